"""One log segment: a ``.log`` file of whole record batches plus its two indexes.

Files in the replica directory, named by the segment's base offset zero-padded to 20 digits:

    00000000000000000000.log        concatenated batches (``mafka4.batch_frame`` format); the truth
    00000000000000000000.index      OffsetIndex: relative offset -> byte position
    00000000000000000000.timeindex  TimeIndex: running max timestamp -> relative offset

Invariants: the batches of a ``.log`` are contiguous in offsets and the first starts at the
segment's base offset; byte positions and relative offsets fit in uint32 (``Log`` rolls
before they would not). Batch ``B`` at position ``p`` gets one entry in each index when at
least ``index_interval_bytes`` of log were written since the last batch that got one (the
first batch never does). That rule depends only on the ``.log`` bytes, so indexes rebuilt
after a crash are byte-identical to the ones written while appending.

After a crash (``open_existing``): a segment the caller trusts (fsynced before the crash)
keeps its indexes if they pass cheap checks (whole entries, monotonic, paired, inside the
file) and the batches after the last entry walk cleanly to the end of the file without a
missing entry. Any other segment, or a trusted one failing those checks, is scanned batch
by batch with CRC checks; the file is cut at the first invalid, torn or non-contiguous
batch, fsynced, and both indexes are rebuilt from the scan.

Reads (``read``) check the CRC and framing of every batch they return, because recovery
scans only what the recovery point does not vouch for: bit rot in a trusted segment must
be caught when it is read. A damaged batch is never returned: a read returns the whole
batches before it, and a read starting at it raises ``CorruptRecord`` naming the file and
byte position. As in Kafka, the CRC does not cover the base offset and leader epoch, which
the leader stamps; a damaged base offset shows only when batches stop being contiguous.

Descriptors on demand. A segment opens its ``.log`` for reading when it is first read, for
writing when it is first appended to (only the active, last, segment of a log is), and its
indexes when they have entries to write; ``release`` closes them all, and the next use opens
them again. So a log that is idle holds no descriptor once its owner released it: a read node
hosting 10,000 VPs held 40,000 (four per idle VP), over this machine's open-file limit of 20,000
(``benchmarks/vp_memory_micro.py``). Not thread-safe.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Iterator

from mafka4.batch_frame import HEADER_BYTES, BatchHeader, check_batch, crc_matches, iter_batches, read_header
from mafka4.errors import CorruptRecord
from mafka4.limits import SEGMENT_SCAN_CHUNK_BYTES, KiB, MiB
from mafka4.limits.servers import LogConfig
from mafka4.log.fsync_points import create, fsync
from mafka4.log.offset_index import U32_MAX, OffsetIndex, OffsetPosition
from mafka4.log.pending_flush import FileToSync
from mafka4.log.time_index import TimeIndex

NAME_DIGITS = 20
LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"


def segment_path(directory: Path, base_offset: int, suffix: str) -> Path:
    return directory / f"{base_offset:0{NAME_DIGITS}d}{suffix}"


def iter_headers(fd: int, position: int, end: int, chunk_bytes: int) -> Iterator[tuple[int, BatchHeader]]:
    """Yield ``(position, header)`` of each batch in ``[position, end)`` without CRC checks.

    Raises ``CorruptRecord`` when the framing is broken (a header that does not parse, a
    batch running past ``end``). Reads ``chunk_bytes`` at a time and skips over the body of
    batches larger than that.
    """
    buffer = b""
    buffer_start = position
    while position < end:
        at = position - buffer_start
        if at + HEADER_BYTES > len(buffer):
            buffer = os.pread(fd, min(max(chunk_bytes, HEADER_BYTES), end - position), position)
            buffer_start, at = position, 0
        header = read_header(buffer, at)
        if position + header.size_bytes > end:
            raise CorruptRecord(f"batch at byte {position} runs {position + header.size_bytes - end} bytes past the end")
        yield position, header
        position += header.size_bytes


def scan_valid_batches(fd: int, end: int, chunk_bytes: int) -> Iterator[tuple[int, BatchHeader]]:
    """Yield ``(position, header)`` of each CRC-valid batch from byte 0; stop at the first bad one."""
    position = 0
    while position < end:
        buffer = os.pread(fd, min(chunk_bytes, end - position), position)
        consumed = 0
        for at, header in iter_batches(buffer):
            yield position + at, header
            consumed = at + header.size_bytes
        if consumed == 0:
            # Either the batch is invalid, or it is larger than a chunk: read it whole.
            try:
                header = read_header(buffer)
            except CorruptRecord:
                return
            if header.size_bytes <= len(buffer) or position + header.size_bytes > end:
                return
            try:
                check_batch(os.pread(fd, header.size_bytes, position))
            except CorruptRecord:
                return
            yield position, header
            consumed = header.size_bytes
        position += consumed


class Segment:
    """A ``.log`` file and its indexes; see the module docstring for the format."""

    __slots__ = ("base_offset", "_log_location", "_config", "_walk_chunk_bytes", "_read_fd", "_write_fd", "_active",
                 "_closed", "size_bytes", "offset_index", "time_index", "next_offset", "max_timestamp_ms",
                 "_bytes_since_index_entry", "_first_batch_max_timestamp_ms")  # no dict, paths as str: see IndexFile

    def __init__(self, directory: Path, base_offset: int, config: LogConfig):
        self.base_offset = base_offset
        self._log_location = os.fspath(segment_path(directory, base_offset, LOG_SUFFIX))  # a str: see IndexFile
        self._config = config
        self._walk_chunk_bytes = min(max(2 * config.index_interval_bytes, 16 * KiB), 1 * MiB)
        self._read_fd: int | None = None  # opened by the first read (``_reader``)
        self._write_fd: int | None = None  # opened by the first append while active (``_writer``)
        self._active = False
        self._closed = False
        self.size_bytes = os.stat(self._log_location).st_size
        self._reset_state()

    def _reset_state(self) -> None:
        """Forget everything derived from the .log: empty in-memory indexes, no batches."""
        # Named from the .log's name as str: a Path parsed per VP interns its directory's name
        # and grows the interpreter's table of interned strings by about 1 KB a VP.
        stem = self._log_location[:-len(LOG_SUFFIX)]
        self.offset_index = OffsetIndex(stem + INDEX_SUFFIX)
        self.time_index = TimeIndex(stem + TIME_INDEX_SUFFIX)
        self.next_offset = self.base_offset
        self.max_timestamp_ms: int | None = None
        self._bytes_since_index_entry = 0
        self._first_batch_max_timestamp_ms: int | None = None

    @property
    def log_path(self) -> Path:
        return Path(self._log_location)

    # --- descriptors ---------------------------------------------------------------------

    def _reader(self) -> int:
        """The ``.log`` open for reading (opened now if it is not)."""
        if self._read_fd is None:
            assert not self._closed, f"{self.log_path} is closed"
            self._read_fd = os.open(self._log_location, os.O_RDONLY)
        return self._read_fd

    def _writer(self) -> int:
        """The ``.log`` open for appending (opened now if it is not); only the active segment's."""
        assert self._active, f"{self.log_path} is not the active segment"
        if self._write_fd is None:
            self._write_fd = os.open(self._log_location, os.O_WRONLY | os.O_APPEND)
        return self._write_fd

    @property
    def holds_descriptors(self) -> bool:
        return (self._read_fd is not None or self._write_fd is not None
                or self.offset_index.holds_descriptor or self.time_index.holds_descriptor)

    def release(self) -> None:
        """Close every descriptor (indexes written behind, nothing fsynced); the next use opens
        them again, and an active segment stays active."""
        for fd in (self._read_fd, self._write_fd):
            if fd is not None:
                os.close(fd)
        self._read_fd = self._write_fd = None
        self.offset_index.release()
        self.time_index.release()

    # --- opening -------------------------------------------------------------------------

    @classmethod
    def create(cls, directory: Path, base_offset: int, config: LogConfig) -> "Segment":
        """A new, empty, active segment. Its files must not exist yet."""
        fd = create(segment_path(directory, base_offset, LOG_SUFFIX), os.O_EXCL)
        os.close(fd)
        segment = cls(directory, base_offset, config)
        segment.offset_index.create_empty()  # replacing any orphan left behind
        segment.time_index.create_empty()
        segment.activate()
        return segment

    @classmethod
    def open_existing(cls, directory: Path, base_offset: int, config: LogConfig, trusted: bool) -> tuple["Segment", bool]:
        """Open an existing segment after a clean or unclean stop; see the module docstring.

        Returns the (inactive) segment and whether it was scanned, truncated if needed,
        and fsynced.
        """
        segment = cls(directory, base_offset, config)
        if trusted and segment._load_trusted():
            return segment, False
        segment._recover()
        return segment, True

    def _load_trusted(self) -> bool:
        offset_index = OffsetIndex.load(self.offset_index.path)
        time_index = TimeIndex.load(self.time_index.path)
        if offset_index is None or time_index is None:
            return False
        if not (offset_index.is_sane(self.size_bytes) and time_index.is_sane(offset_index)):
            return False
        self.offset_index, self.time_index = offset_index, time_index
        try:
            return self._restore_tail(check_crc=True)
        except CorruptRecord:
            return False

    def _restore_tail(self, check_crc: bool = False) -> bool:
        """Walk the batches after the last index entry to restore the append state.

        Returns False if the indexes miss an entry the indexing rule would have written, or
        the last entry does not point at the batch it names, or (``check_crc``) a batch
        fails its CRC: the tail decides the log end offset, so a damaged count there must
        not go unnoticed, and it is short (about ``index_interval_bytes``), so checking is cheap.
        """
        last = self.offset_index.last()
        start = last.position if last else 0
        expected = self.base_offset + (last.relative_offset if last else 0)
        max_timestamp_ms = self.time_index.last().timestamp_ms if last else None
        bytes_since = 0
        for position, header in iter_headers(self._reader(), start, self.size_bytes, self._walk_chunk_bytes):
            if header.base_offset != expected:
                return False
            if check_crc and not self._crc_matches_at(position, header):
                return False
            if position == start:
                if last is not None and header.max_timestamp_ms > max_timestamp_ms:
                    return False
            elif bytes_since >= self._config.index_interval_bytes:
                return False
            bytes_since += header.size_bytes
            max_timestamp_ms = _max_timestamp(max_timestamp_ms, header.max_timestamp_ms)
            expected = header.next_offset
        self._bytes_since_index_entry = bytes_since
        self.max_timestamp_ms = max_timestamp_ms
        self.next_offset = expected
        self._first_batch_max_timestamp_ms = None
        return True

    def _recover(self) -> None:
        """CRC-scan the whole file, cut it after the last good batch, rebuild the indexes."""
        assert not self._active
        self._reset_state()
        valid_end = 0
        for position, header in scan_valid_batches(self._reader(), self.size_bytes, SEGMENT_SCAN_CHUNK_BYTES):
            if header.base_offset != self.next_offset or header.base_offset - self.base_offset > U32_MAX:
                break
            self._index_batch(position, header)
            valid_end = position + header.size_bytes
        fd = os.open(self._log_location, os.O_WRONLY)
        try:
            if valid_end < self.size_bytes:
                os.ftruncate(fd, valid_end)
            fsync(fd)
        finally:
            os.close(fd)
        self.size_bytes = valid_end
        self.offset_index.save()
        self.time_index.save()

    def _crc_matches_at(self, position: int, header: BatchHeader) -> bool:
        return crc_matches(os.pread(self._reader(), header.size_bytes, position), 0, header)

    def _rebuild_indexes(self) -> None:
        """Rebuild both indexes from the (already validated) .log, e.g. after an entry was found wrong."""
        active = self._active
        # Read every header first: a damaged one raises before anything is reset.
        batches = list(iter_headers(self._reader(), 0, self.size_bytes, SEGMENT_SCAN_CHUNK_BYTES))
        self.offset_index.close()
        self.time_index.close()
        self._reset_state()
        for position, header in batches:
            self._index_batch(position, header)
        self.offset_index.save()
        self.time_index.save()
        if active:
            self.offset_index.open_for_append()
            self.time_index.open_for_append()

    def activate(self) -> None:
        """This segment becomes the one appended to (its descriptors open on first use)."""
        assert not self._active
        self._active = True
        self.offset_index.open_for_append()
        self.time_index.open_for_append()

    def deactivate(self) -> None:
        """Close the write descriptors (without fsync): a newer segment takes the appends."""
        if self._write_fd is not None:
            os.close(self._write_fd)
            self._write_fd = None
        self._active = False
        self.offset_index.close()
        self.time_index.close()

    # --- appending -----------------------------------------------------------------------

    def _index_batch(self, position: int, header: BatchHeader) -> None:
        """Account for one batch just placed at ``position``: the indexing rule lives here."""
        relative_offset = header.base_offset - self.base_offset
        running_max_ms = _max_timestamp(self.max_timestamp_ms, header.max_timestamp_ms)
        if self._bytes_since_index_entry >= self._config.index_interval_bytes:
            self.offset_index.append(relative_offset, position)
            self.time_index.append(running_max_ms, relative_offset)
            self._bytes_since_index_entry = 0
        self._bytes_since_index_entry += header.size_bytes
        self.max_timestamp_ms = running_max_ms
        self.next_offset = header.next_offset

    def append(self, data: bytes | memoryview, batches: list[tuple[int, BatchHeader]]) -> None:
        """Append validated, contiguous batches with one write; ``batches`` holds their
        ``(position within data, header)``."""
        assert batches and batches[0][1].base_offset == self.next_offset
        position = self.size_bytes
        fd = self._writer()
        written = os.write(fd, data)
        if written != len(data):
            # Never leave a torn batch behind a short write (e.g. a full disk).
            os.ftruncate(fd, position)
            raise OSError(errno.ENOSPC, f"short write to {self.log_path}: {written} of {len(data)} bytes")
        for relative_position, header in batches:
            self._index_batch(position + relative_position, header)
        self.size_bytes += len(data)

    @property
    def first_batch_max_timestamp_ms(self) -> int | None:
        """Max timestamp of the first batch: where the segment's age is counted from (as in Kafka)."""
        if self.size_bytes == 0:
            return None
        if self._first_batch_max_timestamp_ms is None:
            header = read_header(os.pread(self._reader(), HEADER_BYTES, 0))
            self._first_batch_max_timestamp_ms = header.max_timestamp_ms
        return self._first_batch_max_timestamp_ms

    # --- reading -------------------------------------------------------------------------

    def _entry_is_valid(self, entry: OffsetPosition) -> bool:
        if entry.position == 0:
            return True
        try:
            header = read_header(os.pread(self._reader(), HEADER_BYTES, entry.position))
        except CorruptRecord:
            return False
        return header.base_offset == self.base_offset + entry.relative_offset

    def _first_damaged_header(self) -> int:
        """Where the walk of the batch headers from byte 0 first fails (a damaged header)."""
        walked = 0
        try:
            for position, header in iter_headers(self._reader(), 0, self.size_bytes, SEGMENT_SCAN_CHUNK_BYTES):
                walked = position + header.size_bytes
        except CorruptRecord:
            return walked
        raise AssertionError(f"{self.log_path}: no damaged header to report")

    def locate(self, offset: int) -> tuple[int, BatchHeader]:
        """Position and header of the batch containing ``offset``."""
        assert self.base_offset <= offset < self.next_offset, (offset, self.base_offset, self.next_offset)
        entry = self.offset_index.lookup(offset - self.base_offset)
        if not self._entry_is_valid(entry):
            try:
                self._rebuild_indexes()
            except CorruptRecord as error:  # the index was right: the batch it points at is damaged
                raise self._damaged(self._first_damaged_header(), offset, error) from None
            entry = self.offset_index.lookup(offset - self.base_offset)
        walked = entry.position  # where the next header starts
        try:
            for position, header in iter_headers(self._reader(), entry.position, self.size_bytes, self._walk_chunk_bytes):
                if header.next_offset > offset:
                    return position, header
                walked = position + header.size_bytes
        except CorruptRecord as error:
            raise self._damaged(walked, offset, error) from None
        raise AssertionError(f"offset {offset} not found in {self.log_path}")

    def _damaged(self, position: int, offset: int, error: CorruptRecord) -> CorruptRecord:
        """A header damaged at or before the batch holding ``offset`` (e.g. its count): the same
        refusal as a read of that batch gives, so callers see one kind of message."""
        return CorruptRecord(
            f"{self.log_path}: the batch at byte {position} is damaged ({error.message}) and is not served, so "
            f"offset {offset} cannot be located: this replica's copy is corrupt on disk; read from another "
            f"in-sync replica")

    def read(self, position: int, bytes_max: int, end_offset: int, at_least_one: bool) -> tuple[bytes, bool]:
        """Whole, CRC-checked batches from ``position``: at most ``bytes_max`` bytes (unless
        ``at_least_one`` and the first batch is larger), none reaching past ``end_offset``.

        Returns the bytes and whether they reach the end of the segment. A damaged batch ends
        the read before it; if it is the first one, ``CorruptRecord`` (see the module docstring).
        """
        buffer = os.pread(self._reader(), min(self.size_bytes - position, max(bytes_max, HEADER_BYTES)), position)
        taken = 0
        expected_offset = self.base_offset if position == 0 else None
        while taken + HEADER_BYTES <= len(buffer):
            try:
                header = read_header(buffer, taken)
            except CorruptRecord as error:
                return self._served_before_damage(buffer, taken, position, error.message)
            size = header.size_bytes
            problem = self._framing_problem(header, position + taken, expected_offset)
            if problem is None and taken + size > len(buffer):
                if taken:
                    break  # the next batch does not fit in bytes_max
                buffer = os.pread(self._reader(), size, position)  # a first batch larger than bytes_max
            # Checked before anything is decided from the header: a damaged count must not
            # pass for a batch beyond end_offset, which would end the read silently.
            if problem is None and not crc_matches(buffer, taken, header):
                problem = f"fails its CRC check (stored {header.crc:#010x})"
            if problem is not None:
                return self._served_before_damage(buffer, taken, position, problem)
            if header.next_offset > end_offset:
                return buffer[:taken], False
            if taken + size > bytes_max and not (taken == 0 and at_least_one):
                break
            taken += size
            expected_offset = header.next_offset
        return buffer[:taken], position + taken == self.size_bytes

    def _framing_problem(self, header: BatchHeader, position: int, expected_offset: int | None) -> str | None:
        if position + header.size_bytes > self.size_bytes:
            return f"length {header.size_bytes} runs past the end of the file"
        if expected_offset is not None and header.base_offset != expected_offset:
            return f"base offset {header.base_offset} where {expected_offset} follows"
        return None

    def _served_before_damage(self, buffer: bytes, taken: int, position: int, problem: str) -> tuple[bytes, bool]:
        """The batches before a damaged one; ``CorruptRecord`` when there are none."""
        if taken:
            return buffer[:taken], False
        raise CorruptRecord(
            f"{self.log_path}: the batch at byte {position} is damaged ({problem}) and is not served: "
            f"this replica's copy is corrupt on disk; read from another in-sync replica"
        )

    def offset_for_timestamp(self, timestamp_ms: int) -> int | None:
        """Base offset of the first batch whose max timestamp is >= ``timestamp_ms``."""
        if self.max_timestamp_ms is None or self.max_timestamp_ms < timestamp_ms:
            return None
        for _ in range(2):
            count = self.time_index.count_below(timestamp_ms)
            entry = self.offset_index.entry(count - 1) if count else OffsetPosition(0, 0)
            if self._entry_is_valid(entry):
                break
            self._rebuild_indexes()
        for _, header in iter_headers(self._reader(), entry.position, self.size_bytes, self._walk_chunk_bytes):
            if header.max_timestamp_ms >= timestamp_ms:
                return header.base_offset
        raise AssertionError(f"max timestamp of {self.log_path} is {self.max_timestamp_ms} but no batch has it")

    def headers(self, from_offset: int) -> Iterator[BatchHeader]:
        """Headers from the batch containing ``from_offset`` to the end of the segment."""
        if from_offset >= self.next_offset:
            return
        position = self.locate(from_offset)[0] if from_offset > self.base_offset else 0
        for _, header in iter_headers(self._reader(), position, self.size_bytes, SEGMENT_SCAN_CHUNK_BYTES):
            yield header

    # --- truncation, durability, removal -------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        """Drop the batches at ``offset`` and after (a batch boundary); fsynced."""
        assert self._active, f"{self.log_path} must be active to be truncated"
        assert self.base_offset <= offset <= self.next_offset
        if offset < self.next_offset:
            position, header = self.locate(offset)
            assert header.base_offset == offset, f"offset {offset} is inside the batch at {header.base_offset}"
            kept_entries = self.offset_index.count_below(offset - self.base_offset)
            self.offset_index.truncate(kept_entries)
            self.time_index.truncate(kept_entries)
            os.ftruncate(self._writer(), position)
            self.size_bytes = position
            restored = self._restore_tail()
            assert restored, f"indexes of {self.log_path} inconsistent after truncation"
        self.flush()

    def flush(self) -> None:
        """fsync the .log and both indexes, of the active segment or of one a roll closed."""
        # Linux fsyncs a file whatever the descriptor's access mode, so a closed segment's read
        # descriptor serves.
        fsync(self._write_fd if self._write_fd is not None else self._reader())
        self.offset_index.flush()
        self.time_index.flush()

    def files_to_sync(self) -> tuple[FileToSync, ...]:
        """What ``flush`` fsyncs, as it stands, for a flush on another thread (``log.pending_flush``)."""
        fd = self._write_fd if self._write_fd is not None else self._read_fd
        log_file = (FileToSync.at(self.log_path, self.size_bytes) if fd is None
                    else FileToSync.of(self.log_path, fd, self.size_bytes))
        return (log_file,
                self.offset_index.file_to_sync(), self.time_index.file_to_sync())

    def close(self) -> None:
        """Close every descriptor (without fsync: ``Log`` decides durability)."""
        self.deactivate()
        if self._read_fd is not None:
            os.close(self._read_fd)
            self._read_fd = None
        self._closed = True

    def delete(self) -> None:
        """Close and remove the files; the .log goes first so a crash leaves only orphan indexes."""
        self.close()
        try:
            os.unlink(self._log_location)
        except FileNotFoundError:
            pass
        self.offset_index.delete()
        self.time_index.delete()


def _max_timestamp(current_ms: int | None, timestamp_ms: int) -> int:
    return timestamp_ms if current_ms is None else max(current_ms, timestamp_ms)
