"""``VirtualPartition``: the Ray actor of one virtual-partition (VP) replica, on a read node.

A thin asynchronous shell around a segmented ``Log`` (the physical segment format) and the
pure read-path cores: ``RisrState`` (RISR, VP high watermark), ``FeedProgress`` (idempotent
feeding) and ``EpochHistory`` with ``divergence`` (leader-epoch truncation).

* Leader: ``feed`` takes the records one feeder split out of its physical partition, drops
  those its log already holds (``FeedProgress.unapplied``), encodes the rest as one batch
  (``split.encode_vp_batch``), stamps the next VP offset and its leader epoch, and appends.
  It also takes the feeder's ``fed_through`` and the physical HW, for the RISR's feed-lag
  check. ``replica_fetch`` serves followers by long poll and reports their progress to
  ``RisrState``, which decides the RISR and the VP HW (the smallest LEO of the RISR).
* Follower: a background task fetches from the leader, truncates when the leader answers
  "diverging", appends, and keeps the leader's HW and its answer whether this replica is a
  RISR member (``serving``).
* Consumers ``fetch`` whole batches below the VP HW, and only from RISR members: the
  leader, or a follower that the leader called in sync within ``read_replica_lag_ms_max``
  (a follower cut off from its leader stops serving by itself); otherwise
  ``ReadReplicaNotInSync``.
* RISR changes are written to the VP's etcd key by compare-and-swap, only while the key
  names this replica as leader of this epoch, before ``RisrState.risr_committed`` may
  count them. Liveness: a key under the actor's own lease (``keys.read_replica_liveness``).
* Fault injection (``set_fault``, ``mafka4.faults``), off by default.

Recovery. The log recovers as on the write path; the leader-epoch history comes from its
checkpoint (or the batch headers), the HW from its checkpoint, and the feed progress is
rebuilt from the log's records (``FeedProgress.rebuild``) whenever the replica takes
leadership, so it is exactly what the log holds. Files besides the log:
``leader-epoch-checkpoint`` and ``high-watermark``, both rewritten atomically. Caveat: the
rebuild reads the whole log, and a partition whose last records of this VP were all deleted
by retention would be refed from the physical log start; VP retention must therefore not be
shorter than the physical partitions'.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import ray

from mafka4.coordinator import keys
from mafka4.coordinator.store import MetadataStore
from mafka4.errors import CoordinatorUnavailable, MessageTooLarge, NotLeader, ReadReplicaNotInSync, StaleEpoch
from mafka4.faults import FaultGate
from mafka4.limits import FEED_RECORDS_MAX, LogConfig, ReplicaConfig
from mafka4.physical.actor import FetchResult
from mafka4.physical.checkpoint import write_checkpoint
from mafka4.physical.log import Log
from mafka4.physical.recovery import (
    EPOCH_CHECKPOINT, HIGH_WATERMARK_CHECKPOINT, recovered_epochs, recovered_high_watermark,
)
from mafka4.records import Record, decode_batches, stamp
from mafka4.risr.state import RisrConfig, RisrState
from mafka4.virtual.divergence import divergence, truncation_offset
from mafka4.virtual.metadata import VirtualStore
from mafka4.virtual.split import FeedProgress, SourcedRecord, encode_vp_batch

logger = logging.getLogger(__name__)

NAMESPACE = "mafka4"
CHECKPOINT_INTERVAL_S = 1.0
RETENTION_CHECK_INTERVAL_S = 60.0
RISR_WRITE_BACKOFF_S = 0.5


def vp_actor_name(cluster: str, topic: str, vp: int, replica_id: str) -> str:
    """The Ray actor name of one VP replica; unique per cluster."""
    return f"{cluster}/{topic}/vp/{vp}/{replica_id}"


class VpRole(enum.Enum):
    NONE = "none"  # started, no role announced yet
    LEADER = "leader"
    FOLLOWER = "follower"


@dataclass(frozen=True, slots=True)
class VirtualReplicaSpec:
    """Everything a VP replica actor needs to open its log and find its peers."""

    cluster: str
    topic: str
    vp: int
    replica_id: str
    directory: str
    log_config: LogConfig
    replica_config: ReplicaConfig  # fetch bounds and the liveness lease, as on the write path
    risr_config: RisrConfig
    etcd_endpoint: str

    @property
    def vp_name(self) -> str:
        return f"{self.topic}/v{self.vp}"


@dataclass(frozen=True, slots=True)
class FeedAck:
    """The leader's answer to ``feed``: what its log now holds of the feeder's partition."""

    last_applied: int
    log_end_offset: int
    high_watermark: int


@dataclass(frozen=True, slots=True)
class VpReplicaFetchResult:
    data: bytes
    high_watermark: int
    serving: bool  # the follower is a RISR member and may serve reads
    diverging: tuple[int, int] | None  # (epoch, end offset): the follower must truncate


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@ray.remote(num_cpus=0)
class VirtualPartition:
    def __init__(self, spec: VirtualReplicaSpec):
        self._spec = spec
        self._directory = Path(spec.directory)
        self._log = Log.open(self._directory, spec.log_config, _now_ms())
        self._epochs = recovered_epochs(self._directory, self._log)
        self._high_watermark = recovered_high_watermark(self._directory, self._log)  # a follower's; the leader's is in _risr
        self._role = VpRole.NONE
        self._leader_epoch = -1
        self._leader_id: str | None = None
        self._risr: RisrState | None = None
        self._progress: FeedProgress | None = None
        self._fed_through: dict[int, int] = {}
        self._physical_high_watermarks: dict[int, int] = {}
        self._serving = False
        self._last_leader_contact_ms = 0
        self._leader_handle = None
        self._follow_task: asyncio.Task | None = None
        self._tick_task: asyncio.Task | None = None
        self._tasks: list[asyncio.Task] = []
        self._changed = asyncio.Event()
        self._fault = FaultGate()
        self._store: MetadataStore | None = None
        self._lease = None
        self._risr_task: asyncio.Task | None = None
        self._risr_dirty = False
        self._closed = False

    # --- checkpoints (restarts read them: physical.recovery) ---------------------------

    def _save_epochs(self) -> None:
        write_checkpoint(self._directory / EPOCH_CHECKPOINT, self._epochs.to_text())

    def _records(self) -> Iterator[Record]:
        """Every record of the log, in offset order, read in bounded chunks."""
        offset, end = self._log.log_start_offset, self._log.log_end_offset
        while offset < end:
            records = decode_batches(self._log.read(offset, self._spec.replica_config.fetch_bytes_max))
            assert records, f"{self._spec.vp_name}: no whole batch readable at {offset}"
            yield from records
            offset = records[-1].offset + 1

    # --- role changes -------------------------------------------------------------------

    def _check_new_epoch(self, leader_epoch: int) -> None:
        if leader_epoch < self._leader_epoch:
            raise StaleEpoch(
                f"{self._spec.vp_name}: role notice for leader epoch {leader_epoch} but replica "
                f"{self._spec.replica_id} is at epoch {self._leader_epoch}; the sender is fenced"
            )

    async def become_leader(self, leader_epoch: int, replicas: list[str], risr: list[str]) -> dict:
        if self._role is VpRole.LEADER and self._leader_epoch == leader_epoch:
            return self._describe()  # a repeated notice
        self._check_new_epoch(leader_epoch)
        self._stop_following()
        high_watermark = self._current_high_watermark()
        self._role, self._leader_epoch, self._leader_id = VpRole.LEADER, leader_epoch, self._spec.replica_id
        self._epochs.assign(leader_epoch, self._log.log_end_offset)
        self._save_epochs()
        self._progress = FeedProgress.rebuild(self._records())
        self._fed_through.clear()
        self._risr = RisrState(
            self._spec.vp_name, self._spec.risr_config, self._spec.replica_id, replicas, risr,
            self._log.log_end_offset, high_watermark, _now_ms(),
        )
        self._start_background()
        if self._tick_task is None or self._tick_task.done():
            self._tick_task = asyncio.get_running_loop().create_task(self._leader_ticks())
        self._wake()
        logger.warning("%s: %s leads at epoch %d, RISR %s", self._spec.vp_name, self._spec.replica_id,
                       leader_epoch, sorted(self._risr.risr))
        return self._describe()

    async def become_follower(self, leader_epoch: int, leader_id: str) -> dict:
        if (self._role is VpRole.FOLLOWER and self._leader_epoch == leader_epoch and self._leader_id == leader_id
                and self._follow_task is not None and not self._follow_task.done()):
            return self._describe()  # a repeated notice: keep the fetch in flight
        self._check_new_epoch(leader_epoch)
        self._high_watermark = self._current_high_watermark()
        self._stop_following()
        self._role, self._leader_epoch, self._leader_id = VpRole.FOLLOWER, leader_epoch, leader_id
        self._risr, self._progress, self._serving = None, None, False
        self._leader_handle = ray.get_actor(
            vp_actor_name(self._spec.cluster, self._spec.topic, self._spec.vp, leader_id), namespace=NAMESPACE
        )
        self._follow_task = asyncio.get_running_loop().create_task(self._follow())
        self._start_background()
        self._wake()
        return self._describe()

    def _start_background(self) -> None:
        if not self._tasks:
            loop = asyncio.get_running_loop()
            self._tasks = [loop.create_task(self._housekeeping()), loop.create_task(self._keep_alive())]

    def _stop_following(self) -> None:
        if self._follow_task is not None:
            self._follow_task.cancel()
            self._follow_task = None

    def _current_high_watermark(self) -> int:
        return self._risr.high_watermark if self._risr is not None else self._high_watermark

    def _wake(self) -> None:
        """Wake long-polling fetches (followers' and consumers')."""
        self._changed.set()
        self._changed = asyncio.Event()

    async def _wait_for_change(self, wait_ms_max: int) -> None:
        try:
            await asyncio.wait_for(self._changed.wait(), wait_ms_max / 1000)
        except asyncio.TimeoutError:
            pass

    def _require_leader(self, leader_epoch: int) -> RisrState:
        if leader_epoch < self._leader_epoch:
            raise StaleEpoch(
                f"{self._spec.vp_name}: request for leader epoch {leader_epoch}, replica {self._spec.replica_id} "
                f"is at epoch {self._leader_epoch}: refresh the VP metadata and retry"
            )
        if self._role is not VpRole.LEADER or leader_epoch != self._leader_epoch:
            raise NotLeader(
                f"{self._spec.vp_name}: replica {self._spec.replica_id} is not the leader of epoch {leader_epoch} "
                f"(role {self._role.value}, epoch {self._leader_epoch}, leader {self._leader_id}); retry after a metadata refresh"
            )
        assert self._risr is not None and self._progress is not None
        return self._risr

    # --- leader: feeding ----------------------------------------------------------------

    async def feed(self, leader_epoch: int, partition: int, records: Sequence[SourcedRecord],
                   fed_through: int, physical_high_watermark: int) -> FeedAck:
        """Append the records of ``partition`` this log lacks; record the feeder's progress.

        ``records`` are in physical offset order (one feeder call); ``fed_through`` is the
        next physical offset the feeder will hand over, once this call succeeded.
        """
        risr = self._require_leader(leader_epoch)
        if len(records) > FEED_RECORDS_MAX:
            raise MessageTooLarge(
                f"{self._spec.vp_name}: a feed call of {len(records)} records, more than FEED_RECORDS_MAX={FEED_RECORDS_MAX}"
            )
        assert all(record.partition == partition for record in records), "records of several partitions in one feed call"
        fresh = self._progress.unapplied(records)
        if fresh:
            batch = bytearray(encode_vp_batch(fresh))
            stamp(batch, self._log.log_end_offset, self._leader_epoch)
            self._log.append(batch, _now_ms())
            self._progress.applied(fresh)
            risr.leader_appended(self._log.log_end_offset)
            self._wake()
        self._fed_through[partition] = max(self._fed_through.get(partition, 0), fed_through)
        self._physical_high_watermarks[partition] = physical_high_watermark
        risr.on_feed(self._fed_through, self._physical_high_watermarks, _now_ms())
        return FeedAck(self._progress.last_applied(partition), self._log.log_end_offset, risr.high_watermark)

    async def feed_position(self, leader_epoch: int, partition: int) -> int:
        """The last source offset of ``partition`` this log holds (``split.NOTHING_APPLIED``: none)."""
        self._require_leader(leader_epoch)
        return self._progress.last_applied(partition)

    # --- leader: serving followers and the RISR -----------------------------------------

    async def replica_fetch(self, follower_id: str, follower_epoch: int, fetch_offset: int, last_fetched_epoch: int,
                            bytes_max: int, wait_ms_max: int) -> VpReplicaFetchResult:
        await self._fault.replication()
        risr = self._require_leader(follower_epoch)
        diverging = divergence(self._epochs, self._log.log_end_offset, fetch_offset, last_fetched_epoch)
        if diverging is not None:
            return VpReplicaFetchResult(b"", risr.high_watermark, False, diverging)
        high_watermark_before = risr.high_watermark
        decision = risr.on_replica_fetch(follower_id, fetch_offset, _now_ms())
        if decision.risr_changed:
            self._risr_changed()
        # As on the write path: wake waiters only when the VP HW or the RISR moved, or idle
        # followers would end each other's long polls in a busy loop.
        if decision.risr_changed or risr.high_watermark != high_watermark_before:
            self._wake()
        if fetch_offset >= self._log.log_end_offset and wait_ms_max > 0:
            await self._wait_for_change(wait_ms_max)
        data = self._log.read(fetch_offset, bytes_max) if fetch_offset < self._log.log_end_offset else b""
        return VpReplicaFetchResult(data, risr.high_watermark, decision.serving, None)

    async def _leader_ticks(self) -> None:
        interval_s = min(self._spec.risr_config.read_replica_lag_ms_max / 4000, 0.5)
        while self._role is VpRole.LEADER and not self._closed:
            await asyncio.sleep(interval_s)
            if self._risr is not None and self._risr.tick(_now_ms()):
                self._risr_changed()
            self._wake()

    def _risr_changed(self) -> None:
        logger.warning("%s: RISR is now %s", self._spec.vp_name, sorted(self._risr.risr))
        self._risr_dirty = True
        if self._risr_task is None or self._risr_task.done():
            self._risr_task = asyncio.get_running_loop().create_task(self._persist_risr())

    async def _persist_risr(self) -> None:
        """Write the RISR to etcd until what etcd holds is the current RISR (single flight)."""
        loop = asyncio.get_running_loop()
        while self._risr_dirty and self._role is VpRole.LEADER and not self._closed:
            self._risr_dirty = False
            risr, epoch = sorted(self._risr.risr), self._leader_epoch
            try:
                written = await loop.run_in_executor(None, self._write_risr, risr, epoch)
            except CoordinatorUnavailable as error:  # the HW stays bounded by the wider RISR: safe
                logger.warning("%s: cannot record RISR yet: %s", self._spec.vp_name, error)
                self._risr_dirty = True
                await asyncio.sleep(RISR_WRITE_BACKOFF_S)
                continue
            if not written:
                logger.error("%s: etcd names another leader or epoch; %s is fenced", self._spec.vp_name, self._spec.replica_id)
                return
            if self._role is VpRole.LEADER and self._leader_epoch == epoch:
                self._risr.risr_committed(risr)
                self._wake()

    def _write_risr(self, risr: list[str], leader_epoch: int) -> bool:
        virtual = VirtualStore(self._metadata_store(), self._spec.cluster)
        return virtual.record_risr(self._spec.topic, self._spec.vp, self._spec.replica_id, leader_epoch, risr)

    # --- follower -----------------------------------------------------------------------

    async def _follow(self) -> None:
        config = self._spec.replica_config
        while self._role is VpRole.FOLLOWER and not self._closed:
            await self._fault.replication()
            try:
                result = await self._leader_handle.replica_fetch.remote(
                    self._spec.replica_id, self._leader_epoch, self._log.log_end_offset, self._epochs.latest_epoch,
                    config.fetch_bytes_max, config.fetch_wait_ms_max,
                )
            except asyncio.CancelledError:
                raise
            except Exception as error:  # leader dead, deposed or not yet told: a failover reassigns
                logger.info("%s: fetch from leader %s failed: %s", self._spec.vp_name, self._leader_id, error)
                await asyncio.sleep(config.fetch_backoff_ms / 1000)
                continue
            self._apply_fetch(result)

    def _apply_fetch(self, result: VpReplicaFetchResult) -> None:
        if result.diverging is not None:
            offset = truncation_offset(self._epochs, self._log.log_end_offset, self._high_watermark, *result.diverging)
            logger.warning("%s: %s truncates from %d to %d (leader answered %s)", self._spec.vp_name,
                           self._spec.replica_id, self._log.log_end_offset, offset, result.diverging)
            self._log.truncate_to(offset)
            self._epochs.truncate_from(offset)
            self._high_watermark = min(self._high_watermark, offset)
            self._save_epochs()
            return
        if result.data:
            epoch_before = self._epochs.latest_epoch
            for header in self._log.append_batches(result.data, _now_ms()):
                if header.leader_epoch > self._epochs.latest_epoch:
                    self._epochs.assign(header.leader_epoch, header.base_offset)
            if self._epochs.latest_epoch != epoch_before:
                self._save_epochs()
        self._high_watermark = max(self._high_watermark, min(result.high_watermark, self._log.log_end_offset))
        self._serving = result.serving
        self._last_leader_contact_ms = _now_ms()
        self._wake()

    def _follower_serving(self, now_ms: int) -> bool:
        lag_ms_max = self._spec.risr_config.read_replica_lag_ms_max
        return self._serving and now_ms - self._last_leader_contact_ms <= lag_ms_max

    # --- consumers ----------------------------------------------------------------------

    def _check_serving(self) -> None:
        if self._closed:
            raise ReadReplicaNotInSync(f"{self._spec.vp_name}: replica {self._spec.replica_id} is closed; "
                                       f"re-read the VP's metadata")
        if self._role is VpRole.LEADER:
            return
        if self._role is VpRole.FOLLOWER and self._follower_serving(_now_ms()):
            return
        raise ReadReplicaNotInSync(
            f"{self._spec.vp_name}: replica {self._spec.replica_id} ({self._role.value}) is not in the RISR "
            f"and serves no reads; fetch from the leader {self._leader_id} or another RISR member"
        )

    async def fetch(self, offset: int, bytes_max: int, wait_ms_max: int = 0) -> FetchResult:
        """Whole batches from VP offset ``offset`` below the VP HW (long poll when none)."""
        await self._fault.serving()
        self._check_serving()
        if offset >= self._current_high_watermark() and wait_ms_max > 0:
            await self._wait_for_change(wait_ms_max)
            if self._closed:  # closed during the long poll: nothing new; the reader's next fetch is refused
                return FetchResult(b"", self._current_high_watermark(), self._log.log_start_offset, offset)
            self._check_serving()
        high_watermark = self._current_high_watermark()
        data = self._log.read(offset, bytes_max, end_offset=high_watermark)
        return FetchResult(data, high_watermark, self._log.log_start_offset, self._log.log_end_offset)

    async def list_offsets(self) -> tuple[int, int]:
        """(log start offset, VP high watermark): the readable range."""
        self._check_serving()
        return self._log.log_start_offset, self._current_high_watermark()

    async def offset_for_timestamp(self, timestamp_ms: int) -> int | None:
        offset = self._log.offset_for_timestamp(timestamp_ms)
        return None if offset is None or offset >= self._current_high_watermark() else offset

    def _describe(self) -> dict:
        now_ms = _now_ms()
        described = self._risr.describe(now_ms) if self._risr is not None else {
            "virtual_partition": self._spec.vp_name, "leader": self._leader_id,
            "high_watermark": self._high_watermark, "serving": self._follower_serving(now_ms),
        }
        return {**described, "role": self._role.value, "replica_id": self._spec.replica_id,
                "leader_epoch": self._leader_epoch, "log_start_offset": self._log.log_start_offset,
                "log_end_offset": self._log.log_end_offset, "fed_through": dict(self._fed_through),
                "fault": {"delay_ms": self._fault.fault.delay_ms, "paused": self._fault.fault.paused},
                "pid": os.getpid()}

    async def describe(self) -> dict:
        return self._describe()

    # --- housekeeping -------------------------------------------------------------------

    def _metadata_store(self) -> MetadataStore:
        if self._store is None:
            self._store = MetadataStore(self._spec.etcd_endpoint)
        return self._store

    async def _keep_alive(self) -> None:
        """Hold this replica's liveness key under a lease; re-register after etcd outages."""
        loop = asyncio.get_running_loop()
        ttl_s = self._spec.replica_config.replica_lease_ttl_s
        while not self._closed:
            try:
                self._lease = await loop.run_in_executor(None, self._register_liveness, self._lease, ttl_s)
            except CoordinatorUnavailable as error:
                logger.warning("%s: liveness not refreshed: %s", self._spec.vp_name, error)
                self._lease = None
            await asyncio.sleep(ttl_s / 3)

    def _register_liveness(self, lease, ttl_s: int):
        store = self._metadata_store()
        if lease is not None and store.refresh_lease(lease) > 0:
            return lease
        lease = store.grant_lease(ttl_s)
        key = keys.read_replica_liveness(self._spec.cluster, self._spec.topic, self._spec.vp, self._spec.replica_id)
        store.put(key, {"replica_id": self._spec.replica_id, "pid": os.getpid()}, lease=lease)
        return lease

    async def _housekeeping(self) -> None:
        """Flush by policy, checkpoint the HW, apply retention."""
        saved_high_watermark, last_retention = -1, time.monotonic()
        while not self._closed:
            await asyncio.sleep(CHECKPOINT_INTERVAL_S)
            self._log.maybe_flush(_now_ms())
            high_watermark = self._current_high_watermark()
            if high_watermark != saved_high_watermark:
                write_checkpoint(self._directory / HIGH_WATERMARK_CHECKPOINT, str(high_watermark))
                saved_high_watermark = high_watermark
            if time.monotonic() - last_retention >= RETENTION_CHECK_INTERVAL_S:
                self._log.apply_retention(_now_ms())
                last_retention = time.monotonic()

    async def set_fault(self, delay_ms: int = 0, paused: bool = False) -> dict:
        """Delay or pause this replica's fetch and serve loops (``mafka4.faults``); (0, False) clears it."""
        fault = self._fault.set(delay_ms, paused)
        logger.warning("%s: replica %s fault set to %s", self._spec.vp_name, self._spec.replica_id, fault)
        return {"delay_ms": fault.delay_ms, "paused": fault.paused}

    async def close(self, delete_data: bool = False) -> None:
        """Stop background work and close the log; with ``delete_data`` remove the directory."""
        self._closed = True
        self._stop_following()
        for task in self._tasks + [t for t in (self._tick_task, self._risr_task) if t is not None]:
            task.cancel()
        self._log.close()
        if self._store is not None:
            if self._lease is not None:
                try:
                    self._store.revoke_lease(self._lease)
                except CoordinatorUnavailable:
                    pass  # the lease expires by itself
            self._store.close()
        if delete_data:
            shutil.rmtree(self._directory, ignore_errors=True)

    async def ping(self) -> str:
        return self._spec.replica_id
