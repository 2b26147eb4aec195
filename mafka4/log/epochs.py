"""The leader-epoch history of one partition replica (Kafka's leader-epoch cache).

Each entry ``(leader_epoch, start_offset)`` says that the batches from ``start_offset`` up to
the start of the next entry (or the log end offset, for the last entry) were appended by the
leader of ``leader_epoch``. A leader adds an entry when it takes office; a follower adds one
when it appends the first batch stamped with a new epoch. Comparing two replicas' histories
finds the first offset where their logs may differ without reading the logs
(KIP-101/KIP-279), which is how a follower truncates after a leader change.

Invariants (asserted): epochs strictly increase; start offsets strictly increase. An epoch
whose leader appended nothing is replaced when a later epoch starts at the same offset, as
Kafka does: it owns no batches, so no replica can diverge inside it.

Checkpoint text format (Kafka's ``leader-epoch-checkpoint``), lines separated by "\\n"::

    0              format version
    2              number of entries
    0 0            leader_epoch start_offset, ascending
    3 150

This module is pure: no I/O. The caller writes ``to_text()`` to a file and reads it back.
"""

from __future__ import annotations

import bisect
from typing import Iterable

from mafka4.errors import CorruptRecord
from mafka4.limits import EPOCH_CHECKPOINT_ENTRIES_MAX

NO_EPOCH = -1
NO_OFFSET = -1
CHECKPOINT_VERSION = 0


class EpochHistory:
    """Ascending ``(leader_epoch, start_offset)`` entries of one replica's log."""

    __slots__ = ("_epochs", "_starts")

    def __init__(self, entries: Iterable[tuple[int, int]] = ()):
        # Two parallel lists keep lookups a bisect over plain ints.
        self._epochs: list[int] = []
        self._starts: list[int] = []
        for epoch, start_offset in entries:
            self.assign(epoch, start_offset)

    @property
    def entries(self) -> tuple[tuple[int, int], ...]:
        return tuple(zip(self._epochs, self._starts))

    @property
    def latest_epoch(self) -> int:
        return self._epochs[-1] if self._epochs else NO_EPOCH

    def start_offset_of(self, epoch: int) -> int | None:
        """The start offset recorded for exactly ``epoch``, or None if it is not in the history."""
        index = bisect.bisect_left(self._epochs, epoch)
        if index < len(self._epochs) and self._epochs[index] == epoch:
            return self._starts[index]
        return None

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset``; False if it is already the latest."""
        if epoch == self.latest_epoch:
            return False
        assert epoch >= 0, f"leader epoch {epoch} is negative"
        assert start_offset >= 0, f"start offset {start_offset} is negative"
        assert epoch > self.latest_epoch, f"epoch {epoch} is older than the latest {self.latest_epoch}"
        assert not self._starts or start_offset >= self._starts[-1], (
            f"epoch {epoch} starts at {start_offset}, before the previous epoch's start {self._starts[-1]}"
        )
        if self._starts and self._starts[-1] == start_offset:
            # The previous epoch owns no batch: drop it so start offsets stay strictly ascending.
            self._epochs.pop()
            self._starts.pop()
        self._epochs.append(epoch)
        self._starts.append(start_offset)
        return True

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """Kafka's OffsetsForLeaderEpoch answer for a replica whose last batch has ``epoch``.

        Returns ``(e, end)``: ``e`` is the largest known epoch <= ``epoch`` and ``end`` is the
        offset where ``e`` ends (the start of the next epoch, or ``log_end_offset`` for the
        latest). When ``epoch`` predates every known epoch, returns ``(epoch, first start
        offset)``, as Kafka does: the asker's batches of that epoch are not in this log, so it
        must truncate to where this log's first known epoch starts. ``(-1, -1)`` when the
        history is empty or ``epoch`` is -1 (no answer: the asker falls back to its high
        watermark).
        """
        if epoch < 0 or not self._epochs:
            return NO_EPOCH, NO_OFFSET
        assert log_end_offset >= self._starts[-1], (
            f"log end offset {log_end_offset} is before the latest epoch's start {self._starts[-1]}"
        )
        if epoch >= self._epochs[-1]:
            return self._epochs[-1], log_end_offset
        after = bisect.bisect_right(self._epochs, epoch)  # first entry with a larger epoch
        if after == 0:
            return epoch, self._starts[0]
        return self._epochs[after - 1], self._starts[after]

    def truncate_from(self, offset: int) -> None:
        """Forget epochs starting at or after ``offset``, once the log was truncated to ``offset``."""
        assert offset >= 0, f"truncation offset {offset} is negative"
        keep = bisect.bisect_left(self._starts, offset)
        del self._epochs[keep:]
        del self._starts[keep:]

    def to_text(self) -> str:
        lines = [str(CHECKPOINT_VERSION), str(len(self._epochs))]
        lines.extend(f"{epoch} {start}" for epoch, start in zip(self._epochs, self._starts))
        return "\n".join(lines) + "\n"

    @classmethod
    def from_text(cls, text: str) -> "EpochHistory":
        """Parse ``to_text`` output; raise ``CorruptRecord`` naming the bad line."""
        lines = text.splitlines()
        if len(lines) < 2:
            raise CorruptRecord(
                f"leader-epoch checkpoint has {len(lines)} line(s), needs a version and a count: "
                f"delete the checkpoint file to rebuild it from the log"
            )
        version = _parse_ints(lines[0], 1, 1)[0]
        if version != CHECKPOINT_VERSION:
            raise CorruptRecord(f"leader-epoch checkpoint has version {version}, expected {CHECKPOINT_VERSION}")
        count = _parse_ints(lines[1], 2, 1)[0]
        if not 0 <= count <= EPOCH_CHECKPOINT_ENTRIES_MAX or len(lines) != count + 2:
            raise CorruptRecord(
                f"leader-epoch checkpoint announces {count} entries but holds {len(lines) - 2}: "
                f"delete the checkpoint file to rebuild it from the log"
            )
        history = cls()
        for number, line in enumerate(lines[2:], start=3):
            epoch, start_offset = _parse_ints(line, number, 2)
            if epoch <= history.latest_epoch or start_offset < 0 or (
                history._starts and start_offset <= history._starts[-1]
            ):
                raise CorruptRecord(
                    f"leader-epoch checkpoint line {number} ({line!r}) is not ascending or is negative"
                )
            history.assign(epoch, start_offset)
        return history

    def __eq__(self, other: object) -> bool:
        return isinstance(other, EpochHistory) and self.entries == other.entries

    def __repr__(self) -> str:
        return f"EpochHistory({list(self.entries)!r})"


def _parse_ints(line: str, number: int, expected: int) -> list[int]:
    parts = line.split()
    try:
        values = [int(part) for part in parts]
    except ValueError:
        values = []
    if len(values) != expected or len(parts) != expected:
        raise CorruptRecord(
            f"leader-epoch checkpoint line {number} ({line!r}) should hold {expected} integer(s)"
        )
    return values
