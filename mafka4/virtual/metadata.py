"""Read-path metadata in etcd: a topic's split epochs and the state of each virtual partition.

Key layout (``coordinator/keys.py``)::

    topics/<topic>/virtual/<epoch>   one ``reshard.SplitEpoch``, written once, never changed
    topics/<topic>/vp/<v>            one ``VirtualPartitionState``: hash range, leader,
                                     leader_epoch, replicas, risr, once the VP is closed and
                                     complete its sealed_end_offset, and once its logs are
                                     deleted by retention ``retired``; CAS on its mod_revision

Both are created with the topic, in the topic's own transaction (``read_path_values``), so a
reader sees a mafka4-mode topic with its whole read path or not at all; a later split epoch
and the states of the VPs it opens are created together in one transaction as well
(``virtual.resharding``; their placement is ``plan_children``). Afterwards the VP
leader writes the RISR and a VP failover writes the leader and epoch, each by
compare-and-swap; a topic deletion removes them with the topic's prefix.

``plan_read_path`` decides a new topic's layout and replica placement: epoch 0 with
``virtual_partitions`` even hash ranges, VP ``v`` replicated on ``read_replicas`` distinct
live read nodes in Kafka's round-robin order (``physical.placement``), its first replica
leading at epoch 0 with every replica in the RISR.

Pure apart from ``VirtualStore``, which is the only part that talks to etcd.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Sequence

from mafka4.coordinator import keys
from mafka4.coordinator.store import Fence, MetadataStore
from mafka4.errors import CoordinatorUnavailable, NotEnoughReadNodes, UnknownTopic
from mafka4.limits import TopicConfig, VirtualConfig
from mafka4.physical.placement import assign_replicas
from mafka4.virtual.ranges import HashRange, RangeMap
from mafka4.virtual.read_loss import ReadLoss
from mafka4.virtual.reshard import SplitEpoch, TopicLayout

# A RISR write that keeps losing against concurrent writes (a failover) gives up after this many tries.
RISR_WRITE_ATTEMPTS_MAX = 10


@dataclass(frozen=True, slots=True)
class VirtualPartitionState:
    """Who leads a virtual partition, in which epoch, on which read nodes, and its RISR."""

    vp: int
    hash_range: HashRange
    leader: str
    leader_epoch: int
    replicas: tuple[str, ...]
    risr: tuple[str, ...]
    # Set once the VP is closed and complete: its log end offset, which never changes again
    # (reshard.TopicLayout.is_sealed; recorded by the parent leader's read node).
    sealed_end_offset: int | None = None
    # Set once a closed VP's records are past the topic's retention and its logs were deleted on
    # every read node (virtual.upkeep.retirable). The key stays so that readers know the VP was
    # there and count it as consumed to its end (TopicLayout.readable_vps).
    retired: bool = False

    def __post_init__(self) -> None:
        assert self.leader in self.replicas and self.leader in self.risr, (self.leader, self.replicas, self.risr)
        assert set(self.risr) <= set(self.replicas) and len(set(self.replicas)) == len(self.replicas), self
        assert self.leader_epoch >= 0, self.leader_epoch
        assert self.sealed_end_offset is None or self.sealed_end_offset >= 0, self.sealed_end_offset
        assert isinstance(self.retired, bool), self.retired
        assert not self.retired or self.sealed_end_offset is not None, f"v{self.vp} is retired before it was sealed"

    @property
    def name(self) -> str:
        return f"v{self.vp}"

    def to_json(self) -> dict:
        value = {"range": [self.hash_range.start, self.hash_range.end], "leader": self.leader,
                 "leader_epoch": self.leader_epoch, "replicas": list(self.replicas), "risr": list(self.risr)}
        if self.sealed_end_offset is not None:
            value["sealed_end_offset"] = self.sealed_end_offset
        if self.retired:
            value["retired"] = True
        return value

    @classmethod
    def from_json(cls, vp: int, value: dict) -> "VirtualPartitionState":
        start, end = value["range"]
        return cls(vp, HashRange(start, end), value["leader"], value["leader_epoch"],
                   tuple(value["replicas"]), tuple(value["risr"]), value.get("sealed_end_offset"),
                   value.get("retired", False))


def epoch_to_json(epoch: SplitEpoch) -> dict:
    return {
        "epoch": epoch.epoch,
        "ranges": [[hash_range.start, hash_range.end, vp] for hash_range, vp in epoch.ranges.items()],
        "cut": list(epoch.cut),
        "parents": list(epoch.parents),
        "children": list(epoch.children),
    }


def epoch_from_json(value: dict) -> SplitEpoch:
    ranges = RangeMap.of((HashRange(start, end), vp) for start, end, vp in value["ranges"])
    return SplitEpoch(value["epoch"], ranges, tuple(value["cut"]), tuple(value["parents"]), tuple(value["children"]))


@dataclass(frozen=True, slots=True)
class ReadPathPlan:
    """A new mafka4-mode topic's layout (epoch 0) and the initial state of each VP."""

    layout: TopicLayout
    states: tuple[VirtualPartitionState, ...]


