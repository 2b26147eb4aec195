"""Idempotent-producer state of one partition replica: which sequences are already in the log.

An idempotent producer stamps each batch with its ``producer_id`` and the ``base_sequence``
of its first record; sequences of one producer on one partition are consecutive. For every
producer id the table remembers the last ``batches_remembered`` batches in the log (first and
last sequence, base offset), so the leader can answer a retried batch with its original base
offset instead of appending it twice.

Decisions of ``check`` for a batch with producer id ``p``:

* ``p == -1``: not idempotent, always appended.
* ``p`` unknown (never seen, or forgotten as least recently used): appended whatever its
  sequence, as Kafka accepts a producer whose state expired. The price: a retry of a batch
  whose producer was forgotten is appended again, so ``producer_ids_max`` must exceed the
  number of producers writing to a partition at once.
* the batch's sequences match a remembered batch exactly: a retry, answered with that
  batch's base offset.
* ``base_sequence`` is the next expected sequence: appended.
* anything else (a gap, an overlap, or an old batch no longer remembered):
  ``OutOfOrderSequence``.

Both leader and followers ``record`` every idempotent batch they append, so a new leader
deduplicates retries of batches its predecessor appended. After a log truncation the
remembered batches at or past the truncation offset are dropped (``truncate_from``); the
remaining ones are still in the log, so the table stays exact without rereading the log.

Bounds: at most ``producer_ids_max`` ids, each with at most ``batches_remembered`` batches.
Sequences are int32 and do not wrap: a producer must take a new producer id before 2**31
records (the Kafka wrap-around is not implemented).
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass

from mafka4.errors import OutOfOrderSequence
from mafka4.records import NO_PRODUCER_ID, BatchHeader


@dataclass(frozen=True, slots=True)
class RememberedBatch:
    base_sequence: int
    last_sequence: int
    base_offset: int


class ProducerStateTable:
    """Per-partition memory of recent idempotent batches, bounded in ids and batches."""

    __slots__ = ("_batches_remembered", "_producer_ids_max", "_producers")

    def __init__(self, batches_remembered: int, producer_ids_max: int):
        assert batches_remembered >= 1 and producer_ids_max >= 1
        self._batches_remembered = batches_remembered
        self._producer_ids_max = producer_ids_max
        # Insertion order is recency order: the first id is the least recently used.
        self._producers: OrderedDict[int, deque[RememberedBatch]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._producers)

    def remembered(self, producer_id: int) -> tuple[RememberedBatch, ...]:
        return tuple(self._producers.get(producer_id, ()))

    def next_sequence(self, producer_id: int) -> int | None:
        """The sequence the next batch of ``producer_id`` must start at; None if unknown."""
        batches = self._producers.get(producer_id)
        return batches[-1].last_sequence + 1 if batches else None

    def check(self, header: BatchHeader) -> int | None:
        """None to append ``header``'s batch, or the base offset of the batch it retries."""
        if header.producer_id == NO_PRODUCER_ID:
            return None
        batches = self._producers.get(header.producer_id)
        if not batches:
            return None
        expected = batches[-1].last_sequence + 1
        if header.base_sequence == expected:
            return None
        for batch in batches:
            if batch.base_sequence == header.base_sequence and batch.last_sequence == header.last_sequence:
                return batch.base_offset
        if header.base_sequence > expected:
            raise OutOfOrderSequence(
                f"producer {header.producer_id} sent sequence {header.base_sequence} but the "
                f"partition expects {expected}: an earlier batch was lost or is still in flight; "
                f"resend the unacknowledged batches in sequence order"
            )
        oldest = batches[0].base_sequence
        raise OutOfOrderSequence(
            f"producer {header.producer_id} sent sequences {header.base_sequence}..{header.last_sequence} "
            f"which are neither next ({expected}) nor one of the last {len(batches)} batches "
            f"(sequences {oldest}..{expected - 1}): the batch is too old to deduplicate; "
            f"do not resend batches that were already acknowledged"
        )

    def record(self, header: BatchHeader) -> None:
        """Remember a batch that is now in the log (leader and followers alike)."""
        if header.producer_id == NO_PRODUCER_ID:
            return
        assert header.base_sequence >= 0, f"idempotent batch with base sequence {header.base_sequence}"
        batches = self._producers.get(header.producer_id)
        if batches is None:
            batches = deque(maxlen=self._batches_remembered)
            self._producers[header.producer_id] = batches
            if len(self._producers) > self._producer_ids_max:
                self._producers.popitem(last=False)
        else:
            self._producers.move_to_end(header.producer_id)
            assert header.base_offset > batches[-1].base_offset, (
                f"producer {header.producer_id}: batch at {header.base_offset} recorded after one at "
                f"{batches[-1].base_offset}"
            )
        batches.append(RememberedBatch(header.base_sequence, header.last_sequence, header.base_offset))

    def truncate_from(self, offset: int) -> None:
        """Forget batches at or after ``offset``, once the log was truncated to ``offset``."""
        emptied = []
        for producer_id, batches in self._producers.items():
            while batches and batches[-1].base_offset >= offset:
                batches.pop()
            if not batches:
                emptied.append(producer_id)
        for producer_id in emptied:
            del self._producers[producer_id]

    def clear(self) -> None:
        """Forget everything, before rebuilding from the log's batch headers."""
        self._producers.clear()
