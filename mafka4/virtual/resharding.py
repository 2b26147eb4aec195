"""Resharding a running topic: split and merge virtual partitions, scale, record sealed ends.

The rules are pure (``reshard.TopicLayout.plan_split`` / ``plan_merge``, ``next_scale_step``);
``Resharder`` carries out one split or merge on live actors and etcd:

1. Take the topic's reshard lock (``keys.reshard_lock``, created only while absent, under a
   lease), so one reshard runs per topic and new VP ids are not handed out twice.
2. Read the layout and plan the epoch once at the current cut: this refuses an unknown or
   closed VP, a merge of VPs that are not adjacent and a split beyond
   ``virtual_partitions_max`` before anything stops. Start the children's VP replica actors
   on live read nodes (``metadata.plan_children``) and announce their roles -- before any
   feeder stops, so that the pause is one feeder round, not an actor start.
3. Hold every feeder of the topic (``Feeder.hold``): each finishes its round and, where no
   VP holds a record at or past its ``next_offset``, writes its hold key, reports
   ``fed_through`` and from then on holds back the parents' records at or past it. It feeds
   the other VPs on.
4. Plan the epoch with ``cut[p] = max(fed_through[p], current cut[p])`` and store it in ONE
   transaction: create ``virtual/<k>`` and the children's VP keys only if absent, only while
   the lock key and every hold key are at the revisions read; it also deletes the hold keys.
5. Release the feeders, handing them the stored epoch: they feed the children from the cut
   on at once (a feeder released without it re-reads the layout first, and gives the
   parents what it held back if the epoch was not stored).
6. Wait (at most ``seal_wait_ms_max``) until the parents are sealed and record it
   (``seal_closed_vps``); readers and group members record it otherwise.

No other VP is touched: its range, replicas, offsets and readers stay as they are, and its
feeder does not stop feeding it (it re-sends the records fed during the hold once, which
the VP drops). A failure before the transaction releases the feeders, stops
the children and raises (``ReshardConflict`` when a race was lost: retriable). If the
transaction's outcome is unknown (etcd went away) the children are left running, since the
epoch may have been stored; an unstored epoch's children are orphans with VP ids past the
layout's, stopped by the next reshard before it starts its own.

Sealing. A closed VP is sealed once its leader heard ``fed_through`` at or past the closing
cut from every partition's feeder (``TopicLayout.is_sealed``) and its RISR holds every record
(high watermark == log end offset). Its log end offset is then final: ``seal_closed_vps``
records it as the VP key's ``sealed_end_offset``, which consumer groups and readers use for
parent-before-child (``TopicLayout.readable_vps``) and after which feeders stop serving it.
"""

from __future__ import annotations

import logging
import secrets
import time
from typing import Callable, Mapping, Sequence

import ray

from mafka4.client.errors import unwrap
from mafka4.coordinator import keys
from mafka4.coordinator.store import MetadataStore
from mafka4.coordinator.topics import TopicMetadata, TopicStore
from mafka4.errors import CoordinatorUnavailable, MafkaError, ReshardConflict, WrongReadMode
from mafka4.limits import ReshardConfig
from mafka4.virtual.launcher import announce_roles, feeder_handle, start_vp_replica, stop_vp_replicas, vp_handle
from mafka4.virtual.metadata import VirtualPartitionState, VirtualStore, epoch_to_json, plan_children
from mafka4.virtual.reshard import SplitEpoch, SplitStep, TopicLayout, next_scale_step

logger = logging.getLogger(__name__)

# (layout, cut, fed_through) -> the epoch to store; raises the planning errors.
Plan = Callable[[TopicLayout, Sequence[int], Sequence[int]], SplitEpoch]
DESCRIBE_TIMEOUT_S = 10
RELEASE_TIMEOUT_S = 10
SEAL_POLL_INTERVAL_S = 0.2


