"""The segmented log of one partition replica: ordered segments in one directory.

On disk (``directory``):

    <20-digit base offset>.log / .index / .timeindex   one ``Segment`` each (see segment.py)
    recovery-point                                     checkpoint, one ASCII line:
                                                       ``1 <offset> clean|dirty``

Segments are contiguous: each starts at the next offset of the one before, and only the
last ("active") one is appended to. A roll fsyncs the segment it closes before creating the
next, so only the active segment holds unflushed data, except in a log flushing in the
background (below): there a roll leaves the closed segment, and the directory entry of the new
one, to the next flush, which fsyncs every segment holding data above the recovery point. The
checkpoint (``log.recovery_point``) records an offset ``R`` such that every segment ending at or
below ``R`` was fsynced with its indexes, and whether the log was closed cleanly. It is replaced
atomically (tmp + fsync + rename) and only written when it changes what recovery does: when a
segment becomes fully durable, on truncation (lowered first), on open and on close.

A new log (``open`` created its directory) fsyncs its directory's entry in the parent
directory, without which a power loss can take the whole directory however often its files
were fsynced; a log flushing in the background leaves that, the entry of its first segment and
its first checkpoint (a missing checkpoint reads as the "dirty at 0" it would hold) to its first
flush, so that hosting a thousand new VPs waits for no fsync on the loop. Until a flush nothing
of a log is durable anyway.

Recovery on ``open``:
  * stray ``*.tmp`` files and indexes without a ``.log`` are removed;
  * after a clean close every segment is trusted; otherwise segments ending at or below
    ``R`` are trusted and the others (at least the last) are scanned with CRC checks;
  * a trusted segment keeps its indexes if they pass sanity checks, else it is scanned;
  * a scanned segment is cut at its first invalid, torn or non-contiguous batch, fsynced,
    and its indexes rebuilt; a segment not contiguous with the one before it is deleted
    with every later one. No corrupt byte is kept, and nothing after it;
  * the checkpoint is rewritten as ``dirty`` so a crash from now on is recovered again.

Every file fsync goes through ``fsync_points``, which chaos runs use to cut the files
back to their last fsync (a power loss); appends first ask the node's ``LogDirBudget``
(``log_dir_bytes_max``), which refuses them as a full disk would.

Flushing by time (``flush_interval_ms``) happens in ``append`` and ``maybe_flush``, on the
caller's thread. A log opened with ``flushes_in_background`` leaves it to its owner instead,
which calls ``start_flush``, runs the ``PendingFlush`` on a worker thread and hands it back to
``finish_flush`` (``log.pending_flush``), and its rolls fsync nothing: an event loop then never
waits for the disk to append. Flushing by message count (``flush_interval_messages``),
``flush_interval_ms=0`` (an fsync in every append), ``flush`` and ``close`` stay on the
caller's thread.

Descriptors. Segments open their files when first used (``segment.py``); ``release_descriptors``
closes every one the log holds, without fsyncing or changing anything else, so that an owner of
many logs (a read node's VPs) holds none for a log that went idle.

Time never comes from a clock: every call that needs it takes ``now_ms``. The log is used
from one asyncio thread and is not thread-safe.
"""

from __future__ import annotations

import bisect
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from mafka4.batch_frame import BatchHeader, check_batch, check_single_batch, iter_batches
from mafka4.errors import CorruptRecord, OffsetOutOfRange
from mafka4.limits.servers import LogConfig
from mafka4.log.fsync_points import record_directory, record_synced
from mafka4.log.log_dir_budget import LogDirBudget
from mafka4.log.offset_index import U32_MAX
from mafka4.log.pending_flush import PendingFlush
from mafka4.log.recovery_point import (RecoveryPoint, commit_recovery_point, fsync_directory, read_recovery_point,
                                       write_recovery_point)
from mafka4.log.segment import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, Segment, segment_path

_SEGMENT_FILE = re.compile(r"^(\d{20})(\.log|\.index|\.timeindex)$")
# Our tmp files: an index's or a checkpoint's (``recovery_point``: ``recovery-point.tmp``, or
# ``recovery-point.flush.tmp`` staged by a background flush).
_OWN_TMP_FILE = re.compile(r"^(\d{20}\.(log|index|timeindex)|recovery-point(\.flush)?)\.tmp$")


