"""Online splits and merges of a mafka4-mode topic's VPs, carried out by the controller.

The pure rules are ``layout.py``'s (``plan_split``, ``plan_merge``, ``next_scale_step``: where a
cut may go, which VPs a change opens and closes); this is their shell on etcd and the read
nodes. Clients never run it: they write an intent (``metadata.intents``) and the controller
calls ``Resharder``. A split or merge opens logs inside running read nodes; no process starts.

One reshard (the controller's intent worker runs one at a time; what fences it is below):

1. Read, in one etcd transaction (``Resharder.read``), the topic's config, layout and VP
   states, the registered nodes, the read nodes' liveness keys and those read-node scaling is
   releasing; plan the change with the current cut to learn the parents and children (the
   children's placement is ``placement.plan_children`` on ``placement.placeable_read_nodes``).
2. Hold the parents (``ReadNode.hold`` on each node leading one): every feed stream of the topic
   there stops handing the parents records at or past where it stands, writes its hold key
   (``topics/<t>/holds/<p>/<node>``) and offers that offset; it feeds every other VP on, so a
   split pauses only the split VP's consumers.
3. Plan the epoch with ``cut[p] = max(offers of p, current cut[p])`` and store it in ONE
   transaction: create ``virtual/<k>`` and the children's VP keys only if absent, only while
   every hold key is at the revision its stream wrote, the topic's config key at the revision
   read (the topic was not deleted, nor created again) and the controller's key at the
   revision of its election (``Resharder``'s fence); it also deletes the hold keys.
4. Host the children on their read nodes (``read_node_launcher.host_states``: opens their
   logs) and release the held streams with the stored epoch: they adopt it and go back to the
   offered cut, so the children get their records from there and the parents everything below
   the cut. A holder that leads a child hosts, then releases, in one call; the other holders
   release while the other nodes host the children they lead (``host_states``' ``then_release``).
5. Sealing is the parents' leader nodes' (``ReadNode``): each records its parent's sealed end
   once it is complete, and the group reads the children once it consumed the parents to it.

A failure before the transaction releases the holds without an epoch (the streams give the
parents what they withheld) and raises (``ReshardConflict`` when a race was lost: retriable).
If the transaction's outcome is unknown (etcd went away) the epoch key tells. A stream that
resumes because it took over a VP from another node deletes the partition's hold keys, so a
reshard that held the VP's old node can no longer store its epoch (``partition_feed``).

**What the read of step 1 may miss.** Anything can change after it; the transaction is the fence:

* a split epoch stored since: the plan numbers its epoch ``current.epoch + 1`` and its children
  ``next_vp_id``, ``next_vp_id + 1``, which that epoch took, and epochs and VP keys are only ever
  created if absent (and deleted only with the whole topic): the create fails, nothing is
  overwritten, ``ReshardConflict``;
* a parent's leader moved (the holders were read from stale states): the old node refuses the
  hold (``UnknownVirtualPartition``), or the new leader's stream deleted the hold keys when it
  resumed (see above), so the transaction's requires fail;
* a read node gone or registered since: the children's placement only; a child whose node does
  not take it is repaired by the controller (``Resharded.unhosted``).

**Two reshards of one topic at once** (no lock: the transaction fences them as well). The
controller runs reshards one at a time on its intent worker; a deposed controller whose worker
still finishes one cannot store its epoch (the controller's key moved), so the intent that the
new controller carries out again is carried out once. Were two to run anyway, they could not
both store: each numbers its epoch from the layout it read, so the second create fails. Nor can
one spoil the other's holds: a feed stream holds for one reshard at a time and refuses another's
(``ReshardConflict``, retriable) until the first released it; a release ends only its own
reshard's hold; and a hold key is written by the stream for the reshard it holds for, so a
reshard whose hold was left and taken by another finds its key moved.

Steps 2 and 4 call the same few read nodes. Their handles are kept across reshards
(``ReadNodeHandles``): looked up once, and again only after a call to the node failed or its
liveness key, read in step 1, moved (a restarted node is another actor under the same name).
"""

from __future__ import annotations

import logging
import secrets
import time
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import ray

