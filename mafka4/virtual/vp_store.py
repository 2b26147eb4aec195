"""Read-path metadata in etcd: a topic's split epochs and the state of each virtual partition.

Key layout (``coordinator/metadata/keys.py``)::

    topics/<topic>/virtual/<epoch>   one ``layout.SplitEpoch``, written once, never changed
    topics/<topic>/vp/<v>            one ``VirtualPartitionState`` (``virtual.vp_state``);
                                     CAS on its mod_revision

Both are created with the topic, before or with its config key (``read_path_values``,
``physical.topics.TopicStore.create``), so a reader sees a mafka4-mode topic with its whole read
path or not at all; a later split epoch
and the states of the VPs it opens are created together in one transaction as well
(``control.resharding``; their placement is ``control.placement.plan_children``). Afterwards
the VP leader writes the RISR and a VP failover writes the leader and epoch, each by
compare-and-swap; a topic deletion removes them with the topic's prefix.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

from mafka4.errors import UnknownTopic
from mafka4.limits import RISR_WRITE_ATTEMPTS_MAX, VirtualConfig
from mafka4.log.read_loss import ReadLoss
from mafka4.metadata import keys
from mafka4.metadata.store import Fence, MetadataStore, Update
from mafka4.virtual.layout import TopicLayout
from mafka4.virtual.vp_state import ReadPathPlan, VirtualPartitionState, epochs_from_json, epochs_to_json


def read_path_values(cluster: str, topic: str, plan: ReadPathPlan) -> dict[str, Any]:
    """The etcd keys and values that record ``plan``, to create in the topic's transaction."""
    values: dict[str, Any] = {
        keys.split_epoch(cluster, topic, epoch.epoch): value
        for epoch, value in zip(plan.layout.epochs, epochs_to_json(plan.layout.epochs))
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
        epochs = epochs_from_json(item.value for item in items)
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
        def with_sealed_end(value: dict) -> dict | Update:
            state = VirtualPartitionState.from_json(vp, value)
            if state.sealed_end_offset is not None:
                assert state.sealed_end_offset == sealed_end_offset, (vp, state.sealed_end_offset, sealed_end_offset)
                return Update.KEEP
            return dataclasses.replace(state, sealed_end_offset=sealed_end_offset).to_json()

        return self._store.update(keys.virtual_partition(self._cluster, topic, vp), with_sealed_end,
                                  RISR_WRITE_ATTEMPTS_MAX, f"recording the sealed end of {topic}/v{vp}")

    def read_losses(self, topic: str) -> dict[int, ReadLoss]:
        """Per physical partition, the offsets retention deleted before every read node fed them (``keys.read_loss``)."""
        prefix = keys.read_losses_prefix(self._cluster, topic)
        found = (ReadLoss.from_json(int(item.key[len(prefix):]), item.value) for item in self._store.get_prefix(prefix))
        return {loss.partition: loss for loss in found if loss.ranges}

    def record_risr(self, topic: str, vp: int, leader: str, leader_epoch: int, risr: Sequence[str]) -> bool:
        """CAS ``risr`` into the VP key if it still names ``leader`` at ``leader_epoch``.

        False when it names another leader or epoch (the writer is fenced) or the topic is gone.
        """
        def with_risr(value: dict) -> dict | Update:
            state = VirtualPartitionState.from_json(vp, value)
            if state.leader != leader or state.leader_epoch != leader_epoch:
                return Update.REFUSE
            return Update.KEEP if list(state.risr) == list(risr) else {**state.to_json(), "risr": list(risr)}

        return self._store.update(keys.virtual_partition(self._cluster, topic, vp), with_risr,
                                  RISR_WRITE_ATTEMPTS_MAX, f"RISR write for {topic}/v{vp}")
