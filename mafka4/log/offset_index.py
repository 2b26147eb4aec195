"""Index files of a log segment, and the sparse offset index.

An index file is a flat array of fixed-width big-endian entries, with no header. The
entries are also held in memory (as the raw bytes) because every lookup binary-searches
them; the file exists only so that opening a large log does not have to re-read every
segment. An index never holds information that is not in the ``.log`` file: it can always
be rebuilt by scanning batch headers, and a damaged index is rebuilt, never repaired.

The offset index (``<base offset>.index``) maps a batch to its byte position:

    offset  size  field
    0       4     relative_offset   uint32, batch base offset - segment base offset
    4       4     position          uint32, byte position of the batch in the .log file

Entries are strictly increasing in both fields. The first batch of a segment never has an
entry (a lookup that finds no entry starts at position 0), so a sane entry has both fields
above zero. Which batches get an entry is decided by ``Segment`` (one per
``index_interval_bytes`` of log data); because that rule depends only on the log bytes, a
rebuilt index is byte-identical to the one written while appending.

Writing behind. An open index keeps its new entries in memory and writes them to its file in
one ``os.write`` when it is flushed, staged for a flush on another thread (``file_to_sync``),
truncated or closed, not one write per entry: a read node appends a VP batch to each of
hundreds of VP logs per feed round, and the index writes were half of its appends' system
calls (``benchmarks/feed_split_micro.py``). The file may then lag the entries in memory, but
never a fsync: whatever a flush vouches for has its entries on disk, and recovery rebuilds the
index of any segment it does not trust (``Segment.open_existing``), as it rebuilds one a crash
cut short.

Descriptors on demand. An index open for append (``open_for_append``) opens its file only when
it has entries to write, and ``release`` closes it again while keeping it open for append: a
read node hosts tens of thousands of idle VP logs, and a descriptor held by each index of each
of them ran into the process's open-file limit (``benchmarks/vp_memory_micro.py``).

Not thread-safe: a segment and its indexes are used from one thread.
"""

from __future__ import annotations

import bisect
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from mafka4.batch_frame import HEADER_BYTES
from mafka4.log.fsync_points import TMP_SUFFIX, create, created, fsync
from mafka4.log.pending_flush import FileToSync

U32_MAX = 2**32 - 1


