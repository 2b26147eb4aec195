"""``PhysicalPartition``: the Ray actor of one physical-partition replica.

A thin asynchronous shell around ``PhysicalReplica`` (``physical.physical_replica``: the log,
the pure ``ReplicaState`` and every follow-up of its ``Ready``), which the simulator drives too.
The actor turns Ray and stream calls into its calls, runs the background tasks (following,
ticks, flushes, checkpoints, retention), and does what its ``Ready`` leaves to a driver:
long polls woken (``ChangeSignal``), early batches held (``SequenceGate``), ISR changes handed
to its etcd side (``physical.replica_metadata``: the ISR compare-and-swap, the liveness key
and the read nodes' feed positions).

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
* Liveness and ISR changes in etcd: ``physical.replica_metadata``. While etcd is unreachable
  the data path goes on regardless.
* Clients (producers, consumers) reach the replica on its client port
  (``frontend.replica_port``: PRODUCE, FETCH, LIST_OFFSETS, authenticated and ACL-checked),
  started with its first role on a free port of its node and named in its liveness key, where
  every node's metadata answer finds it. The cluster's own processes keep using the stream.
* Metrics: with the client port, a Prometheus metrics server starts on another free port of
  the node (``metrics.exposition``), named in the liveness key too (``metrics_address``); each
  scrape takes a snapshot on the actor's loop: ``describe`` and the requests counted in
  ``physical.replica_traffic`` (produce, fetch, the produce latency histogram, and the end-to-end
  latency of the batches consumers' fetches carry: ``metrics.end_to_end``). On the leader,
  the lag of every Mafka3-mode group with an offset committed in the partition
  (``metrics.group_lag``), from the groups' offsets read from etcd at most every
  ``GROUP_OFFSETS_MAX_AGE_MS``, when scraped (``metadata.group_offsets_cache``).

Damaged data on disk (bit rot in a segment that recovery trusted) is caught by the read
path, which checks every batch's CRC (``Segment.read``). A damaged batch is never served,
to followers or to readers: the fetch fails with ``CorruptRecord`` naming the file and
byte position, and the replica logs it as an error (``physical_replica``). A reader (the feeder) then reads from
another in-sync replica. Followers cannot help a leader whose own copy is damaged below
its HW: it keeps refusing until an operator moves leadership away (stop the replica, and
the controller elects another ISR member) and removes the damaged replica's directory so
that it refetches everything as a follower. Repairing that automatically (truncate and
refetch from a replica) is not implemented. The follower loop survives damage in its own
log (a truncation or append that raises ``CorruptRecord``): it logs, backs off and fetches
again rather than stop following.

The actor never decodes a record: per-message work belongs to clients and feeders.
"""

from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import dataclass
from typing import Callable

import ray

from mafka4.batch_frame import check_producer_batch
from mafka4.clocks import monotonic_ms, monotonic_s, wall_ms, wall_ms_fine
from mafka4.collector import freeze_what_start_up_left
from mafka4.errors import CoordinatorUnavailable, CorruptRecord, RequestTimedOut
from mafka4.faults import FaultGate
from mafka4.limits import HIGH_WATERMARK_CHECKPOINT_INTERVAL_S, PRODUCE_TIMEOUT_MS_DEFAULT, Acks, ReadMode
from mafka4.limits.servers import LogConfig, ReplicaConfig
from mafka4.log.log import Log, RetentionResult
from mafka4.log.log_dir_budget import LogDirBudget
from mafka4.log.read_loss import retention_floor
from mafka4.long_poll import ChangeSignal
from mafka4.metrics.exposition import MetricsServer, start_on_loop
from mafka4.metadata.group_offsets_cache import GroupOffsetsCache
from mafka4.metrics.families import replica_families
from mafka4.metrics.group_lag import group_lag
from mafka4.partition_gate import GatedHandle, NetworkFault, PartitionGate
from mafka4.physical.physical_replica import PhysicalReplica
from mafka4.frontend.replica_port import ReplicaPort
from mafka4.physical.replica import AppendPlan, Ready, Role
from mafka4.physical.replica_metadata import ReplicaMetadata
from mafka4.physical.replica_traffic import ReplicaTraffic
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


