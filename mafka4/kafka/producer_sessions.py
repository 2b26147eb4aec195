"""What a read node's Kafka listener remembers of idempotent Kafka producers (pure).

An idempotent Kafka producer (confluent-kafka with ``enable.idempotence``, kafka-python by
default) holds a producer id and epoch (``InitProducerId``, ``kafka.producer_handlers``) and
numbers the records it sends to each partition: a batch carries the sequence of its first
record, and the next batch to that partition starts where it ended. Per (producer id, topic,
Kafka partition) the listener remembers the producer's epoch, the sequence it expects next and
the producer's last ``batches_remembered`` batches (base sequence, record count, the base offset
it answered), so that the retry of a batch whose answer was lost is answered again instead of
appended twice.

``admit`` decides before anything is appended:

- **NEW**: append it, then call ``recorded``. The next sequence of a known producer, sequence 0
  of an unknown one, or sequence 0 of a newer epoch (the producer bumped its epoch: what was
  remembered of its older epoch is forgotten).
- **DUPLICATE**: the batch (base sequence and count) is one of the remembered ones: answer its
  base offset and append nothing, as Kafka answers a retry.
- **OUT_OF_ORDER** (OUT_OF_ORDER_SEQUENCE_NUMBER): any other sequence of a known producer (a
  gap: a batch before it failed, and the client resends from there; an overlap; a batch older
  than the remembered ones), or a newer epoch that does not start at sequence 0.
- **FENCED** (INVALID_PRODUCER_EPOCH): an epoch older than the remembered one.
- **UNKNOWN**: no entry for the producer here (never seen, forgotten as the least recently
  used, or made in an earlier term, below) and a sequence other than 0. Its earlier batches
  went to another read node while that one led the partition, or to this node before it
  restarted. The batch is appended and the producer remembered from there on: this is what
  Kafka brokers do since 2.5 (KIP-360: a producer without state "accept[s] writes with any
  sequence number"), and the one answer that lets every client go on by itself. Kafka's older
  answer, UNKNOWN_PRODUCER_ID, makes librdkafka fail the producer for good when the batch was a
  retry (its "unable to retry without risking duplication/reordering"; exactly the case after a
  restart or a leader change) and only a first try recovers (a new producer id, sequences from
  0, the batch sent again); kafka-python bumps its epoch and sends the batch again. Either way
  a batch that was appended before the state was lost is appended again: the answer only
  decides whether the producer survives. The decision stays distinct from NEW so that the
  listener can count and log it.

**Terms.** Every entry remembers the term it was made in: what the caller passes to tell one
leadership of the partition from the next (the VP's leader epoch; for a partition forwarded by
number, a number of the live brokers). An entry of another term is stale: the partition was led
elsewhere in between, and the producer's batches there are unknown here. It is dropped and the
producer is UNKNOWN. Kept, it would expect an old sequence and answer the producer's next batch
OUT_OF_ORDER, which librdkafka takes as a fatal loss of sync for the oldest batch in flight.

**Entries are made by ``admit``**, before the append: if the append fails, the producer's later
batches (already in flight behind it) find the entry expecting the failed one's sequence and get
OUT_OF_ORDER (the client then resends from the failed one) instead of being appended before it.

**Sequences** are int32 and wrap from 2**31 - 1 to 0, as Kafka's do. **Epochs** are int16.

**Bounds**: at most ``entries_max`` entries, the least recently used (admitted or recorded)
forgotten first; each with at most ``batches_remembered`` batches.

The caller runs ``admit`` -> append -> ``recorded`` of one entry without another ``admit`` of it
in between (the listener serves a connection's requests one at a time and holds a lock per
entry across the append, for a client that retries on a second connection).
"""

from __future__ import annotations

import enum
from collections import OrderedDict
from dataclasses import dataclass

from mafka4.limits import KAFKA_PRODUCER_BATCHES_REMEMBERED

SEQUENCES = 2**31  # a batch's base sequence is an int32 and wraps to 0 after 2**31 - 1
EPOCH_LAST = 2**15 - 1  # a producer epoch is an int16