class IndexFile:
    """Fixed-width entries in memory, written behind to an append-only file when open (see the module doc)."""

    ENTRY: ClassVar[struct.Struct]
    # No per-instance dict, and the path as a str (a Path and its cached str cost three times
    # as much): a read node holds two indexes per VP, of 100,000 VPs.
    __slots__ = ("_location", "_raw", "_appendable", "_fd", "_written")

    def __init__(self, path: str | os.PathLike, raw: bytes = b""):
        assert len(raw) % self.ENTRY.size == 0
        self._location = os.fspath(path)
        self._raw = bytearray(raw)
        self._appendable = False  # open for append: later entries are written behind to the file
        self._fd: int | None = None  # while appendable, opened when entries are to be written
        self._written = len(raw)  # bytes of ``_raw`` the file holds (while appendable: the rest is to write)

    @classmethod
    def load(cls, path: Path):
        """The index stored at ``path``, or None when it is missing or not whole entries."""
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return None
        if len(raw) % cls.ENTRY.size:
            return None
        return cls(path, raw)

    @property
    def path(self) -> Path:
        return Path(self._location)

    def __len__(self) -> int:
        return len(self._raw) // self.ENTRY.size

    @property
    def raw(self) -> bytes:
        return bytes(self._raw)

    def _entry(self, index: int) -> tuple:
        return self.ENTRY.unpack_from(self._raw, index * self.ENTRY.size)

    def _bisect_right(self, field: int, value: int) -> int:
        """Number of leading entries whose ``field`` is <= ``value`` (fields are sorted)."""
        return bisect.bisect_right(range(len(self)), value, key=lambda i: self._entry(i)[field])

    def _bisect_left(self, field: int, value: int) -> int:
        """Number of leading entries whose ``field`` is < ``value`` (fields are sorted)."""
        return bisect.bisect_left(range(len(self)), value, key=lambda i: self._entry(i)[field])

    def _last_entry(self) -> tuple | None:
        return self._entry(len(self) - 1) if self._raw else None

    def _append(self, *fields: int) -> None:
        self._raw += self.ENTRY.pack(*fields)

    @property
    def holds_descriptor(self) -> bool:
        return self._fd is not None

    def _descriptor(self) -> int:
        """The file, open for append (opened now if it is not)."""
        assert self._appendable, f"{self.path} is not open for append"
        if self._fd is None:
            fd = os.open(self._location, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            size = os.fstat(fd).st_size
            if size != self._written:
                os.close(fd)
                raise AssertionError(f"{self.path} holds {size} bytes, memory says {self._written}")
            if not self._written:
                created(fd)  # new (or found empty): not its inode's previous file, if it reused one
            self._fd = fd
        return self._fd

    def _write_behind(self) -> None:
        """Write the entries the file lacks, in one write."""
        if self._appendable and self._written < len(self._raw):
            pending = self._raw[self._written:]
            written = os.write(self._descriptor(), pending)
            assert written == len(pending), f"short index write to {self.path}"
            self._written = len(self._raw)

    def truncate(self, count: int) -> None:
        """Keep only the first ``count`` entries."""
        assert 0 <= count <= len(self)
        del self._raw[count * self.ENTRY.size:]
        if self._appendable and self._written > len(self._raw):
            os.ftruncate(self._descriptor(), len(self._raw))
        self._written = min(self._written, len(self._raw))

    def create_empty(self) -> None:
        """Make the file, empty (emptied if it exists)."""
        assert not self._raw and not self._appendable
        os.close(create(self._location))

    def open_for_append(self) -> None:
        """Write later entries behind to the file (created if missing), which must equal memory;
        the descriptor is opened when there is something to write."""
        assert not self._appendable
        try:
            size = os.stat(self._location).st_size
        except FileNotFoundError:
            size = 0  # created by the first write
        assert size == len(self._raw), f"{self.path} holds {size} bytes, memory {len(self._raw)}"
        self._appendable = True
        self._written = len(self._raw)

    def release(self) -> None:
        """Write the entries behind and close the descriptor; the index stays open for append."""
        self._write_behind()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def save(self) -> None:
        """Replace the file with the in-memory entries (tmp file + fsync + rename)."""
        reopen = self._appendable
        self.close()
        tmp = self._location + TMP_SUFFIX
        fd = create(tmp)
        try:
            written = os.write(fd, self._raw)
            assert written == len(self._raw), f"short index write to {tmp}"
            fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self._location)
        self._written = len(self._raw)
        if reopen:
            self.open_for_append()

    def flush(self) -> None:
        """fsync the file, open for append or not (the index of a segment a roll closed)."""
        self._write_behind()
        if self._fd is not None:
            fsync(self._fd)
            return
        fd = os.open(self._location, os.O_RDONLY)
        try:
            fsync(fd)  # Linux fsyncs a file whatever the descriptor's access mode
        finally:
            os.close(fd)

    def file_to_sync(self) -> FileToSync:
        """The file with every entry written, for a flush on another thread (``log.pending_flush``)."""
        self._write_behind()
        if self._fd is None:
            return FileToSync.at(self.path, len(self._raw))
        return FileToSync.of(self.path, self._fd, len(self._raw))

    def close(self) -> None:
        """Write the entries behind and stop appending."""
        self.release()
        self._appendable = False

    def delete(self) -> None:
        self.close()
        try:
            os.unlink(self._location)
        except FileNotFoundError:
            pass


@dataclass(frozen=True, slots=True)
class OffsetPosition:
    relative_offset: int
    position: int


class OffsetIndex(IndexFile):
    """Sparse map from relative batch base offset to byte position in the segment."""

    ENTRY = struct.Struct(">II")
    __slots__ = ()

    def append(self, relative_offset: int, position: int) -> None:
        assert 0 < relative_offset <= U32_MAX and 0 < position <= U32_MAX
        last = self._last_entry()  # a tuple: a frozen dataclass per append cost more than the append
        assert last is None or (relative_offset > last[0] and position > last[1])
        self._append(relative_offset, position)

    def entry(self, index: int) -> OffsetPosition:
        return OffsetPosition(*self._entry(index))

    def last(self) -> OffsetPosition | None:
        return self.entry(len(self) - 1) if len(self) else None

    def lookup(self, relative_offset: int) -> OffsetPosition:
        """The last entry at or below ``relative_offset``, or (0, 0): where a scan starts."""
        count = self._bisect_right(0, relative_offset)
        return self.entry(count - 1) if count else OffsetPosition(0, 0)

    def count_below(self, relative_offset: int) -> int:
        """Number of entries for batches that start below ``relative_offset``."""
        return self._bisect_left(0, relative_offset)

    def is_sane(self, log_bytes: int) -> bool:
        """Both fields strictly increasing, above zero, and every position inside the log."""
        previous = (0, 0)
        for relative_offset, position in self.ENTRY.iter_unpack(self._raw):
            if relative_offset <= previous[0] or position <= previous[1]:
                return False
            previous = (relative_offset, position)
        return previous[1] + HEADER_BYTES <= log_bytes if len(self) else True
