"""VP replication between read nodes: one fetch session per node pair for every VP the pair shares.

A follower replica does not fetch by itself. Its read node runs one ``ReplicaFetcher`` per node
that leads any VP it follows, and the pair keeps a *fetch session* (Kafka's KIP-227): the
leader's node remembers, per VP of the session, what the follower last asked (``FetchPosition``:
its log end and last epoch) and already knows (the leader's HW, whether it serves reads). A
request carries only the VPs whose entry changed since the previous one (and those that left),
and the answer only the VPs with news. So a thousand idle VPs cost two small calls a second
between two nodes, not a thousand entries each way.

Leader side (``FetchSessions``, used by ``ReadNode.replica_fetch``):

* the changed entries are reported to their VP's core at once (the RISR learns the follower's log
  end; the HW may move), and each idle entry again once a quarter of its VP's
  ``read_replica_lag_ms_max`` passed, which keeps an idle, caught-up follower in the RISR;
* the answer goes back at once if any VP of the session has news -- data, a divergence, an
  error, or a HW or serving flag that differs from what the follower knows -- else the call
  waits (long poll) for a change on the node, looking again only at the VPs that changed since;
* a VP paused by fault injection answers nothing (its follower then lags out of the RISR);
* a session the node does not know (it restarted, or the follower's last request failed) is
  refused with ``SESSION_UNKNOWN``; the follower then sends a full request.

Follower side (``ReplicaFetcher``): applies each answer to its ``HostedVp`` unless the VP's role,
epoch or log changed while the call was out (the answer is then moot, and the entry is sent
again). An entry refused with ``NotLeader`` or ``StaleEpoch`` is left for the controller, which
announces the roles again after any failover; a notice of a new epoch (or of a VP newly followed)
that arrives while a call is out leaves that call and asks at once, in a new session, instead of
waiting out the leader's long poll (``_call_unless_moved``); an unreachable leader node is retried after
``replica_fetch_backoff_ms`` with a new session, and so is a VP whose disk refused the data (a
full disk: nothing of it was appended, and its entry is sent again).

The wire values are named tuples, not dataclasses: Ray pickles every call, and tuples pickle
several times faster, which is most of an idle node's cost.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from dataclasses import dataclass, field
from typing import Callable, NamedTuple, Sequence

from mafka4.clocks import wall_ms
from mafka4.errors import MafkaError, NotLeader
from mafka4.limits.servers import ReadNodeConfig
from mafka4.transport.remote_errors import unwrap
from mafka4.virtual.hosted_vp import HostedVp, VpId
from mafka4.virtual.node_loop import NodeLoop
from mafka4.virtual.replica_core import FetchPosition, ReplicaAnswer, VpRole

logger = logging.getLogger(__name__)

# The answer to a request of a session the leader's node does not know.
SESSION_UNKNOWN = -1


class FollowerFetch(NamedTuple):
    """One VP of a node-pair fetch: what its follower asks and what it already knows."""

    vp_id: VpId
    position: FetchPosition
    high_watermark: int
    serving: bool


class FollowerAnswer(NamedTuple):
    """The leader node's answer for one VP of a node-pair fetch."""

    vp_id: VpId
    answer: ReplicaAnswer | None
    data: bytes = b""
    error: MafkaError | None = None

    def news_for(self, fetch: FollowerFetch) -> bool:
        """True if the follower learns something from this answer.

        An error is not news: the follower can do nothing with it but wait for the
        controller's next role notice, so it must not end the long poll (that would make the
        two nodes call each other in a busy loop).
        """
        if self.data:
            return True
        if self.answer is None:
            return False
        return (self.answer.diverging is not None or self.answer.high_watermark != fetch.high_watermark
                or self.answer.serving != fetch.serving)


class SessionRequest(NamedTuple):
    """One request of a fetch session: ``session_id`` None opens a new one (``changed`` then has every entry)."""

    follower_id: str
    session_id: int | None
    changed: tuple[FollowerFetch, ...]
    removed: tuple[VpId, ...]


class SessionAnswer(NamedTuple):
    session_id: int  # SESSION_UNKNOWN: open a new session with a full request
    answers: tuple[FollowerAnswer, ...]


def answer_follower(replica: HostedVp | None, follower_id: str, fetch: FollowerFetch, bytes_max: int,
                    now_ms: int, report: bool) -> FollowerAnswer:
    """The leader's answer for one VP (``report``: tell its RISR about the fetch)."""
    if replica is None:
        return FollowerAnswer(fetch.vp_id, None, error=NotLeader(
            f"{fetch.vp_id}: not hosted on the node {follower_id} fetched from; the controller announces the VP's "
            f"leader again"))
    if replica.fault.fault.paused:
        return FollowerAnswer(fetch.vp_id, None)
    try:
        if report:
            answer = replica.answer_follower(follower_id, fetch.position, now_ms)
        else:
            answer = replica.core.current_answer(follower_id, fetch.position)
        data = replica.read_for_follower(answer.read_from, bytes_max) if bytes_max > 0 else b""
    except MafkaError as error:  # this VP only: the others of the pair go on
        return FollowerAnswer(fetch.vp_id, None, error=error)
    return FollowerAnswer(fetch.vp_id, answer, data)


