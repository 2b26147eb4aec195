"""Online splits and merges of a mafka4-mode topic's VPs, carried out by the controller.

The pure rules are ``layout.py``'s (``plan_split``, ``plan_merge``, ``next_scale_step``: where a
cut may go, which VPs a change opens and closes); this is their shell on etcd and the read
nodes. Clients never run it: they write an intent (``metadata.intents``) and the controller
calls ``Resharder``. A split or merge opens logs inside running read nodes; no process starts.

One reshard, under the topic's reshard lock (``keys.reshard_lock``, bound to the runner's lease):

1. Read the layout and the VP states; plan the change with the current cut to learn the
   parents and children (the children's placement is ``placement.plan_children``).
2. Hold the parents (``ReadNode.hold`` on each node leading one): every feed stream of the topic
   there stops handing the parents records at or past where it stands, writes its hold key
   (``topics/<t>/holds/<p>/<node>``) and offers that offset; it feeds every other VP on, so a
   split pauses only the split VP's consumers.
3. Plan the epoch with ``cut[p] = max(offers of p, current cut[p])`` and store it in ONE
   transaction: create ``virtual/<k>`` and the children's VP keys only if absent, only while
   the lock key and every hold key are at the revisions read; it also deletes the hold keys.
4. Host the children on their read nodes (``read_node_launcher.host_states``: opens their logs), then
   release the held streams with the stored epoch: they adopt it and go back to the offered cut,
   so the children get their records from there and the parents everything below the cut.
5. Sealing is the parents' leader nodes' (``ReadNode``): each records its parent's sealed end
   once it is complete, and the group reads the children once it consumed the parents to it.

A failure before the transaction releases the holds without an epoch (the streams give the
parents what they withheld) and raises (``ReshardConflict`` when a race was lost: retriable).
If the transaction's outcome is unknown (etcd went away) the epoch key tells. Steps 2 and 4 call
the same few nodes: each is looked up once per reshard (``ReadNodeHandles``), not per call. A stream that
resumes because it took over a VP from another node deletes the partition's hold keys, so a
reshard that held the VP's old node can no longer store its epoch (``partition_feed``).
"""

from __future__ import annotations

import logging
import secrets
import time
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import ray

from mafka4.coordinator.control.placement import plan_children
from mafka4.coordinator.control.read_node_launcher import host_states
from mafka4.errors import CoordinatorUnavailable, MafkaError, ReshardConflict, WrongReadMode
from mafka4.limits import ReadMode, ReshardConfig
from mafka4.metadata import keys
from mafka4.metadata.store import MetadataStore
from mafka4.physical.partition_state import TopicMetadata
from mafka4.physical.topics import TopicStore
from mafka4.transport.remote_errors import unwrap
from mafka4.virtual.handles import ReadNodeHandles
from mafka4.virtual.layout import SplitEpoch, SplitStep, TopicLayout, next_scale_step
from mafka4.virtual.vp_state import VirtualPartitionState, epoch_to_json
from mafka4.virtual.vp_store import VirtualStore

logger = logging.getLogger(__name__)

# (layout, cut, fed_through) -> the epoch to store; raises the planning errors.
Plan = Callable[[TopicLayout, Sequence[int], Sequence[int]], SplitEpoch]


@dataclass(frozen=True, slots=True)
class Resharded:
    """One stored split or merge, and the children a read node did not take (the controller repairs them)."""

    epoch: SplitEpoch
    unhosted: tuple[int, ...]


