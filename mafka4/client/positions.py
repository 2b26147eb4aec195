"""Where a consumer starts reading a partition, and when a group member commits its positions:
the rules every consumer shares (``PartitionConsumer`` over physical partitions, ``VirtualConsumer``
and ``VirtualGroupConsumer`` over VPs).

* **Start offset** (``start_offset``): a partition a reader starts (at construction, or claimed
  in a group) is read from its committed offset if it has one that its log still holds; else
  from its log start (earliest) or its high watermark (latest). A committed offset below the
  log start was deleted by retention: reading resumes where the log now begins or ends, as
  ``auto_offset_reset`` says (Kafka's rule). A ``VirtualGroupConsumer`` takes a committed
  offset without asking for the log's range (it saves a call per claimed VP) and applies the
  rule only to VPs without one.
* **Auto-commit** (``CommitSchedule``): a member's positions are committed by the first
  ``poll()`` once ``auto_commit_interval_ms`` has passed since its last commit, whatever sent
  that one (``commit()``, an earlier auto-commit; answered or not), so an
  auto-commit never follows another commit closer than the interval. It is skipped while the
  positions equal those of the last commit its coordinator answered without losing any of
  them (librdkafka skips the same way; Kafka's Java client writes them again): an idle member
  then sends no commits at all, and its ``poll()`` has no auto-commit to wake up for. Writing
  them again would change nothing on the server, which writes only offsets that move forward
  (an unchanged commit is one etcd read there) and judges liveness by heartbeats. Nothing
  is skipped that is not known to be held: a commit not answered, one that found partitions
  taken away, and every sync of the group (a claim, a revoke, a rebalance) make the next
  auto-commit write whatever the positions; ``commit()`` always writes.

* **A diverged log** (``rewound``): a VP fetch carries the leader epoch of the last record read
  before the position; a replica whose log does not hold that history (a VP with one replica
  lost its unflushed tail in a power loss and fed it again, in a new epoch and an order that
  may differ) answers ``(epoch, end offset)``. The reader moves back to that end offset, never
  forward, and takes the answered epoch as its last, so its next fetch passes the check: it
  reads the records from there again (duplicates), and none is skipped (Kafka's KIP-320).

Pure: offsets and ``now_ms`` in, decisions out.
"""

from __future__ import annotations

from typing import Mapping

from mafka4.errors import ProtocolError

# partition or VP -> (offset, high watermark seen, leader epoch of the record before the offset:
# ``NO_EPOCH``, -1, when not known, and always for a partition)
Positions = Mapping[int, tuple[int, int, int]]


def start_offset(committed: int | None, log_range: tuple[int, int], earliest: bool) -> int:
    """The offset a partition is first read from; ``log_range`` is its (log start offset, high watermark)."""
    log_start, high_watermark = log_range
    if committed is not None and committed >= log_start:
        return committed
    return log_start if earliest else high_watermark


def rewound(offset: int, diverging: tuple[int, int]) -> tuple[int, int]:
    """A reader's (position, last leader epoch) after a fetch from ``offset`` was answered
    ``diverging`` = (epoch, end offset): back to the end offset, never forward."""
    epoch, end_offset = diverging
    if end_offset < 0:
        raise ProtocolError(f"a diverging answer with end offset {end_offset}: a replica answers an offset of its log")
    return min(offset, end_offset), epoch


class CommitSchedule:
    """When a group member's next auto-commit is due (see the module docstring); ``positions`` are
    what a commit would send."""

    __slots__ = ("interval_ms", "_last_commit_ms", "_settled")

    def __init__(self, interval_ms: int | None, now_ms: float):
        assert interval_ms is None or interval_ms > 0, interval_ms
        self.interval_ms = interval_ms  # None: only commit(), a release and close() commit
        self._last_commit_ms = now_ms
        # The positions of the last commit the coordinator answered losing none; None: not known.
        self._settled: dict[int, tuple[int, int]] | None = None

    def due(self, now_ms: float, positions: Positions) -> bool:
        return self.until_due_ms(now_ms, positions) == 0

    def until_due_ms(self, now_ms: float, positions: Positions) -> float:
        """How long until the next auto-commit is due (0: due; infinity: none is due while ``positions`` stay)."""
        if self.interval_ms is None or positions == self._settled:
            return float("inf")
        return max(self._last_commit_ms + self.interval_ms - now_ms, 0.0)

    def sent(self, now_ms: float) -> None:
        """A commit was sent at ``now_ms`` (answered or not: a failed one waits an interval too)."""
        self._last_commit_ms = now_ms
        self._settled = None  # until it is answered

    def acknowledged(self, positions: Positions) -> None:
        """The coordinator answered the commit of ``positions`` and lost none of them."""
        self._settled = dict(positions)

    def forget(self) -> None:
        """What the member owns may have changed (a sync): the next auto-commit writes, whatever the positions."""
        self._settled = None