def _as_path(directory: str | os.PathLike) -> Path:
    """``directory`` as a ``Path``, the one given if it is one: each costs about 300 bytes, and a
    read node holds a log per VP."""
    return directory if isinstance(directory, Path) else Path(directory)


def clean_directory(directory: Path) -> list[int]:
    """Remove our stray tmp files and orphan indexes; return the sorted base offsets of .log files."""
    names = os.listdir(directory)
    bases = {int(m.group(1)) for m in map(_SEGMENT_FILE.match, names) if m and m.group(2) == LOG_SUFFIX}
    for name in names:
        match = _SEGMENT_FILE.match(name)
        if _OWN_TMP_FILE.match(name) or (match and int(match.group(1)) not in bases):
            (directory / name).unlink()
    return sorted(bases)


@dataclass(frozen=True, slots=True)
class RetentionResult:
    """What one ``Log.apply_retention`` pass deleted."""

    segments_deleted: int
    # Offsets [first, end) deleted at or above the fed floor, once held past unfed_hold_ms_max;
    # None if none. One range: deleted segments are the oldest and contiguous, and each one
    # after the first unfed one lies wholly above the floor.
    unfed_deleted: tuple[int, int] | None = None


class Log:
    """Ordered segments of one replica directory; see the module docstring."""

    __slots__ = ("_directory", "_config", "_budget", "_flushes_in_background", "_truncations", "_segments",
                 "_checkpoint", "_recovery_point", "_unflushed_messages", "_last_flush_ms", "_now_ms", "_closed",
                 "_parent_unsynced", "flushes_total")  # no per-instance dict: a read node holds one per VP, 100,000 of them

    def __init__(self, directory: Path, config: LogConfig, now_ms: int, budget: LogDirBudget | None = None,
                 flushes_in_background: bool = False):
        """Use ``Log.open``."""
        self._directory = directory
        self._config = config
        self._budget = budget
        self._flushes_in_background = flushes_in_background
        self._truncations = 0  # a flush begun before a truncation must not vouch for what follows it
        self._segments: list[Segment] = []
        self._checkpoint = RecoveryPoint(0, False)
        self._recovery_point = 0  # everything below this offset is fsynced
        self._unflushed_messages = 0
        self._last_flush_ms = now_ms
        self._now_ms = now_ms  # latest time a caller told us; flush() takes none
        self._closed = False
        # A new directory whose own entry in its parent is not fsynced yet (see the module docstring).
        self._parent_unsynced = False
        self.flushes_total = 0  # fsyncs of .log data, for tests of the flush policy

    @classmethod
    def open(cls, directory: str | os.PathLike, config: LogConfig, now_ms: int,
             budget: LogDirBudget | None = None, flushes_in_background: bool = False) -> "Log":
        """Open (creating if missing) and recover the log in ``directory``; appends ask ``budget``
        (the node's ``log_dir_bytes_max``) first. With ``flushes_in_background`` the caller flushes
        by time through ``start_flush`` and ``finish_flush`` (see the module docstring)."""
        path = _as_path(directory)
        created = not path.is_dir()
        path.mkdir(parents=True, exist_ok=True)
        log = cls(path, config, now_ms, budget, flushes_in_background)
        log._load_segments(clean_directory(path), read_recovery_point(path))
        log._recovery_point = log.log_end_offset
        if not created:
            log._write_checkpoint(RecoveryPoint(log.log_end_offset, False))
        elif flushes_in_background:
            log._parent_unsynced = True
        else:
            fsync_directory(path.parent)
        record_directory(path)  # what recovery left is what survived (log.fsync_points)
        return log

    def _load_segments(self, bases: list[int], checkpoint: RecoveryPoint) -> None:
        for index, base_offset in enumerate(bases):
            if self._segments and base_offset != self._segments[-1].next_offset:
                self._delete_files(bases[index:])
                break
            is_last = index == len(bases) - 1
            trusted = checkpoint.clean_shutdown or (not is_last and bases[index + 1] <= checkpoint.offset)
            segment, scanned = Segment.open_existing(self._directory, base_offset, self._config, trusted)
            self.flushes_total += scanned
            self._segments.append(segment)
        if self._segments:
            self._segments[-1].activate()
        else:
            self._segments.append(Segment.create(self._directory, 0, self._config))
            if not self._flushes_in_background:  # else the first flush does (``_directory_unsynced``)
                fsync_directory(self._directory)

    def _delete_files(self, bases: list[int]) -> None:
        # Newest first, so that a crash in between leaves a contiguous log.
        for base_offset in reversed(bases):
            for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX):
                segment_path(self._directory, base_offset, suffix).unlink(missing_ok=True)
        fsync_directory(self._directory)

    # --- state ---------------------------------------------------------------------------

    @property
    def directory(self) -> Path:
        return self._directory

    @property
    def log_start_offset(self) -> int:
        return self._segments[0].base_offset

    @property
    def log_end_offset(self) -> int:
        return self._segments[-1].next_offset

    @property
    def flushed_offset(self) -> int:
        """Every batch below this offset is fsynced: what a power loss cannot take (the
        recovery point in memory; a just-opened log is durable to its end)."""
        return self._recovery_point

    @property
    def size_bytes(self) -> int:
        return sum(segment.size_bytes for segment in self._segments)

    @property
    def segment_count(self) -> int:
        return len(self._segments)

    @property
    def newest_timestamp_ms(self) -> int | None:
        """The largest record timestamp in the log (None: it holds no record)."""
        stamps = [segment.max_timestamp_ms for segment in self._segments if segment.max_timestamp_ms is not None]
        return max(stamps, default=None)

    @property
    def _active(self) -> Segment:
        return self._segments[-1]

    def _segment_index(self, offset: int) -> int:
        """Index of the segment whose range holds ``offset`` (the last one for the log end)."""
        index = bisect.bisect_right(self._segments, offset, key=lambda segment: segment.base_offset) - 1
        assert index >= 0, f"offset {offset} is below the log start {self.log_start_offset}"
        return index

    def _check_open(self) -> None:
        assert not self._closed, f"log {self._directory} is closed"

    # --- appending -----------------------------------------------------------------------

    def append(self, batch: bytes | bytearray, now_ms: int, check_crc: bool = True) -> BatchHeader:
        """Append one CRC-valid batch stamped with base offset ``log_end_offset``.

        ``check_crc=False`` is for a caller that checked the CRC itself (a leader on receipt, a VP
        leader that just encoded the batch): a second check would be another pass over every byte
        (about 20 µs per MiB here with ``checksum.crc32``; 0.37 ms with zlib's)."""
        self._check_open()
        header = check_single_batch(batch, check_crc)
        self._check_follows(header, self.log_end_offset)
        self._append_batches(batch, [(0, header)], now_ms)
        return header

    def append_batches(self, data: bytes, now_ms: int) -> list[BatchHeader]:
        """Append concatenated batches (follower path): all of them, or none if one is bad."""
        self._check_open()
        batches: list[tuple[int, BatchHeader]] = []
        expected, end = self.log_end_offset, 0
        for position, header in iter_batches(data):
            self._check_follows(header, expected)
            batches.append((position, header))
            expected, end = header.next_offset, position + header.size_bytes
        if end != len(data):
            check_batch(data, end)  # raises CorruptRecord saying what is wrong
            raise CorruptRecord(f"bytes {end}..{len(data)} of the appended data are not a whole batch")
        if batches:
            self._append_batches(data, batches, now_ms)
        return [header for _, header in batches]

    def _check_follows(self, header: BatchHeader, expected_offset: int) -> None:
        if header.base_offset != expected_offset:
            raise CorruptRecord(
                f"batch has base offset {header.base_offset} but log {self._directory} expects "
                f"{expected_offset}: stamp batches with the log end offset and append them in order"
            )

    def _append_batches(self, data: bytes | bytearray, batches: list[tuple[int, BatchHeader]], now_ms: int) -> None:
        """Write validated batches, one write per segment they land in, then apply the flush policy.

        A node past its ``log_dir_bytes_max`` refuses the whole append before anything is written
        (``OSError`` ENOSPC, as a full disk): no batch of it lands, in any segment."""
        self._now_ms = now_ms
        if self._budget is not None:
            self._budget.reserve(len(data), now_ms)
        if len(batches) == 1:  # a leader's append (hundreds per feed round on a read node): no slicing
            position, header = batches[0]
            assert position == 0 and header.size_bytes == len(data), (position, header.size_bytes, len(data))
            if self._must_roll(0, [], header):
                self._roll(header.base_offset)
            self._active.append(data, batches)
            self._unflushed_messages += header.count
            self._apply_flush_policy(now_ms)
            return
        with memoryview(data) as view:
            run_start, run = 0, []
            for position, header in batches:
                if self._must_roll(position - run_start, run, header):
                    if run:
                        self._append_run(view[run_start:position], run)
                    self._roll(header.base_offset)
                    run_start, run = position, []
                run.append((position - run_start, header))
            last_position, last = batches[-1]
            self._append_run(view[run_start:last_position + last.size_bytes], run)
        self._apply_flush_policy(now_ms)

    def _append_run(self, data: memoryview, run: list[tuple[int, BatchHeader]]) -> None:
        self._active.append(data, run)
        self._unflushed_messages += sum(header.count for _, header in run)

    def _must_roll(self, pending_bytes: int, run: list[tuple[int, BatchHeader]], header: BatchHeader) -> bool:
        """Whether ``header``'s batch must start a new segment, given ``run`` not yet written."""
        active = self._active
        segment_bytes = active.size_bytes + pending_bytes
        if segment_bytes == 0:
            return False  # an empty segment takes any batch, even one above segment_bytes_max
        if segment_bytes + header.size_bytes > self._config.segment_bytes_max:
            return True
        if header.base_offset - active.base_offset > U32_MAX:
            return True  # the relative offset would not fit the index
        # Age is measured in record time, as Kafka does: comparing with now_ms instead would
        # roll a segment per batch while old data is replayed with its original timestamps.
        first_ms = active.first_batch_max_timestamp_ms if active.size_bytes else run[0][1].max_timestamp_ms
        return header.max_timestamp_ms - first_ms > self._config.segment_age_ms_max

    def _roll(self, base_offset: int) -> None:
        assert base_offset == self.log_end_offset
        if self._flushes_in_background:
            # The closed segment and the new one's directory entry wait for the next flush (an
            # fsync here held the event loop for 20 ms and more); recovery scans every segment
            # above the checkpoint and drops a tail that is not contiguous.
            self._active.deactivate()
            self._segments.append(Segment.create(self._directory, base_offset, self._config))
            return
        self.flush()
        self._active.deactivate()
        self._segments.append(Segment.create(self._directory, base_offset, self._config))
        fsync_directory(self._directory)
        self._maybe_write_checkpoint()

    @property
    def holds_descriptors(self) -> bool:
        return any(segment.holds_descriptors for segment in self._segments)

    def release_descriptors(self) -> None:
        """Close every file descriptor the log holds (see the module docstring); no fsync: what
        is durable stays so, and a pending background flush opens its files by path."""
        self._check_open()
        for segment in self._segments:
            segment.release()

    # --- durability ----------------------------------------------------------------------

    def _apply_flush_policy(self, now_ms: int) -> None:
        messages_max = self._config.flush_interval_messages
        interval_ms = self._config.flush_interval_ms
        if messages_max is not None and self._unflushed_messages >= messages_max:
            self.flush()
        elif interval_ms is not None and now_ms - self._last_flush_ms >= interval_ms:
            # 0 asks for an fsync before each append returns, which no background flush gives.
            if interval_ms == 0 or not self._flushes_in_background:
                self.flush()

    def flush(self) -> None:
        """fsync every segment holding data above the recovery point and advance it to the log
        end; the checkpoint file follows when a whole segment became durable."""
        self._check_open()
        if self._recovery_point == self.log_end_offset:
            return
        for segment in self._unflushed_segments():
            segment.flush()
        if self._directory_unsynced():
            fsync_directory(self._directory)
        if self._parent_unsynced:
            fsync_directory(self._directory.parent)
            self._parent_unsynced = False
        self.flushes_total += 1
        self._recovery_point = self.log_end_offset
        self._unflushed_messages = 0
        self._last_flush_ms = self._now_ms
        self._maybe_write_checkpoint()

    def maybe_flush(self, now_ms: int) -> bool:
        """Flush if ``flush_interval_ms`` passed since the last flush and data is unflushed."""
        if not self._flush_due(now_ms):
            return False
        self.flush()
        return True

    def _flush_due(self, now_ms: int) -> bool:
        self._check_open()
        self._now_ms = now_ms
        interval_ms = self._config.flush_interval_ms
        if interval_ms is None or self._recovery_point == self.log_end_offset:
            return False
        return now_ms - self._last_flush_ms >= interval_ms

    @property
    def flush_by_time_pending(self) -> bool:
        """Whether data waits for a flush by ``flush_interval_ms`` (``maybe_flush``, ``start_flush``):
        an owner that flushes only logs that changed keeps visiting this log until it is False."""
        return self._config.flush_interval_ms is not None and self._recovery_point < self.log_end_offset

    def _unflushed_segments(self) -> list[Segment]:
        """The segments holding data above the recovery point: the active one, and in a log
        flushing in the background those a roll closed since the last flush."""
        return self._segments[self._first_unflushed_index():]

    def _first_unflushed_index(self) -> int:
        return self._segment_index(max(self._recovery_point, self.log_start_offset))

    def _directory_unsynced(self) -> bool:
        """Whether the active segment's directory entry may not be durable: in a log flushing in
        the background a roll does not fsync the directory, so a flush must before the recovery
        point passes into the new segment (a spare fsync when the segment came otherwise)."""
        return self._flushes_in_background and self._recovery_point <= self._active.base_offset

    def start_flush(self, now_ms: int, force: bool = False) -> PendingFlush | None:
        """``maybe_flush`` in three steps: if a flush is due, what it will make durable, to ``run``
        on a worker thread and then pass to ``finish_flush``; None if none is due. With ``force``
        a flush is due whenever data is unflushed, whatever ``flush_interval_ms`` says (a lone VP
        leader's fsync, ``virtual.housekeeping``). Start the next one only after finishing this
        one: two in flight would stage the same checkpoint file."""
        if not self._flush_due(now_ms) and not (force and self._recovery_point < self.log_end_offset):
            return None
        self._last_flush_ms = now_ms
        end_offset = self.log_end_offset
        raises_checkpoint = self._checkpoint.offset < self._active.base_offset
        return PendingFlush(end_offset, self._unflushed_messages, self._truncations,
                            tuple(file for segment in self._unflushed_segments() for file in segment.files_to_sync()),
                            self._directory, sync_directory=self._directory_unsynced(),
                            sync_parent=self._parent_unsynced,
                            checkpoint=RecoveryPoint(end_offset, False) if raises_checkpoint else None)

    def finish_flush(self, pending: PendingFlush) -> bool:
        """Advance the recovery point to what ``pending`` made durable and put its checkpoint in
        place, if it ran to the end and the log was not truncated, closed or flushed as far
        meanwhile; True if it moved."""
        if self._closed:
            return False  # leave the staged file alone: another log may have opened the directory
        if (not pending.synced or pending.truncations != self._truncations
                or pending.end_offset <= self._recovery_point):
            if pending.staged is not None:
                pending.staged.unlink(missing_ok=True)
            return False
        for file in pending.files:
            record_synced(file.path, file.inode, file.size)
        if pending.sync_parent:
            self._parent_unsynced = False
        self.flushes_total += 1
        self._recovery_point = pending.end_offset
        self._unflushed_messages = max(0, self._unflushed_messages - pending.messages)
        if pending.staged is not None:
            commit_recovery_point(pending.staged)
            self._checkpoint = pending.checkpoint
        return True

    def _maybe_write_checkpoint(self) -> None:
        # The segment holding the checkpoint offset is always rescanned after a crash, so the
        # checkpoint only needs to move once a whole segment has become durable.
        if self._checkpoint.offset < self._active.base_offset <= self._recovery_point:
            self._write_checkpoint(RecoveryPoint(self._recovery_point, False))

    def _write_checkpoint(self, point: RecoveryPoint) -> None:
        write_recovery_point(self._directory, point)
        self._checkpoint = point

    def close(self) -> None:
        """Flush, mark the shutdown clean (the next open skips the tail scan), close files."""
        if self._closed:
            return
        self.flush()
        self._write_checkpoint(RecoveryPoint(self.log_end_offset, True))
        for segment in self._segments:
            segment.close()
        self._closed = True

    def close_unflushed(self) -> None:
        """Close the files with no fsync and no clean-shutdown mark: for a log whose directory is
        deleted next (a deleted topic's), where an fsync per file would only delay the deletion."""
        if self._closed:
            return
        for segment in self._segments:
            segment.close()
        self._closed = True

    # --- reading -------------------------------------------------------------------------

    def read(self, offset: int, bytes_max: int, end_offset: int | None = None) -> bytes:
        """Whole batches from the one holding ``offset``, none ending past ``end_offset``
        (default: the log end), at most ``bytes_max`` bytes but at least one batch if any.

        Every batch returned passed its CRC check. A damaged batch is never returned: the read
        stops before it, and a read of the batch itself raises ``CorruptRecord`` naming the
        file and byte position (``Segment.read``)."""
        self._check_open()
        if not self.log_start_offset <= offset <= self.log_end_offset:
            raise OffsetOutOfRange(
                f"offset {offset} is out of range: log {self._directory} holds offsets "
                f"[{self.log_start_offset}, {self.log_end_offset}]; fetch from within that range"
            )
        end = self.log_end_offset if end_offset is None else min(end_offset, self.log_end_offset)
        if offset >= end:
            return b""
        index = self._segment_index(offset)
        position = self._segments[index].locate(offset)[0]
        chunks: list[bytes] = []
        bytes_left = bytes_max
        for segment in self._segments[index:]:
            try:
                data, reached_end = segment.read(position, bytes_left, end, at_least_one=not chunks)
            except CorruptRecord:
                if not chunks:
                    raise
                break  # serve what precedes the damage; a read starting there raises
            if data:
                chunks.append(data)
                bytes_left -= len(data)
            if not reached_end or bytes_left <= 0:
                break
            position = 0
        return b"".join(chunks)

    def offset_for_timestamp(self, timestamp_ms: int, end_offset: int | None = None) -> int | None:
        """Base offset of the first batch whose max timestamp is >= ``timestamp_ms``, or None; None
        as well if that batch starts at or past ``end_offset`` (a reader's bound, as in ``read``)."""
        self._check_open()
        for segment in self._segments:
            if segment.max_timestamp_ms is not None and segment.max_timestamp_ms >= timestamp_ms:
                offset = segment.offset_for_timestamp(timestamp_ms)
                return None if offset is None or (end_offset is not None and offset >= end_offset) else offset
        return None

    def timestamp_at(self, offset: int, end_offset: int | None = None) -> int | None:
        """The first timestamp of the batch holding the first record at or after ``offset`` (the log
        start if ``offset`` is below it), read from its header; None if there is no such record
        below ``end_offset`` (a reader's bound, as in ``read``; default: the log end). A group's lag
        in time counts from it (``metrics.group_lag``)."""
        self._check_open()
        start = max(offset, self.log_start_offset)
        end = self.log_end_offset if end_offset is None else min(end_offset, self.log_end_offset)
        if start >= end:
            return None
        return self._segments[self._segment_index(start)].locate(start)[1].first_timestamp_ms

    def batch_headers(self, from_offset: int = 0) -> Iterator[BatchHeader]:
        """Headers of every batch from the one holding ``from_offset``. Do not modify the
        log while iterating."""
        self._check_open()
        start = max(from_offset, self.log_start_offset)
        if start >= self.log_end_offset:
            return
        for segment in self._segments[self._segment_index(start):]:
            yield from segment.headers(start)

    # --- removal -------------------------------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        """Drop every batch at ``offset`` and after (a batch boundary); durable on return."""
        self._check_open()
        assert self.log_start_offset <= offset <= self.log_end_offset, (
            f"truncate_to({offset}) outside [{self.log_start_offset}, {self.log_end_offset}]")
        if offset == self.log_end_offset:
            return
        index = self._segment_index(offset)
        header = self._segments[index].locate(offset)[1]
        assert header.base_offset == offset, f"truncate_to({offset}) is inside the batch at {header.base_offset}"
        if self._checkpoint.offset > offset:
            # Lower the checkpoint first: a crash must not trust what is being cut.
            self._write_checkpoint(RecoveryPoint(offset, False))
        # The recovery point moves to ``offset``: segments below it that a roll closed unflushed
        # (a log flushing in the background) are fsynced first.
        for segment in self._segments[self._first_unflushed_index():index]:
            segment.flush()
        doomed = self._segments[index + 1:]
        if doomed:
            self._active.deactivate()
            for segment in reversed(doomed):
                segment.delete()
            del self._segments[index + 1:]
            self._active.activate()
        if doomed or self._directory_unsynced():
            fsync_directory(self._directory)
        self._active.truncate_to(offset)
        self.flushes_total += 1
        self._truncations += 1
        self._recovery_point = offset
        self._unflushed_messages = 0

    def apply_retention(self, now_ms: int, fed_floor: int | None = None) -> RetentionResult:
        """Delete the oldest segments (never the active one) that passed ``retention_ms``, or
        while the log is larger than ``retention_bytes``.

        With ``fed_floor`` (the smallest offset a reader still needs) a segment holding an
        offset at or above it is kept until ``_past_unfed_hold``; being oldest, it keeps every
        segment after it too, so the log always starts at a segment boundary and no offset is
        deleted before an older one."""
        self._check_open()
        self._now_ms = now_ms
        retention_ms, retention_bytes = self._config.retention_ms, self._config.retention_bytes
        size_bytes = self.size_bytes
        deleted = 0
        unfed_first: int | None = None
        while len(self._segments) > 1:
            oldest = self._segments[0]
            expired = (retention_ms is not None and oldest.max_timestamp_ms is not None
                       and now_ms - oldest.max_timestamp_ms > retention_ms)
            oversized = retention_bytes is not None and size_bytes > retention_bytes
            if not (expired or oversized):
                break
            unfed = fed_floor is not None and max(oldest.base_offset, fed_floor) < oldest.next_offset
            if unfed and not self._past_unfed_hold(oldest, now_ms):
                break
            if unfed and unfed_first is None:
                unfed_first = max(oldest.base_offset, fed_floor)
            size_bytes -= oldest.size_bytes
            oldest.delete()
            del self._segments[0]
            deleted += 1
        if deleted:
            fsync_directory(self._directory)
        unfed_deleted = None if unfed_first is None else (unfed_first, self.log_start_offset)
        return RetentionResult(deleted, unfed_deleted)

    def retention_due_ms(self) -> int | None:
        """The earliest time at which ``apply_retention`` may delete a segment by age, with nothing
        appended meanwhile: one past the oldest segment's ``retention_ms`` (None: no segment but the
        active one, which is never deleted, or no time bound). Size-based retention and a moving
        fed floor change only with appends and the floor: their callers know when those happen, so
        an owner of many logs checks the idle ones only at this time (``virtual.visit_schedule``)."""
        retention_ms = self._config.retention_ms
        if retention_ms is None or len(self._segments) < 2 or self._segments[0].max_timestamp_ms is None:
            return None
        return self._segments[0].max_timestamp_ms + retention_ms + 1

    def _past_unfed_hold(self, segment: Segment, now_ms: int) -> bool:
        """Whether an unfed ``segment`` has been held ``unfed_hold_ms_max`` past its retention."""
        hold_ms = self._config.unfed_hold_ms_max
        if hold_ms is None or segment.max_timestamp_ms is None:
            return False
        return now_ms - segment.max_timestamp_ms > (self._config.retention_ms or 0) + hold_ms