class Resharder:
    """Splits and merges the VPs of mafka4-mode topics; see the module docstring."""

    def __init__(self, store: MetadataStore, cluster: str, config: ReshardConfig = ReshardConfig()):
        self._store, self._cluster, self._config = store, cluster, config
        self._topics = TopicStore(store, cluster)
        self._virtual = VirtualStore(store, cluster)

    def split(self, topic: str, vp: int) -> Resharded:
        """Split active ``vp`` at its range's midpoint into two new VPs."""
        return self._reshard(topic, lambda layout, cut, fed: layout.plan_split(vp, cut, fed))

    def merge(self, topic: str, first: int, second: int) -> Resharded:
        """Merge two active VPs with adjacent ranges into one new VP."""
        return self._reshard(topic, lambda layout, cut, fed: layout.plan_merge(first, second, cut, fed))

    def scale(self, topic: str, virtual_partitions: int) -> list[Resharded]:
        """Split the widest / merge the narrowest adjacent pair until ``virtual_partitions`` VPs are active.

        A step that fails retriably (a race with a failover, a stream slow to stop) is planned
        again from the layout then stored, at most ``step_attempts_max`` times in a row.
        """
        config = self._mafka4_topic(topic).config
        done: list[Resharded] = []
        failures = 0
        while True:
            layout = self._virtual.layout(topic, config.partitions, config.virtual_config())
            step = next_scale_step(layout, virtual_partitions)
            if step is None:
                return done
            try:
                if isinstance(step, SplitStep):
                    done.append(self.split(topic, step.vp))
                else:
                    done.append(self.merge(topic, step.first, step.second))
                failures = 0
            except MafkaError as error:
                failures += 1
                if not error.retriable or failures >= self._config.step_attempts_max:
                    raise
                logger.warning("%s: reshard step %s failed (%s); planning it again", topic, step, error)

    # --- one reshard ------------------------------------------------------------------------

    def _mafka4_topic(self, topic: str) -> TopicMetadata:
        metadata = self._topics.get(topic)
        if metadata.config.read_mode is not ReadMode.MAFKA4:
            raise WrongReadMode(
                f"topic {topic!r} is in read_mode={metadata.config.read_mode.value!r}: it has no virtual partitions to "
                f"split, merge or scale; create a topic with read_mode='mafka4' (--read-mode mafka4)"
            )
        return metadata

    def _reshard(self, topic: str, plan: Plan) -> Resharded:
        metadata = self._mafka4_topic(topic)
        token = secrets.token_hex(8)
        lease = self._store.grant_lease(self._config.lock_ttl_s)
        try:
            lock_revision = self._store.create_leased(keys.reshard_lock(self._cluster, topic), {"owner": token}, lease, {})
            if lock_revision is None:
                raise ReshardConflict(
                    f"another split or merge of topic {topic!r} is running; retry when it finished (its lock "
                    f"expires {self._config.lock_ttl_s} s after its runner died)"
                )
            return self._reshard_locked(metadata, plan, token, lock_revision)
        finally:
            try:
                self._store.revoke_lease(lease)
            except CoordinatorUnavailable:
                pass  # the lock expires with its lease

    def _reshard_locked(self, metadata: TopicMetadata, plan: Plan, token: str, lock_revision: int) -> Resharded:
        topic, config = metadata.name, metadata.config
        layout, states = self._virtual.layout_and_states(topic, config.partitions, config.virtual_config())
        current_cut = layout.current.cut
        draft = plan(layout, current_cut, current_cut)
        children = plan_children(draft, config.read_replicas, self._topics.live_nodes("read"))
        holders = sorted({states[parent][0].leader for parent in draft.parents})
        handles = ReadNodeHandles(self._cluster)  # hold, host and release call the same nodes: one lookup each
        started = time.monotonic()
        try:
            offers = self._hold(topic, holders, token, draft.parents, handles)
            cut = [max([current_cut[p]] + [offer[p][0] for offer in offers.values()]) for p in range(config.partitions)]
            fed_through = [max(offer[p][0] for offer in offers.values()) for p in range(config.partitions)]
            epoch = plan(layout, cut, fed_through)
            assert epoch.children == draft.children, (epoch.children, draft.children)
            hold_revisions = {keys.feeder_hold(self._cluster, topic, p, node): offer[p][1]
                              for node, offer in offers.items() for p in range(config.partitions)}
            if not self._store_epoch(topic, epoch, children, lock_revision, hold_revisions):
                raise ReshardConflict(
                    f"topic {topic!r}: a held feed stream left its hold (timeout, restart or failover) or the reshard "
                    f"lock expired before the new split epoch was stored; nothing changed, retry"
                )
        except BaseException:
            self._release(topic, holders, token, handles)
            raise
        refused = host_states(self._cluster, topic, config, children, timeout_s=self._config.call_timeout_ms / 1000,
                              handles=handles)
        self._release(topic, holders, token, handles, epoch, children)
        unhosted = tuple(sorted({vp for failures in refused.values() for vp in failures if vp >= 0}
                                | {s.vp for s in children if any(-1 in refused.get(r, {}) for r in s.replicas)}))
        logger.warning("%s: split epoch %d stored: %s -> %s at cut %s, %.0f ms after the holds were asked%s", topic,
                       epoch.epoch, epoch.parents, epoch.children, epoch.cut, (time.monotonic() - started) * 1000,
                       f"; children not hosted yet: {unhosted}" if unhosted else "")
        return Resharded(epoch, unhosted)

    def _hold(self, topic: str, holders: Sequence[str], token: str, parents: Sequence[int], handles: ReadNodeHandles
              ) -> dict[str, Mapping[int, tuple[int, int]]]:
        """Hold the parents at every node leading one; per node, per partition ``(offered cut, hold key revision)``."""
        wait_ms = self._config.hold_wait_ms_max
        found = {node: handles.get(node) for node in holders}
        missing = [node for node, handle in found.items() if handle is None]
        if missing:
            raise ReshardConflict(f"read nodes {missing} leading VPs {list(parents)} of {topic!r} are not running; "
                                  f"retry once the controller restarted them or failed their VPs over")
        refs = {node: handle.hold.remote(topic, token, list(parents), wait_ms) for node, handle in found.items()}
        try:
            return dict(zip(refs, ray.get(list(refs.values()), timeout=wait_ms / 1000 + self._config.call_timeout_ms / 1000)))
        except (MafkaError, ray.exceptions.RayError) as raised:
            if isinstance(raised, ray.exceptions.RayActorError):
                for node in holders:  # which one died ray.get does not say: look them all up again
                    handles.forget(node)
            error = unwrap(raised)
            if isinstance(error, MafkaError):
                if not error.retriable:
                    raise ReshardConflict(f"topic {topic!r}: a parent's leader changed during the reshard ({error}); "
                                          f"retry") from None
                raise error from None
            raise ReshardConflict(f"a read node did not hold the reshard's parents ({type(error).__name__}); retry") from None

    def _release(self, topic: str, holders: Sequence[str], token: str, handles: ReadNodeHandles,
                 epoch: SplitEpoch | None = None, children: Sequence[VirtualPartitionState] = ()) -> None:
        """Release the held streams; with the stored ``epoch`` they adopt it without reading etcd first."""
        refs = [handle.release.remote(topic, token, epoch, list(children))
                for handle in (handles.get(node) for node in holders) if handle is not None]
        try:
            ray.get(refs, timeout=self._config.call_timeout_ms / 1000)
        except (ray.exceptions.RayError, TimeoutError) as error:
            for node in holders:
                handles.forget(node)
            # A stream not told leaves its hold by itself after hold_ms_max.
            logger.warning("reshard %s: releasing the holds failed: %s", token, error)

    def _store_epoch(self, topic: str, epoch: SplitEpoch, children: Sequence[VirtualPartitionState],
                     lock_revision: int, hold_revisions: Mapping[str, int]) -> bool:
        creates = {keys.split_epoch(self._cluster, topic, epoch.epoch): epoch_to_json(epoch)}
        creates.update({keys.virtual_partition(self._cluster, topic, s.vp): s.to_json() for s in children})
        requires = {keys.reshard_lock(self._cluster, topic): lock_revision, **hold_revisions}
        try:
            return self._store.transact(creates, requires, deletes=list(hold_revisions))
        except CoordinatorUnavailable:
            # The answer was lost, not necessarily the write: the epoch key tells (raises while etcd is away).
            found = self._store.get(keys.split_epoch(self._cluster, topic, epoch.epoch))
            return found is not None and found.value == epoch_to_json(epoch)
