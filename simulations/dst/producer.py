"""Idempotent producers with acks=all: the simulator's ``client.sender`` pipelines.

One pipeline per partition, as ``sender._PartitionPipeline``: up to
``IN_FLIGHT_BATCHES_MAX`` batches in flight, each stamped once with (producer id,
sequence) and answered in order. When the oldest batch fails (an error answer or a request
timeout), the pipeline lets every batch in flight settle, answers those that succeeded, and
resends the rest in sequence order with the same producer id and sequences, after a backoff
and a metadata refresh; no new batch is sent until the resent ones are acknowledged. If the
oldest is refused as ``UnknownProducer`` (the leader has no state of the producer id), the
rest are resent under a new producer id from sequence 0. Batches never expire here
(``delivery_timeout_ms`` is infinite), so a drained run must acknowledge every batch: a
stuck pipeline is a finding.

The workload: every ``produce_interval_ms`` a producer makes one batch of 1 to 3 records for
a random partition, keyed (keys routed by ``client.partitioner.Partitioner``) or keyless.
Values are unique (``<producer>-<n>``). History: ``Send`` when a record is made, ``Ack`` for
every record of an acknowledged batch.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from mafka4.client.partitioner import Partitioner
from mafka4.limits import Acks
from mafka4.records import encode_batch
from simulations.checkers import Ack, Send
from simulations.dst import messages as m
from simulations.dst.coordinator import NAME as COORDINATOR
from simulations.dst.env import Env

IN_FLIGHT_BATCHES_MAX = 5
KEYS = tuple(b"key-%d" % i for i in range(12))
RETRY_BACKOFF_MS = 20
METADATA_MAX_AGE_MS = 200
PRODUCER_ID_STRIDE = 10_000  # above every first producer id: renewed ids never collide


@dataclass(slots=True)
class _Batch:
    records: list[tuple[bytes | None, bytes, int, None]]
    base_sequence: int = -1
    encoded: bytes = b""
    attempts: int = 0


@dataclass(slots=True)
class _InFlight:
    batch: _Batch
    request_id: int
    sent_ms: int
    base_offset: int | None = None
    failure: m.Failure | None = None

    @property
    def settled(self) -> bool:
        return self.base_offset is not None or self.failure is not None


@dataclass(slots=True)
class _Pipeline:
    partition: int
    producer_id: int
    next_sequence: int = 0
    queue: deque[_Batch] = field(default_factory=deque)
    in_flight: list[_InFlight] = field(default_factory=list)
    resend: list[_Batch] = field(default_factory=list)
    backoff_until_ms: int = 0
    # Sequences resent and not yet answered: new batches wait until it is empty.
    resent: set[int] = field(default_factory=set)
    # How many times the pipeline took a new producer id (after UnknownProducer).
    incarnation: int = 0


class SimProducer:
    def __init__(self, env: Env, index: int):
        self.env = env
        self.name = f"prod{index}"
        options = env.options
        self._partitioner = Partitioner("t", options.partitions)
        self._keys = {p: [k for k in KEYS if self._partitioner.partition(k, None) == p] for p in range(options.partitions)}
        self.index = index
        self._pipelines = [_Pipeline(p, self._first_producer_id(p)) for p in range(options.partitions)]
        self._leaders: dict[int, str] = {}
        self._metadata_request = 0
        self._metadata_at_ms = -METADATA_MAX_AGE_MS
        self.batches_made = 0
        self.records_acked = 0
        self._looping = False
        env.network.register(self.name, self.handle)

    @property
    def done(self) -> bool:
        options = self.env.options
        making = self.batches_made < options.batches_per_producer and self.env.now_ms < options.chaos_ms
        return not making and self.unacknowledged() == 0

    def unacknowledged(self) -> int:
        return sum(len(p.queue) + len(p.in_flight) + len(p.resend) for p in self._pipelines)

    def start(self) -> None:
        self._loop()

    def _loop(self) -> None:
        self._looping = False
        options = self.env.options
        if self.batches_made < options.batches_per_producer and self.env.now_ms < options.chaos_ms:
            self._make_batch()
        self._pump()
        self._keep_looping()

    def _keep_looping(self) -> None:
        if not self.done and not self._looping:
            self._looping = True
            self.env.scheduler.after(self.env.jitter(self.env.options.produce_interval_ms), self._loop)

    def make_filler(self, partition: int) -> None:
        """One more batch for ``partition`` during the drain: it carries the partition past a
        split cut that was set above its log end (children wait for their parents' cuts)."""
        if not self._pipelines[partition].queue:
            self._make_batch(partition)
            self._pump()
            self._keep_looping()

    def _make_batch(self, partition: int | None = None) -> None:
        rng = self.env.rng
        if partition is None:
            partition = rng.randrange(self.env.options.partitions)
        records = []
        for _ in range(rng.randint(1, 3)):
            keys = self._keys[partition]
            key = rng.choice(keys) if keys and rng.random() < 0.8 else None
            value = b"%s-%d" % (self.name.encode(), self.env.request_id())
            records.append((key, value, self.env.now_ms, None))
            self.env.history.append(Send(self.name, key, value, partition))
        self._pipelines[partition].queue.append(_Batch(records))
        self.batches_made += 1

    # --- metadata ------------------------------------------------------------------------

    def _refresh(self, force: bool = False) -> None:
        if force or self.env.now_ms - self._metadata_at_ms >= METADATA_MAX_AGE_MS:
            self._metadata_at_ms = self.env.now_ms
            self.env.network.send(self.name, COORDINATOR, m.MetadataRequest(self.env.request_id()))

    def _on_metadata(self, message: m.Metadata) -> None:
        if message.request_id < self._metadata_request:
            return  # an older read arriving late: keep the newer one
        self._metadata_request = message.request_id
        self._leaders = {state.partition: state.leader for state in message.partitions}
        self._pump()

    # --- the pipelines -------------------------------------------------------------------

    def _pump(self) -> None:
        timeout_ms = self.env.options.request_timeout_ms
        for pipeline in self._pipelines:
            for sent in pipeline.in_flight:
                if not sent.settled and self.env.now_ms - sent.sent_ms >= timeout_ms:
                    sent.failure = m.Failure("RequestTimedOut", True, "no answer within the request timeout")
            self._answer_in_order(pipeline)
            self._send_more(pipeline)
        if not self._leaders:
            self._refresh()

    def _answer_in_order(self, pipeline: _Pipeline) -> None:
        while pipeline.in_flight and pipeline.in_flight[0].base_offset is not None:
            self._acknowledged(pipeline, pipeline.in_flight.pop(0))
        if not pipeline.in_flight or pipeline.in_flight[0].failure is None:
            return
        if not all(sent.settled for sent in pipeline.in_flight):
            return  # let every batch in flight settle first (sender._recover)
        state_lost = pipeline.in_flight[0].failure.error == "UnknownProducer"
        for sent in pipeline.in_flight:
            if sent.base_offset is not None:
                self._acknowledged(pipeline, sent)
            else:
                pipeline.resend.append(sent.batch)
        pipeline.in_flight.clear()
        pipeline.resend.sort(key=lambda batch: batch.base_sequence)
        if state_lost:
            self._renumber(pipeline)
        attempts = min(batch.attempts for batch in pipeline.resend)
        pipeline.backoff_until_ms = self.env.now_ms + RETRY_BACKOFF_MS * min(attempts, 5)
        self._refresh(force=True)

    def _renumber(self, pipeline: _Pipeline) -> None:
        """A new producer id, and the batches to resend stamped from sequence 0 under it."""
        pipeline.incarnation += 1
        pipeline.producer_id = self._first_producer_id(pipeline.partition) + PRODUCER_ID_STRIDE * pipeline.incarnation
        pipeline.next_sequence = 0
        pipeline.resent.clear()
        for batch in pipeline.resend:
            self._stamp(pipeline, batch)
        self.env.count("producer_ids_renewed")

    def _first_producer_id(self, partition: int) -> int:
        return 1000 + 100 * self.index + partition

    def _stamp(self, pipeline: _Pipeline, batch: _Batch) -> None:
        batch.base_sequence = pipeline.next_sequence
        batch.encoded = encode_batch(batch.records, pipeline.producer_id, batch.base_sequence)
        pipeline.next_sequence += len(batch.records)

    def _acknowledged(self, pipeline: _Pipeline, sent: _InFlight) -> None:
        pipeline.resent.discard(sent.batch.base_sequence)
        for index, (key, value, _, _) in enumerate(sent.batch.records):
            self.env.history.append(Ack(key, value, pipeline.partition, sent.base_offset + index))
        self.records_acked += len(sent.batch.records)

    def _send_more(self, pipeline: _Pipeline) -> None:
        leader = self._leaders.get(pipeline.partition)
        if leader is None or self.env.now_ms < pipeline.backoff_until_ms:
            return
        if pipeline.in_flight and pipeline.in_flight[0].failure is not None:
            return  # recovering
        while len(pipeline.in_flight) < IN_FLIGHT_BATCHES_MAX:
            if pipeline.resend:
                batch = pipeline.resend.pop(0)
                pipeline.resent.add(batch.base_sequence)
            elif pipeline.queue and not pipeline.resent and not any(s.failure is not None for s in pipeline.in_flight):
                batch = pipeline.queue.popleft()
                self._stamp(pipeline, batch)
            else:
                return
            batch.attempts += 1
            request_id = self.env.request_id()
            pipeline.in_flight.append(_InFlight(batch, request_id, self.env.now_ms))
            self.env.network.send(self.name, leader, m.Produce(request_id, pipeline.partition, batch.encoded, Acks.ALL))

    def handle(self, source: str, message: object) -> None:
        if isinstance(message, m.Metadata):
            self._on_metadata(message)
            return
        assert isinstance(message, m.ProduceResult), message
        for pipeline in self._pipelines:
            for sent in pipeline.in_flight:
                if sent.request_id == message.request_id and not sent.settled:
                    if message.failure is None:
                        sent.base_offset = message.base_offset
                    else:
                        sent.failure = message.failure
                    self._pump()
                    return