class Resharder:
    """Splits and merges the VPs of mafka4-mode topics; see the module docstring."""

    def __init__(self, store: MetadataStore, cluster: str, config: ReshardConfig = ReshardConfig()):
        self._store, self._cluster, self._config = store, cluster, config
        self._topics = TopicStore(store, cluster)
        self._virtual = VirtualStore(store, cluster)

    def split(self, topic: str, vp: int) -> SplitEpoch:
        """Split active ``vp`` at its range's midpoint into two new VPs."""
        return self._reshard(topic, lambda layout, cut, fed: layout.plan_split(vp, cut, fed))

    def merge(self, topic: str, first: int, second: int) -> SplitEpoch:
        """Merge two active VPs with adjacent ranges into one new VP."""
        return self._reshard(topic, lambda layout, cut, fed: layout.plan_merge(first, second, cut, fed))

    def scale(self, topic: str, virtual_partitions: int) -> list[SplitEpoch]:
        """Split the widest / merge the narrowest adjacent pair until ``virtual_partitions`` VPs are active.

        A step that fails retriably (a race with another reshard, a feeder slow to stop) is
        planned again from the layout then stored, at most ``step_attempts_max`` times in a row.
        """
        metadata = self._mafka4_topic(topic)
        epochs: list[SplitEpoch] = []
        config = metadata.config
        failures = 0
        while True:
            layout = self._virtual.layout(topic, config.partitions, config.virtual_config())
            step = next_scale_step(layout, virtual_partitions)
            if step is None:
                return epochs
            try:
                if isinstance(step, SplitStep):
                    epochs.append(self.split(topic, step.vp))
                else:
                    epochs.append(self.merge(topic, step.first, step.second))
                failures = 0
            except MafkaError as error:
                failures += 1
                if not error.retriable or failures >= self._config.step_attempts_max:
                    raise
                logger.warning("%s: reshard step %s failed (%s); planning it again", topic, step, error)

    # --- one reshard ------------------------------------------------------------------------

    def _mafka4_topic(self, topic: str) -> TopicMetadata:
        metadata = self._topics.get(topic)
        if metadata.config.read_mode != "mafka4":
            raise WrongReadMode(
                f"topic {topic!r} is in read_mode={metadata.config.read_mode!r}: it has no virtual partitions to "
                f"split, merge or scale; create a topic with read_mode='mafka4' (--read-mode mafka4)"
            )
        return metadata

    def _reshard(self, topic: str, plan: Plan) -> SplitEpoch:
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
            epoch = self._reshard_locked(metadata, plan, token, lease, lock_revision)
        finally:
            try:
                self._store.revoke_lease(lease)
            except CoordinatorUnavailable:
                pass  # the lock expires with its lease
        self._wait_sealed(metadata, epoch.parents)
        return epoch

    def _reshard_locked(self, metadata: TopicMetadata, plan: Plan, token: str, lease, lock_revision: int
                        ) -> SplitEpoch:
        topic, config = metadata.name, metadata.config
        layout = self._virtual.layout(topic, config.partitions, config.virtual_config())
        current_cut = layout.current.cut
        draft = plan(layout, current_cut, current_cut)
        children = plan_children(draft, config.read_replicas, self._topics.live_nodes("read"))
        feeders = [feeder_handle(self._cluster, topic, p) for p in range(config.partitions)]
        if None in feeders:
            raise ReshardConflict(
                f"the feeder of {topic}-{feeders.index(None)} is not running: a reshard needs every feeder to stop "
                f"at one cut; restart it (virtual.launcher.restart_feeder) and retry"
            )
        self._start_children(metadata, layout, children)
        if self._store.refresh_lease(lease) == 0:  # starting actors on a busy node can outlast the lock
            stop_vp_replicas(self._cluster, topic, children, delete_data=True)
            raise ReshardConflict(f"the reshard lock of topic {topic!r} expired while its children started; retry")
        may_have_landed = False
        try:
            held = self._hold(feeders, token, draft.parents)
            held_at = time.monotonic()
            fed_through = [offset for offset, _ in held]
            epoch = plan(layout, [max(fed, cut) for fed, cut in zip(fed_through, current_cut)], fed_through)
            assert epoch.children == draft.children, (epoch.children, draft.children)
            may_have_landed = True
            stored = self._store_epoch(topic, epoch, children, lock_revision, [revision for _, revision in held])
            if not stored:
                may_have_landed = False
                raise ReshardConflict(
                    f"topic {topic!r}: a feeder left its hold (timeout or restart) or the reshard lock expired before "
                    f"the new split epoch was stored; nothing changed, retry"
                )
        except BaseException:
            self._release(feeders, token)
            if not may_have_landed:
                stop_vp_replicas(self._cluster, topic, children, delete_data=True)
            raise
        self._release(feeders, token, epoch, children)
        logger.warning("%s: split epoch %d stored: %s -> %s at cut %s; the parents' records were held back %.0f ms "
                       "after the last feeder reached the cut", topic, epoch.epoch, epoch.parents, epoch.children,
                       epoch.cut, (time.monotonic() - held_at) * 1000)
        return epoch

    def _start_children(self, metadata: TopicMetadata, layout: TopicLayout,
                        children: Sequence[VirtualPartitionState]) -> None:
        """Start and announce the children's replicas, after stopping orphans holding their names."""
        assert all(not layout.exists(state.vp) for state in children), "children get new VP ids"
        stop_vp_replicas(self._cluster, metadata.name, children, delete_data=True)
        data_root = self._topics.data_root()
        try:
            for state in children:
                for replica in state.replicas:
                    start_vp_replica(self._cluster, self._store.endpoint, metadata, state.vp, replica, data_root)
            announce_roles(self._cluster, metadata.name, children, timeout_s=self._config.start_timeout_ms / 1000)
        except BaseException:
            stop_vp_replicas(self._cluster, metadata.name, children, delete_data=True)
            raise

    def _hold(self, feeders: list, token: str, parents: Sequence[int]) -> list[tuple[int, int]]:
        """Hold back the parents' records at every feeder; ``(fed_through, hold key mod_revision)`` per partition."""
        wait_ms = self._config.hold_wait_ms_max
        refs = [feeder.hold.remote(token, tuple(parents), wait_ms) for feeder in feeders]
        try:
            return ray.get(refs, timeout=wait_ms / 1000 + DESCRIBE_TIMEOUT_S)
        except (MafkaError, ray.exceptions.RayError) as raised:
            error = unwrap(raised)
            if isinstance(error, MafkaError):
                raise error from None
            raise ReshardConflict(f"a feeder did not stop for the reshard ({type(error).__name__}); retry") from None

    def _release(self, feeders: list, token: str, epoch: SplitEpoch | None = None,
                 children: Sequence[VirtualPartitionState] = ()) -> None:
        """Release the held feeders; with the stored ``epoch`` they go on without reading etcd first."""
        try:
            ray.get([feeder.release.remote(token, epoch, tuple(children)) for feeder in feeders],
                    timeout=RELEASE_TIMEOUT_S)
        except (ray.exceptions.RayError, TimeoutError) as error:
            # A feeder not told leaves its hold by itself after hold_ms_max.
            logger.warning("reshard %s: releasing the feeders failed: %s", token, error)

    def _store_epoch(self, topic: str, epoch: SplitEpoch, children: Sequence[VirtualPartitionState],
                     lock_revision: int, hold_revisions: Sequence[int]) -> bool:
        creates = {keys.split_epoch(self._cluster, topic, epoch.epoch): epoch_to_json(epoch)}
        creates.update({keys.virtual_partition(self._cluster, topic, s.vp): s.to_json() for s in children})
        holds = [keys.feeder_hold(self._cluster, topic, p) for p in range(len(hold_revisions))]
        requires = {keys.reshard_lock(self._cluster, topic): lock_revision, **dict(zip(holds, hold_revisions))}
        try:
            return self._store.transact(creates, requires, deletes=holds)
        except CoordinatorUnavailable:
            # The answer was lost, not necessarily the write: the epoch key tells (raises while etcd is away).
            found = self._store.get(keys.split_epoch(self._cluster, topic, epoch.epoch))
            return found is not None and found.value == epoch_to_json(epoch)

    def _wait_sealed(self, metadata: TopicMetadata, parents: Sequence[int]) -> None:
        deadline = time.monotonic() + self._config.seal_wait_ms_max / 1000
        config = metadata.config
        while True:
            layout, states = self._virtual.layout_and_states(metadata.name, config.partitions, config.virtual_config())
            sealed = seal_closed_vps(self._store, self._cluster, metadata.name, layout,
                                     {vp: state for vp, (state, _) in states.items()})
            if set(parents) <= set(sealed) or time.monotonic() >= deadline:
                return
            time.sleep(SEAL_POLL_INTERVAL_S)