from mafka4.clocks import wall_ms_fine
from mafka4.coordinator.control.placement import leaving_read_nodes, placeable_read_nodes, plan_children
from mafka4.coordinator.control.read_node_launcher import Release, host_states
from mafka4.errors import CoordinatorUnavailable, MafkaError, ReshardConflict, WrongReadMode
from mafka4.limits import ReadMode, TopicConfig
from mafka4.limits.servers import ReshardConfig
from mafka4.metadata import keys
from mafka4.metadata.store import Fence, MetadataStore
from mafka4.names import validate_topic_name
from mafka4.physical.topics import TopicStore
from mafka4.transport.remote_errors import unwrap
from mafka4.virtual.handles import ReadNodeHandles
from mafka4.virtual.layout import DEFAULT_POLICY, LanePolicy, MergeStep, SplitEpoch, SplitStep, TopicLayout, next_scale_step
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


@dataclass(frozen=True, slots=True)
class ReshardInputs:
    """What one reshard reads of etcd, in one transaction (at one revision): see ``Resharder.read``."""

    topic: str
    config: TopicConfig
    topic_revision: int  # of the topic's config key: written once, when the topic was created
    layout: TopicLayout
    states: Mapping[int, tuple[VirtualPartitionState, int]]  # vp -> (state, mod_revision)
    read_nodes: Sequence[str]  # registered read nodes, where children may go
    liveness: Mapping[str, int]  # read node -> mod_revision of its liveness key
    # Read nodes that read-node scaling is releasing or released (``keys.read_scaling``'s
    # "releasing", ``keys.released_read_node``): children go elsewhere (``placeable_read_nodes``).
    leaving: frozenset[str] = frozenset()


