"""VP replication between read nodes: one fetch stream per node pair for every VP the pair shares.

A follower replica does not fetch by itself. Its read node runs one ``ReplicaFetcher`` per
node that leads any VP it follows; each request carries, for every such VP, what the follower
asks (``FetchPosition``: its log end and last epoch) and what it already knows (the leader's HW,
whether it serves reads), and the leader's node answers all of them in one reply
(``ReadNode.replica_fetch``, built by ``answer_followers``). So replication costs one long-poll
call per node pair, not one per VP: a thousand idle VPs replicate with two calls a second.

Leader side (``answer_followers``): every entry is reported to its VP's core once (the RISR
learns the follower's log end; the HW may move). The reply goes back at once if any entry has
news -- data, a divergence, a HW or a serving flag that differs from what the follower knows --
else the call waits (long poll) for a change on the node, and answers with the current HW and
data, without reporting the same fetch again. An error is not news: the follower can only wait
for the controller, and answering it at once would make the two nodes call each other in a
busy loop until then. A VP paused by fault injection answers nothing (its follower then lags
out of the RISR).

Follower side (``ReplicaFetcher``): applies each answer to its ``HostedVp`` unless the VP's role
or epoch changed while the call was out (the answer is then moot). An entry refused with
``NotLeader`` or ``StaleEpoch`` is left for the controller, which announces the roles again
after any failover; an unreachable leader node is retried after ``replica_fetch_backoff_ms``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Callable, Sequence

from mafka4.client.errors import unwrap
from mafka4.errors import MafkaError, NotLeader
from mafka4.limits import ReadNodeConfig
from mafka4.virtual.hosted_vp import HostedVp, VpId
from mafka4.virtual.replica_core import FetchPosition, ReplicaAnswer, VpRole

logger = logging.getLogger(__name__)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class FollowerFetch:
    """One VP of a node-pair fetch: what its follower asks and what it already knows."""

    vp_id: VpId
    position: FetchPosition
    high_watermark: int
    serving: bool


@dataclass(frozen=True, slots=True)
class FollowerAnswer:
    """The leader node's answer for one VP of a node-pair fetch."""

    answer: ReplicaAnswer | None
    data: bytes = b""
    error: MafkaError | None = None

    def news_for(self, fetch: FollowerFetch) -> bool:
        """True if the follower learns something it acts on from this answer (an error it only logs)."""
        if self.data:
            return True
        if self.answer is None:
            return False
        return (self.answer.diverging is not None or self.answer.high_watermark != fetch.high_watermark
                or self.answer.serving != fetch.serving)


def answer_followers(follower_id: str, fetches: Sequence[FollowerFetch], hosted: Callable[[VpId], HostedVp | None],
                     config: ReadNodeConfig, now_ms: int, report: bool) -> list[FollowerAnswer]:
    """The leader node's answers to one node-pair fetch (``report``: tell the RISR about it).

    Bytes are shared out in order up to ``replica_fetch_bytes_max``; an entry past the budget
    gets no data this time (its follower asks again at once: the others had news).
    """
    answers: list[FollowerAnswer] = []
    budget = config.replica_fetch_bytes_max
    for fetch in fetches:
        replica = hosted(fetch.vp_id)
        if replica is None:
            answers.append(FollowerAnswer(None, error=_not_hosted(fetch.vp_id, follower_id)))
            continue
        if replica.fault.fault.paused:
            answers.append(FollowerAnswer(None))
            continue
        try:
            if report:
                answer = replica.answer_follower(follower_id, fetch.position, now_ms)
            else:
                answer = replica.core.current_answer(follower_id, fetch.position)
            bytes_max = min(config.replica_vp_fetch_bytes_max, budget)
            # A read can fail for one VP (its follower asks below the log start): only that entry fails.
            data = replica.read_for_follower(answer.read_from, bytes_max) if bytes_max > 0 else b""
        except MafkaError as error:
            answers.append(FollowerAnswer(None, error=error))
            continue
        budget -= len(data)
        answers.append(FollowerAnswer(answer, data))
    return answers


def _not_hosted(vp_id: VpId, follower_id: str) -> MafkaError:
    return NotLeader(f"{vp_id}: not hosted on the node {follower_id} fetched from; the controller announces "
                     f"the VP's leader again")


class ReplicaFetcher:
    """This node's replication stream from one leader node; see the module docstring."""

    def __init__(self, node_id: str, leader_node: str, followed: Callable[[], list[HostedVp]],
                 leader_handle: Callable[[], object], forget_handle: Callable[[], None], config: ReadNodeConfig):
        self.node_id, self.leader_node, self.config = node_id, leader_node, config
        self._followed, self._leader_handle, self._forget_handle = followed, leader_handle, forget_handle
        self._kick = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._closed = False
        self.stats = {"fetches": 0, "errors": 0, "last_error": None, "vps": 0}

    def start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())

    def wake(self) -> None:
        self._kick.set()

    def close(self) -> None:
        self._closed = True
        if self._task is not None:
            self._task.cancel()

    async def _run(self) -> None:
        config = self.config
        while not self._closed:
            replicas = [h for h in self._followed() if not h.fault.fault.paused]
            self.stats["vps"] = len(replicas)
            if not replicas:
                self._kick.clear()
                try:
                    await asyncio.wait_for(self._kick.wait(), config.replica_fetch_wait_ms_max / 1000)
                except asyncio.TimeoutError:
                    pass
                continue
            delay_ms = max(h.fault.fault.delay_ms for h in replicas)
            if delay_ms:
                await asyncio.sleep(delay_ms / 1000)
            fetches = [FollowerFetch(h.vp_id, h.core.fetch_position(), h.core.high_watermark, h.core.serving(_now_ms()))
                       for h in replicas]
            try:
                answers = await asyncio.wait_for(
                    self._leader_handle().replica_fetch.remote(self.node_id, fetches, config.replica_fetch_wait_ms_max),
                    config.call_timeout_ms / 1000)
            except asyncio.CancelledError:
                raise
            except Exception as error:  # the leader's node is dead or restarting: the controller acts
                self.stats["errors"] += 1
                self.stats["last_error"] = f"{type(unwrap(error)).__name__}: {unwrap(error)}"
                self._forget_handle()
                await asyncio.sleep(config.replica_fetch_backoff_ms / 1000)
                continue
            self.stats["fetches"] += 1
            now_ms = _now_ms()
            for replica, fetch, answer in zip(replicas, fetches, answers):
                core = replica.core
                if (replica.closed or core.role is not VpRole.FOLLOWER or core.leader_id != self.leader_node
                        or core.leader_epoch != fetch.position.leader_epoch
                        or core.log_end_offset != fetch.position.fetch_offset):
                    continue  # the role or the log changed while the call was out: the answer is moot
                if answer.error is not None:
                    logger.debug("%s: fetch from %s refused: %s", replica.vp_id, self.leader_node, answer.error)
                    continue
                if answer.answer is not None:
                    replica.apply_answer(answer.answer, answer.data, now_ms)
