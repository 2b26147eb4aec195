"""Idempotent-producer state of one partition replica: which sequences are already in the log.

An idempotent producer stamps each batch with its ``producer_id`` and the ``base_sequence``
of its first record; sequences of one producer on one partition are consecutive. For every
producer id the table remembers its next expected sequence and the last
``batches_remembered`` batches in the log (first and last sequence, base offset), so the
leader can answer a retried batch with its original base offset instead of appending it twice.

Decisions of ``check`` for a batch with producer id ``p``:

* ``p == -1``: not idempotent, always appended.
* ``p`` unknown (never seen, or forgotten as least recently used): appended if its batch
  starts at sequence 0 (a new producer); otherwise ``UnknownProducer``, a kind of
  ``OutOfOrderSequence``. Accepting it would let a producer whose first batches failed
  (e.g. ``NotLeader`` during an election) while a later one waited get the later one
  appended and the first ones refused for ever as out of order. A producer whose state
  really is gone (its batches left the log, or it was forgotten) continues under a new
  producer id (``client.sender``). Forgetting has a price: a retry of a batch whose
  producer was forgotten is appended again, so ``producer_ids_max`` must exceed the number
  of producers writing to a partition at once.
* the batch's sequences match a remembered batch exactly: a retry, answered with that
  batch's base offset.
* ``base_sequence`` is the next expected sequence: appended.
* anything else (a gap, an overlap, or an old batch no longer remembered):
  ``OutOfOrderSequence``.

Both leader and followers ``record`` every idempotent batch they append, so a new leader
deduplicates retries of batches its predecessor appended. After a log truncation the
remembered batches at or past the truncation offset are dropped (``truncate_from``) and the
next expected sequence moves back to the first sequence dropped. The remaining batches are
still in the log and still the producer's latest ones, so the table stays exact without
rereading the log. A producer keeps its entry even when every remembered batch went: older
batches of it are still in the log (the table remembers only the latest ones), and a
producer believed unknown would have a retry of one of them appended twice. Only a
producer whose batch at sequence 0 was truncated has nothing left in the log; it is forgotten.

Why the shorter memory after a truncation is enough: a producer has at most
``batches_remembered`` batches unacknowledged (its in-flight bound), and every batch before
those was acknowledged, so committed, so never truncated. The batches it may retry are
therefore among the remembered ones that survive, or truncated (and then appended again).
For the same reason a truncation never reaches below a producer's oldest remembered batch
unless acknowledged batches are cut (a leader that lost its unflushed tail); the table
cannot see older batches, so then its next sequence may be too high and the producer's
retries are refused (``OutOfOrderSequence``), never appended twice.

Bounds: at most ``producer_ids_max`` ids, each with at most ``batches_remembered`` batches.
Sequences are int32 and do not wrap: a producer must take a new producer id before 2**31
records (the Kafka wrap-around is not implemented).
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass

from mafka4.batch_frame import NO_PRODUCER_ID, BatchHeader
from mafka4.errors import OutOfOrderSequence, UnknownProducer


@dataclass(frozen=True, slots=True)
class RememberedBatch:
    base_sequence: int
    last_sequence: int
    base_offset: int


class _Producer:
    """One producer's next expected sequence and its latest batches in the log (oldest first)."""

    __slots__ = ("next_sequence", "batches")

    def __init__(self, batches_remembered: int):
        self.next_sequence = 0
        self.batches: deque[RememberedBatch] = deque(maxlen=batches_remembered)


class ProducerStateTable:
    """Per-partition memory of recent idempotent batches, bounded in ids and batches."""

    __slots__ = ("_batches_remembered", "_producer_ids_max", "_producers")

    def __init__(self, batches_remembered: int, producer_ids_max: int):
        assert batches_remembered >= 1 and producer_ids_max >= 1
        self._batches_remembered = batches_remembered
        self._producer_ids_max = producer_ids_max
        # Insertion order is recency order: the first id is the least recently used.
        self._producers: OrderedDict[int, _Producer] = OrderedDict()

    def __len__(self) -> int:
        return len(self._producers)

    def remembered(self, producer_id: int) -> tuple[RememberedBatch, ...]:
        producer = self._producers.get(producer_id)
        return tuple(producer.batches) if producer is not None else ()

    def next_sequence(self, producer_id: int) -> int | None:
        """The sequence the next batch of ``producer_id`` must start at; None if unknown."""
        producer = self._producers.get(producer_id)
        return producer.next_sequence if producer is not None else None

    def check(self, header: BatchHeader) -> int | None:
        """None to append ``header``'s batch, or the base offset of the batch it retries."""
        if header.producer_id == NO_PRODUCER_ID:
            return None
        producer = self._producers.get(header.producer_id)
        if producer is None:
            if header.base_sequence == 0:
                return None
            raise UnknownProducer(
                f"producer {header.producer_id} is unknown to this partition and its batch starts at "
                f"sequence {header.base_sequence}, not 0: resend its earlier batches first; if none is "
                f"unacknowledged, its state is gone here, continue under a new producer id"
            )
        expected = producer.next_sequence
        if header.base_sequence == expected:
            return None
        for batch in producer.batches:
            if batch.base_sequence == header.base_sequence and batch.last_sequence == header.last_sequence:
                return batch.base_offset
        if header.base_sequence > expected:
            raise OutOfOrderSequence(
                f"producer {header.producer_id} sent sequence {header.base_sequence} but the "
                f"partition expects {expected}: an earlier batch was lost or is still in flight; "
                f"resend the unacknowledged batches in sequence order"
            )
        oldest = producer.batches[0].base_sequence if producer.batches else expected
        raise OutOfOrderSequence(
            f"producer {header.producer_id} sent sequences {header.base_sequence}..{header.last_sequence} "
            f"which are neither next ({expected}) nor one of the last {len(producer.batches)} batches "
            f"(sequences {oldest}..{expected - 1}): the batch is too old to deduplicate; "
            f"do not resend batches that were already acknowledged"
        )

    def record(self, header: BatchHeader) -> None:
        """Remember a batch that is now in the log (leader and followers alike)."""
        if header.producer_id == NO_PRODUCER_ID:
            return
        assert header.base_sequence >= 0, f"idempotent batch with base sequence {header.base_sequence}"
        producer = self._producers.get(header.producer_id)
        if producer is None:
            producer = _Producer(self._batches_remembered)
            self._producers[header.producer_id] = producer
            if len(self._producers) > self._producer_ids_max:
                self._producers.popitem(last=False)
        else:
            self._producers.move_to_end(header.producer_id)
            assert not producer.batches or header.base_offset > producer.batches[-1].base_offset, (
                f"producer {header.producer_id}: batch at {header.base_offset} recorded after one at "
                f"{producer.batches[-1].base_offset}"
            )
        producer.batches.append(RememberedBatch(header.base_sequence, header.last_sequence, header.base_offset))
        producer.next_sequence = header.last_sequence + 1

    def truncate_from(self, offset: int) -> None:
        """Forget batches at or after ``offset``, once the log was truncated to ``offset``."""
        emptied = []
        for producer_id, producer in self._producers.items():
            while producer.batches and producer.batches[-1].base_offset >= offset:
                producer.next_sequence = producer.batches.pop().base_sequence
            if producer.next_sequence == 0:
                emptied.append(producer_id)  # its first batch went: nothing of it is left in the log
        for producer_id in emptied:
            del self._producers[producer_id]
