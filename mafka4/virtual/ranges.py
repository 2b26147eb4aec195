"""Hash ranges: how a topic's virtual partitions (VPs) divide the 64-bit key-hash space.

Every message has a 64-bit hash (``message_hash``); a topic's VPs own disjoint, contiguous,
half-open ranges ``[start, end)`` that together cover ``[0, 2**64)`` exactly once, so every
hash belongs to exactly one VP. A ``RangeMap`` is one such layout (ranges -> VP ids) with a
bisect lookup. One VP (``even_ranges(1)``) owns the whole space: the topic has one global order.

The hash of a message:

* keyed: ``key_hash(key)`` (``mafka4.hashing``), the hash the producer's partitioner uses, so
  one key lives in one physical partition and, after the split, in one VP;
* keyless: ``keyless_hash(seed, sequence) = (key_hash(seed) + sequence * GOLDEN_GAMMA) mod
  2**64`` with ``seed = "mafka4.keyless" + int64 producer id + int32 physical partition`` (big
  endian) and ``sequence`` the record's producer sequence (``base_sequence + index``).
  ``GOLDEN_GAMMA = floor(2**64 / phi)`` is odd, so consecutive sequences of one producer walk
  the ring in steps of 1/phi of its size: by the three-distance theorem any ``n`` consecutive
  hashes split ``V`` even ranges within a few records of ``n / V`` each (a rough round robin),
  and the hash is a pure function of (producer id, partition, sequence), so a refeed puts the
  record in the same VP. A non-idempotent producer's batch has no producer id or sequence; its
  records use producer id -1 and their physical offset as the sequence instead.

Invariants (asserted): ``0 <= start < end <= 2**64``; a layout's ranges are sorted,
contiguous, start at 0, end at ``2**64`` and map to distinct VP ids.

Pure: no I/O.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Iterable

from mafka4.batch_frame import NO_PRODUCER_ID
from mafka4.hashing import KEY_HASH_SPACE, key_hash

HASH_SPACE = KEY_HASH_SPACE
# floor(2**64 / golden ratio), odd: the Weyl-sequence step of Fibonacci hashing.
GOLDEN_GAMMA = 0x9E3779B97F4A7C15
_KEYLESS_SEED_PREFIX = b"mafka4.keyless"


@dataclass(frozen=True, slots=True, order=True)
class HashRange:
    """The half-open key-hash range ``[start, end)``."""

    start: int
    end: int

    def __post_init__(self) -> None:
        assert 0 <= self.start < self.end <= HASH_SPACE, (self.start, self.end)

    @property
    def width(self) -> int:
        return self.end - self.start

    def __contains__(self, hash_value: int) -> bool:
        return self.start <= hash_value < self.end

    def can_split(self) -> bool:
        return self.width >= 2

    def split(self) -> tuple["HashRange", "HashRange"]:
        """The two halves at the midpoint: ``[start, mid)`` and ``[mid, end)``."""
        assert self.can_split(), f"range {self} of width 1 cannot be split"
        middle = self.start + self.width // 2
        return HashRange(self.start, middle), HashRange(middle, self.end)

    def is_adjacent_to(self, other: "HashRange") -> bool:
        return self.end == other.start or other.end == self.start

    def merge(self, other: "HashRange") -> "HashRange":
        """The union of two adjacent ranges (in either order)."""
        assert self.is_adjacent_to(other), f"ranges {self} and {other} are not adjacent"
        return HashRange(min(self.start, other.start), max(self.end, other.end))

    def __str__(self) -> str:
        return f"[{self.start:#x}, {self.end:#x})"


def even_ranges(count: int) -> tuple[HashRange, ...]:
    """``count`` ranges of (almost) equal width covering the whole hash space, in order."""
    assert 1 <= count <= HASH_SPACE, count
    bounds = [index * HASH_SPACE // count for index in range(count + 1)]
    return tuple(HashRange(start, end) for start, end in zip(bounds, bounds[1:]))


def check_layout(ranges: Iterable[HashRange]) -> None:
    """Assert that ``ranges`` (in any order) cover ``[0, 2**64)`` exactly once."""
    ordered = sorted(ranges)
    assert ordered, "a layout holds at least one range"
    assert ordered[0].start == 0, f"layout starts at {ordered[0].start:#x}, not 0"
    assert ordered[-1].end == HASH_SPACE, f"layout ends at {ordered[-1].end:#x}, not 2**64"
    for left, right in zip(ordered, ordered[1:]):
        assert left.end == right.start, f"ranges {left} and {right} leave a gap or overlap"


@dataclass(frozen=True, slots=True)
class RangeMap:
    """One layout: sorted ranges and the VP id owning each. Build with ``RangeMap.of``."""

    ranges: tuple[HashRange, ...]
    vp_ids: tuple[int, ...]
    # The ranges' starts, for ``vp_for_hash``: the feed places every record with one bisect.
    _starts: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        assert len(self.ranges) == len(self.vp_ids), (self.ranges, self.vp_ids)
        assert list(self.ranges) == sorted(self.ranges), "ranges must be sorted"
        assert len(set(self.vp_ids)) == len(self.vp_ids), f"duplicate VP ids {self.vp_ids}"
        check_layout(self.ranges)
        object.__setattr__(self, "_starts", tuple(r.start for r in self.ranges))

    @classmethod
    def of(cls, assignment: Iterable[tuple[HashRange, int]]) -> "RangeMap":
        """A layout from ``(range, vp id)`` pairs in any order."""
        pairs = sorted(assignment)
        return cls(tuple(r for r, _ in pairs), tuple(vp for _, vp in pairs))

    @classmethod
    def even(cls, count: int, first_vp_id: int = 0) -> "RangeMap":
        """``count`` even ranges owned by VPs ``first_vp_id, first_vp_id + 1, ...`` in hash order."""
        return cls(even_ranges(count), tuple(range(first_vp_id, first_vp_id + count)))

    def __len__(self) -> int:
        return len(self.ranges)

    def items(self) -> tuple[tuple[HashRange, int], ...]:
        return tuple(zip(self.ranges, self.vp_ids))

    def vp_for_hash(self, hash_value: int) -> int:
        """The VP whose range holds ``hash_value``."""
        assert 0 <= hash_value < HASH_SPACE, hash_value
        # Starts are sorted and the first is 0, so the owner is the last range starting <= hash.
        return self.vp_ids[bisect.bisect_right(self._starts, hash_value) - 1]

    def range_of(self, vp_id: int) -> HashRange | None:
        """The range ``vp_id`` owns in this layout, or None if it owns none here."""
        try:
            return self.ranges[self.vp_ids.index(vp_id)]
        except ValueError:
            return None

    def replace(self, removed: Iterable[int], added: Iterable[tuple[HashRange, int]]) -> "RangeMap":
        """This layout with the ranges of ``removed`` VPs handed to ``added``; still one cover."""
        removed = set(removed)
        assert removed <= set(self.vp_ids), (removed, self.vp_ids)
        kept = [(r, vp) for r, vp in self.items() if vp not in removed]
        return RangeMap.of(kept + list(added))


def keyless_hash(producer_id: int, partition: int, sequence: int) -> int:
    """The hash of a keyless message; see the module docstring for why it spreads evenly."""
    assert 0 <= partition < 2**31, partition
    seed = _KEYLESS_SEED_PREFIX + producer_id.to_bytes(8, "big", signed=True) + partition.to_bytes(4, "big")
    return (key_hash(seed) + sequence * GOLDEN_GAMMA) % HASH_SPACE


def message_hash(key: bytes | None, partition: int, producer_id: int, sequence: int, offset: int) -> int:
    """The 64-bit hash that places one physical record in a VP.

    ``sequence`` is the record's producer sequence (ignored for keyed records and for
    non-idempotent producers, whose records use ``offset`` instead).
    """
    if key is not None:
        return key_hash(key)
    if producer_id == NO_PRODUCER_ID:
        return keyless_hash(NO_PRODUCER_ID, partition, offset)
    return keyless_hash(producer_id, partition, sequence)
