"""``ReadNodeRecords``: everything one read node writes to etcd, and its one connection to it.

The read node (``read_node.ReadNode``) holds one of these; its feed streams and topic views
read etcd through ``store`` as well. The records, each written from the node's event loop with
the etcd calls in the loop's default executor (an actor's loop must not wait on etcd):

* **Liveness**: ``keys.read_node_liveness`` under the node's own lease (a ``LeaseTask``: written
  again under a new lease after an etcd outage expired it, and under the same one if another
  process took the key, as a replaced node continued for a moment does). The controller restarts
  a node whose key is gone and whose actor does not answer a ping. Its value names where the
  node serves clients (``client``) and Prometheus metrics (``metrics``, ``metrics.targets``).
* **RISR**: per VP led here, an ``InSyncRecorder`` (one write in flight) compare-and-swaps the
  RISR into the VP key only while the key names this node as leader of that epoch; the core
  counts a RISR only once it is recorded (``HostedVp.risr_written``).
* **Sealed ends** of closed VPs led here (``VirtualStore.record_sealed_end``): once written, the
  VP's children become readable.
* **Feed positions** (``keys.feed_position``): every ``feed_position_interval_ms``, where each feed
  stream stands, so that physical retention keeps what the node has not fed; a stopped stream's
  key is deleted. Only what changed since the last write is written.
* **Read loss** (``keys.read_loss``): a range retention deleted before the node fed it, added to
  the partition's ``ReadLoss`` by compare-and-swap, and retried in the background while etcd is
  away; the additions of one partition go in order, one after the other.
* **Load** (``keys.read_node_load``): every ``load_report_interval_ms``, the node's load over the
  last interval (``virtual.load_meter``), under the liveness lease, so that it goes with the
  node. A report etcd did not take (etcd away, no lease held) is dropped, not retried: the next
  one, a window later, says where the load stands then.

While etcd is away every other record is retried (logged), never dropped, and the data path goes on.
After ``close`` nothing is written any more (the liveness lease is revoked, so its key goes).
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Callable

from mafka4.clocks import wall_ms
from mafka4.errors import CoordinatorUnavailable
from mafka4.limits import IN_SYNC_WRITE_BACKOFF_S
from mafka4.limits.servers import ReadNodeConfig
from mafka4.log.read_loss import LostRange, ReadLoss
from mafka4.metadata import keys
from mafka4.metadata.in_sync_recorder import InSyncRecorder
from mafka4.metadata.lease_holder import LeaseHolder, LeaseTask
from mafka4.metadata.read_node_load import ReadNodeLoad
from mafka4.metadata.store import MetadataStore
from mafka4.metrics.targets import METRICS_FIELD
from mafka4.virtual.hosted_vp import HostedVp, VpId
from mafka4.virtual.vp_store import VirtualStore

logger = logging.getLogger(__name__)

# A feed stream: (topic, physical partition).
FeedKey = tuple[str, int]


class ReadNodeRecords:
    """The etcd records of read node ``node_id`` of ``cluster``; see the module docstring."""

    def __init__(self, cluster: str, node_id: str, etcd_endpoint: str, config: ReadNodeConfig):
        self._cluster, self._node_id, self._etcd_endpoint, self._config = cluster, node_id, etcd_endpoint, config
        self._started_ms = wall_ms()
        self._store: MetadataStore | None = None
        self._liveness: LeaseTask | None = None
        self._positions_task: asyncio.Task | None = None
        self._load_task: asyncio.Task | None = None
        self._positions_written: dict[FeedKey, int] = {}
        self._risr_recorders: dict[VpId, InSyncRecorder] = {}
        self._losses: dict[FeedKey, asyncio.Task] = {}
        self._closed = False

    def store(self) -> MetadataStore:
        """The node's connection to etcd, opened on first use (a node starts while etcd is away)."""
        if self._store is None:
            self._store = MetadataStore(self._etcd_endpoint)
        return self._store

    @property
    def started(self) -> bool:
        return self._liveness is not None

    def registered_client_port(self) -> int:
        """The port the node's registration names for its client port; 0 (any) if it names none or
        etcd does not answer (blocks on etcd)."""
        try:
            registration = self.store().get(keys.node(self._cluster, self._node_id))
        except CoordinatorUnavailable as error:
            logger.warning("read node %s: its registration could not be read (%s); serving clients on any port",
                           self._node_id, error.message)
            return 0
        return 0 if registration is None else registration.value.get("client_port", 0)

    async def start(self, positions: Callable[[], dict[FeedKey, int]], client_address: str | None,
                    load: Callable[[], ReadNodeLoad | None] | None = None, kafka_address: str | None = None,
                    metrics_address: str | None = None) -> None:
        """Write the liveness key, naming where the node serves clients, Kafka clients and metrics
        (unless etcd is away: then the lease task writes it as soon as it answers) and keep it; report
        ``positions()`` from now on, and ``load()`` (the node's load over the window since its last
        call; None: nothing to report) unless ``load`` is None."""
        assert not self.started, f"read node {self._node_id}: records started twice"
        liveness_key = keys.read_node_liveness(self._cluster, self._node_id)

        def write_liveness(lease) -> None:
            value = {"node_id": self._node_id, "pid": os.getpid(), "started_ms": self._started_ms,
                     "client": client_address, "kafka": kafka_address, METRICS_FIELD: metrics_address}
            self.store().put(liveness_key, value, lease=lease)

        self._liveness = LeaseTask(LeaseHolder(
            self.store(), self._config.lease_ttl_s, f"read node {self._node_id}: liveness",
            on_granted=write_liveness, regrant=True, keys=[liveness_key]))
        await self._liveness.keep_alive()
        self._liveness.start()
        self._positions_task = asyncio.get_running_loop().create_task(self._report_positions(positions))
        if load is not None:
            self._load_task = asyncio.get_running_loop().create_task(self._report_load(load))

    def close(self) -> None:
        """Stop every writer and revoke the liveness lease (blocks on etcd, as an actor's last call may)."""
        self._closed = True
        for task in (self._positions_task, self._load_task):
            if task is not None:
                task.cancel()
        for recorder in self._risr_recorders.values():
            recorder.close()
        if self._liveness is not None:
            self._liveness.close()
        if self._store is not None:
            self._store.close()

    # --- RISR and sealed ends --------------------------------------------------------------

    def risr_changed(self, hosted: HostedVp) -> None:
        """``hosted``'s core asked to record its RISR (``Ready.write_risr``)."""
        recorder = self._risr_recorders.get(hosted.vp_id)
        if recorder is None:
            recorder = self._risr_recorders[hosted.vp_id] = self._risr_recorder(hosted)
        recorder.changed()

    def forget(self, vp_id: VpId) -> None:
        """``vp_id`` is no longer hosted here: stop writing its RISR."""
        recorder = self._risr_recorders.pop(vp_id, None)
        if recorder is not None:
            recorder.close()

    def _risr_recorder(self, hosted: HostedVp) -> InSyncRecorder:
        """The writer of ``hosted``'s RISR, as long as it leads on this node."""
        def to_record() -> tuple[frozenset[str], int] | None:
            if not hosted.core.is_leader or hosted.closed or self._closed:
                return None
            return hosted.core.risr, hosted.core.leader_epoch

        def write(risr: tuple[str, ...], leader_epoch: int) -> bool:
            virtual = VirtualStore(self.store(), self._cluster)
            return virtual.record_risr(hosted.vp_id.topic, hosted.vp_id.vp, self._node_id, leader_epoch, list(risr))

        return InSyncRecorder(str(hosted.vp_id), "RISR", self._node_id, to_record, write, hosted.risr_written,
                              IN_SYNC_WRITE_BACKOFF_S)

    async def record_sealed_end(self, vp_id: VpId, end_offset: int) -> bool:
        """Record that ``vp_id`` ends at ``end_offset``; True if etcd holds it now. False (logged) if
        etcd is away: the caller checks again at its next tick."""
        virtual = VirtualStore(self.store(), self._cluster)
        try:
            sealed = await asyncio.get_running_loop().run_in_executor(
                None, virtual.record_sealed_end, vp_id.topic, vp_id.vp, end_offset)
        except CoordinatorUnavailable as error:
            logger.warning("%s: sealed end not recorded yet: %s", vp_id, error)
            return False
        if sealed:
            logger.info("%s sealed at VP offset %d", vp_id, end_offset)
        return sealed

    # --- feed positions ----------------------------------------------------------------------

    async def _report_positions(self, positions: Callable[[], dict[FeedKey, int]]) -> None:
        interval_s = self._config.feed_position_interval_ms / 1000
        loop = asyncio.get_running_loop()
        while not self._closed:
            await asyncio.sleep(interval_s)
            current = positions()
            changed = {key: offset for key, offset in current.items() if self._positions_written.get(key) != offset}
            stopped = [key for key in self._positions_written if key not in current]
            if not changed and not stopped:
                continue
            try:
                await loop.run_in_executor(None, self._write_positions, changed, stopped)
            except CoordinatorUnavailable as error:
                logger.warning("feed positions not recorded yet: %s", error)
                continue
            self._positions_written.update(changed)
            for key in stopped:
                del self._positions_written[key]

    def _write_positions(self, changed: dict[FeedKey, int], stopped: list[FeedKey]) -> None:
        store = self.store()
        for (topic, partition), offset in changed.items():
            store.put(keys.feed_position(self._cluster, topic, partition, self._node_id), {"next_offset": offset})
        for topic, partition in stopped:
            store.delete(keys.feed_position(self._cluster, topic, partition, self._node_id))

    # --- load --------------------------------------------------------------------------------

    async def _report_load(self, load: Callable[[], ReadNodeLoad | None]) -> None:
        interval_s = self._config.load_report_interval_ms / 1000
        key = keys.read_node_load(self._cluster, self._node_id)
        loop = asyncio.get_running_loop()
        while not self._closed:
            await asyncio.sleep(interval_s)
            report = load()  # measured even while it cannot be written: the next window starts now
            lease = self._liveness.holder.lease
            if report is None or lease is None:
                continue  # no lease held (etcd away): a key bound to no lease would outlive the node
            try:
                await loop.run_in_executor(None, self.store().put, key, report.to_json(), lease)
            except CoordinatorUnavailable as error:
                logger.warning("read node %s: load report not recorded: %s", self._node_id, error)

    # --- read loss -----------------------------------------------------------------------------

    def record_loss(self, topic: str, lost: LostRange) -> None:
        """Add ``lost`` to the partition's read-loss key (retried in the background while etcd is away)."""
        key = (topic, lost.partition)
        previous = self._losses.get(key)
        self._losses[key] = asyncio.get_running_loop().create_task(self._write_loss(topic, lost, previous))

    async def _write_loss(self, topic: str, lost: LostRange, previous: asyncio.Task | None) -> None:
        if previous is not None:
            await asyncio.wait([previous])
        loop = asyncio.get_running_loop()
        while not self._closed:
            try:
                await loop.run_in_executor(None, self._add_loss, topic, lost)
                return
            except CoordinatorUnavailable as error:
                logger.warning("%s: read loss %s not recorded yet: %s", topic, lost, error)
                await asyncio.sleep(IN_SYNC_WRITE_BACKOFF_S)

    def _add_loss(self, topic: str, lost: LostRange) -> None:
        store = self.store()
        key = keys.read_loss(self._cluster, topic, lost.partition)
        while True:
            found = store.get(key)
            loss = ReadLoss.from_json(lost.partition, found.value) if found is not None else ReadLoss(lost.partition)
            if store.compare_and_swap(key, loss.add(lost).to_json(), found.mod_revision if found else 0):
                return