class Decision(enum.Enum):
    NEW = "new"
    DUPLICATE = "duplicate"
    OUT_OF_ORDER = "out of order"
    FENCED = "fenced"
    UNKNOWN = "unknown"


APPENDED = frozenset({Decision.NEW, Decision.UNKNOWN})  # the decisions whose batch is appended


@dataclass(frozen=True, slots=True)
class Admission:
    decision: Decision
    base_offset: int = -1  # DUPLICATE: the base offset the batch was answered the first time
    reason: str = ""  # OUT_OF_ORDER, FENCED, UNKNOWN: what happened, for the answer and the log


@dataclass(frozen=True, slots=True)
class RememberedBatch:
    base_sequence: int
    count: int
    base_offset: int


class _Entry:
    """One producer on one partition: its epoch, the term it was made in, the sequence it
    expects next and its last batches (oldest first)."""

    __slots__ = ("epoch", "term", "next_sequence", "batches")

    def __init__(self, epoch: int, term: int, next_sequence: int):
        self.epoch, self.term, self.next_sequence = epoch, term, next_sequence
        self.batches: tuple[RememberedBatch, ...] = ()


def next_sequence(base_sequence: int, count: int) -> int:
    """The sequence after a batch of ``count`` records from ``base_sequence`` (wrapping)."""
    return (base_sequence + count) % SEQUENCES


