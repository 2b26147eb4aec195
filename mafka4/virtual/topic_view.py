"""``TopicView``: what a read node knows of one topic's metadata, shared by the topic's feed streams.

One etcd transaction reads the physical partitions' states (leader, ISR: where a feed stream
reads), the split epochs (the layout) and the VP states (sealed ends, leaders) at one
revision; a view is re-read when it is older than ``FeederConfig.metadata_max_age_ms``, when a
stream failed (``invalidate``) and when the controller announced roles. While etcd is away
the view keeps what it knew (the data path goes on; metadata changes wait). A reshard that
stored a new epoch hands it to the streams it held, which ``adopt`` it at once, before the next
read.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Callable

from mafka4.errors import CoordinatorUnavailable, UnknownTopic
from mafka4.limits import TopicConfig
from mafka4.metadata import keys
from mafka4.metadata.store import MetadataStore
from mafka4.physical.partition_state import PartitionState
from mafka4.virtual.layout import SplitEpoch, TopicLayout
from mafka4.virtual.vp_state import VirtualPartitionState
from mafka4.virtual.vp_store import VirtualStore

logger = logging.getLogger(__name__)


class TopicView:
    """The layout, VP states and physical partition states of one topic, as a read node last read them."""

    def __init__(self, cluster: str, topic: str, config: TopicConfig, open_store: Callable[[], MetadataStore],
                 max_age_ms: int):
        self.cluster, self.topic, self.config = cluster, topic, config
        self._open_store = open_store
        self._max_age_s = max_age_ms / 1000
        self.layout: TopicLayout | None = None
        self.states: dict[int, VirtualPartitionState] = {}
        self.partitions: dict[int, PartitionState] = {}
        self.read_at = float("-inf")  # time.monotonic() of the last successful read
        self.generation = 0  # grows with every change a stream must look at
        self._sealed: tuple[int, frozenset[int]] = (-1, frozenset())  # (generation, sealed VPs)
        self._reading: asyncio.Task | None = None

    @property
    def sealed(self) -> frozenset[int]:
        if self._sealed[0] != self.generation:
            self._sealed = (self.generation, frozenset(
                vp for vp, state in self.states.items() if state.sealed_end_offset is not None))
        return self._sealed[1]

    def invalidate(self) -> None:
        self.read_at = float("-inf")

    async def refresh_if_old(self) -> None:
        if time.monotonic() - self.read_at < self._max_age_s:
            return
        await self.refresh()

    async def refresh(self) -> None:
        """Read the metadata again (one read in flight per view, shared by every caller)."""
        if self._reading is None or self._reading.done():
            self._reading = asyncio.get_running_loop().create_task(self._read())
        await asyncio.shield(self._reading)

    async def _read(self) -> None:
        try:
            layout, states, partitions = await asyncio.get_running_loop().run_in_executor(None, self._read_sync)
        except CoordinatorUnavailable as error:
            if self.layout is None:
                raise
            logger.warning("%s: metadata not refreshed, keeping what is known: %s", self.topic, error)
            self.read_at = time.monotonic()
            return
        if layout != self.layout or states != self.states or partitions != self.partitions:
            self.generation += 1
        self.layout, self.states, self.partitions = layout, states, partitions
        self.read_at = time.monotonic()

    def _read_sync(self) -> tuple[TopicLayout, dict[int, VirtualPartitionState], dict[int, PartitionState]]:
        store = self._open_store()
        physical_prefix = keys.physical_prefix(self.cluster, self.topic)
        epochs_prefix = keys.split_epochs_prefix(self.cluster, self.topic)
        states_prefix = keys.virtual_partitions_prefix(self.cluster, self.topic)
        found = store.get_prefixes([physical_prefix, epochs_prefix, states_prefix])
        if not found[epochs_prefix]:
            raise UnknownTopic(f"topic {self.topic!r} has no virtual-partition layout in etcd: it was deleted")
        layout = VirtualStore.layout_from(self.topic, self.config.partitions, self.config.virtual_config(),
                                          found[epochs_prefix])
        states = {vp: state for vp, (state, _) in VirtualStore.states_from(states_prefix, found[states_prefix]).items()}
        partitions = {
            int(item.key[len(physical_prefix):]): PartitionState.from_json(int(item.key[len(physical_prefix):]), item.value)
            for item in found[physical_prefix]
        }
        return layout, states, partitions

    def adopt(self, epoch: SplitEpoch, children: tuple[VirtualPartitionState, ...]) -> None:
        """A reshard stored ``epoch`` with ``children``: take it without waiting for the next read."""
        assert self.layout is not None
        if epoch.epoch == len(self.layout.epochs):
            self.layout = self.layout.append(epoch)
            self.states = {**self.states, **{state.vp: state for state in children}}
            self.generation += 1
