"""``PhysicalPartition``: the Ray actor of one physical-partition replica.

A thin asynchronous shell around the segmented ``Log`` and the pure ``ReplicaState``:
it turns requests into core calls, does the disk and network work the core decided on,
and wakes waiters when the high watermark or the log end offset moves.

* Leader: ``produce`` checks the batch CRC, asks the core for the base offset, stamps the
  batch, appends it and, for acks=all, waits until the high watermark passes it.
  ``replica_fetch`` serves followers by long poll and reports their progress to the core.
* Follower: a background task fetches from the leader, truncates when the leader reports
  a divergence (leader-epoch truncation), appends and follows the leader's HW. Its fetches go
  over a TCP stream to the leader (``runtime.stream_calls``), not as Ray calls: a Ray call
  carrying a 1 MiB answer cost about 3 ms of CPU on each side, the stream under 1 ms. The
  follower asks the leader's actor where it listens (``stream_endpoint``, a Ray call), and
  asks again after the stream broke.
* Consumers ``fetch`` whole batches below the high watermark. With ``from_follower`` a
  follower answers too, below its own high watermark (Kafka's KIP-392): feeders read
  committed data off a follower so that splitting never loads the leader's write path.
* Fault injection (``set_fault``, ``mafka4.faults``): delays or pauses the fetch and serve
  loops, off by default. A network fault (``set_partition``, ``mafka4.partition_gate``) drops
  or delays a follower's fetches from its leader, or their answers, as a partition between
  the two nodes would.
* Disk full (``set_log_dir_bytes_max``, ``log.log_dir_budget``): past the node's bound an append
  fails before a byte is written; a leader answers produce with ``DiskFull`` (retriable: the
  producer backs off and retries; leadership does not move), a follower logs it, backs off and
  fetches again, so it leaves the ISR until space returns.
* Stage trace (``set_stage_trace``, ``mafka4.stage_trace``): when an experiment turns it on, the
  leader stamps each produced batch's arrival, append and commit; off by default.
* Retention (``retention_pass``, every ``LogConfig.retention_check_interval_ms``): for a topic in read
  mode "mafka4" it never deletes what a read node has not fed. Before each pass the replica
  reads the partition's feed positions (``keys.feed_positions_prefix``) and passes their
  minimum to ``Log.apply_retention`` as the fed floor (0 while none is recorded: a new topic
  holds everything); when etcd does not answer, the pass is skipped, since an unknown floor
  must not delete unfed data. Past ``unfed_hold_ms_max`` unfed segments go anyway and the
  offsets are logged as an error (read nodes report them to consumers).
* Liveness: the replica keeps a key under its own etcd lease (``keys.replica_liveness``),
  refreshed every third of ``replica_lease_ttl_s`` by a ``LeaseTask`` (written again under a new
  lease after an etcd outage expired it); when the actor dies the key expires and the
  controller notices. While etcd is unreachable the data path goes on regardless.
* ISR changes are written to the partition's etcd key by compare-and-swap (only while the
  key still names this replica as leader of this epoch), with the eligible leader replicas
  they imply (``PartitionState.with_isr``), before the core may count the new
  ISR (``ReplicaState.isr_committed``); a leader fenced by a newer epoch acknowledges nothing.
  One write is in flight at a time (``InSyncRecorder``, which writes a read node's RISRs too).

Damaged data on disk (bit rot in a segment that recovery trusted) is caught by the read
path, which checks every batch's CRC (``Segment.read``). A damaged batch is never served,
to followers or to readers: the fetch fails with ``CorruptRecord`` naming the file and
byte position, and the actor logs it as an error. A reader (the feeder) then reads from
another in-sync replica. Followers cannot help a leader whose own copy is damaged below
its HW: it keeps refusing until an operator moves leadership away (stop the replica, and
the controller elects another ISR member) and removes the damaged replica's directory so
that it refetches everything as a follower. Repairing that automatically (truncate and
refetch from a replica) is not implemented. The follower loop survives damage in its own
log (a truncation or append that raises ``CorruptRecord``): it logs, backs off and fetches
again rather than stop following.

The actor never decodes a record: per-message work belongs to clients and feeders.
The replica directory (the log, the leader-epoch and high-watermark checkpoints) is a
``ReplicaStorage`` (``log.replica_storage``), as every replica's is.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections import deque
from dataclasses import dataclass
from typing import Callable

import ray

from mafka4.batch_frame import check_producer_batch, stamp
from mafka4.clocks import wall_ms, wall_ms_fine
from mafka4.errors import CoordinatorUnavailable, CorruptRecord, DiskFull, NotLeader, RequestTimedOut
from mafka4.faults import FaultGate
from mafka4.limits import (HIGH_WATERMARK_CHECKPOINT_INTERVAL_S, IN_SYNC_WRITE_BACKOFF_S, ISR_WRITE_ATTEMPTS_MAX,
                           PRODUCE_TIMEOUT_MS_DEFAULT, Acks, LogConfig, ReadMode, ReplicaConfig)
from mafka4.log.log import Log, RetentionResult
from mafka4.log.log_dir_budget import LogDirBudget, is_disk_full
from mafka4.log.read_loss import feed_position_from_json, retention_floor
from mafka4.log.replica_storage import ReplicaStorage
from mafka4.long_poll import ChangeSignal
from mafka4.metadata import keys
from mafka4.metadata.in_sync_recorder import InSyncRecorder
from mafka4.metadata.lease_holder import LeaseHolder, LeaseTask
from mafka4.metadata.store import MetadataStore
from mafka4.partition_gate import GatedHandle, NetworkFault, PartitionGate
from mafka4.physical.follower import apply_leader_answer
from mafka4.physical.partition_state import PartitionState
from mafka4.physical.replica import ReplicaState, Role
from mafka4.physical.sequencer import SequenceGate
from mafka4.stage_trace import StageTrace
from mafka4.transport.ray_names import NAMESPACE, replica_actor_name
from mafka4.transport.remote_errors import unwrap
from mafka4.transport.stream_calls import StreamEndpoint, StreamHandle, StreamServer, actor_stream

logger = logging.getLogger(__name__)


# Methods a replica serves over its stream (``stream_endpoint``): the ones that carry batches.
STREAM_METHODS = frozenset({"produce", "replica_fetch", "fetch"})


@dataclass(frozen=True, slots=True)
class ReplicaSpec:
    """Everything a replica actor needs to open its log."""

    cluster: str
    topic: str
    partition: int
    replica_id: str
    directory: str
    log_config: LogConfig
    replica_config: ReplicaConfig
    etcd_endpoint: str
    # The topic's read mode: mafka4 holds retention for read nodes.
    read_mode: ReadMode

    @property
    def partition_name(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass(frozen=True, slots=True)
class FetchResult:
    """Whole batches from ``fetch``, with the offsets a reader needs to continue."""

    data: bytes
    high_watermark: int
    log_start_offset: int
    log_end_offset: int


@dataclass(frozen=True, slots=True)
class ReplicaFetchResult:
    data: bytes
    high_watermark: int
    diverging: tuple[int, int] | None  # (epoch, end offset): the follower must truncate


async def retention_pass(log: Log, spec: ReplicaSpec, read_feed_positions: Callable[[], list[int]],
                         now_ms: int) -> RetentionResult | None:
    """Apply retention to ``log``, in a "mafka4"-mode topic never below the fed floor read by
    ``read_feed_positions`` (in an executor thread: it calls etcd); None when etcd did not answer
    and the pass was skipped."""
    fed_floor = None
    if spec.read_mode is ReadMode.MAFKA4:
        try:
            positions = await asyncio.get_running_loop().run_in_executor(None, read_feed_positions)
        except CoordinatorUnavailable as error:
            logger.warning("%s: retention skipped, the read nodes' feed positions are unknown: %s",
                           spec.partition_name, error)
            return None
        floor = retention_floor(positions)
        fed_floor = 0 if floor is None else floor  # no read node recorded one yet: keep everything
    result = log.apply_retention(now_ms, fed_floor)
    if result.unfed_deleted is not None:
        first, end = result.unfed_deleted
        logger.error(
            "%s: retention deleted offsets [%d, %d) that a read node had not fed (fed floor %s), held "
            "unfed_hold_ms_max=%s ms past retention; their messages are lost for every consumer group of %r",
            spec.partition_name, first, end, fed_floor, spec.log_config.unfed_hold_ms_max, spec.topic)
    return result


class _Waiters:
    """Producers waiting for the high watermark, in offset order (appends are ordered)."""

    def __init__(self):
        self._queue: deque[tuple[int, int, asyncio.Future]] = deque()

    def add(self, next_offset: int, leader_epoch: int) -> asyncio.Future:
        future = asyncio.get_running_loop().create_future()
        self._queue.append((next_offset, leader_epoch, future))
        return future

    def release(self, state: ReplicaState) -> None:
        while self._queue:
            next_offset, leader_epoch, future = self._queue[0]
            if future.done():
                self._queue.popleft()
                continue
            try:
                if not state.ack_ready(next_offset, leader_epoch):
                    return
                future.set_result(None)
            except Exception as error:  # NotEnoughReplicas after append, NotLeader: the producer retries
                future.set_exception(error)
            self._queue.popleft()

    def fail_all(self, error: Exception) -> None:
        while self._queue:
            _, _, future = self._queue.popleft()
            if not future.done():
                future.set_exception(error)


@ray.remote(num_cpus=0)
class PhysicalPartition:
    def __init__(self, spec: ReplicaSpec):
        self._spec = spec
        # The node's log directory holds every replica directory of the node (physical_launcher).
        self._budget = LogDirBudget(os.path.dirname(os.path.normpath(spec.directory)))
        # The flush timer fsyncs on a worker thread: on the event loop each fsync (5-30 ms) held
        # up every produce and fetch of the replica (log.pending_flush).
        self._storage = ReplicaStorage(spec.directory, spec.log_config, wall_ms(), self._budget,
                                       flushes_in_background=True)
        self._log = self._storage.log
        self._state = ReplicaState(
            spec.replica_id, spec.partition_name, spec.replica_config,
            self._log.log_end_offset, self._storage.recovered_high_watermark(),
            self._storage.recovered_epochs(), self._storage.recovered_producers(spec.replica_config),
        )
        self._waiters = _Waiters()
        self._sequence_gate = SequenceGate(self._state.producers.next_sequence)
        self._changes = ChangeSignal()  # long-polling fetches, followers' and consumers'
        self._tasks: list[asyncio.Task] = []
        self._follow_task: asyncio.Task | None = None
        self._leader_handle = None
        self._leader_stream: StreamHandle | None = None
        # What other processes call over a stream instead of through Ray (started when first asked).
        self._stream_server = StreamServer(self, STREAM_METHODS, f"replica {spec.replica_id} of {spec.partition_name}")
        self._closed = False
        self._store: MetadataStore | None = None
        self._liveness: LeaseTask | None = None
        self._isr_recorder = InSyncRecorder(
            spec.partition_name, "ISR", spec.replica_id, self._isr_to_record, self._write_isr, self._isr_recorded,
            IN_SYNC_WRITE_BACKOFF_S)
        self._fault = FaultGate()
        self._partition_gate = PartitionGate(spec.replica_id)  # replicas are named by their node
        self._stage_trace: StageTrace | None = None

    # --- role changes -------------------------------------------------------------------

    async def become_leader(self, leader_epoch: int, replicas: list[str], isr: list[str]) -> dict:
        if self._state.role is Role.LEADER and self._state.leader_epoch == leader_epoch:
            return self._state.describe()  # a repeated notice: the controller announces roles again after a failover
        already_ticking = self._state.role is Role.LEADER  # a new epoch of the same leader keeps its tick task
        self._stop_following()
        self._state.become_leader(leader_epoch, replicas, isr, wall_ms())
        self._storage.save_epochs(self._state.epochs)
        self._start_background(None if already_ticking else self._leader_ticks())
        self._wake()
        return self._state.describe()

    async def become_follower(self, leader_epoch: int, leader_id: str) -> dict:
        if (self._state.role is Role.FOLLOWER and self._state.leader_epoch == leader_epoch
                and self._state.leader_id == leader_id and self._follow_task is not None and not self._follow_task.done()):
            return self._state.describe()  # a repeated notice: keep the fetch in flight
        self._state.become_follower(leader_epoch, leader_id)
        self._waiters.fail_all(NotLeader(f"{self._spec.partition_name}: {self._spec.replica_id} is now a follower of {leader_id}"))
        self._stop_following()
        leader_actor = ray.get_actor(
            replica_actor_name(self._spec.cluster, self._spec.topic, self._spec.partition, leader_id), namespace=NAMESPACE)
        self._leader_stream = actor_stream(leader_actor, f"leader {leader_id} of {self._spec.partition_name}")
        self._leader_handle = GatedHandle(self._leader_stream, self._partition_gate, leader_id)
        self._follow_task = asyncio.get_running_loop().create_task(self._follow())
        self._start_background(None)
        return self._state.describe()

    def _start_background(self, role_task) -> None:
        if not self._tasks:
            loop = asyncio.get_running_loop()
            self._tasks = [loop.create_task(self._flush_periodically()), loop.create_task(self._retain_periodically()),
                           loop.create_task(self._checkpoint_high_watermark())]
            self._liveness = LeaseTask(LeaseHolder(
                self._metadata_store(), self._spec.replica_config.replica_lease_ttl_s,
                f"{self._spec.partition_name}: liveness of replica {self._spec.replica_id}",
                on_granted=self._write_liveness, regrant=True, keys=[self._liveness_key()]))
            self._liveness.start()
        if role_task is not None:
            self._tasks.append(asyncio.get_running_loop().create_task(role_task))

    def _stop_following(self) -> None:
        if self._follow_task is not None:
            self._follow_task.cancel()
            self._follow_task = None
        if self._leader_stream is not None:
            self._leader_stream.close()
            self._leader_stream = None

    def _wake(self) -> None:
        """Wake long-polling fetches and release producers whose batches are committed."""
        self._waiters.release(self._state)
        self._changes.notify()

    # --- leader: produce ----------------------------------------------------------------

    async def produce(self, batch: bytes, acks: Acks = Acks.ALL, timeout_ms: int = PRODUCE_TIMEOUT_MS_DEFAULT) -> int:
        """Append one batch; return its base offset once ``acks`` is satisfied."""
        trace = self._stage_trace
        received_ms = wall_ms_fine() if trace is not None else 0.0
        header = check_producer_batch(batch)  # sources and reserved bits refused (records)
        await self._sequence_gate.wait_turn(header, self._spec.replica_config.sequence_wait_ms_max)
        now_ms = wall_ms()
        plan = self._state.plan_append(header, acks, now_ms)
        if not plan.duplicate:
            # A large batch arrives over the stream as a bytearray of its own (``runtime.stream_frames``),
            # and an actor's arguments are always the call's own copy: stamped where it lies.
            stamped = batch if type(batch) is bytearray else bytearray(batch)
            stamp(stamped, plan.base_offset, plan.leader_epoch)
            try:
                header = self._log.append(stamped, now_ms, check_crc=False)  # checked on receipt, above
            except OSError as error:
                if not is_disk_full(error):
                    raise
                raise DiskFull(f"{self._spec.partition_name}: replica {self._spec.replica_id} cannot append "
                               f"({error.strerror}: {error.filename}); nothing of the batch was written. The producer "
                               f"retries; free space on the node or raise its log_dir_bytes_max") from None
            self._state.appended(header, now_ms)
            self._sequence_gate.batch_appended()
            self._wake()
        appended_ms = wall_ms_fine() if trace is not None else 0.0
        if acks is Acks.ALL:
            await self._committed(plan.next_offset, plan.leader_epoch, timeout_ms)
        if trace is not None and not plan.duplicate:
            trace.record((plan.base_offset, plan.next_offset, received_ms, appended_ms, wall_ms_fine()))
        return plan.base_offset

    async def _committed(self, next_offset: int, leader_epoch: int, timeout_ms: int) -> None:
        if self._state.ack_ready(next_offset, leader_epoch):
            return
        try:
            await asyncio.wait_for(self._waiters.add(next_offset, leader_epoch), timeout_ms / 1000)
        except asyncio.TimeoutError:
            raise RequestTimedOut(
                f"{self._spec.partition_name}: the ISR {sorted(self._state.isr)} did not replicate offset "
                f"{next_offset - 1} within {timeout_ms} ms; the producer retries (idempotently)"
            ) from None

    # --- leader: serve followers --------------------------------------------------------

    async def replica_fetch(self, follower_id: str, follower_epoch: int, fetch_offset: int, last_fetched_epoch: int,
                            bytes_max: int, wait_ms_max: int) -> ReplicaFetchResult:
        await self._fault.replication()
        self._state.check_epoch(follower_epoch)  # a follower of another epoch is fenced or must wait
        high_watermark_before = self._state.high_watermark
        decision = self._state.on_follower_fetch(follower_id, fetch_offset, last_fetched_epoch, wall_ms())
        if decision.isr_changed:
            self._isr_recorder.changed()
        # Only a moved HW releases anyone (producers, HW-bound readers). Waking on every fetch
        # would make two idle followers end each other's long polls in a busy loop.
        moved_high_watermark = decision.high_watermark != high_watermark_before
        if decision.isr_changed or moved_high_watermark:
            self._wake()
        if decision.diverging is not None:
            return ReplicaFetchResult(b"", self._state.high_watermark, decision.diverging)
        # The fetch that moved the HW returns at once, so its follower learns the new HW now (and
        # can serve it to read nodes) rather than with the next batch, as KIP-392 has Kafka do.
        # Others parked here were woken above. No loop: the follower's next fetch moves nothing.
        if fetch_offset >= self._log.log_end_offset and wait_ms_max > 0 and not moved_high_watermark:
            await self._changes.next_change(wait_ms_max / 1000)
        data = self._read_own_log(fetch_offset, bytes_max) if fetch_offset < self._log.log_end_offset else b""
        return ReplicaFetchResult(data, self._state.high_watermark, None)

    def _read_own_log(self, offset: int, bytes_max: int, end_offset: int | None = None) -> bytes:
        """``Log.read``, with damage on disk logged as an error before the caller hears of it."""
        try:
            return self._log.read(offset, bytes_max, end_offset)
        except CorruptRecord as error:
            logger.error("%s: replica %s (%s) refuses to serve offset %d: %s", self._spec.partition_name,
                         self._spec.replica_id, self._state.role.value, offset, error)
            raise CorruptRecord(
                f"replica {self._spec.replica_id} of partition {self._spec.partition_name} cannot serve offset "
                f"{offset}: {error.message}") from None

    async def _wait_for_high_watermark(self, offset: int, wait_ms_max: int) -> None:
        """Park until the HW passes ``offset``, the role changes or ``wait_ms_max`` ends. Appends
        below the HW wake the parked fetches too (a follower's log moved, a leader's followers
        must fetch): a consumer's fetch sleeps through those instead of returning empty."""
        role = self._state.role
        await self._changes.wait_until(
            lambda: offset < self._state.high_watermark or self._state.role is not role or self._closed,
            wait_ms_max / 1000)

    async def _leader_ticks(self) -> None:
        interval_s = min(self._spec.replica_config.replica_lag_ms_max / 2000, 1.0)
        while self._state.role is Role.LEADER:
            await asyncio.sleep(interval_s)
            if self._state.tick(wall_ms()):
                self._isr_recorder.changed()
            self._wake()

    # --- leader: ISR in the coordinator -------------------------------------------------

    def _isr_to_record(self) -> tuple[frozenset[str], int] | None:
        """The ISR and epoch the ``InSyncRecorder`` writes next; None when this replica no longer leads."""
        if self._state.role is not Role.LEADER or self._closed:
            return None
        return self._state.isr, self._state.leader_epoch

    def _isr_recorded(self, isr: tuple[str, ...], leader_epoch: int) -> None:
        # Deposed while the write was out: the ISR belongs to an epoch this replica no longer leads.
        if self._state.role is Role.LEADER and self._state.leader_epoch == leader_epoch:
            self._state.isr_committed(isr)
            self._wake()

    def _metadata_store(self) -> MetadataStore:
        if self._store is None:
            self._store = MetadataStore(self._spec.etcd_endpoint)
        return self._store

    def _write_isr(self, isr: tuple[str, ...], leader_epoch: int) -> bool:
        """CAS the ISR (and the ELR it implies) into the partition key if it still names this leader and epoch."""
        self._metadata_store()
        key = keys.physical_partition(self._spec.cluster, self._spec.topic, self._spec.partition)
        for _ in range(ISR_WRITE_ATTEMPTS_MAX):
            current = self._store.get(key)
            if current is None:
                return False  # the topic was deleted
            state = PartitionState.from_json(self._spec.partition, current.value)
            if state.leader != self._spec.replica_id or state.leader_epoch != leader_epoch:
                return False
            new_state = state.with_isr(isr, self._spec.replica_config.min_insync_replicas)
            if new_state == state or self._store.compare_and_swap(key, {**current.value, **new_state.to_json()}, current.mod_revision):
                return True
        raise CoordinatorUnavailable(f"ISR write for {self._spec.partition_name} kept conflicting; retrying")

    # --- follower -----------------------------------------------------------------------

    async def _follow(self) -> None:
        config = self._spec.replica_config
        while self._state.role is Role.FOLLOWER and not self._closed:
            await self._fault.replication()
            try:
                result = await self._leader_handle.replica_fetch.remote(
                    self._spec.replica_id, self._state.leader_epoch, self._state.log_end_offset, self._state.last_fetched_epoch,
                    config.fetch_bytes_max, config.fetch_wait_ms_max,
                )
            except asyncio.CancelledError:
                raise
            except Exception as raised:  # leader dead or not leader any more: the controller reassigns
                error = unwrap(raised)
                # A leader refusing its own damaged data does not heal by retrying: say so loudly.
                log = logger.error if isinstance(error, CorruptRecord) else logger.info
                log("%s: fetch from leader failed: %s", self._spec.partition_name, error)
                await asyncio.sleep(config.fetch_backoff_ms / 1000)
                continue
            try:
                self._apply_fetch(result)
            except (CorruptRecord, OSError) as error:  # its own log is damaged (or the data was), or its disk full
                logger.error("%s: replica %s could not apply a fetch from the leader: %s",
                             self._spec.partition_name, self._spec.replica_id, error)
                await asyncio.sleep(config.fetch_backoff_ms / 1000)

    def _apply_fetch(self, result: ReplicaFetchResult) -> None:
        apply_leader_answer(self._state, self._storage, result.diverging, result.data, result.high_watermark, wall_ms())
        if result.diverging is None:  # a truncation moves nothing a parked fetch waits for
            self._wake()

    # --- consumers ----------------------------------------------------------------------

    async def fetch(self, offset: int, bytes_max: int, wait_ms_max: int = 0, from_follower: bool = False) -> FetchResult:
        """Whole batches from ``offset`` below the high watermark (long poll when none).

        ``from_follower``: a follower may answer as well, below its own high watermark
        (committed data, possibly a little behind the leader's).
        """
        await self._fault.serving()
        if self._state.role is not Role.LEADER and not (from_follower and self._state.role is Role.FOLLOWER):
            raise NotLeader(f"{self._spec.partition_name}: {self._spec.replica_id} is not the leader (leader: {self._state.leader_id})")
        if offset >= self._state.high_watermark and wait_ms_max > 0:
            await self._wait_for_high_watermark(offset, wait_ms_max)
            if self._closed:  # stopped during the long poll (topic deleted, replica moved): nothing new
                return FetchResult(b"", self._state.high_watermark, self._log.log_start_offset, offset)
        data = self._read_own_log(offset, bytes_max, end_offset=self._state.high_watermark)
        return FetchResult(data, self._state.high_watermark, self._log.log_start_offset, self._log.log_end_offset)

    async def list_offsets(self) -> tuple[int, int]:
        """(log start offset, high watermark): the readable range, for consumers positioning."""
        return self._log.log_start_offset, self._state.high_watermark

    async def offset_for_timestamp(self, timestamp_ms: int) -> int | None:
        return self._log.offset_for_timestamp(timestamp_ms, end_offset=self._state.high_watermark)

    async def describe(self) -> dict:
        return {**self._state.describe(), "log_start_offset": self._log.log_start_offset,
                "log_end_offset": self._log.log_end_offset, "size_bytes": self._log.size_bytes,
                "replica_id": self._spec.replica_id, "pid": os.getpid()}

    # --- housekeeping -------------------------------------------------------------------

    def _liveness_key(self) -> str:
        return keys.replica_liveness(self._spec.cluster, self._spec.topic, self._spec.partition, self._spec.replica_id)

    def _write_liveness(self, lease) -> None:
        value = {"replica_id": self._spec.replica_id, "pid": os.getpid()}
        self._metadata_store().put(self._liveness_key(), value, lease=lease)

    async def _flush_periodically(self) -> None:
        flush_interval_ms = self._spec.log_config.flush_interval_ms
        interval_s = min((flush_interval_ms or 1000) / 1000, 1.0)
        while not self._closed:
            await asyncio.sleep(interval_s)
            pending = self._log.start_flush(wall_ms())
            if pending is not None:
                await asyncio.to_thread(pending.run)
                self._log.finish_flush(pending)

    async def _retain_periodically(self) -> None:
        # A loop of its own: reading feed positions waits for etcd, and the flush timer must not.
        while not self._closed:
            await asyncio.sleep(self._spec.log_config.retention_check_interval_ms / 1000)
            await retention_pass(self._log, self._spec, self._read_feed_positions, wall_ms())

    def _read_feed_positions(self) -> list[int]:
        prefix = keys.feed_positions_prefix(self._spec.cluster, self._spec.topic, self._spec.partition)
        return [feed_position_from_json(item.value) for item in self._metadata_store().get_prefix(prefix)]

    async def _checkpoint_high_watermark(self) -> None:
        # Written and fsynced on a worker thread, as the log's flush: the checkpoint's fsync took
        # up to 37 ms here (it waits for the file system's journal), and on the loop every produce
        # and fetch waited. Renamed into place here, and only while open (ReplicaStorage).
        while not self._closed:
            await asyncio.sleep(HIGH_WATERMARK_CHECKPOINT_INTERVAL_S)
            staged = await asyncio.to_thread(self._storage.stage_high_watermark, self._state.high_watermark)
            if staged is not None and not self._closed:
                self._storage.commit_high_watermark(staged)

    async def close(self, delete_data: bool = False) -> None:
        """Stop background work and close the log; with ``delete_data`` remove the directory."""
        self._closed = True
        self._stop_following()
        self._stream_server.close()
        for task in self._tasks:
            task.cancel()
        self._isr_recorder.close()
        self._waiters.fail_all(NotLeader(f"{self._spec.partition_name}: replica {self._spec.replica_id} is shutting down"))
        self._storage.close(delete_data)
        if self._liveness is not None:
            self._liveness.close()
        if self._store is not None:
            self._store.close()

    async def ping(self) -> str:
        return self._spec.replica_id

    async def stream_endpoint(self) -> StreamEndpoint:
        """Where this replica serves ``STREAM_METHODS`` over a stream, on its node's address."""
        return await self._stream_server.start(ray.util.get_node_ip_address())

    async def set_stage_trace(self, enabled: bool) -> None:
        """Start (or stop and discard) this replica's stage trace (``mafka4.stage_trace``)."""
        self._stage_trace = StageTrace() if enabled else None

    async def take_stage_trace(self) -> dict:
        """The stage-trace rows since the last take (empty when tracing is off)."""
        return self._stage_trace.take() if self._stage_trace is not None else {"rows": [], "dropped": 0}

    async def set_log_dir_bytes_max(self, bytes_max: int | None) -> dict:
        """Bound the node's log directory for this replica's appends (``log.log_dir_budget``; None: no
        bound, 0: a full disk): a leader refuses produce with ``DiskFull``, a follower stops appending."""
        self._budget.set_bytes_max(bytes_max)
        logger.warning("%s: replica %s log_dir_bytes_max set to %s", self._spec.partition_name,
                       self._spec.replica_id, bytes_max)
        return self._budget.describe(wall_ms())

    async def set_fault(self, delay_ms: int = 0, paused: bool = False) -> dict:
        """Delay or pause this replica's fetch and serve loops (``mafka4.faults``); (0, False) clears it."""
        fault = self._fault.set(delay_ms, paused)
        logger.warning("%s: replica %s fault set to %s", self._spec.partition_name, self._spec.replica_id, fault)
        return fault.describe()

    async def set_partition(self, fault: NetworkFault) -> dict:
        """Cut or slow the network between this replica's node and others (``mafka4.partition_gate``);
        an empty ``NetworkFault`` heals it."""
        self._partition_gate.set(fault)
        logger.warning("%s: replica %s network fault set to %s", self._spec.partition_name, self._spec.replica_id,
                       fault.describe())
        return fault.describe()
