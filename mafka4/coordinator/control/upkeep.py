"""The controller's upkeep of the read path: the shell around ``control.upkeep_decisions``'s decisions.

Every ``upkeep_interval_ms`` the active controller looks at every mafka4-mode topic:

* **Replicas off gone read nodes.** ``NodeAbsence`` tracks how long each read node has been
  unregistered; past ``read_node_gone_ms`` its follower replicas move to other live read nodes
  (``plan_replica_moves``). The moved state is written with the next leader epoch (a fenced
  compare-and-swap), so the leader takes office again with the new replica list and the repair
  (``read_path_repairs``) hosts the new replica, which copies the log from the leader and
  joins the RISR. A leader on a gone node fails over first (repair), its followers move later.
* **Merges after groups shrank.** A topic's target is its creation count of VPs or the largest
  mafka4-mode group reading it; once it has had more active VPs than that for
  ``vp_merge_delay_ms`` (``ShrinkWatch``), the controller writes a merge intent of the
  narrowest adjacent pair (``merge_step``), which its intent worker carries out like a
  client's.
* **Retiring closed VPs.** A sealed closed VP whose newest record passed the topic's retention
  (or that holds none; the leader's node says, ``ReadNode.describe_vps``) is marked retired in
  etcd (fenced CAS) and its logs are dropped on every node hosting it.

With ``ControllerConfig.read_node_scaling`` on, each pass also runs the read-node scaling and
the replica moves between live read nodes (``read_scaling.ReadScaling``) on the states read
here; a VP with a move in flight is busy, and its replicas do not move off gone nodes until the
move ended (``plan_replica_moves``'s ``busy``): two writers of one VP's replicas could leave it
one replica short.

Returns the VPs whose roles must be announced again; failures are logged and retried at the
next pass.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import defaultdict
from typing import Sequence

from mafka4.coordinator.control.read_node_launcher import drop_everywhere
from mafka4.coordinator.control.read_path_decisions import VirtualPartitionItem
from mafka4.coordinator.control.read_scaling import ReadScaling, busy_vps
from mafka4.coordinator.control.upkeep_decisions import (NodeAbsence, ShrinkWatch, merge_step, plan_replica_moves,
                                                         retirable, target_virtual_partitions)
from mafka4.coordinator.groups.partition_protocol import VIRTUAL_ASSIGNOR, MemberInfo
from mafka4.limits import DESCRIBE_TIMEOUT_S, ReadMode, TopicConfig
from mafka4.limits.servers import ControllerConfig
from mafka4.metadata import intents, keys
from mafka4.metadata.intents import IntentKind
from mafka4.metadata.store import Fence, MetadataStore
from mafka4.physical.partition_state import config_from_json
from mafka4.physical.topics import TopicStore
from mafka4.virtual.handles import ask_leader_nodes
from mafka4.virtual.layout import TRUNK, TopicLayout
from mafka4.virtual.vp_state import VirtualPartitionState
from mafka4.virtual.vp_store import VirtualStore

log = logging.getLogger("mafka4.controller")


class ReadPathUpkeep:
    def __init__(self, store: MetadataStore, cluster: str, config: ControllerConfig,
                 scaling: ReadScaling | None = None):
        self._store, self._cluster, self._config = store, cluster, config
        self._scaling = scaling  # None: read-node scaling is off (ControllerConfig.read_node_scaling)
        self._topics = TopicStore(store, cluster)
        self._virtual = VirtualStore(store, cluster)
        self._absence = NodeAbsence(config.read_node_gone_ms)
        self._shrink: dict[str, ShrinkWatch] = {}
        self._merging: dict[str, str] = {}  # topic -> id of the merge intent written and not yet done

    def run(self, registered_read_nodes: Sequence[str], fence: Fence, now_ms: int, wall_ms: int
            ) -> set[VirtualPartitionItem]:
        """One pass over every mafka4-mode topic (``now_ms``: the trackers' monotonic clock; ``wall_ms``:
        the clock record timestamps are compared with); the VPs whose roles must be announced again."""
        topics = {}
        for name in self._topics.names():
            found = self._store.get(keys.topic(self._cluster, name))
            if found is None:
                continue
            config = config_from_json(found.value)
            if config.read_mode is ReadMode.MAFKA4:
                layout, states = self._virtual.layout_and_states(name, config.partitions, config.virtual_config())
                topics[name] = (config, layout, states)
        named = {node for _, _, states in topics.values() for state, _ in states.values() for node in state.replicas}
        self._absence.observe(registered_read_nodes, now_ms, named)
        gone = self._absence.gone(now_ms)
        members = self._group_sizes()
        records = self._scaling.records() if self._scaling is not None else {}
        busy = busy_vps(records)
        repairs: set[VirtualPartitionItem] = set()
        for name, (config, layout, states) in sorted(topics.items()):
            if gone:
                repairs |= self._move_off(name, states, set(registered_read_nodes) - gone, gone, fence,
                                          busy.get(name, frozenset()))
            self._merge_if_due(name, config, layout, members.get(name, []), now_ms)
            self._retire(name, config, layout, states, fence, wall_ms)
        for name in set(self._shrink) - set(topics):
            del self._shrink[name]
        if self._scaling is not None:
            repairs |= self._scaling.run({name: states for name, (_, _, states) in topics.items()},
                                         registered_read_nodes, records, fence, wall_ms)
        return repairs

    def stopped_read_nodes(self) -> frozenset[str]:
        """Read nodes released by the scaling whose actor was stopped: the repair must not start them again."""
        return self._scaling.stopped_read_nodes if self._scaling is not None else frozenset()

    def gone_nodes(self, now_ms: int) -> frozenset[str]:
        """Read nodes unregistered for longer than ``read_node_gone_ms`` (as of the last pass)."""
        return self._absence.gone(now_ms)

    # --- replicas off gone nodes ------------------------------------------------------------

    def _move_off(self, topic: str, states: dict[int, tuple[VirtualPartitionState, int]], live: set[str],
                  gone: frozenset[str], fence: Fence, busy: frozenset[int]) -> set[VirtualPartitionItem]:
        moves = plan_replica_moves([state for state, _ in states.values()], live, gone, busy)
        for stuck in moves.stuck:
            log.warning("%s: %s", topic, stuck)
        moved = set()
        for state in moves.states:
            new = dataclasses.replace(state, leader_epoch=state.leader_epoch + 1)
            if self._virtual.swap(topic, new, states[state.vp][1], fence):
                log.warning("%s/v%d: replicas %s -> %s (read nodes %s gone for good), epoch %d", topic, state.vp,
                            list(states[state.vp][0].replicas), list(new.replicas), sorted(gone), new.leader_epoch)
                moved.add(VirtualPartitionItem(topic, state.vp))
        return moved

    # --- merges -----------------------------------------------------------------------------

    def _group_sizes(self) -> dict[str, list[int]]:
        """Per topic, the live count of every mafka4-mode group's trunk readers: the trunk's VPs serve them
        (a lane's own readers have the lane's VPs, which upkeep never merges)."""
        counts: dict[tuple[str, str], int] = defaultdict(int)
        prefix = keys.groups_prefix(self._cluster)
        for item in self._store.get_prefix(prefix):
            group = keys.group_name_of(self._cluster, item.key)
            if group is None or not item.key.startswith(keys.group_members_prefix(self._cluster, group)):
                continue
            if item.value.get("assignor") == VIRTUAL_ASSIGNOR and TRUNK in MemberInfo.from_json(item.value).reads:
                counts[(group, item.value["topic"])] += 1
        sizes: dict[str, list[int]] = defaultdict(list)
        for (_, topic), count in counts.items():
            sizes[topic].append(count)
        return sizes

    def _merge_if_due(self, topic: str, config: TopicConfig, layout: TopicLayout, group_sizes: list[int],
                      now_ms: int) -> None:
        pending = self._merging.get(topic)
        if pending is not None and self._store.get(keys.intent(self._cluster, pending)) is not None:
            return  # the last merge is still to be carried out
        self._merging.pop(topic, None)
        target = target_virtual_partitions(config.virtual_partitions, group_sizes)
        watch = self._shrink.setdefault(topic, ShrinkWatch(self._config.vp_merge_delay_ms))
        if not watch.observe(len(layout.current.ranges), target, now_ms):
            return
        step = merge_step(layout, target)
        if step is None:
            return
        intent = intents.submit(self._store, self._cluster, IntentKind.MERGE, topic,
                                {"first": step.first, "second": step.second})
        self._merging[topic] = intent.intent_id
        log.warning("%s: %d active VPs, %d needed (groups of %s members) for %d ms: merging v%d and v%d", topic,
                    len(layout.current.ranges), target, group_sizes or "no", self._config.vp_merge_delay_ms,
                    step.first, step.second)

    # --- retiring closed VPs ------------------------------------------------------------------

    def _retire(self, topic: str, config: TopicConfig, layout: TopicLayout,
                states: dict[int, tuple[VirtualPartitionState, int]], fence: Fence, wall_ms: int) -> None:
        candidates = [state for state, _ in states.values()
                      if not state.retired and state.sealed_end_offset is not None and not layout.is_active(state.vp)]
        if not candidates or config.retention_ms is None:
            return
        described = ask_leader_nodes(self._cluster, topic, candidates, "describe_vps", timeout_s=DESCRIBE_TIMEOUT_S)
        newest = {vp: answer["newest_timestamp_ms"] for vp, answer in described.items()
                  if isinstance(answer, dict)}
        for vp in retirable(layout, candidates, newest, config.retention_ms, wall_ms):
            state, revision = states[vp]
            if not self._virtual.swap(topic, dataclasses.replace(state, retired=True), revision, fence):
                continue  # changed meanwhile: looked at again next pass
            drop_everywhere(self._cluster, topic, state.replicas, [vp], delete_data=True)
            log.info("%s/v%d retired: closed, sealed at %d, newest record older than retention_ms=%d", topic, vp,
                     state.sealed_end_offset, config.retention_ms)