def seal_closed_vps(store: MetadataStore, cluster: str, topic: str, layout: TopicLayout,
                    states: Mapping[int, VirtualPartitionState]) -> dict[int, int]:
    """Record the sealed end of every closed VP that is sealed now; returns every sealed VP's end offset.

    A closed VP whose leader does not answer is left for a later call (after its failover).
    """
    sealed = {vp: s.sealed_end_offset for vp, s in states.items() if s.sealed_end_offset is not None}
    pending = [vp for vp in states if vp not in sealed and layout.exists(vp) and not layout.is_active(vp)]
    virtual = VirtualStore(store, cluster)
    for vp in pending:
        state = states[vp]
        leader = vp_handle(cluster, topic, vp, state.leader)
        if leader is None:
            continue
        try:
            described = ray.get(leader.describe.remote(), timeout=DESCRIBE_TIMEOUT_S)
        except (ray.exceptions.RayError, TimeoutError):
            continue
        fed_through = [described["fed_through"].get(p, 0) for p in range(layout.partitions)]
        if (described["role"] == "leader" and described["leader_epoch"] == state.leader_epoch
                and layout.is_sealed(vp, fed_through) and described["high_watermark"] == described["log_end_offset"]):
            if virtual.record_sealed_end(topic, vp, described["log_end_offset"]):
                sealed[vp] = described["log_end_offset"]
                logger.info("%s/v%d sealed at VP offset %d", topic, vp, sealed[vp])
    return sealed
