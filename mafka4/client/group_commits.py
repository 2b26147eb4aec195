"""``GroupCommits``: when and how a group member commits its positions, for both group consumers.

``PartitionConsumer`` in a group (Mafka3 mode) and ``VirtualGroupConsumer`` (Mafka4 mode) each
give it the one thing that differs, how to write their positions to the group (``write``), and
call ``if_due`` from ``poll()`` (their group duties) and ``now`` from ``commit()`` and their
own triggers. ``CommitSchedule`` decides when an auto-commit is due.

An auto-commit that the group's coordinator does not answer is skipped and tried again an interval later; one that
finds partitions taken away (a rebalance, a lapsed lease) is logged: their next owner re-reads
from their last committed offsets, which is the at-least-once the consumers promise. Neither
reaches the caller of ``poll()``; a ``commit()`` raises both.
"""

from __future__ import annotations

import logging
import time
from typing import Callable

from mafka4.client.positions import CommitSchedule
from mafka4.errors import CoordinatorUnavailable

logger = logging.getLogger(__name__)

# Writes the member's positions: (the offset written per partition, the partitions no longer owned).
Write = Callable[[], tuple[dict[int, int], set[int]]]


def _now_ms() -> float:
    return time.monotonic() * 1000


class GroupCommits:
    def __init__(self, group: str, interval_ms: int | None, write: Write, partitions_noun: str):
        self._group = group
        self._write = write
        self._partitions_noun = partitions_noun  # how the logs name the partitions: "partitions", "VPs"
        self._schedule = CommitSchedule(interval_ms, _now_ms())

    def now(self) -> tuple[dict[int, int], set[int]]:
        """Commit every owned position now; ``CoordinatorUnavailable`` if the coordinator does not answer."""
        self._schedule.committed(_now_ms())
        return self._write()

    def seconds_until_due(self) -> float:
        """How long a poll may wait before the next auto-commit is due (infinity without auto-commit)."""
        return self._schedule.until_due_ms(_now_ms()) / 1000

    def if_due(self) -> None:
        """Auto-commit, if an interval passed since the last commit."""
        if not self._schedule.due(_now_ms()):
            return
        try:
            _, lost = self.now()
        except CoordinatorUnavailable as error:
            logger.warning("group %s: auto-commit skipped, retried in %d ms: %s", self._group,
                           self._schedule.interval_ms, error)
            return
        if lost:
            logger.warning("group %s: lost %s %s before committing; their next owner re-reads from the last "
                           "committed offsets", self._group, self._partitions_noun, sorted(lost))
