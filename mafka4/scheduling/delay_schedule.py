"""A delay topic's schedule: the delay scheduler's timer index of its scheduled (delayed) records.

What it holds. One entry per scheduled record of the delay topic (``mafka4.delays``) not yet
released or cancelled: its due time (epoch ms), its log offset and its message id (delay topic
partition and offset; the log offset is the id's offset, kept in the entry so that a take needs no
lookup). The delay topic is the truth; the schedule is an index of it, rebuilt by reading the
topic after a restart (``scheduling.delay_log`` applies its records again): pending
= scheduled records minus those a release marker or a cancel marker names. It writes nothing
durable itself. The scheduler takes entries out first (``take_due``; ``pending`` then
``cancel``), then produces their release copies, and puts them back with ``schedule`` if that
fails: an entry whose release is in flight can be neither released twice nor cancelled once its
release is decided. A crash in between loses nothing: the topic holds no release marker, so the
scheduler that reads the topic again finds the entry pending.

Layout: a hashed timing wheel of two levels, each a dict from slot number (``due_ms //
width``) to one ``array('q')`` of the slot's entries, four int64 each (due_ms, log_offset,
partition, offset), with a heap of the slots' numbers for the earliest (``_Slots``). *Near*
slots are ``limits.DELAY_SLOT_MS`` (a second) wide and hold the entries due within the *far*
slots already reached; *far* slots are ``limits.DELAY_FAR_SLOT_MS`` (a minute) wide and hold the
rest, in arrival order. When ``take_due`` reaches a far slot it spreads its entries into near
slots (each entry moves once); the near slot being taken is sorted once, by due time and log
offset, and kept sorted. Beside the wheel, for cancel, a message index: per physical partition,
the offsets of its scheduled messages in ascending order and each one's due time (two
``array('q')``). The scheduler reads a partition's records in ascending offset order, so the index
only appends (an offset out of order is inserted, at a memmove's cost).

Memory per pending entry, measured with tracemalloc (1M entries scheduled over 8
partitions; a script, not a test): ~50 bytes due within 10 minutes, ~52 due within 7 days: 32 in
a slot's array, 16 in the index, the rest arrays' growth and the slots' own cost (an array, a
dict entry and a heap entry, ~135 bytes a slot, which the minute-wide far slots spread over many
entries; one-second slots alone cost ~132 bytes an entry at 1M over 7 days). Tombstones (below)
add at most 16 bytes per pending entry. A heap of (due, offset, MessageId) tuples costs ~185.

Cancel. The index finds the message's due time (a bisection), hence its slot (a near one if its
far slot was reached, else a far one); its four ints are deleted from the slot's array at once
(a search and a memmove within one slot: ~2 ms in a far slot of 100k entries), an emptied slot
leaves the dict and its number stays in the heap until reached (``_Slots.head`` pops numbers of
slots gone). The index entry is not deleted: its due time becomes -1, a tombstone, as do those
of the entries ``take_due`` takes. A partition's index is compacted (its tombstones filtered
out) once they are more than half of it, so it holds at most twice its pending messages plus a
constant, and each compaction's cost is paid by the removals before it.

Complexities (n pending entries, k the entries of one slot, p of one partition's index, S
slots): ``schedule`` O(1) amortized (O(log S) when it opens a slot; O(k) into the near slot
being taken; O(p) for an offset out of order); ``pending`` and ``cancel`` O(log p + k);
``take_due`` O(k log k) per near slot it reaches, O(k) per far slot it spreads (in one call: at
100k entries due per minute, ~0.07 s) and O(log p) per entry taken; ``next_due_ms``
O(1) when the earliest slot is sorted, else O(k) (a min in C); ``counts_by_horizon`` O(S) plus
the entries of the few slots that straddle a horizon (vectorised); ``len`` O(1).

Pure: no I/O, no clock (``now_ms`` is an argument).
"""

from __future__ import annotations

import heapq
from array import array
from bisect import bisect_left, bisect_right
from itertools import chain, compress
from typing import NamedTuple

import numpy

from mafka4.delays import MessageId
from mafka4.limits import DELAY_FAR_SLOT_MS, DELAY_SLOT_MS, SECOND_MS

