"""``TopicView``: what a read node knows of one topic's metadata, shared by the topic's feed streams.

One etcd transaction reads the physical partitions' states (leader, ISR: where a feed stream
reads), the split epochs (the layout) and the VP states (sealed ends, leaders) at one
revision; a view is re-read when it is older than ``FeederConfig.metadata_max_age_ms``, when a
stream failed (``invalidate``) and when the controller announced roles. While etcd is away
the view keeps what it knew (the data path goes on; metadata changes wait). A reshard that
stored a new epoch hands it to the streams it held, which ``adopt`` it at once, before the next
read.

A re-read first asks etcd whether any of those keys changed since the last read
(``MetadataStore.prefix_changes``: keys written since, and how many there are), and reads them
only then: a topic of 100,000 VPs is 100,000 VP states to fetch and parse (seconds of CPU here),
which an idle read node must not pay every ``metadata_max_age_ms``.
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
        # What the last full read saw: a revision at or before it, and each prefix's key count.
        self._read_revision: int | None = None
        self._read_counts: dict[str, int] = {}

    @property
    def sealed(self) -> frozenset[int]:
        if self._sealed[0] != self.generation:
            self._sealed = (self.generation, frozenset(
                vp for vp, state in self.states.items() if state.sealed_end_offset is not None))
        return self._sealed[1]

    def invalidate(self) -> None:
        self.read_at = float("-inf")

    @property
    def old(self) -> bool:
        """Read longer than ``max_age_ms`` ago (or invalidated)."""
        return time.monotonic() - self.read_at >= self._max_age_s

    async def refresh_if_old(self) -> None:
        if not self.old:
            return
        await self.refresh()

    async def refresh(self) -> None:
        """Read the metadata again (one read in flight per view, shared by every caller)."""
        if self._reading is None or self._reading.done():
            self._reading = asyncio.get_running_loop().create_task(self._read())
        await asyncio.shield(self._reading)

    async def _read(self) -> None:
        try:
            read = await asyncio.get_running_loop().run_in_executor(None, self._read_sync)
        except CoordinatorUnavailable as error:
            if self.layout is None:
                raise
            logger.warning("%s: metadata not refreshed, keeping what is known: %s", self.topic, error)
            self.read_at = time.monotonic()
            return
        if read is None:  # nothing changed in etcd since the last read
            self.read_at = time.monotonic()
            return
        layout, states, partitions = read
        if layout != self.layout or states != self.states or partitions != self.partitions:
            self.generation += 1
        self.layout, self.states, self.partitions = layout, states, partitions
        self.read_at = time.monotonic()

    def _read_sync(self) -> tuple[TopicLayout, dict[int, VirtualPartitionState], dict[int, PartitionState]] | None:
        """The topic's metadata, or None if no key of it changed since the last read."""
        store = self._open_store()
        physical_prefix = keys.physical_prefix(self.cluster, self.topic)
        epochs_prefix = keys.split_epochs_prefix(self.cluster, self.topic)
        states_prefix = keys.virtual_partitions_prefix(self.cluster, self.topic)
        prefixes = [physical_prefix, epochs_prefix, states_prefix]
        # Before a first read no count is known: a probe past every revision only learns one.
        changes, revision = store.prefix_changes(prefixes, self._read_revision or (1 << 62))
        if self._read_revision is not None and self.layout is not None and all(
                changed == 0 and count == self._read_counts.get(prefix) for prefix, (count, changed) in changes.items()):
            return None
        found = store.get_prefixes(prefixes)
        if not found[epochs_prefix]:
            raise UnknownTopic(f"topic {self.topic!r} has no virtual-partition layout in etcd: it was deleted")
        layout = VirtualStore.layout_from(self.topic, self.config.partitions, self.config.virtual_config(),
                                          found[epochs_prefix])
        states = {vp: state for vp, (state, _) in VirtualStore.states_from(states_prefix, found[states_prefix]).items()}
        partitions = {
            int(item.key[len(physical_prefix):]): PartitionState.from_json(int(item.key[len(physical_prefix):]), item.value)
            for item in found[physical_prefix]
        }
        # The read came after the probe: a key written in between is read now and counted as a
        # change at the next probe too (one spare read), never missed. Set only once all of it
        # parsed, so a failed read is not taken for a current one.
        self._read_revision, self._read_counts = revision, {prefix: len(found[prefix]) for prefix in prefixes}
        return layout, states, partitions

    def adopt(self, epoch: SplitEpoch, children: tuple[VirtualPartitionState, ...]) -> None:
        """A reshard stored ``epoch`` with ``children``: take it without waiting for the next read."""
        assert self.layout is not None
        if epoch.epoch == len(self.layout.epochs):
            self.layout = self.layout.append(epoch)
            self.states = {**self.states, **{state.vp: state for state in children}}
            self.generation += 1
