"""``HostedVp``: one virtual-partition (VP) replica inside a read node -- a log, not a process.

The shell around ``VpReplicaCore``: it owns the VP's ``ReplicaStorage`` (the segmented log in
the write path's format and its checkpoints, one directory per VP replica) and its fault gate,
feeds the core what happens to the log and carries out the core's ``Ready``: the log-local
parts itself (truncation, flush, the leader-epoch checkpoint) and the rest through the
``notify`` callback its ``ReadNode`` gives it (record a RISR change in etcd, wake long-polling
fetches). The ``ReadNode`` and the simulator (``simulations.dst.virtual``) both host it
unchanged.

Every method is synchronous and runs on the read node's event loop, except ``VpChores.run``
and the constructor, which opens the log on the worker thread (``virtual.vp_opening``);
none does network I/O, so a feed stream can hand records to hundreds of VPs in one pass without
a single remote call.

Flushing. The log flushes by time (``LogConfig.flush_interval_ms``) in housekeeping only (a
segment roll leaves the segment it closes to that flush); a leader alone in the RISR of a VP
with other replicas is also asked to flush after each append (``Ready.flush``: the core's
lone-leader rule, so a power loss never takes an offset a reader saw). A VP with one replica
serves its unflushed tail: after a power loss its readers learn from their next fetch that
the log diverged from what they read (``read``'s epoch check) and read again from where it
did. After every core call it executes, and after housekeeping, the shell reports the log's flushed offset to the core
(``VpReplicaCore.flushed``) if it moved, so a lone leader's HW follows its fsyncs.

On a read node that flush is owed (``owe_flush``), not run at once: a read node hosting 256 VPs
spent 26-31% of its event loop in lone leaders' fsyncs (py-spy, ``bench feed-lag``), and every
feed and fetch of the node waited behind each one. Its housekeeping runs the owed fsyncs on the
worker thread instead, those of every VP that became owed meanwhile in one batch
(``start_owed_flush``, ``finish_owed_flush``; ``virtual.housekeeping``). The HW still waits for
the fsync, so what a reader sees is as durable as before; it only appears a batch later. The
one flush that stays on the loop is one a RISR write waits for (the RISR shrinking to the
leader: the tail readers saw is fsynced before etcd may hold a RISR of the leader alone).
Without ``owe_flush`` (the simulator, tests) the shell fsyncs at once.

Housekeeping comes in three steps, so that a read node fsyncs all its VPs on one worker thread
while its event loop goes on feeding and serving (a physical replica's fsyncs took 5-37 ms here):
``start_housekeeping`` on the loop notes what is due, ``VpChores.run`` on the worker thread does
the fsyncs (the log's flush, ``log.pending_flush``, and the HW checkpoint's write), and
``finish_housekeeping`` on the loop takes the result in (renaming the checkpoint into place,
which a replica closed meanwhile skips) and applies retention. ``housekeep`` does all three in
a row (the simulator, tests). A read node runs them only for the VPs that changed
(``on_change``, called after every core call that did something and after a follower's append)
until ``housekeeping_pending`` is False, and retention only for those that changed or whose
``retention_due_ms`` came (``virtual.housekeeping``): an idle VP is not visited.

File descriptors. The log opens its files when it is first appended to or read
(``log.segment``), and a housekeeping pass that finds the VP with nothing to do (nothing
appended since the pass before, everything flushed, the HW checkpointed) closes them
(``Log.release_descriptors``): ``housekeeping_pending`` stays True while the log holds one, so
a VP that went idle gets that one more visit, and a read that opened the log's files counts as
a change. So an idle VP holds no descriptor, where it held four, and a read node's descriptors
follow its busy VPs, not all of them (the open-file limit here is 20,000). Closing a descriptor
changes nothing on disk: an fsync reaches the file through any descriptor, and a background
flush opens the files it syncs by path.

The directory holds what a physical replica's does (``log.replica_storage``): the log, the
leader-epoch and the high-watermark checkpoints, both rewritten atomically; the HW checkpoint
is written by housekeeping (every ``housekeeping_interval_ms`` on a read node) if the HW
moved, so a restarted replica may recover an older HW (never a newer one than its log).
Retention deletes only whole segments below the HW, as Kafka's does, so the log start never
passes it.

Stage trace. While its read node traces the VP's topic (``mafka4.stage_trace``), the replica
stamps each fed append and each move of its high watermark (``trace``; None otherwise, and
always in the simulator, whose clock is not the wall clock).

Recovery. The log recovers as on the write path; the leader-epoch history comes from its
checkpoint (or the batch headers), the HW from its checkpoint, and the feed progress is
rebuilt from the log's records (``FeedProgress.rebuild``) whenever the replica takes
leadership, so it is exactly what the log holds. Caveat: the rebuild reads the whole log, and
a partition whose last records of this VP were all deleted by retention would be re-fed from
that partition's oldest undeleted offset; VP retention must not be shorter than the physical
partitions'.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Iterator, NamedTuple, Sequence

from mafka4.batch_frame import stamp
from mafka4.batch_payload import Record, decode_batches
from mafka4.clocks import wall_ms_fine
from mafka4.errors import MessageTooLarge
from mafka4.faults import FaultGate
from mafka4.limits import FEED_RECORDS_MAX, SEGMENT_SCAN_CHUNK_BYTES
from mafka4.limits.servers import LogConfig
from mafka4.log.epochs import NO_EPOCH
from mafka4.log.log_dir_budget import LogDirBudget
from mafka4.log.pending_flush import PendingFlush
from mafka4.log.replica_storage import ReplicaStorage, StagedHighWatermark
from mafka4.risr.state import RisrConfig
from mafka4.stage_trace import StageTrace
from mafka4.virtual.load_meter import LoadMeter
from mafka4.virtual.replica_core import NOTHING, FetchPosition, Ready, ReplicaAnswer, VpReplicaCore
from mafka4.virtual.vp_records import FedRecords, FeedProgress, vp_batches

logger = logging.getLogger(__name__)


class VpId(NamedTuple):
    """A VP of one topic: the key under which a read node hosts it (a named tuple: it crosses
    read nodes in every fetch, and tuples pickle fast)."""

    topic: str
    vp: int

    def __str__(self) -> str:
        return f"{self.topic}/v{self.vp}"


class VpRead(NamedTuple):
    """Whole batches for a consumer, with the offsets it needs to go on; or (``diverging`` set,
    ``data`` empty) the ``(epoch, end offset)`` the reader moves back to (``VpReplicaCore.reader_divergence``)."""

    data: bytes
    high_watermark: int
    log_start_offset: int
    log_end_offset: int
    diverging: tuple[int, int] | None = None


@functools.lru_cache(maxsize=64)  # a read node's topics have a few configs between them
def _shared(config: LogConfig | RisrConfig) -> LogConfig | RisrConfig:
    """The first of the equal (frozen) configs it was given: a copy per VP cost about 200 bytes
    of each of 100,000 VPs (``benchmarks/vp_memory_micro.py``)."""
    return config


def vp_directory(data_root: str | Path, node_id: str, vp_id: VpId) -> Path:
    return Path(data_root) / node_id / f"{vp_id.topic}-v{vp_id.vp}"


@dataclass(slots=True)
class VpChores:
    """The part of one VP's housekeeping that waits for the disk, for a worker thread."""

    storage: ReplicaStorage
    flush: PendingFlush | None  # the log's flush by time (or an owed one), if one is due
    high_watermark: int | None  # to checkpoint, if it moved since the last one; None: no checkpoint (an owed flush)
    staged: StagedHighWatermark | None = None  # that checkpoint, for ``finish_housekeeping`` to put in place
    error: Exception | None = None  # what ``run`` met; ``finish_housekeeping`` raises it on the loop

    def run(self) -> None:
        try:
            if self.flush is not None:
                self.flush.run()
            if self.high_watermark is not None:
                self.staged = self.storage.stage_high_watermark(self.high_watermark)
        except Exception as error:  # one VP's disk trouble must not stop the next VP's chores
            self.error = error