def answer_followers(follower_id: str, fetches: Sequence[FollowerFetch], hosted: Callable[[VpId], HostedVp | None],
                     config: ReadNodeConfig, now_ms: int, report: bool) -> list[FollowerAnswer]:
    """The leader node's answers for ``fetches``, bytes shared out in order up to ``replica_fetch_bytes_max``
    (an entry past the budget gets no data this time; its follower asks again at once)."""
    answers: list[FollowerAnswer] = []
    budget = config.replica_fetch_bytes_max
    for fetch in fetches:
        answer = answer_follower(hosted(fetch.vp_id), follower_id, fetch,
                                 min(config.replica_vp_fetch_bytes_max, budget), now_ms, report)
        budget -= len(answer.data)
        answers.append(answer)
    return answers


# --- leader side ------------------------------------------------------------------------------


def _refresh_ms(replica: HostedVp | None) -> int:
    """How often an idle session entry is reported to its VP's RISR: a quarter of its lag bound."""
    return 0 if replica is None else replica.core.config.read_replica_lag_ms_max // 4


@dataclass(slots=True)
class _Session:
    follower_id: str
    entries: dict[VpId, FollowerFetch] = field(default_factory=dict)
    reported_ms: dict[VpId, int] = field(default_factory=dict)  # when each entry was last reported to its RISR


class FetchSessions:
    """A leader node's fetch sessions, keyed by id; see the module docstring."""

    def __init__(self, config: ReadNodeConfig):
        self._config = config
        self._sessions: dict[int, _Session] = {}
        self._ids = itertools.count(1)

    def open(self, request: SessionRequest) -> tuple[int, _Session] | None:
        """The request's session with its changes applied (a new one for ``session_id`` None);
        None for a session this node does not know."""
        if request.session_id is None:
            session_id, session = next(self._ids), _Session(request.follower_id)
            for old in [sid for sid, s in self._sessions.items() if s.follower_id == request.follower_id]:
                del self._sessions[old]  # one session per follower node: a new one replaces it
            self._sessions[session_id] = session
        else:
            session_id, session = request.session_id, self._sessions.get(request.session_id)
            if session is None or session.follower_id != request.follower_id:
                return None
        for vp_id in request.removed:
            session.entries.pop(vp_id, None)
            session.reported_ms.pop(vp_id, None)
        for fetch in request.changed:
            session.entries[fetch.vp_id] = fetch
        return session_id, session

    def first_answers(self, request: SessionRequest, session: _Session, hosted: Callable[[VpId], HostedVp | None],
                      now_ms: int) -> list[FollowerAnswer]:
        """Report the changed entries, and each idle one once a quarter of its VP's
        ``read_replica_lag_ms_max`` passed since its last report (that keeps an idle, caught-up
        follower in the RISR at a quarter of the cost of reporting it on every request); the news."""
        changed = {fetch.vp_id for fetch in request.changed}
        to_report = [fetch for vp_id, fetch in session.entries.items()
                     if vp_id in changed or now_ms - session.reported_ms.get(vp_id, 0) >= _refresh_ms(hosted(vp_id))]
        for fetch in to_report:
            session.reported_ms[fetch.vp_id] = now_ms
        answers = answer_followers(session.follower_id, to_report, hosted, self._config, now_ms, report=True)
        return [answer for answer, fetch in zip(answers, to_report) if answer.news_for(fetch)]

    def later_answers(self, session: _Session, changed: Callable[[VpId], bool],
                      hosted: Callable[[VpId], HostedVp | None], now_ms: int) -> list[FollowerAnswer]:
        """After a wake: the news among the session's VPs that ``changed``, without reporting again."""
        fetches = [fetch for vp_id, fetch in session.entries.items() if changed(vp_id)]
        answers = answer_followers(session.follower_id, fetches, hosted, self._config, now_ms, report=False)
        return [answer for answer, fetch in zip(answers, fetches) if answer.news_for(fetch)]


# --- follower side ----------------------------------------------------------------------------