class Resharder:
    """Splits and merges the VPs of mafka4-mode topics; see the module docstring.

    Keeps the read nodes' handles from one reshard to the next (``ReadNodeHandles``, following
    the liveness keys each reshard reads): a controller keeps one for its term.
    """

    def __init__(self, store: MetadataStore, cluster: str, fence: Fence, config: ReshardConfig = ReshardConfig()):
        """``fence``: the controller's election (``ControllerElection.fence``); no epoch is stored without it."""
        self._store, self._cluster, self._fence, self._config = store, cluster, fence, config
        self._handles = ReadNodeHandles(cluster)

    def split(self, topic: str, vp: int, stamps: list[tuple[str, float]] | None = None) -> Resharded:
        """Split active ``vp`` at its range's midpoint into two new VPs. ``stamps``, if given, gets
        ``(hop, wall ms)`` of each step (a join trace's, ``mafka4.join_trace``)."""
        return self._reshard(self.read(topic), _plan_of(SplitStep(vp)), stamps)

    def merge(self, topic: str, first: int, second: int) -> Resharded:
        """Merge two active VPs with adjacent ranges into one new VP."""
        return self._reshard(self.read(topic), _plan_of(MergeStep(first, second)))

    def scale(self, topic: str, virtual_partitions: int) -> list[Resharded]:
        """Split the widest / merge the narrowest adjacent pair until ``virtual_partitions`` VPs are active.

        A step that fails retriably (a race with a failover, a stream slow to stop) is planned
        again from the layout then stored, at most ``step_attempts_max`` times in a row.
        """
        done: list[Resharded] = []
        failures = 0
        while True:
            inputs = self.read(topic)
            step = next_scale_step(inputs.layout, virtual_partitions)
            if step is None:
                return done
            try:
                done.append(self._reshard(inputs, _plan_of(step)))
                failures = 0
            except MafkaError as error:
                failures += 1
                if not error.retriable or failures >= self._config.step_attempts_max:
                    raise
                logger.warning("%s: reshard step %s failed (%s); planning it again", topic, step, error)

    def open_lane(self, topic: str, lane: str, policy: LanePolicy = DEFAULT_POLICY) -> tuple[int, Resharded | None]:
        """Open lane ``lane`` of ``topic`` with ``policy`` (one VP owning the lane's whole hash space); its lane id, and
        the epoch stored (None: the lane was open already).

        No stream is held: the epoch changes no other lane's layout (``TopicLayout.plan_open_lane``),
        so a feed stream that meets the lane's first record before its view holds the epoch only
        waits for the view (``feed_plan.plan_round``). Its cut is where the feed streams stand, as
        they last recorded it (``keys.feed_position``; each at most the high watermark, so below any
        record of the lane), so a lane VP that restarts is fed from there. The epoch and the
        child's VP key are created in one transaction fenced as a split's; losing a race with
        another epoch is retried from a new read, at most ``step_attempts_max`` times.
        """
        for attempt in range(1, self._config.step_attempts_max + 1):
            inputs = self.read(topic)
            known = inputs.layout.current.lane_id(lane)
            if known is not None:
                return known, None
            epoch = inputs.layout.plan_open_lane(lane, policy, self._fed_positions(topic, inputs.config.partitions))
            children = plan_children(epoch, inputs.config.read_replicas, placeable_read_nodes(
                inputs.read_nodes, inputs.liveness.keys(), inputs.leaving, inputs.config.read_replicas))
            if not self._store_epoch(inputs, epoch, children, {}):
                logger.warning("%s: opening lane %r lost a race with another epoch (attempt %d); planning again",
                               topic, lane, attempt)
                continue
            self._handles.follow_liveness(inputs.liveness)
            refused = host_states(self._cluster, topic, inputs.config, children,
                                  timeout_s=self._config.call_timeout_ms / 1000, handles=self._handles)
            unhosted = tuple(sorted({s.vp for s in children if refused.get(s.leader)}))
            logger.warning("%s: lane %r opened by split epoch %d with VP %d%s", topic, lane, epoch.epoch,
                           epoch.children[0], f"; not hosted yet: {unhosted}" if unhosted else "")
            return epoch.lane_id(lane), Resharded(epoch, unhosted)
        raise ReshardConflict(f"topic {topic!r}: lane {lane!r} could not be opened, every attempt lost a race with "
                              f"another split epoch; retry")

    def _fed_positions(self, topic: str, partitions: int) -> list[int]:
        """Per partition, the furthest ``next_offset`` a read node's feed stream recorded (0 if none did)."""
        positions = [0] * partitions
        prefix = keys.topic_feed_positions_prefix(self._cluster, topic)
        for item in self._store.get_prefix(prefix):
            partition, _, _ = item.key[len(prefix):].partition("/")
            if partition.isdigit() and int(partition) < partitions and isinstance(item.value, dict):
                positions[int(partition)] = max(positions[int(partition)], int(item.value.get("next_offset", 0)))
        return positions

    def read(self, topic: str) -> ReshardInputs:
        """Everything a reshard of ``topic`` plans with, in one etcd round trip: the topic's config,
        split epochs and VP states, the registered nodes and the read nodes' liveness keys.

        Read at one revision, so every VP of the layout has its state. What the reshard then
        stores cannot be made wrong by this read having become stale meanwhile (module docstring).
        """
        validate_topic_name(topic)
        topic_key = keys.topic(self._cluster, topic)
        epochs = keys.split_epochs_prefix(self._cluster, topic)
        states = keys.virtual_partitions_prefix(self._cluster, topic)
        nodes, liveness = keys.nodes_prefix(self._cluster), keys.read_nodes_prefix(self._cluster)
        released, scaling = keys.released_read_nodes_prefix(self._cluster), keys.read_scaling(self._cluster)
        found = self._store.get_prefixes([epochs, states, nodes, liveness, released], keys=[topic_key, scaling])
        config = TopicStore.config_from(topic, next(iter(found[topic_key]), None))
        if config.read_mode is not ReadMode.MAFKA4:
            raise WrongReadMode(
                f"topic {topic!r} is in read_mode={config.read_mode.value!r}: it has no virtual partitions to "
                f"split, merge or scale; create a topic with read_mode='mafka4' (--read-mode mafka4)"
            )
        live = {node: item.mod_revision for item in found[liveness]
                if (node := keys.parse_read_node_liveness(self._cluster, item.key)) is not None}
        return ReshardInputs(topic, config, found[topic_key][0].mod_revision,
                             VirtualStore.layout_from(topic, config.partitions, config.virtual_config(), found[epochs]),
                             VirtualStore.states_from(states, found[states]),
                             TopicStore.nodes_from(found[nodes], "read"), live,
                             leaving_read_nodes(self._cluster, found[released], found[scaling]))

    # --- one reshard ------------------------------------------------------------------------

    def _reshard(self, inputs: ReshardInputs, plan: Plan, stamps: list[tuple[str, float]] | None = None) -> Resharded:
        topic, config, layout, states = inputs.topic, inputs.config, inputs.layout, inputs.states
        token = secrets.token_hex(8)
        current_cut = layout.current.cut
        draft = plan(layout, current_cut, current_cut)
        children = plan_children(draft, config.read_replicas, placeable_read_nodes(
            inputs.read_nodes, inputs.liveness.keys(), inputs.leaving, config.read_replicas))
        holders = sorted({states[parent][0].leader for parent in draft.parents})
        handles = self._handles
        handles.follow_liveness(inputs.liveness)
        started = time.monotonic()
        _stamp(stamps, "holds_asked")
        try:
            offers = self._hold(topic, holders, token, draft.parents, handles)
            _stamp(stamps, "holds_answered")
            cut = [max([current_cut[p]] + [offer[p][0] for offer in offers.values()]) for p in range(config.partitions)]
            fed_through = [max(offer[p][0] for offer in offers.values()) for p in range(config.partitions)]
            epoch = plan(layout, cut, fed_through)
            assert epoch.children == draft.children, (epoch.children, draft.children)
            hold_revisions = {keys.feeder_hold(self._cluster, topic, p, node): offer[p][1]
                              for node, offer in offers.items() for p in range(config.partitions)}
            if not self._store_epoch(inputs, epoch, children, hold_revisions):
                raise ReshardConflict(
                    f"topic {topic!r}: another split epoch was stored, a held feed stream left its hold (timeout, "
                    f"restart or failover), the topic was deleted or this controller was deposed before the new "
                    f"split epoch was stored; nothing changed, retry"
                )
        except BaseException:
            self._release(topic, holders, token, handles)
            raise
        _stamp(stamps, "epoch_stored")
        refused = host_states(self._cluster, topic, config, children, timeout_s=self._config.call_timeout_ms / 1000,
                              handles=handles, then_release=Release(tuple(holders), token, epoch, children))
        _stamp(stamps, "children_hosted")
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

    def _release(self, topic: str, holders: Sequence[str], token: str, handles: ReadNodeHandles) -> None:
        """Release the held streams of a reshard that stored no epoch: the parents get what was withheld."""
        refs = [handle.release.remote(topic, token)
                for handle in (handles.get(node) for node in holders) if handle is not None]
        try:
            ray.get(refs, timeout=self._config.call_timeout_ms / 1000)
        except (ray.exceptions.RayError, TimeoutError) as error:
            for node in holders:
                handles.forget(node)
            # A stream not told leaves its hold by itself after hold_ms_max.
            logger.warning("reshard %s: releasing the holds failed: %s", token, error)

    def _store_epoch(self, inputs: ReshardInputs, epoch: SplitEpoch, children: Sequence[VirtualPartitionState],
                     hold_revisions: Mapping[str, int]) -> bool:
        topic = inputs.topic
        stored = epoch_to_json(epoch, inputs.layout.current)
        creates = {keys.split_epoch(self._cluster, topic, epoch.epoch): stored}
        creates.update({keys.virtual_partition(self._cluster, topic, s.vp): s.to_json() for s in children})
        requires = {keys.topic(self._cluster, topic): inputs.topic_revision, self._fence[0]: self._fence[1],
                    **hold_revisions}
        try:
            return self._store.transact(creates, requires, deletes=list(hold_revisions))
        except CoordinatorUnavailable:
            # The answer was lost, not necessarily the write: the epoch key tells (raises while etcd is away).
            found = self._store.get(keys.split_epoch(self._cluster, topic, epoch.epoch))
            return found is not None and found.value == stored


def _stamp(stamps: list[tuple[str, float]] | None, hop: str) -> None:
    if stamps is not None:
        stamps.append((hop, wall_ms_fine()))


def _plan_of(step: SplitStep | MergeStep) -> Plan:
    if isinstance(step, SplitStep):
        return lambda layout, cut, fed: layout.plan_split(step.vp, cut, fed)
    return lambda layout, cut, fed: layout.plan_merge(step.first, step.second, cut, fed)