def run_chores(chores: Sequence[VpChores]) -> None:
    """``run`` each of ``chores`` in turn (on a read node's worker thread)."""
    for one in chores:
        one.run()


class HostedVp:
    """One VP replica of a read node; see the module docstring."""

    __slots__ = ("vp_id", "fault", "_notify", "_on_change", "_owe_flush", "_load", "_storage", "_log", "core",
                 "closed", "trace", "_traced_high_watermark", "fetch_requests",
                 "fetch_bytes")  # no per-instance dict: a read node holds 100,000

    def __init__(self, vp_id: VpId, node_id: str, directory: Path, log_config: LogConfig, risr_config: RisrConfig,
                 now_ms: int, notify: Callable[["HostedVp", Ready], None], budget: LogDirBudget | None = None,
                 on_change: Callable[["HostedVp"], None] | None = None,
                 owe_flush: Callable[["HostedVp"], None] | None = None, load: LoadMeter | None = None):
        """``on_change``: called after anything that may give housekeeping or a RISR tick work (the
        log grew or was cut, the HW, the role or the RISR moved), so that a read node visits only
        the VPs it names (``virtual.visit_schedule``). ``owe_flush``: called instead of fsyncing
        on the loop when the core asks for a flush (``Ready.flush``), so that the caller runs it on
        a worker thread (``start_owed_flush``, ``finish_owed_flush``); None: fsync at once.
        ``load``: the node's load meter, which ``feed`` adds the bytes it appends to; None: not metered."""
        self.vp_id = vp_id
        self.fault = FaultGate()
        self._notify = notify
        self._on_change = on_change
        self._owe_flush = owe_flush
        self._load = load
        # Retention keeps every segment holding an offset at or past the HW (the fed floor, held
        # without a time bound): records not on every RISR member yet are not the leader's to drop,
        # and the core's invariant log start <= HW must hold on leaders and followers alike.
        # ``budget``: the node's log_dir_bytes_max, shared by all its VPs (an append past it raises ENOSPC).
        self._storage = ReplicaStorage(directory, _shared(replace(log_config, unfed_hold_ms_max=None)), now_ms,
                                       budget, flushes_in_background=True)
        self._log = self._storage.log
        self.core = VpReplicaCore(str(vp_id), node_id, _shared(risr_config), self._storage.recovered_epochs(),
                                  self._log.log_start_offset, self._log.log_end_offset,
                                  self._storage.recovered_high_watermark(), flushed_offset=self._log.flushed_offset)
        self.closed = False
        # Set by the read node while its topic is traced (``mafka4.stage_trace``); None otherwise.
        self.trace: StageTrace | None = None
        self._traced_high_watermark = self.core.high_watermark
        # Consumers' reads of this replica and the bytes they got, since it was opened (its node's metrics).
        self.fetch_requests = self.fetch_bytes = 0

    @property
    def directory(self) -> Path:
        return self._storage.directory

    @property
    def log_start_offset(self) -> int:
        return self._log.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._log.log_end_offset

    def _execute(self, ready: Ready) -> None:
        if ready.truncate_to is not None:
            logger.warning("%s: %s truncates from %d to %d", self.vp_id, self.core.replica_id,
                           self._log.log_end_offset, ready.truncate_to)
            self._log.truncate_to(ready.truncate_to)
        if ready.flush:
            # A RISR write that may leave this leader alone in etcd waits for the fsync of the
            # tail readers saw (``RisrState``'s lone leader): that flush stays here, on the loop.
            if self._owe_flush is None or ready.write_risr is not None:
                self._log.flush()
            else:
                self._owe_flush(self)
        flushed = self._report_flushed()
        if flushed is not NOTHING:  # (a Ready made per append, hundreds a feed round, costs more than this test)
            ready = ready | flushed
        if ready.save_epochs:
            self._storage.save_epochs(self.core.epochs)
        if self.trace is not None and self.core.is_leader and self.core.high_watermark > self._traced_high_watermark:
            self._traced_high_watermark = self.core.high_watermark
            self.trace.record(("hw", self.vp_id.vp, self._traced_high_watermark, wall_ms_fine()))
        if ready.write_risr is not None or ready.wake:
            self._notify(self, ready)
        if self._on_change is not None and ready:
            self._on_change(self)

    def _report_flushed(self) -> Ready:
        """Tell the core how far the log is fsynced, if that moved since it last heard."""
        flushed_offset = self._log.flushed_offset
        if flushed_offset == self.core.flushed_offset:
            return NOTHING
        return self.core.flushed(flushed_offset)

    # --- roles ---------------------------------------------------------------------------

    def become_leader(self, leader_epoch: int, replicas: Sequence[str], risr: Sequence[str], now_ms: int) -> None:
        core = self.core
        if core.is_leader and core.leader_epoch == leader_epoch:
            return  # a repeated notice: do not read the log again
        # Leading already (a replica move's step names the same leader at a new epoch): the held
        # progress goes on. Rebuilding reads the whole log on the node's loop, every VP of the node
        # waiting meanwhile: a move of a VP that holds days of records would stall them for seconds.
        progress = None if core.is_leader else FeedProgress.rebuild(self._records())
        self._execute(core.become_leader(leader_epoch, replicas, risr, progress, now_ms))
        # A failover is news; a VP's first leader (a topic's creation, a split's child) is routine,
        # and a topic of 1,024 VPs logged 1,024 warnings.
        logger.log(logging.WARNING if leader_epoch > 0 else logging.DEBUG, "%s: %s leads at epoch %d, RISR %s",
                   self.vp_id, core.replica_id, leader_epoch, sorted(core.risr))

    def become_follower(self, leader_epoch: int, leader_id: str) -> None:
        self._execute(self.core.become_follower(leader_epoch, leader_id))

    def _records(self) -> Iterator[Record]:
        """Every record of the log, in offset order, read in bounded chunks."""
        offset, end = self._log.log_start_offset, self._log.log_end_offset
        while offset < end:
            records = decode_batches(self._log.read(offset, SEGMENT_SCAN_CHUNK_BYTES))
            assert records, f"{self.vp_id}: no whole batch readable at {offset}"
            yield from records
            offset = records[-1].offset + 1

    # --- leader: feeding ----------------------------------------------------------------

    def feed(self, leader_epoch: int, records: FedRecords, now_ms: int) -> int:
        """Append the records of one partition (ascending offsets) this log lacks; how many it appended.

        ``records``: decoded, or kept encoded by the column split (``vp_records.EncodedChunk``), whose
        VP batches are its records' bytes as the producer wrote them, encoded by no one here."""
        if len(records) > FEED_RECORDS_MAX:
            raise MessageTooLarge(f"{self.vp_id}: a feed call of {len(records)} records, more than "
                                  f"FEED_RECORDS_MAX={FEED_RECORDS_MAX}")
        core, log = self.core, self._log
        fresh = core.plan_feed(leader_epoch, records)
        appended_bytes = 0
        for run, encoded in vp_batches(fresh):  # one per run of a codec, spanning physical batches (vp_records)
            batch = bytearray(encoded)
            base_offset = log.log_end_offset
            stamp(batch, base_offset, leader_epoch)
            log_end_offset = log.append(batch, now_ms, check_crc=False).next_offset  # its CRC was computed just now
            appended_bytes += len(batch)
            if self.trace is not None:
                self.trace.record(("append", self.vp_id.vp, base_offset, log_end_offset, wall_ms_fine()))
            self._execute(core.leader_appended(run, log_end_offset))
        if self._load is not None:
            self._load.fed_bytes_total += appended_bytes
        return len(fresh)

    # --- leader: followers --------------------------------------------------------------

    def answer_follower(self, follower_id: str, position: FetchPosition, now_ms: int) -> ReplicaAnswer:
        """Report one follower's fetch to the core; the answer (the data comes from ``read_for_follower``)."""
        answer, ready = self.core.replica_fetch(follower_id, position.leader_epoch, position.fetch_offset,
                                                position.last_fetched_epoch, now_ms)
        self._execute(ready)
        return answer

    def read_for_follower(self, offset: int | None, bytes_max: int) -> bytes:
        if offset is None or offset >= self._log.log_end_offset:
            return b""
        held = self._log.holds_descriptors
        data = self._log.read(offset, bytes_max)
        self._after_read(held)
        return data

    def _after_read(self, held: bool) -> None:
        """A read that opened the log's files (``held``: it held some before) is a change for
        housekeeping, whose visit closes them once the VP is idle (the module docstring)."""
        if not held and self._on_change is not None and self._log.holds_descriptors:
            self._on_change(self)

    def tick(self, now_ms: int) -> None:
        self._execute(self.core.tick(now_ms))

    def risr_written(self, risr: Sequence[str], leader_epoch: int) -> None:
        self._execute(self.core.risr_written(risr, leader_epoch))

    # --- follower -----------------------------------------------------------------------

    def apply_answer(self, answer: ReplicaAnswer, data: bytes, now_ms: int) -> None:
        """The leader's answer to this follower's fetch: truncate, or append and take its HW."""
        core = self.core
        if answer.diverging is not None:
            self._execute(core.truncate(answer.diverging))
            return
        ready = Ready()
        if data:
            ready = core.follower_appended(self._log.append_batches(data, now_ms))
            if self._on_change is not None:  # the log grew, whether or not the core has more to do
                self._on_change(self)
        self._execute(ready | core.leader_progress(answer.high_watermark, answer.serving, now_ms))

    # --- consumers ----------------------------------------------------------------------

    def read(self, offset: int, bytes_max: int, now_ms: int, last_epoch: int = NO_EPOCH) -> VpRead:
        """Whole batches from ``offset`` below the HW, from a replica that may serve reads (at least
        one batch if there is one, unless ``bytes_max`` is 0: a fetch whose budget other VPs spent);
        none, and where to move back to, if the reader's last record (of ``last_epoch``) before
        ``offset`` is not where this log has it."""
        self.core.check_serving(now_ms)
        high_watermark = self.core.high_watermark
        diverging = self.core.reader_divergence(offset, last_epoch)
        if diverging is not None:
            return VpRead(b"", high_watermark, self._log.log_start_offset, self._log.log_end_offset, diverging)
        readable = offset < high_watermark and bytes_max > 0
        data = b""
        if readable:
            held = self._log.holds_descriptors
            data = self._log.read(offset, bytes_max, end_offset=high_watermark)
            self._after_read(held)
        self.fetch_requests += 1
        self.fetch_bytes += len(data)
        return VpRead(data, high_watermark, self._log.log_start_offset, self._log.log_end_offset)

    def readable(self, offset: int, now_ms: int, last_epoch: int = NO_EPOCH) -> bool:
        """True if a read from ``offset`` would return data now (or fail, or answer "diverging", at once)."""
        return (offset < self.core.high_watermark or not self.core.serving(now_ms)
                or self.core.reader_divergence(offset, last_epoch) is not None)

    def list_offsets(self, now_ms: int) -> tuple[int, int]:
        """(log start offset, HW): the readable range."""
        self.core.check_serving(now_ms)
        return self._log.log_start_offset, self.core.high_watermark

    def offset_for_timestamp(self, timestamp_ms: int) -> int | None:
        held = self._log.holds_descriptors
        offset = self._log.offset_for_timestamp(timestamp_ms, end_offset=self.core.high_watermark)
        self._after_read(held)
        return offset

    def timestamp_at(self, offset: int) -> int | None:
        """The timestamp a group at ``offset`` lags from: the first of the batch holding the first
        record at or after it below the HW (``Log.timestamp_at``); None: none is left below the HW."""
        held = self._log.holds_descriptors
        timestamp_ms = self._log.timestamp_at(offset, end_offset=self.core.high_watermark)
        self._after_read(held)
        return timestamp_ms

    def flush_now(self) -> None:
        """fsync the log to its end on this thread (a closed VP before it is sealed: a sealed VP is
        never fed again, so a power loss must not cut what it holds, as it may cut a one-replica
        VP's unflushed tail while the feed can still refill it)."""
        if self._log.flushed_offset < self._log.log_end_offset:
            self._log.flush()
            self._execute(self._report_flushed())

    # --- housekeeping -------------------------------------------------------------------

    def housekeep(self, now_ms: int, retention_due: bool) -> None:
        """Flush by the log's policy, checkpoint a changed HW, apply retention when due: the three
        steps of housekeeping in a row, on this thread."""
        chores = self.start_housekeeping(now_ms)
        chores.run()
        self.finish_housekeeping(chores, now_ms, retention_due)

    def start_housekeeping(self, now_ms: int) -> VpChores:
        """What housekeeping must do on the disk now, to ``run`` on a worker thread."""
        return VpChores(self._storage, self._log.start_flush(now_ms), self.core.high_watermark)

    def finish_housekeeping(self, chores: VpChores, now_ms: int, retention_due: bool) -> None:
        """Take in what ``chores`` made durable, then apply retention when due; raises what the
        chores met (after taking in what they did). Call it only while this replica is open: a
        closed one must not put its checkpoint in place."""
        self._take_in(chores)
        if retention_due:
            self.apply_retention(now_ms)
        if chores.flush is None and chores.staged is None and not self._durability_pending:
            self._log.release_descriptors()  # a pass with nothing to do: the VP is idle

    def start_owed_flush(self, now_ms: int) -> VpChores | None:
        """The fsync this replica owes (``owe_flush``), to ``run`` on a worker thread and hand to
        ``finish_owed_flush``; None if it owes none any more (flushed meanwhile, or no longer a lone
        leader: its log then flushes by policy). It checkpoints no HW: housekeeping does."""
        if not self.core.flush_needed:
            return None
        flush = self._log.start_flush(now_ms, force=True)
        return None if flush is None else VpChores(self._storage, flush, None)

    def finish_owed_flush(self, chores: VpChores) -> None:
        """Take in what an owed flush made durable, so the core's HW follows it; raises what the
        fsync met. Call it only while this replica is open."""
        self._take_in(chores)

    def _take_in(self, chores: VpChores) -> None:
        """Take in what ``chores`` made durable, then raise what they met."""
        if chores.flush is not None:
            self._log.finish_flush(chores.flush)
        if chores.staged is not None:
            self._storage.commit_high_watermark(chores.staged)
        self._execute(self._report_flushed())
        if chores.error is not None:
            raise chores.error

    def apply_retention(self, now_ms: int) -> None:
        """Delete the whole segments below the HW that retention allows now."""
        if self._log.apply_retention(now_ms, fed_floor=self.core.high_watermark).segments_deleted:
            self.core.log_start_moved(self._log.log_start_offset)

    @property
    def housekeeping_pending(self) -> bool:
        """Whether housekeeping still has work here with nothing new happening: data waiting for the
        flush by time, a HW not checkpointed yet, or descriptors to close once idle (the module
        docstring). A read node visits the VP until it is False."""
        return self._durability_pending or self._log.holds_descriptors

    @property
    def _durability_pending(self) -> bool:
        """Data waiting for the flush by time, or a HW not checkpointed yet."""
        return self._log.flush_by_time_pending or not self._storage.high_watermark_saved(self.core.high_watermark)

    def retention_due_ms(self) -> int | None:
        """When retention may next delete a segment by age alone (``Log.retention_due_ms``)."""
        return self._log.retention_due_ms()

    def describe(self, now_ms: int) -> dict:
        return {**self.core.describe(now_ms), "log_start_offset": self._log.log_start_offset,
                "newest_timestamp_ms": self._log.newest_timestamp_ms,
                "fault": self.fault.fault.describe(), "fetch_requests": self.fetch_requests,
                "fetch_bytes": self.fetch_bytes}

    def close(self, delete_data: bool = False) -> None:
        self.closed = True
        self._storage.close(delete_data)

    def discard(self) -> Path | None:
        """Close, its data to be deleted: the directory moved aside, to remove (``ReplicaStorage.discard``)."""
        self.closed = True
        return self._storage.discard()