class ReplicaFetcher(NodeLoop):
    """This node's replication session with one leader node; see the module docstring."""

    def __init__(self, node_id: str, leader_node: str, followed: Callable[[], list[HostedVp]],
                 leader_handle: Callable[[], object], forget_handle: Callable[[], None], config: ReadNodeConfig):
        super().__init__()
        self.node_id, self.leader_node, self.config = node_id, leader_node, config
        self._followed, self._leader_handle, self._forget_handle = followed, leader_handle, forget_handle
        self._session_id: int | None = None
        self._sent: dict[VpId, FollowerFetch] = {}  # what the leader's session holds for each VP
        # calls_left: calls left unanswered because a followed VP moved meanwhile (``_call_unless_moved``)
        self.stats = {"fetches": 0, "errors": 0, "last_error": None, "vps": 0, "sessions": 0, "calls_left": 0}

    def _request(self, replicas: list[HostedVp]) -> SessionRequest:
        now_ms = wall_ms()
        current = {h.vp_id: FollowerFetch(h.vp_id, h.core.fetch_position(), h.core.high_watermark,
                                          h.core.serving(now_ms)) for h in replicas}
        if self._session_id is None:
            self._sent = {}
        changed = tuple(fetch for vp_id, fetch in current.items() if self._sent.get(vp_id) != fetch)
        removed = tuple(vp_id for vp_id in self._sent if vp_id not in current)
        self._sent = current
        return SessionRequest(self.node_id, self._session_id, changed, removed)

    async def _run(self) -> None:
        config = self.config
        while not self._closed:
            replicas = [h for h in self._followed() if not h.fault.fault.paused]
            self.stats["vps"] = len(replicas)
            if not replicas and not self._sent:
                await self._idle(config.replica_fetch_wait_ms_max / 1000)
                continue
            delay_ms = max((h.fault.fault.delay_ms for h in replicas), default=0)
            if delay_ms:
                await asyncio.sleep(delay_ms / 1000)
            request = self._request(replicas)
            try:
                answer = await self._call_unless_moved(request)
            except asyncio.CancelledError:
                raise
            except Exception as error:  # the leader's node is dead or restarting: the controller acts
                self.stats["errors"] += 1
                self.stats["last_error"] = f"{type(unwrap(error)).__name__}: {unwrap(error)}"
                self._session_id = None
                self._forget_handle()
                await asyncio.sleep(config.replica_fetch_backoff_ms / 1000)
                continue
            if answer is None:  # a followed VP moved while the call was out: a new session asks at once
                self.stats["calls_left"] += 1
                self._session_id = None
                continue
            self.stats["fetches"] += 1
            if answer.session_id == SESSION_UNKNOWN:
                self._session_id = None  # the leader's node restarted: a full request next
                continue
            if self._session_id != answer.session_id:
                self.stats["sessions"] += 1
            self._session_id = answer.session_id
            if not self._apply(answer.answers):
                await asyncio.sleep(config.replica_fetch_backoff_ms / 1000)

    async def _call_unless_moved(self, request: SessionRequest) -> SessionAnswer | None:
        """The leader node's answer to ``request``; None if, while the call was out, a followed VP
        took a new epoch or began to be followed here (a role notice, ``_moved``).

        The call is a long poll, and the leader does not end it for an entry it refuses (an
        error alone is no news), so a follower told of a new epoch would wait up to
        ``replica_fetch_wait_ms_max`` to ask at it, and the VP's high watermark with it. Each step
        of a replica move bumps the epoch: left waiting, every moved VP's readers stalled for
        about that long. So the call is left (its answer, if any, is dropped: the positions it
        answered are asked again) and the caller opens a new session; the leader replaces the
        old one (``FetchSessions``)."""
        config = self.config
        call = asyncio.ensure_future(asyncio.wait_for(
            self._leader_handle().replica_fetch.remote(request, config.replica_fetch_wait_ms_max),
            config.call_timeout_ms / 1000))
        try:
            while True:
                self._kick.clear()  # a wake before the request is in it
                kicked = asyncio.ensure_future(self._kick.wait())
                try:
                    await asyncio.wait({call, kicked}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    kicked.cancel()
                if call.done():
                    return call.result()
                if self._moved():
                    call.cancel()
                    return None
        except BaseException:
            call.cancel()
            raise

    def _moved(self) -> bool:
        """A VP followed here (and not paused, as ``_run`` asks) is at another epoch than the request
        in flight said, or not in it at all."""
        for hosted in self._followed():
            if hosted.fault.fault.paused:
                continue
            sent = self._sent.get(hosted.vp_id)
            if sent is None or sent.position.leader_epoch != hosted.core.leader_epoch:
                return True
        return False

    def _apply(self, answers: Sequence[FollowerAnswer]) -> bool:
        """Apply the answers to their VPs; False if a VP's disk refused its data (it asks again later)."""
        now_ms = wall_ms()
        hosted = {h.vp_id: h for h in self._followed()}
        applied = True
        for answer in answers:
            replica, sent = hosted.get(answer.vp_id), self._sent.get(answer.vp_id)
            if replica is None or sent is None:
                continue
            core = replica.core
            if (replica.closed or core.role is not VpRole.FOLLOWER or core.leader_id != self.leader_node
                    or core.leader_epoch != sent.position.leader_epoch
                    or core.log_end_offset != sent.position.fetch_offset):
                self._sent.pop(answer.vp_id, None)  # the role or the log changed meanwhile: sent again next time
                continue
            if answer.error is not None:
                logger.debug("%s: fetch from %s refused: %s", replica.vp_id, self.leader_node, answer.error)
                continue
            if answer.answer is not None:
                try:
                    replica.apply_answer(answer.answer, answer.data, now_ms)
                except OSError as error:  # the node's disk is full: nothing was appended, the entry goes again
                    logger.error("%s: could not append what %s sent: %s", replica.vp_id, self.leader_node, error)
                    self._sent.pop(answer.vp_id, None)
                    applied = False
        return applied