_FIELDS = 4  # an entry in a slot's array: due_ms, log_offset, partition, offset
_DEAD = -1  # an index entry's due time once its message was released or cancelled
# Horizons of ``counts_by_horizon``: due within a minute, an hour, a day (overdue counts as a minute).
HORIZONS = (("minute", 60 * SECOND_MS), ("hour", 3600 * SECOND_MS), ("day", 24 * 3600 * SECOND_MS))
LATER = "later"
_NAMES = [name for name, _ in HORIZONS] + [LATER]  # by the number of bounds a due time is past
# A partition's index is compacted once it has more tombstones than this and than live entries.
_COMPACT_FLOOR = 64


class DueEntry(NamedTuple):
    """A scheduled record taken from the schedule: release it (append its release copy)."""

    due_ms: int
    log_offset: int
    message_id: MessageId


class _PartitionIndex:
    """One partition's scheduled messages: offsets ascending, each one's due time (or ``_DEAD``)."""

    __slots__ = ("offsets", "dues", "dead")

    def __init__(self) -> None:
        self.offsets = array("q")
        self.dues = array("q")
        self.dead = 0

    def add(self, offset: int, due_ms: int) -> bool:
        """Index ``offset`` as due at ``due_ms``; False if it is pending already."""
        if not self.offsets or offset > self.offsets[-1]:
            self.offsets.append(offset)
            self.dues.append(due_ms)
            return True
        i = bisect_left(self.offsets, offset)
        if i < len(self.offsets) and self.offsets[i] == offset:
            if self.dues[i] != _DEAD:
                return False
            self.dues[i] = due_ms  # put back after a take (or scheduled again after a cancel)
            self.dead -= 1
            return True
        self.offsets.insert(i, offset)
        self.dues.insert(i, due_ms)
        return True

    def due_of(self, offset: int) -> int | None:
        """The due time of pending ``offset``; None if it is not pending."""
        i = bisect_left(self.offsets, offset)
        if i == len(self.offsets) or self.offsets[i] != offset or self.dues[i] == _DEAD:
            return None
        return self.dues[i]

    def first_pending(self) -> int | None:
        """The lowest pending offset; None if none is pending. A pass over the leading tombstones,
        which compaction keeps under half the index."""
        for offset, due_ms in zip(self.offsets, self.dues):
            if due_ms != _DEAD:
                return offset
        return None

    def remove(self, offset: int) -> None:
        i = bisect_left(self.offsets, offset)
        assert i < len(self.offsets) and self.offsets[i] == offset and self.dues[i] != _DEAD, offset
        self.dues[i] = _DEAD
        self.dead += 1
        if self.dead > _COMPACT_FLOOR and 2 * self.dead > len(self.dues):
            keep = [due != _DEAD for due in self.dues]
            self.offsets = array("q", compress(self.offsets, keep))
            self.dues = array("q", compress(self.dues, keep))
            assert len(keep) - len(self.dues) == self.dead, (len(keep), len(self.dues), self.dead)
            self.dead = 0


