"""The sender's rules for one partition, without I/O: which batch goes next, with which
sequence, what is answered, what is resent and when (pure).

``PipelineCore`` keeps up to ``in_flight_batches_max`` batches of one partition in flight and
answers them in order. Every batch carries (producer id, sequence), so the leader refuses
gaps and answers retries with the original offset: a retried batch is never appended twice,
and order holds because the leader only accepts the next sequence.

When the oldest batch in flight fails, the pipeline lets the rest settle, answers those that
succeeded, then (``Retry``) backs off, has its driver refresh the metadata, and resends all
unanswered batches in sequence order (``resend``). No new batch is sent until every resent one
is acknowledged: a new batch appended before a resent one arrives (Ray may start calls out of
order, or the resend fails again) would push the resent batch out of the leader's
deduplication window (``producer_batches_remembered``) although it may be in the log, and
every retry of it would then be refused as out of order.

A batch that fails for good (non-retriable error, or ``delivery_timeout_ms`` passed) leaves a
gap in the sequence, so the partition continues under a fresh producer id. So does a pipeline
whose oldest unacknowledged batch is answered ``UnknownProducer``: the leader has no state of
this producer id (expired, or a leader that never had its batches), so its sequence cannot
continue there; the unanswered batches are resent from sequence 0 under a fresh id, as
Kafka's producer does on UNKNOWN_PRODUCER_ID.

When new batches are taken. A pipeline takes batches from the accumulator when it is woken
while nothing is in flight (``woken``) and each time its oldest batch is answered
(``send_new`` after a ``step`` that answered it) -- not while it waits for an answer: a batch
that becomes ready meanwhile keeps growing in the accumulator until then.

The drivers: ``sender._PartitionPipeline`` runs the core on the producer's event loop with Ray
calls, and the deterministic simulator (``simulations.dst.producer``) runs it on a simulated
network and clock. A driver sends each ``InFlight`` it is given and reports its outcome
(``acknowledged`` / ``failed``, with the error's retriability, which only the driver can
judge), calls ``step`` and carries out what it returns. Producer ids come from the driver
(``new_producer_id``), so the core draws nothing random.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from mafka4.batch_frame import HEADER_BYTES
from mafka4.batch_payload import encode_record_arrays
from mafka4.client.partitioner import message_hash_column
from mafka4.errors import RequestTimedOut, UnknownProducer
from mafka4.limits import ProducerConfig

if TYPE_CHECKING:
    from mafka4.client.futures import BatchResult

SEQUENCE_MAX = 2**31 - 1


@dataclass(slots=True)
class ProducerBatch:
    """A batch on its way: its records until it is answered, and its send history.

    ``records`` are in payload form, ``(timestamp_delta_ms, key, value, headers or None)``
    relative to ``first_timestamp_ms`` (``batch_payload.encode_record_arrays``). ``lane_ids``: the
    records' lane ids (``batch_payload``'s lane-id column, 2 bytes each), made at the batch's first
    record in a lane, zeros for the trunk records before it; None while every record is in the trunk."""

    partition: int
    created_ms: float
    result: BatchResult
    records: list = field(default_factory=list)
    lane_ids: bytearray | None = None
    first_timestamp_ms: int = 0
    max_timestamp_ms: int = 0
    size_bytes: int = HEADER_BYTES
    attempts: int = 0
    encoded: bytes | None = None
    producer_id: int = -1
    base_sequence: int = -1
    sent_time_ms: float | None = None  # wall clock of the first attempt (``RecordMetadata.sent_time_ms``)


@dataclass(slots=True, eq=False)  # one attempt is one call: equal by identity
class InFlight:
    """One attempt at sending a batch, and its outcome once known."""

    batch: ProducerBatch
    request: object = None  # the driver's handle of the call (a future, a request id)
    base_offset: int | None = None
    error: BaseException | None = None
    retriable: bool = False

    @property
    def settled(self) -> bool:
        return self.base_offset is not None or self.error is not None


@dataclass(frozen=True, slots=True)
class Answer:
    """Answer ``batch`` to the user: its base offset (-1 with acks=0), or the error that failed it."""

    batch: ProducerBatch
    base_offset: int | None
    error: BaseException | None


@dataclass(frozen=True, slots=True)
class Retry:
    """The pipeline paused: wait ``backoff_ms``, forget the partition's leader, refresh the
    metadata (keep the old routes if that fails), then call ``resend``."""

    backoff_ms: int
    error: BaseException  # what failed the oldest batch


@dataclass(frozen=True, slots=True)
class Step:
    answers: tuple[Answer, ...] = ()
    retry: Retry | None = None

    def __bool__(self) -> bool:
        return bool(self.answers) or self.retry is not None


class PipelineCore:
    """In-order delivery of one partition's batches; see the module docstring."""

    def __init__(self, topic: str, partition: int, config: ProducerConfig, new_producer_id: Callable[[], int]):
        assert config.compression is not None, "the Producer resolves the default codec before the sender starts"
        self._topic = topic
        self._partition = partition
        self._config = config
        self._new_producer_id = new_producer_id
        self._producer_id = new_producer_id()
        self._next_sequence = 0
        self._in_flight: deque[InFlight] = deque()
        # Batches to resend once the driver has backed off and refreshed (a ``Retry`` is out).
        self._resend: list[ProducerBatch] | None = None
        self._renumber = False  # the batches to resend get sequences under a fresh producer id

    @property
    def in_flight(self) -> tuple[InFlight, ...]:
        return tuple(self._in_flight)

    @property
    def oldest(self) -> InFlight | None:
        return self._in_flight[0] if self._in_flight else None

    @property
    def retrying(self) -> bool:
        """A ``Retry`` was returned and ``resend`` not called yet."""
        return self._resend is not None

    @property
    def idle(self) -> bool:
        return not self._in_flight and self._resend is None

    # --- sending -------------------------------------------------------------------------

    def woken(self, pop_ready: Callable[[], ProducerBatch | None]) -> list[InFlight]:
        """Batches became ready or lingered: send them now if the pipeline is idle (else they
        wait until the oldest batch in flight is answered)."""
        return self.send_new(pop_ready) if self.idle else []

    def send_new(self, pop_ready: Callable[[], ProducerBatch | None]) -> list[InFlight]:
        """New batches from ``pop_ready`` (the accumulator), stamped, up to the in-flight limit;
        none while recovering or while a resent batch is unacknowledged."""
        sent = []
        while (len(self._in_flight) < self._config.in_flight_batches_max and self._resend is None
               and not self._failed_oldest() and not self._resend_in_flight()
               and (batch := pop_ready()) is not None):
            self._assign_sequence(batch)
            sent.append(self._attempt(batch))
        return sent

    def resend(self) -> list[InFlight]:
        """After a ``Retry``'s backoff and metadata refresh: the unanswered batches, in order."""
        assert self._resend is not None, "resend without a Retry"
        resend, self._resend = self._resend, None
        for batch in resend:
            if self._renumber:
                self._assign_sequence(batch)
        return [self._attempt(batch) for batch in resend]

    def abandon(self) -> list[ProducerBatch]:
        """Every batch in flight or waiting to be resent (the producer is closing)."""
        batches = [sent.batch for sent in self._in_flight] + (self._resend or [])
        self._in_flight.clear()
        self._resend = None
        return batches

    def _attempt(self, batch: ProducerBatch) -> InFlight:
        batch.attempts += 1
        sent = InFlight(batch)
        self._in_flight.append(sent)
        return sent

    def _assign_sequence(self, batch: ProducerBatch) -> None:
        if self._next_sequence + len(batch.records) > SEQUENCE_MAX:
            self._producer_id, self._next_sequence = self._new_producer_id(), 0
        batch.producer_id, batch.base_sequence = self._producer_id, self._next_sequence
        # With the key-hash column: the feeder splits the batch by it, decoding no record. Its keyless
        # hashes are made of the producer id and sequence, so a renumbered batch is encoded again.
        hashes = message_hash_column(batch.records, batch.producer_id, self._partition, batch.base_sequence)
        batch.encoded = encode_record_arrays(batch.records, batch.first_timestamp_ms, batch.max_timestamp_ms,
                                             batch.producer_id, batch.base_sequence, self._config.compression,
                                             message_hashes=hashes,
                                             lane_ids=None if batch.lane_ids is None else bytes(batch.lane_ids))
        self._next_sequence += len(batch.records)

    def _resend_in_flight(self) -> bool:
        """A resent batch is not acknowledged yet: new batches wait (see the module docstring)."""
        return any(sent.batch.attempts > 1 for sent in self._in_flight)

    def _failed_oldest(self) -> bool:
        return bool(self._in_flight) and self._in_flight[0].error is not None

    # --- outcomes ------------------------------------------------------------------------

    def acknowledged(self, sent: InFlight, base_offset: int) -> None:
        assert not sent.settled and sent in self._in_flight, "an outcome for a call not in flight"
        assert base_offset is not None
        sent.base_offset = base_offset

    def failed(self, sent: InFlight, error: BaseException, retriable: bool) -> None:
        assert not sent.settled and sent in self._in_flight, "an outcome for a call not in flight"
        sent.error, sent.retriable = error, retriable

    def step(self, now_ms: float) -> Step:
        """What the outcomes known so far decide: the oldest batch answered if it succeeded; if it
        failed and every batch in flight has settled, the recovery (answers and a ``Retry``).
        Empty while the oldest batch is unanswered, or failed with others still unsettled."""
        oldest = self.oldest
        if oldest is None or not oldest.settled:
            return Step()
        if oldest.error is None:
            self._in_flight.popleft()
            return Step((Answer(oldest.batch, oldest.base_offset, None),))
        if not all(sent.settled for sent in self._in_flight):
            return Step()
        return self._recover(oldest.error, now_ms)

    def _recover(self, error: BaseException, now_ms: float) -> Step:
        """Answer what succeeded or failed for good, and resend the rest in order."""
        answers, unanswered = [], []
        for sent in self._in_flight:
            if sent.error is None:
                answers.append(Answer(sent.batch, sent.base_offset, None))
            else:
                unanswered.append(sent)
        self._in_flight.clear()
        # The oldest unanswered batch is next in sequence: refused as unknown, the leader
        # has no state of this producer id and never will (see the module docstring).
        state_lost = isinstance(unanswered[0].error, UnknownProducer)
        gap = False
        resend = []
        delivery_timeout_ms = self._config.delivery_timeout_ms
        for sent in unanswered:
            batch = sent.batch
            expired = now_ms - batch.created_ms > delivery_timeout_ms
            if gap or not (expired or not sent.retriable):
                resend.append(batch)
                continue
            final = sent.error if not expired else RequestTimedOut(
                f"{self._topic}-{self._partition}: not acknowledged within delivery_timeout_ms="
                f"{delivery_timeout_ms} after {batch.attempts} attempt(s); last error: {sent.error}"
            )
            answers.append(Answer(batch, None, final))
            gap = True
        self._renumber = gap or state_lost
        if self._renumber:
            self._producer_id, self._next_sequence = self._new_producer_id(), 0
        if not resend:
            return Step(tuple(answers))
        self._resend = resend
        config = self._config
        backoff_ms = min(config.retry_backoff_ms * 2 ** min(resend[0].attempts - 1, 16), config.retry_backoff_ms_max)
        return Step(tuple(answers), Retry(backoff_ms, error))
