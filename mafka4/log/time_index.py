"""The time index of a log segment: where to start looking for a timestamp.

File ``<base offset>.timeindex``, a flat array of fixed-width big-endian entries:

    offset  size  field
    0       8     timestamp_ms      int64, largest max_timestamp_ms of any batch up to this one
    8       4     relative_offset   uint32, base offset of this batch - segment base offset

The time index has exactly one entry per offset-index entry, for the same batch (entry ``i``
of one pairs with entry ``i`` of the other). Timestamps are the running maximum, so they
never decrease even when producers' clocks disagree, and a binary search is valid. Pairing
the two indexes, rather than writing a time entry only when the maximum grows (as Kafka
does), costs 12 bytes per ``index_interval_bytes`` and makes both checkable against each
other after a crash. Like the offset index, it is rebuilt from the ``.log`` when damaged.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from mafka4.log.offset_index import U32_MAX, IndexFile, OffsetIndex


@dataclass(frozen=True, slots=True)
class TimestampOffset:
    timestamp_ms: int
    relative_offset: int


class TimeIndex(IndexFile):
    """Running maximum timestamp at each offset-index entry."""

    ENTRY = struct.Struct(">qI")
    __slots__ = ()

    def append(self, timestamp_ms: int, relative_offset: int) -> None:
        assert 0 < relative_offset <= U32_MAX
        last = self._last_entry()
        assert last is None or (timestamp_ms >= last[0] and relative_offset > last[1])
        self._append(timestamp_ms, relative_offset)

    def entry(self, index: int) -> TimestampOffset:
        return TimestampOffset(*self._entry(index))

    def last(self) -> TimestampOffset | None:
        return self.entry(len(self) - 1) if len(self) else None

    def count_below(self, timestamp_ms: int) -> int:
        """Number of leading entries whose running maximum is below ``timestamp_ms``.

        Every batch up to entry ``count - 1`` is older than ``timestamp_ms``, so a search
        may start at that entry's batch.
        """
        return self._bisect_left(0, timestamp_ms)

    def is_sane(self, offset_index: OffsetIndex) -> bool:
        """Paired with ``offset_index`` entry by entry, timestamps never decreasing."""
        if len(self) != len(offset_index):
            return False
        previous_ms = None
        for index, (timestamp_ms, relative_offset) in enumerate(self.ENTRY.iter_unpack(self._raw)):
            if relative_offset != offset_index.entry(index).relative_offset:
                return False
            if previous_ms is not None and timestamp_ms < previous_ms:
                return False
            previous_ms = timestamp_ms
        return True