class _Slots:
    """Entries by slot (``due_ms // width_ms``): a dict from slot to an ``array('q')`` of its
    entries, ``_FIELDS`` ints each, and a heap of the slots' numbers (with numbers of slots gone
    since, skipped when reached). The slot being taken (``sorted_head``) is sorted by due time
    and log offset once, and kept sorted: ``add`` inserts into it in place, a removal keeps order."""

    __slots__ = ("width_ms", "slots", "heap", "sorted_slot")

    def __init__(self, width_ms: int):
        self.width_ms = width_ms
        self.slots: dict[int, array] = {}
        self.heap: list[int] = []
        self.sorted_slot: int | None = None

    def add(self, entry: tuple[int, int, int, int]) -> None:
        slot = entry[0] // self.width_ms
        entries = self.slots.get(slot)
        if entries is None:
            entries = self.slots[slot] = array("q")
            heapq.heappush(self.heap, slot)
        if slot != self.sorted_slot:
            entries.extend(entry)
            return
        # A take put back, or an entry due within the slot being taken (a slot wider than DELAY_MS_MIN).
        position = bisect_right(entries[0::_FIELDS], entry[0])
        while position and (entries[(position - 1) * _FIELDS], entries[(position - 1) * _FIELDS + 1]) > entry[:2]:
            position -= 1
        entries[position * _FIELDS:position * _FIELDS] = array("q", entry)

    def log_offset_of(self, due_ms: int, message_id: MessageId) -> int | None:
        """The log offset of the entry of ``message_id``, due at ``due_ms``; None if it is not here."""
        entries = self.slots.get(due_ms // self.width_ms)
        position = _find(entries, message_id) if entries is not None else None
        return None if position is None else entries[position + 1]

    def remove(self, due_ms: int, message_id: MessageId) -> bool:
        """Remove the entry of ``message_id``, due at ``due_ms``; False if it is not here."""
        slot = due_ms // self.width_ms
        entries = self.slots.get(slot)
        position = _find(entries, message_id) if entries is not None else None
        if position is None:
            return False
        del entries[position:position + _FIELDS]
        if not entries:
            del self.slots[slot]  # its number leaves the heap when reached
        return True

    def head(self) -> int | None:
        """The earliest slot holding entries (its number), or None."""
        while self.heap:
            if self.heap[0] in self.slots:
                return self.heap[0]
            heapq.heappop(self.heap)
        return None

    def pop_head(self) -> array:
        """The earliest slot's entries, the slot gone."""
        slot = heapq.heappop(self.heap)
        return self.slots.pop(slot)

    def sorted_head(self) -> array:
        """The earliest slot's entries (``head`` is not None), sorted."""
        slot = self.heap[0]
        entries = self.slots[slot]
        if slot != self.sorted_slot:
            ordered = sorted(zip(*(entries[field::_FIELDS] for field in range(_FIELDS))))
            entries = self.slots[slot] = array("q", chain.from_iterable(ordered))
            self.sorted_slot = slot
        return entries

    def min_due_ms(self, slot: int) -> int:
        entries = self.slots[slot]
        return entries[0] if slot == self.sorted_slot else min(entries[0::_FIELDS])

    def count_by_horizon(self, counts: dict[str, int], bounds: list[int]) -> None:
        for slot, entries in self.slots.items():
            first, last = slot * self.width_ms, (slot + 1) * self.width_ms - 1
            name = _horizon(first, bounds)
            if name == _horizon(last, bounds):
                counts[name] += len(entries) // _FIELDS
            else:
                # Vectorised: such a slot may hold a bulk scheduled alike (1M entries: 223 ms a
                # count one by one, every second the scheduler writes its state).
                dues = numpy.frombuffer(entries, dtype=numpy.int64)[0::_FIELDS]
                for index, count in enumerate(numpy.bincount(numpy.searchsorted(bounds, dues, side="left"),
                                                             minlength=len(_NAMES))):
                    counts[_NAMES[index]] += int(count)


class DelaySchedule:
    """A delay topic's pending scheduled records, by due time (see the module docstring)."""

    __slots__ = ("_near", "_far", "_near_through", "_index", "_len")

    def __init__(self, slot_ms: int = DELAY_SLOT_MS, far_slot_ms: int = DELAY_FAR_SLOT_MS):
        assert isinstance(slot_ms, int) and isinstance(far_slot_ms, int), (slot_ms, far_slot_ms)
        assert 1 <= slot_ms <= far_slot_ms, (slot_ms, far_slot_ms)
        self._near = _Slots(slot_ms)
        self._far = _Slots(far_slot_ms)
        # The far slots up to this one (their numbers) were spread into near slots: an entry due
        # within them goes to a near slot, a later one to a far slot.
        self._near_through = -1
        self._index: dict[int, _PartitionIndex] = {}
        self._len = 0

    def __len__(self) -> int:
        return self._len

    def schedule(self, due_ms: int, log_offset: int, message_id: MessageId) -> None:
        """Hold the scheduled record at ``log_offset`` until ``due_ms``. A message id pending already
        is a broken invariant (the feed applies each record once; a take is put back once)."""
        assert due_ms >= 0 and log_offset >= 0, (due_ms, log_offset)
        index = self._index.get(message_id.partition)
        if index is None:
            index = self._index[message_id.partition] = _PartitionIndex()
        added = index.add(message_id.offset, due_ms)
        assert added, f"message {message_id} is scheduled already"
        self._slots_of(due_ms).add((due_ms, log_offset, message_id.partition, message_id.offset))
        self._len += 1

    def _slots_of(self, due_ms: int) -> _Slots:
        return self._near if due_ms // self._far.width_ms <= self._near_through else self._far

    def pending(self, message_id: MessageId) -> DueEntry | None:
        """The entry of ``message_id`` if it is pending here (to put back should the cancel
        marker's append fail); None if it is not (unknown to this schedule, released, or cancelled)."""
        index = self._index.get(message_id.partition)
        due_ms = index.due_of(message_id.offset) if index is not None else None
        if due_ms is None:
            return None
        log_offset = self._slots_of(due_ms).log_offset_of(due_ms, message_id)
        assert log_offset is not None, f"message {message_id} is indexed as due at {due_ms} but in no slot"
        return DueEntry(due_ms, log_offset, message_id)

    def cancel(self, message_id: MessageId) -> bool:
        """Forget the pending message ``message_id``; False if it is not pending (unknown to this
        schedule, released, or cancelled already)."""
        index = self._index.get(message_id.partition)
        due_ms = index.due_of(message_id.offset) if index is not None else None
        if due_ms is None:
            return False
        removed = self._slots_of(due_ms).remove(due_ms, message_id)
        assert removed, f"message {message_id} is indexed as due at {due_ms} but in no slot"
        index.remove(message_id.offset)
        self._len -= 1
        return True

    def take_due(self, now_ms: int, limit: int) -> list[DueEntry]:
        """Up to ``limit`` entries due at ``now_ms`` or before, in due order (ties by log offset),
        removed from the schedule."""
        assert limit >= 1, limit
        self._spread_far_slots(now_ms)
        taken: list[DueEntry] = []
        while len(taken) < limit:
            slot = self._near.head()
            if slot is None or slot * self._near.width_ms > now_ms:
                break
            entries = self._near.sorted_head()
            count = min(bisect_right(entries[0::_FIELDS], now_ms), limit - len(taken))
            for start in range(0, count * _FIELDS, _FIELDS):
                due_ms, log_offset, partition, offset = entries[start:start + _FIELDS]
                self._index[partition].remove(offset)
                taken.append(DueEntry(due_ms, log_offset, MessageId(partition, offset)))
            del entries[:count * _FIELDS]
            self._len -= count
            if entries:
                break
            self._near.pop_head()
        return taken

    def _spread_far_slots(self, now_ms: int) -> None:
        """Move the entries of the far slots that began by ``now_ms`` into near slots."""
        far_slot = now_ms // self._far.width_ms
        if far_slot <= self._near_through:
            return
        self._near_through = far_slot
        while (slot := self._far.head()) is not None and slot <= far_slot:
            entries = self._far.pop_head()
            for start in range(0, len(entries), _FIELDS):
                self._near.add(tuple(entries[start:start + _FIELDS]))

    def first_pending_offset(self, partition: int) -> int | None:
        """The lowest offset of ``partition`` still pending (the delay topic may be read again from
        there after a restart); None if none of its messages is pending."""
        index = self._index.get(partition)
        return index.first_pending() if index is not None else None

    def next_due_ms(self) -> int | None:
        """When the earliest pending entry is due; None if none is pending. Every near entry is
        due before every far one."""
        for slots in (self._near, self._far):
            slot = slots.head()
            if slot is not None:
                return slots.min_due_ms(slot)
        return None

    def counts_by_horizon(self, now_ms: int) -> dict[str, int]:
        """Pending entries by when they are due after ``now_ms``: within a minute (overdue ones
        too), an hour, a day, or later."""
        counts = dict.fromkeys([name for name, _ in HORIZONS] + [LATER], 0)
        bounds = [now_ms + horizon_ms for _, horizon_ms in HORIZONS]
        self._near.count_by_horizon(counts, bounds)
        self._far.count_by_horizon(counts, bounds)
        return counts


def _horizon(due_ms: int, bounds: list[int]) -> str:
    for (name, _), bound in zip(HORIZONS, bounds):
        if due_ms <= bound:
            return name
    return LATER


def _find(entries: array, message_id: MessageId) -> int | None:
    """The position in a slot's array of the entry of ``message_id``; None if it is not there."""
    offsets = entries[3::_FIELDS]
    start = 0
    while True:
        try:
            i = offsets.index(message_id.offset, start)
        except ValueError:
            return None
        if entries[i * _FIELDS + 2] == message_id.partition:
            return i * _FIELDS
        start = i + 1
