"""``GroupCommits``: when and how a group member commits its positions, for both group consumers.

``PartitionConsumer`` in a group (Mafka3 mode) and ``VirtualGroupConsumer`` (Mafka4 mode) each
give it the two things that differ: what their positions are (``positions``: what a commit
would send, per partition or VP) and how to write them to the group (``write``). They call
``if_due`` from ``poll()`` (their group duties), ``now`` from ``commit()`` and their own
triggers, and ``forget`` after every sync. ``CommitSchedule`` decides when an auto-commit is
due, and skips one whose positions the coordinator already holds (``client.positions``).

An auto-commit that the group's coordinator does not answer is skipped and tried again an interval later; one that
finds partitions taken away (a rebalance, a lapsed lease) is logged: their next owner re-reads
from their last committed offsets, which is the at-least-once the consumers promise. Neither
reaches the caller of ``poll()``; a ``commit()`` raises both.
"""

from __future__ import annotations

import logging
import time
from typing import Callable

from mafka4.client.positions import CommitSchedule, Positions
from mafka4.errors import CoordinatorUnavailable

logger = logging.getLogger(__name__)

# Writes ``positions`` to the group: (the offset written per partition, the partitions no longer owned).
Write = Callable[[Positions], tuple[dict[int, int], set[int]]]


def _now_ms() -> float:
    return time.monotonic() * 1000


class GroupCommits:
    def __init__(self, group: str, interval_ms: int | None, positions: Callable[[], Positions], write: Write,
                 partitions_noun: str):
        self._group = group
        self._positions = positions
        self._write = write
        self._partitions_noun = partitions_noun  # how the logs name the partitions: "partitions", "VPs"
        self._schedule = CommitSchedule(interval_ms, _now_ms())

    def now(self) -> tuple[dict[int, int], set[int]]:
        """Commit every owned position now; ``CoordinatorUnavailable`` if the coordinator does not answer."""
        return self._commit(self._positions())

    def _commit(self, positions: Positions) -> tuple[dict[int, int], set[int]]:
        self._schedule.sent(_now_ms())
        written, lost = self._write(positions)
        if not lost:
            self._schedule.acknowledged(positions)
        return written, lost

    def forget(self) -> None:
        """The member synced (what it owns may have changed): the next auto-commit writes."""
        self._schedule.forget()

    def seconds_until_due(self) -> float:
        """How long a poll may wait before the next auto-commit is due (infinity: none is due until
        the positions move, or without auto-commit)."""
        return self._schedule.until_due_ms(_now_ms(), self._positions()) / 1000

    def if_due(self) -> None:
        """Auto-commit, if an interval passed since the last commit and the coordinator may not hold these positions."""
        positions = self._positions()
        if not self._schedule.due(_now_ms(), positions):
            return
        try:
            _, lost = self._commit(positions)
        except CoordinatorUnavailable as error:
            logger.warning("group %s: auto-commit skipped, retried in %d ms: %s", self._group,
                           self._schedule.interval_ms, error)
            return
        if lost:
            logger.warning("group %s: lost %s %s before committing; their next owner re-reads from the last "
                           "committed offsets", self._group, self._partitions_noun, sorted(lost))