class ProducerSessions:
    """The listener's memory of idempotent producers; see the module docstring."""

    __slots__ = ("_entries_max", "_batches_remembered", "_entries", "_keys_by_producer")

    def __init__(self, entries_max: int, batches_remembered: int = KAFKA_PRODUCER_BATCHES_REMEMBERED):
        assert entries_max >= 1 and batches_remembered >= 1, (entries_max, batches_remembered)
        self._entries_max, self._batches_remembered = entries_max, batches_remembered
        # Insertion order is recency order: the first entry is the least recently used.
        self._entries: OrderedDict[tuple[int, str, int], _Entry] = OrderedDict()
        self._keys_by_producer: dict[int, set[tuple[str, int]]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def remembered(self, producer_id: int, topic: str, partition: int) -> tuple[RememberedBatch, ...]:
        entry = self._entries.get((producer_id, topic, partition))
        return () if entry is None else entry.batches

    def expected(self, producer_id: int, topic: str, partition: int) -> tuple[int, int] | None:
        """``(epoch, next sequence)`` of the producer on the partition; None if it has no entry."""
        entry = self._entries.get((producer_id, topic, partition))
        return None if entry is None else (entry.epoch, entry.next_sequence)

    def admit(self, producer_id: int, epoch: int, topic: str, partition: int, base_sequence: int, count: int,
              term: int = 0) -> Admission:
        """What to do with a batch of ``count`` records from ``base_sequence``; see the module docstring."""
        _check_batch(producer_id, epoch, base_sequence, count)
        key = (producer_id, topic, partition)
        entry = self._entries.get(key)
        if entry is not None and entry.term != term:
            self._drop(key)
            entry = None
        if entry is None:
            self._add(key, _Entry(epoch, term, base_sequence))
            if base_sequence == 0:
                return Admission(Decision.NEW)
            return Admission(Decision.UNKNOWN, reason=(
                f"producer {producer_id} is unknown to this node for {topic} [{partition}] and its batch starts at "
                f"sequence {base_sequence}: appended as a new producer's (its state was lost: the partition was led "
                f"elsewhere, the node restarted, or it was forgotten as the least recently used)"))
        self._entries.move_to_end(key)
        if epoch < entry.epoch:
            return Admission(Decision.FENCED, reason=(
                f"producer {producer_id} sent epoch {epoch} to {topic} [{partition}], which has seen its epoch "
                f"{entry.epoch}: a newer instance of this producer took over"))
        if epoch > entry.epoch:
            if base_sequence != 0:
                return Admission(Decision.OUT_OF_ORDER, reason=(
                    f"producer {producer_id} sent the first batch of its epoch {epoch} to {topic} [{partition}] "
                    f"with sequence {base_sequence}: a new epoch starts at sequence 0"))
            entry.epoch, entry.next_sequence, entry.batches = epoch, 0, ()
            return Admission(Decision.NEW)
        for batch in entry.batches:
            if batch.base_sequence == base_sequence and batch.count == count:
                return Admission(Decision.DUPLICATE, base_offset=batch.base_offset)
        if base_sequence == entry.next_sequence:
            return Admission(Decision.NEW)
        return Admission(Decision.OUT_OF_ORDER, reason=(
            f"producer {producer_id} sent sequence {base_sequence} ({count} records) to {topic} [{partition}], "
            f"which expects sequence {entry.next_sequence}: a batch before it failed or is still on its way "
            f"(resend from the oldest unacknowledged one), or it is older than the last "
            f"{len(entry.batches)} batches remembered"))

    def recorded(self, producer_id: int, epoch: int, topic: str, partition: int, base_sequence: int, count: int,
                 base_offset: int, term: int = 0) -> None:
        """Remember an admitted batch that was appended at ``base_offset`` (the offset it is answered)."""
        _check_batch(producer_id, epoch, base_sequence, count)
        key = (producer_id, topic, partition)
        entry = self._entries.get(key)
        if entry is not None and epoch < entry.epoch:
            return  # the producer bumped its epoch while this batch was appended: its old sequences are gone
        if entry is None or entry.term != term or epoch > entry.epoch:
            # Forgotten (or superseded) while the batch was appended: remembered from this batch on.
            self._drop(key)
            entry = _Entry(epoch, term, base_sequence)
            self._add(key, entry)
        assert base_sequence == entry.next_sequence, (
            f"producer {producer_id} on {topic} [{partition}]: batch at sequence {base_sequence} recorded where "
            f"{entry.next_sequence} was expected (was it admitted?)")
        entry.batches = (*entry.batches, RememberedBatch(base_sequence, count, base_offset))[-self._batches_remembered:]
        entry.next_sequence = next_sequence(base_sequence, count)
        self._entries.move_to_end(key)
        _check_entry(entry, self._batches_remembered)

    def bump(self, producer_id: int, epoch: int) -> None:
        """The producer took epoch ``epoch`` (InitProducerId with its id and previous epoch): what
        is remembered of its older epochs is forgotten, and their batches are FENCED from now on."""
        assert 0 <= epoch <= EPOCH_LAST, epoch
        for topic, partition in self._keys_by_producer.get(producer_id, ()):
            entry = self._entries[(producer_id, topic, partition)]
            if entry.epoch < epoch:
                entry.epoch, entry.next_sequence, entry.batches = epoch, 0, ()

    def _add(self, key: tuple[int, str, int], entry: _Entry) -> None:
        assert key not in self._entries, key
        self._entries[key] = entry
        self._keys_by_producer.setdefault(key[0], set()).add(key[1:])
        while len(self._entries) > self._entries_max:
            self._drop(next(iter(self._entries)))

    def _drop(self, key: tuple[int, str, int]) -> None:
        if self._entries.pop(key, None) is None:
            return
        keys = self._keys_by_producer[key[0]]
        keys.discard(key[1:])
        if not keys:
            del self._keys_by_producer[key[0]]


def _check_batch(producer_id: int, epoch: int, base_sequence: int, count: int) -> None:
    assert producer_id >= 0, f"producer id {producer_id}: only idempotent batches are admitted"
    assert 0 <= epoch <= EPOCH_LAST, f"producer epoch {epoch}"
    assert 0 <= base_sequence < SEQUENCES, f"base sequence {base_sequence}"
    assert count >= 1, f"a batch of {count} records"


def _check_entry(entry: _Entry, batches_remembered: int) -> None:
    """The remembered batches follow each other without a gap and end where the next is expected."""
    assert len(entry.batches) <= batches_remembered, len(entry.batches)
    for before, after in zip(entry.batches, entry.batches[1:]):
        assert next_sequence(before.base_sequence, before.count) == after.base_sequence, (before, after)
    if entry.batches:
        last = entry.batches[-1]
        assert next_sequence(last.base_sequence, last.count) == entry.next_sequence, (last, entry.next_sequence)