def plan_read_path(config: TopicConfig, read_nodes: Sequence[str], start: int = 0) -> ReadPathPlan | None:
    """The read path of a new topic with ``config`` (None in mafka3 mode: no VPs at all).

    Raises ``NotEnoughReadNodes`` when ``read_replicas`` is more than the live read nodes.
    """
    config = config.resolved()
    if config.virtual_partition_count == 0:
        return None
    replicas_per_vp = config.read_replica_count
    if replicas_per_vp > len(read_nodes):
        live = ", ".join(sorted(read_nodes)) or "none"
        raise NotEnoughReadNodes(
            f"read_replicas={replicas_per_vp} needs {replicas_per_vp} live read nodes, {len(read_nodes)} are "
            f"live ({live}): lower read_replicas, start more read nodes ('mafka4 up --read-nodes "
            f"{replicas_per_vp}'), or create the topic with read_mode='mafka3' (consumers read physical partitions)"
        )
    layout = TopicLayout.initial(config.partitions, config.virtual_partition_count, config.virtual_config())
    assignment = assign_replicas(len(layout.current.ranges), replicas_per_vp, read_nodes, start=start)
    states = tuple(
        VirtualPartitionState(vp, hash_range, replicas[0], 0, tuple(replicas), tuple(replicas))
        for (hash_range, vp), replicas in zip(layout.current.ranges.items(), assignment)
    )
    return ReadPathPlan(layout, states)


def plan_children(epoch: SplitEpoch, read_replicas: int, read_nodes: Sequence[str]) -> tuple[VirtualPartitionState, ...]:
    """The initial state of the VPs ``epoch`` opens: placed like a new topic's (``plan_read_path``),
    starting at the first child's id so that consecutive splits spread over the read nodes."""
    if read_replicas > len(read_nodes):
        live = ", ".join(sorted(read_nodes)) or "none"
        raise NotEnoughReadNodes(
            f"read_replicas={read_replicas} needs {read_replicas} live read nodes for the new virtual partitions, "
            f"{len(read_nodes)} are live ({live}): start more read nodes ('mafka4 up --read-nodes {read_replicas}')"
        )
    assignment = assign_replicas(len(epoch.children), read_replicas, read_nodes, start=epoch.children[0])
    return tuple(
        VirtualPartitionState(vp, epoch.ranges.range_of(vp), replicas[0], 0, tuple(replicas), tuple(replicas))
        for vp, replicas in zip(epoch.children, assignment)
    )


def read_path_values(cluster: str, topic: str, plan: ReadPathPlan) -> dict[str, Any]:
    """The etcd keys and values that record ``plan``, to create in the topic's transaction."""
    values: dict[str, Any] = {
        keys.split_epoch(cluster, topic, epoch.epoch): epoch_to_json(epoch) for epoch in plan.layout.epochs
    }
    for state in plan.states:
        values[keys.virtual_partition(cluster, topic, state.vp)] = state.to_json()
    return values