@ray.remote(num_cpus=0)
class PhysicalPartition:
    def __init__(self, spec: ReplicaSpec):
        self._spec = spec
        # The node's log directory holds every replica directory of the node (physical_launcher).
        self._budget = LogDirBudget(os.path.dirname(os.path.normpath(spec.directory)))
        # The flush timer fsyncs on a worker thread: on the event loop each fsync (5-30 ms) held
        # up every produce and fetch of the replica (log.pending_flush).
        self._replica = PhysicalReplica(spec.replica_id, spec.partition_name, spec.directory, spec.log_config,
                                        spec.replica_config, wall_ms(), self._on_ready, self._budget,
                                        flushes_in_background=True)
        self._state = self._replica.state  # read-only here: every change goes through the replica
        self._log = self._replica.log
        self._sequence_gate = SequenceGate(self._replica.is_early)
        self._changes = ChangeSignal()  # long-polling fetches, followers' and consumers'
        self._tasks: list[asyncio.Task] = []
        self._follow_task: asyncio.Task | None = None
        self._leader_handle = None
        self._leader_stream: StreamHandle | None = None
        # What other processes call over a stream instead of through Ray (started when first asked).
        self._stream_server = StreamServer(self, STREAM_METHODS, f"replica {spec.replica_id} of {spec.partition_name}")
        self._closed = False
        self._metadata = ReplicaMetadata(spec.cluster, spec.topic, spec.partition, spec.replica_id, spec.etcd_endpoint,
                                         spec.replica_config, self._replica.isr_to_write, self._replica.isr_written)
        self._fault = FaultGate()
        self._partition_gate = PartitionGate(spec.replica_id)  # replicas are named by their node
        self._stage_trace: StageTrace | None = None
        self._client_port = ReplicaPort(spec.etcd_endpoint, spec.cluster, spec.topic, spec.partition, spec.replica_id,
                                        self)
        self._client_port_started = False
        self._traffic = ReplicaTraffic()  # what its metrics count of the requests served
        # The groups' committed offsets for the group lag metrics, read when scraped (``metadata.group_offsets_cache``).
        self._group_offsets = GroupOffsetsCache(self._metadata.store, spec.cluster,
                                                f"replica {spec.replica_id} of {spec.partition_name}")
        self._metrics: MetricsServer | None = None  # started with the client port
        # Ray's objects stay out of the full collections later allocations cause: in a replica they
        # walked Ray's start-up objects for 54-123 ms at a time, collecting nothing, and stalled its
        # produce requests and its followers that long (``mafka4.collector``).
        freeze_what_start_up_left()

    def _on_ready(self, ready: Ready) -> None:
        """What the replica leaves to its driver (``physical_replica``); it answers waiters itself."""
        if ready.write_isr is not None:
            self._metadata.isr_changed()
        if ready.sequence_advanced:
            self._sequence_gate.batch_appended()
        if ready.wake:
            self._changes.notify()

    # --- role changes -------------------------------------------------------------------

    async def become_leader(self, leader_epoch: int, replicas: list[str], isr: list[str]) -> dict:
        if self._state.leads(leader_epoch):
            return self._state.describe()  # a repeated notice: the controller announces roles again after a failover
        already_ticking = self._state.role is Role.LEADER  # a new epoch of the same leader keeps its tick task
        await self._serve_clients()
        self._stop_following()
        self._replica.become_leader(leader_epoch, replicas, isr, wall_ms())
        self._start_background(None if already_ticking else self._leader_ticks())
        return self._state.describe()

    async def become_follower(self, leader_epoch: int, leader_id: str) -> dict:
        if (self._state.role is Role.FOLLOWER and self._state.leader_epoch == leader_epoch
                and self._state.leader_id == leader_id and self._follow_task is not None and not self._follow_task.done()):
            return self._state.describe()  # a repeated notice: keep the fetch in flight
        await self._serve_clients()
        self._replica.become_follower(leader_epoch, leader_id)
        self._stop_following()
        leader_actor = ray.get_actor(
            replica_actor_name(self._spec.cluster, self._spec.topic, self._spec.partition, leader_id), namespace=NAMESPACE)
        self._leader_stream = actor_stream(leader_actor, f"leader {leader_id} of {self._spec.partition_name}")
        self._leader_handle = GatedHandle(self._leader_stream, self._partition_gate, leader_id)
        self._follow_task = asyncio.get_running_loop().create_task(self._follow())
        self._start_background(None)
        return self._state.describe()

    async def _serve_clients(self) -> None:
        """Start the client port once, before the first role's liveness key names it. A port that
        cannot start is logged; the replica serves the cluster's own streams regardless."""
        if self._client_port_started:
            return
        self._client_port_started = True
        host = ray.util.get_node_ip_address()
        try:
            await asyncio.to_thread(self._client_port.start_view)
            self._metadata.client_address = await self._client_port.start(host)
        except Exception:
            logger.exception("%s: replica %s serves no client port", self._spec.partition_name, self._spec.replica_id)
        self._metrics = start_on_loop(f"replica {self._spec.replica_id} of {self._spec.partition_name}",
                                      replica_families, self._metrics_snapshot, host)
        if self._metrics is not None:
            self._metadata.metrics_address = self._metrics.address

    async def _metrics_snapshot(self) -> dict:
        """What its metrics are made of (``metrics.families.replica_families``), on the actor's loop;
        on the leader, the lag of the groups with an offset committed in the partition (``group_lag``)."""
        spec = self._spec
        lags = None
        if self._state.role is Role.LEADER:
            offsets = await self._group_offsets.offsets(monotonic_ms())
            lags = self._group_lags(offsets.partitions.get((spec.topic, spec.partition), {}), wall_ms())
        return {"topic": spec.topic, "partition": spec.partition, "node": spec.replica_id,
                "replica": self._replica.describe(), "min_insync_replicas": spec.replica_config.min_insync_replicas,
                "traffic": self._traffic.snapshot(), "client_port": self._client_port.counters, "group_lag": lags}

    def _group_lags(self, committed: dict[str, int], now_ms: int) -> list[dict]:
        """Per group of ``committed`` ({group: offset} in this partition): its lag (``metrics.group_lag``),
        from one batch header per group behind."""
        rows, high_watermark = [], self._state.high_watermark
        for group, offset in sorted(committed.items()):
            try:
                timestamp_ms = self._log.timestamp_at(offset, end_offset=high_watermark)
            except CorruptRecord as error:  # the lag in messages still stands
                logger.warning("%s: group %s's lag in time is unknown: %s", self._spec.partition_name, group,
                               error.message)
                timestamp_ms = None
            lag = group_lag(offset, high_watermark, timestamp_ms, now_ms)
            rows.append({"group": group, "topic": self._spec.topic, "partition": self._spec.partition,
                         "committed_offset": offset, "high_watermark": high_watermark,
                         "lag_messages": lag.messages, "lag_ms": lag.ms})
        return rows

    async def lag_position(self, offset: int | None) -> tuple[int, int | None]:
        """(HW, the timestamp a group at ``offset`` lags from: ``Log.timestamp_at``; None if it lags
        none or ``offset`` is None), for ``mafka4 group describe``'s lag in time (``metrics.group_lag``)."""
        high_watermark = self._state.high_watermark
        return high_watermark, None if offset is None else self._log.timestamp_at(offset, end_offset=high_watermark)

    async def client_port_counters(self) -> dict[str, int]:
        """The client port's counters: connections, requests, refusals, bad frames, ..."""
        return self._client_port.counters

    def _start_background(self, role_task) -> None:
        if not self._tasks:
            loop = asyncio.get_running_loop()
            self._tasks = [loop.create_task(self._flush_periodically()), loop.create_task(self._retain_periodically()),
                           loop.create_task(self._checkpoint_high_watermark())]
            self._metadata.start_liveness()
        if role_task is not None:
            self._tasks.append(asyncio.get_running_loop().create_task(role_task))

    def _stop_following(self) -> None:
        if self._follow_task is not None:
            self._follow_task.cancel()
            self._follow_task = None
        if self._leader_stream is not None:
            self._leader_stream.close()
            self._leader_stream = None

    # --- leader: produce ----------------------------------------------------------------

    async def produce(self, batch: bytes, acks: Acks = Acks.ALL, timeout_ms: int = PRODUCE_TIMEOUT_MS_DEFAULT) -> int:
        """Append one batch; return its base offset once ``acks`` is satisfied."""
        trace = self._stage_trace
        received_s = monotonic_s()
        received_ms = wall_ms_fine() if trace is not None else 0.0
        header = check_producer_batch(batch)  # sources and reserved bits refused (records)
        await self._sequence_gate.wait_turn(header, self._spec.replica_config.sequence_wait_ms_max)
        # A large batch arrives over the stream as a bytearray of its own (``runtime.stream_frames``),
        # and an actor's arguments are always the call's own copy: the replica stamps it where it lies.
        plan = self._replica.append(header, batch, acks, wall_ms())
        appended_ms = wall_ms_fine() if trace is not None else 0.0
        if acks is Acks.ALL:
            await self._committed(plan, timeout_ms)
        if trace is not None and not plan.duplicate:
            trace.record((plan.base_offset, plan.next_offset, received_ms, appended_ms, wall_ms_fine()))
        self._traffic.produced(len(batch), header.count, monotonic_s() - received_s)
        return plan.base_offset

    async def _committed(self, plan: AppendPlan, timeout_ms: int) -> None:
        committed = asyncio.get_running_loop().create_future()
        self._replica.wait_for_commit(plan, committed)
        if committed.done():  # committed already, or refused: no need to yield to the loop
            return committed.result()
        try:
            await asyncio.wait_for(committed, timeout_ms / 1000)
        except asyncio.TimeoutError:
            raise RequestTimedOut(
                f"{self._spec.partition_name}: the ISR {sorted(self._state.isr)} did not replicate offset "
                f"{plan.next_offset - 1} within {timeout_ms} ms; the producer retries (idempotently)"
            ) from None

    # --- leader: serve followers --------------------------------------------------------

    async def replica_fetch(self, follower_id: str, follower_epoch: int, fetch_offset: int, last_fetched_epoch: int,
                            bytes_max: int, wait_ms_max: int) -> ReplicaFetchResult:
        await self._fault.replication()
        high_watermark_before = self._state.high_watermark
        decision = self._replica.answer_follower(follower_id, follower_epoch, fetch_offset, last_fetched_epoch,
                                                 wall_ms())
        if decision.diverging is not None:
            return ReplicaFetchResult(b"", self._state.high_watermark, decision.diverging)
        # The fetch that moved the HW returns at once, so its follower learns the new HW now (and
        # can serve it to read nodes) rather than with the next batch, as KIP-392 has Kafka do.
        # Others parked here were woken by the replica. No loop: the follower's next fetch moves nothing.
        moved_high_watermark = decision.high_watermark != high_watermark_before
        if fetch_offset >= self._log.log_end_offset and wait_ms_max > 0 and not moved_high_watermark:
            await self._changes.next_change(wait_ms_max / 1000)
        data = self._replica.read_for_follower(fetch_offset, bytes_max)
        self._traffic.follower_fetched(len(data))
        return ReplicaFetchResult(data, self._state.high_watermark, None)

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
            self._replica.tick(wall_ms())

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
                self._replica.apply_leader_answer(result.diverging, result.data, result.high_watermark, wall_ms())
            except (CorruptRecord, OSError) as error:  # its own log is damaged (or the data was), or its disk full
                logger.error("%s: replica %s could not apply a fetch from the leader: %s",
                             self._spec.partition_name, self._spec.replica_id, error)
                await asyncio.sleep(config.fetch_backoff_ms / 1000)

    # --- consumers ----------------------------------------------------------------------

    async def fetch(self, offset: int, bytes_max: int, wait_ms_max: int = 0, from_follower: bool = False) -> FetchResult:
        """Whole batches from ``offset`` below the high watermark (long poll when none).

        ``from_follower``: a follower may answer as well, below its own high watermark
        (committed data, possibly a little behind the leader's).
        """
        await self._fault.serving()
        self._replica.check_serving(from_follower)
        if offset >= self._state.high_watermark and wait_ms_max > 0:
            await self._wait_for_high_watermark(offset, wait_ms_max)
            if self._closed:  # stopped during the long poll (topic deleted, replica moved): nothing new
                return FetchResult(b"", self._state.high_watermark, self._log.log_start_offset, offset)
        data = self._replica.read_committed(offset, bytes_max)
        if from_follower:  # a read node's feed (or a consumer reading a follower): no consumer served here
            self._traffic.fetched(len(data))
        else:
            self._traffic.consumer_fetched(data, wall_ms())
        return FetchResult(data, self._state.high_watermark, self._log.log_start_offset, self._log.log_end_offset)

    async def list_offsets(self) -> tuple[int, int]:
        """(log start offset, high watermark): the readable range, for consumers positioning."""
        return self._log.log_start_offset, self._state.high_watermark

    async def offset_for_timestamp(self, timestamp_ms: int) -> int | None:
        return self._log.offset_for_timestamp(timestamp_ms, end_offset=self._state.high_watermark)

    async def describe(self) -> dict:
        return {**self._replica.describe(), "replica_id": self._spec.replica_id, "pid": os.getpid()}

    # --- housekeeping -------------------------------------------------------------------

    async def _flush_periodically(self) -> None:
        flush_interval_ms = self._spec.log_config.flush_interval_ms
        interval_s = min((flush_interval_ms or 1000) / 1000, 1.0)
        while not self._closed:
            await asyncio.sleep(interval_s)
            pending = self._replica.start_flush(wall_ms())
            if pending is not None:
                await asyncio.to_thread(pending.run)
                self._replica.finish_flush(pending)

    async def _retain_periodically(self) -> None:
        # A loop of its own: reading feed positions waits for etcd, and the flush timer must not.
        while not self._closed:
            await asyncio.sleep(self._spec.log_config.retention_check_interval_ms / 1000)
            await retention_pass(self._log, self._spec, self._metadata.read_feed_positions, wall_ms())

    async def _checkpoint_high_watermark(self) -> None:
        # Written and fsynced on a worker thread, as the log's flush: the checkpoint's fsync took
        # up to 37 ms here (it waits for the file system's journal), and on the loop every produce
        # and fetch waited. Renamed into place here, and only while open (PhysicalReplica).
        while not self._closed:
            await asyncio.sleep(HIGH_WATERMARK_CHECKPOINT_INTERVAL_S)
            staged = await asyncio.to_thread(self._replica.stage_high_watermark, self._state.high_watermark)
            if staged is not None:
                self._replica.commit_high_watermark(staged)

    async def close(self, delete_data: bool = False) -> None:
        """Stop background work and close the log; with ``delete_data`` remove the directory."""
        self._closed = True
        self._stop_following()
        self._stream_server.close()
        self._client_port.close()
        for task in self._tasks:
            task.cancel()
        self._replica.close(delete_data)
        self._group_offsets.close()
        self._metadata.close()
        if self._metrics is not None:  # last: its thread waits for the server (off the loop)
            await asyncio.to_thread(self._metrics.stop)

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
