"""What physical retention may delete, and what it deleted that read nodes had not fed.

Each read node's feed stream of a physical partition records the next offset it still needs
(its *feed position*, ``keys.feed_position``). Physical retention never deletes an offset at or
above the smallest of them, the *retention floor* (``retention_floor``), until the topic's
``unfed_hold_ms_max`` is over (``Log.apply_retention``). What it deletes then is a *read loss*:
physical offsets ``[first, end)`` of one partition that no VP will ever hold, kept per
partition in ``keys.read_loss`` as a ``ReadLoss`` and reported to consumers as ``RecordsLost``.

Invariants: a ``LostRange`` is never empty; a ``ReadLoss`` holds ranges of its own partition,
sorted, disjoint and merged (no two touch), so adding a range twice changes nothing.

Pure values: no I/O, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable


@dataclass(frozen=True, slots=True)
class LostRange:
    """Physical offsets ``[first_offset, end_offset)`` of ``partition`` that no read node fed."""

    partition: int
    first_offset: int
    end_offset: int

    def __post_init__(self) -> None:
        assert self.partition >= 0, f"partition {self.partition} is negative"
        assert 0 <= self.first_offset < self.end_offset, (
            f"lost range [{self.first_offset}, {self.end_offset}) of partition {self.partition} is empty or negative")

    @property
    def offsets(self) -> int:
        return self.end_offset - self.first_offset


@dataclass(frozen=True, slots=True)
class ReadLoss:
    """Every range of one physical partition that retention deleted before it was fed."""

    partition: int
    ranges: tuple[LostRange, ...] = ()

    def __post_init__(self) -> None:
        assert all(r.partition == self.partition for r in self.ranges), (self.partition, self.ranges)
        assert all(a.end_offset < b.first_offset for a, b in zip(self.ranges, self.ranges[1:])), (
            f"ranges of partition {self.partition} are not sorted, disjoint and merged: {self.ranges}")

    @property
    def offsets(self) -> int:
        """Physical offsets lost in total."""
        return sum(r.offsets for r in self.ranges)

    def add(self, lost: LostRange) -> "ReadLoss":
        """This loss and ``lost``, merged with every range it overlaps or touches."""
        assert lost.partition == self.partition, f"a loss of partition {lost.partition} added to {self.partition}"
        first, end = lost.first_offset, lost.end_offset
        kept = []
        for r in self.ranges:
            if r.end_offset < first or end < r.first_offset:
                kept.append(r)
            else:
                first, end = min(first, r.first_offset), max(end, r.end_offset)
        kept.append(LostRange(self.partition, first, end))
        return ReadLoss(self.partition, tuple(sorted(kept, key=lambda r: r.first_offset)))

    def to_json(self) -> dict:
        return {"ranges": [[r.first_offset, r.end_offset] for r in self.ranges]}

    @classmethod
    def from_json(cls, partition: int, value: dict) -> "ReadLoss":
        loss = cls(partition)
        for first, end in value["ranges"]:
            loss = loss.add(LostRange(partition, first, end))
        return loss


def retention_floor(positions: Iterable[int]) -> int | None:
    """The smallest next offset any read node still needs; None when none recorded one."""
    positions = list(positions)
    assert all(p >= 0 for p in positions), f"negative feed position in {positions}"
    return min(positions, default=None)


def feed_position_to_json(next_offset: int) -> dict:
    """The value of a ``keys.feed_position`` key."""
    assert next_offset >= 0, f"feed position {next_offset} is negative"
    return {"next_offset": next_offset}


def feed_position_from_json(value: dict) -> int:
    return value["next_offset"]