class VirtualStore:
    """Reads and compare-and-swaps the read-path metadata of one cluster's topics."""

    def __init__(self, store: MetadataStore, cluster: str):
        self._store = store
        self._cluster = cluster

    def layout(self, topic: str, partitions: int, config: VirtualConfig = VirtualConfig()) -> TopicLayout:
        """The topic's split epochs, oldest first; ``UnknownTopic`` if it has none."""
        items = self._store.get_prefix(keys.split_epochs_prefix(self._cluster, topic))
        return self.layout_from(topic, partitions, config, items)

    def layout_and_states(self, topic: str, partitions: int, config: VirtualConfig = VirtualConfig()
                          ) -> tuple[TopicLayout, dict[int, tuple[VirtualPartitionState, int]]]:
        """The layout and every VP state, read at one revision (so every VP of the layout has a state)."""
        epochs_prefix = keys.split_epochs_prefix(self._cluster, topic)
        states_prefix = keys.virtual_partitions_prefix(self._cluster, topic)
        found = self._store.get_prefixes([epochs_prefix, states_prefix])
        return (self.layout_from(topic, partitions, config, found[epochs_prefix]),
                self.states_from(states_prefix, found[states_prefix]))

    @staticmethod
    def layout_from(topic: str, partitions: int, config: VirtualConfig, items) -> TopicLayout:
        """The layout from the items read below ``keys.split_epochs_prefix``."""
        epochs = sorted((epoch_from_json(item.value) for item in items), key=lambda e: e.epoch)
        if not epochs:
            raise UnknownTopic(
                f"topic {topic!r} has no virtual-partition layout: it does not exist or is in mafka3 mode"
            )
        return TopicLayout(partitions, epochs, config)

    def states(self, topic: str) -> dict[int, tuple[VirtualPartitionState, int]]:
        """Every VP of the topic: ``vp -> (state, mod_revision)``."""
        prefix = keys.virtual_partitions_prefix(self._cluster, topic)
        return self.states_from(prefix, self._store.get_prefix(prefix))

    @staticmethod
    def states_from(prefix: str, items) -> dict[int, tuple[VirtualPartitionState, int]]:
        """``vp -> (state, mod_revision)`` from the items read below ``prefix`` (``keys.virtual_partitions_prefix``)."""
        found = {}
        for item in items:
            vp = int(item.key[len(prefix):])
            found[vp] = (VirtualPartitionState.from_json(vp, item.value), item.mod_revision)
        return found

    def state(self, topic: str, vp: int) -> tuple[VirtualPartitionState, int] | None:
        item = self._store.get(keys.virtual_partition(self._cluster, topic, vp))
        return None if item is None else (VirtualPartitionState.from_json(vp, item.value), item.mod_revision)

    def swap(self, topic: str, state: VirtualPartitionState, mod_revision: int, fence: Fence | None = None) -> bool:
        """Write ``state`` only if the VP key is still at ``mod_revision`` (and ``fence`` holds, if given)."""
        return self._store.compare_and_swap(
            keys.virtual_partition(self._cluster, topic, state.vp), state.to_json(), mod_revision, fence
        )

    def record_sealed_end(self, topic: str, vp: int, sealed_end_offset: int) -> bool:
        """Add ``sealed_end_offset`` to the VP key (CAS, retried against RISR writes); False if the VP is gone.

        A sealed end never changes, so a second writer finds it recorded and agrees with it.
        """
        for _ in range(RISR_WRITE_ATTEMPTS_MAX):
            found = self.state(topic, vp)
            if found is None:
                return False
            state, mod_revision = found
            if state.sealed_end_offset is not None:
                assert state.sealed_end_offset == sealed_end_offset, (vp, state.sealed_end_offset, sealed_end_offset)
                return True
            if self.swap(topic, dataclasses.replace(state, sealed_end_offset=sealed_end_offset), mod_revision):
                return True
        raise CoordinatorUnavailable(f"recording the sealed end of {topic}/v{vp} kept conflicting; retrying")

    def read_losses(self, topic: str) -> dict[int, ReadLoss]:
        """Per physical partition, the offsets retention deleted before every read node fed them (``keys.read_loss``)."""
        prefix = keys.read_losses_prefix(self._cluster, topic)
        found = (ReadLoss.from_json(int(item.key[len(prefix):]), item.value) for item in self._store.get_prefix(prefix))
        return {loss.partition: loss for loss in found if loss.ranges}

    def record_risr(self, topic: str, vp: int, leader: str, leader_epoch: int, risr: Sequence[str]) -> bool:
        """CAS ``risr`` into the VP key if it still names ``leader`` at ``leader_epoch``.

        False when it names another leader or epoch (the writer is fenced) or the topic is gone.
        """
        key = keys.virtual_partition(self._cluster, topic, vp)
        for _ in range(RISR_WRITE_ATTEMPTS_MAX):
            current = self._store.get(key)
            if current is None:
                return False
            state = VirtualPartitionState.from_json(vp, current.value)
            if state.leader != leader or state.leader_epoch != leader_epoch:
                return False
            if list(state.risr) == list(risr) or self._store.compare_and_swap(
                    key, {**state.to_json(), "risr": list(risr)}, current.mod_revision):
                return True
        raise CoordinatorUnavailable(f"RISR write for {topic}/v{vp} kept conflicting; retrying")
