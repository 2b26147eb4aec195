"""Idempotent producers with acks=all: production's sender pipeline on the simulated network and clock.

What is production's code, run unchanged:

* batching: ``client.accumulator.RecordAccumulator`` (``linger_ms``, ``batch_bytes_max``, a
  lingered batch that keeps growing until its pipeline takes it);
* partitioning: ``client.partitioner.Partitioner`` (keys by hash, keyless messages sticky
  until their batch opens or fills);
* every rule of a partition's pipeline: ``client.sender_core.PipelineCore`` (the in-flight
  limit, producer ids and sequences, in-order answers, settling every call before resending,
  new batches held behind resends, a fresh producer id after ``UnknownProducer`` or a batch
  failed for good, the backoff), batches encoded with the configured codec
  (``ProducerConfig.compression``: ``$MAFKA4_COMPRESSION``, resolved as a ``Producer`` does);
* answers: ``RecordAccumulator.complete`` completes each record's future; the history is
  written by the futures' callbacks.

What this shell does as ``client.producer.Producer.send`` and ``client.sender`` do, on simulated
time: ``_send`` (reserve, partition, append, move the sticky partition, wake the pipeline or arm
the linger timer), the linger timers (``Sender._arm_linger``), and the pipeline loop
(``sender._PartitionPipeline.run``: outcomes in, ``step``, answers out; on a ``Retry``, wait
the backoff, refresh the metadata, then ``resend``).

What stands in for Ray and etcd:

* a produce call is a ``Produce`` message and its answer a ``ProduceResult``; a failure is
  rebuilt as the mafka4 error it names, with the retriability it carries (``ActorUnavailable``,
  a call to a replica that does not run there, is retriable, as Ray's ``ActorUnavailableError``
  is to the sender). A call with no answer within ``request_timeout_ms`` fails as a retriable
  ``RequestTimedOut``: the network may drop messages, where Ray reports a dead actor instead.
* routing: the partition leaders from the coordinator's metadata (``MetadataRequest``), read
  before the first message (a ``Producer`` reads the topic's metadata when it starts) and before
  every resend, keeping per partition the newest leader epoch (``Routing.refresh``); a refresh
  with no answer within ``request_timeout_ms`` keeps the old routes, as one that fails while
  etcd is away. Production also watches the partition keys; here leader changes are learnt
  only through failures and refreshes.
* producer ids count up per producer instead of being random.

The workload: every ``produce_interval_ms`` a producer sends 1 to 3 messages, keyed (from
``KEYS``) or keyless; values are unique (``<producer>-<n>``). A share of them (``lane_share``)
goes to a lane of ``options.lanes``, as ``Producer.send(lane=)`` sends it: the lane header first
(``batch_payload.laned_headers``) and the lane id to the accumulator (the batch's lane-id column).
The first message of a lane waits for the lane to open, as ``Producer._lane`` does: the producer
asks the coordinator (``OpenLane``, with the lane's fallback from the options: whoever opens a
lane sets its policy), remembers the lane id, then sends what waited, in order; a question not
answered within ``request_timeout_ms`` (or refused) is asked again. ``delivery_timeout_ms`` is
production's default, longer than any run, so nothing expires: a drained run must answer every
message, and a message failed for good fails the seed (``failures``). History: ``Send`` when a
message is sent (with the partition it went to), ``Ack`` when its future completes with an
offset.
"""

from __future__ import annotations

import math

from mafka4 import errors
from mafka4.batch_payload import laned_headers
from mafka4.client.accumulator import RECORD_OVERHEAD_BYTES, RecordAccumulator
from mafka4.client.futures import RecordMetadata
from mafka4.client.sender_core import InFlight, PipelineCore, ProducerBatch, Retry
from mafka4.errors import MafkaError, NotLeader, RequestTimedOut
from mafka4.physical.partition_state import PartitionState
from simulations.checkers import Ack, Send
from simulations.dst import messages as m
from simulations.dst.coordinator import NAME as COORDINATOR
from simulations.dst.env import Env

TOPIC = "t"
KEYS = tuple(b"key-%d" % i for i in range(12))
PRODUCER_IDS_PER_PRODUCER = 1_000_000  # producer ids of producer i: i * this + 1, + 2, ...


class RemoteFailure(MafkaError):
    """A failed call whose error is no mafka4 error (a missing actor): what the sender's
    ``_is_retriable`` would say of it travels with the failure."""


def error_of(failure: m.Failure) -> BaseException:
    """The error a failed call raises in production, from its ``messages.Failure``."""
    cls = getattr(errors, failure.error, None)
    if isinstance(cls, type) and issubclass(cls, MafkaError):
        error = cls(failure.text)
        assert error.retriable == failure.retriable, failure
        return error
    return RemoteFailure(f"{failure.error}: {failure.text}")


class SimProducer:
    def __init__(self, env: Env, index: int):
        self.env = env
        self.name = f"prod{index}"
        self.index = index
        options = env.options
        self.config = options.producer_config
        assert self.config.delivery_timeout_ms > options.chaos_ms + options.drain_ms_max, \
            "a message that expires would fail instead of showing a stuck pipeline"
        self._accumulator = RecordAccumulator(TOPIC, self.config, options.partitions)
        self._producer_ids = 0
        self._pipelines: list[PipelineCore] = [
            options.pipeline_class(TOPIC, p, self.config, self._new_producer_id) for p in range(options.partitions)]
        self._calls: dict[int, tuple[int, InFlight]] = {}  # request id -> (partition, call)
        self._leaders: dict[int, PartitionState] = {}
        self._refreshes: dict[int, int] = {}  # metadata request id -> partition waiting to resend (-1: start)
        self._started = False
        self._fillers: set[int] = set()  # partitions with a filler message unanswered
        self._lane_ids: dict[str, int] = {}  # lane -> its id, once the coordinator answered
        self._lane_waiting: dict[str, list[bytes | None]] = {}  # lane -> keys of the messages waiting for it
        self._lane_requests: dict[int, str] = {}  # OpenLane request id -> lane
        self.writes_made = 0
        self.unanswered = 0  # messages sent and not answered yet
        self.records_acked = 0
        self.failures: list[str] = []  # messages failed for good
        env.network.register(self.name, self.handle)

    @property
    def making(self) -> bool:
        options = self.env.options
        return self.writes_made < options.writes_per_producer and self.env.now_ms < options.chaos_ms

    @property
    def done(self) -> bool:
        return not self.making and self.unanswered == 0

    def start(self) -> None:
        """Read the metadata, then write (``_on_metadata`` starts the workload)."""
        self._refresh(-1)

    def _new_producer_id(self) -> int:
        self._producer_ids += 1
        assert self._producer_ids < PRODUCER_IDS_PER_PRODUCER
        return self.index * PRODUCER_IDS_PER_PRODUCER + self._producer_ids

    # --- the workload --------------------------------------------------------------------

    def _loop(self) -> None:
        if not self.making:
            return
        rng, options = self.env.rng, self.env.options
        for _ in range(rng.randint(1, 3)):
            key = rng.choice(KEYS) if rng.random() < 0.8 else None
            if options.lanes and rng.random() < options.lane_share:
                self._send_in_lane(rng.choice(options.lanes)[0], key)
            else:
                self._send(key)
        self.writes_made += 1
        self.env.scheduler.after(self.env.jitter(self.env.options.produce_interval_ms), self._loop)

    def make_filler(self, partition: int) -> None:
        """One keyless message to ``partition`` during the drain: it carries the partition past a
        split cut that was set above its log end (children wait for their parents' cuts)."""
        if self._started and partition not in self._fillers:
            self._fillers.add(partition)
            self._send(None, partition)

    def _send_in_lane(self, lane: str, key: bytes | None) -> None:
        """``Producer.send(lane=lane)``: at once if the lane's id is known, else after it opens (in order)."""
        if lane in self._lane_ids and lane not in self._lane_waiting:
            self._send(key, lane=lane)
            return
        self.unanswered += 1  # answered once sent and acknowledged: the run drains only after that
        first = lane not in self._lane_waiting
        self._lane_waiting.setdefault(lane, []).append(key)
        if first:
            self._open_lane(lane)

    def _open_lane(self, lane: str) -> None:
        request_id = self.env.request_id()
        self._lane_requests[request_id] = lane
        fallback = dict(self.env.options.lanes)[lane]
        self.env.network.send(self.name, COORDINATOR, m.OpenLane(request_id, lane, fallback))
        self.env.scheduler.after(self.env.options.request_timeout_ms, lambda: self._lane_unanswered(request_id))

    def _lane_unanswered(self, request_id: int) -> None:
        lane = self._lane_requests.pop(request_id, None)
        if lane is not None:
            self._open_lane(lane)

    def _on_lane_opened(self, message: m.LaneOpened) -> None:
        if message.request_id not in self._lane_requests or message.lane_id is None:
            return  # late or duplicated; refused: asked again at its timeout
        lane = self._lane_requests.pop(message.request_id)
        self._lane_ids[lane] = message.lane_id
        for key in self._lane_waiting.pop(lane, []):
            self.unanswered -= 1
            self._send(key, lane=lane)

    def _send(self, key: bytes | None, partition: int | None = None, lane: str = "") -> None:
        """``Producer.send`` of one message (``lane``: its lane, whose id is known)."""
        now_ms = self.env.now_ms
        value = b"%s-%d" % (self.name.encode(), self.env.request_id())
        headers = laned_headers(lane, None)
        size_bytes = RECORD_OVERHEAD_BYTES + len(value) + (len(key) if key else 0)
        size_bytes += sum(len(name) + len(data) + 4 for name, data in headers or ())  # as ``Producer._size_bytes``
        accumulator = self._accumulator
        assert accumulator.reserved_bytes + size_bytes <= self.config.buffer_bytes_max, "reserve() would block"
        future, target, opened, closed = accumulator.append(key, value, partition, now_ms, headers, size_bytes, now_ms,
                                                            None, self._lane_ids[lane] if lane else 0)
        self.env.history.append(Send(self.name, key, value, target, lane))
        self.unanswered += 1
        future.add_callback(lambda metadata, error: self._answered(key, value, target, partition, metadata, error,
                                                                   lane))
        if closed:
            self._wake(target)
        if opened:
            self._arm_linger(target, self.config.linger_ms)

    def _answered(self, key: bytes | None, value: bytes, partition: int, filler_of: int | None,
                  metadata: RecordMetadata | None, error: BaseException | None, lane: str = "") -> None:
        self.unanswered -= 1
        if filler_of is not None:
            self._fillers.discard(filler_of)
        if error is not None:
            self.failures.append(f"{value!r} to p{partition} failed: {type(error).__name__}: {error}")
            self.env.note(f"{self.name}: {self.failures[-1]}")
            return
        self.env.history.append(Ack(key, value, partition, metadata.offset, lane))
        if lane:
            self.env.count("lane_messages_acked")
        self.records_acked += 1

    # --- the sender ----------------------------------------------------------------------

    def _arm_linger(self, partition: int, delay_ms: float) -> None:
        self.env.scheduler.after(math.ceil(delay_ms), lambda: self._linger_expired(partition))

    def _linger_expired(self, partition: int) -> None:
        remaining_ms = self._accumulator.linger_remaining_ms(partition, self.env.now_ms)
        if remaining_ms:
            self._arm_linger(partition, remaining_ms)
        else:
            self._wake(partition)

    def _pop_ready(self, partition: int):
        return lambda: self._accumulator.pop_ready(partition, self.env.now_ms)

    def _wake(self, partition: int) -> None:
        for sent in self._pipelines[partition].woken(self._pop_ready(partition)):
            self._transmit(partition, sent)

    def _transmit(self, partition: int, sent: InFlight) -> None:
        """``_PartitionPipeline._send``: one produce call to the partition's leader."""
        request_id = self.env.request_id()
        sent.request = request_id
        state = self._leaders.get(partition)
        if state is None or not state.leader:
            # As a failed future: the pipeline sees it once it looks at its calls again.
            error = NotLeader(f"no leader of {TOPIC}-{partition} known; retrying after a metadata refresh")
            self.env.scheduler.after(0, lambda: self._settle(partition, sent, error, True))
            return
        self._calls[request_id] = (partition, sent)
        batch: ProducerBatch = sent.batch
        self.env.network.send(self.name, state.leader,
                              m.Produce(request_id, partition, batch.encoded, self.config.acks))
        self.env.scheduler.after(self.env.options.request_timeout_ms, lambda: self._timed_out(request_id))

    def _timed_out(self, request_id: int) -> None:
        if request_id in self._calls:
            partition, sent = self._calls[request_id]
            self._settle(partition, sent, RequestTimedOut(
                f"no answer from the leader of {TOPIC}-{partition} within {self.env.options.request_timeout_ms} ms"),
                True)

    def _settle(self, partition: int, sent: InFlight, outcome: int | BaseException, retriable: bool = False) -> None:
        self._calls.pop(sent.request, None)
        pipeline = self._pipelines[partition]
        if isinstance(outcome, BaseException):
            pipeline.failed(sent, outcome, retriable)
        else:
            pipeline.acknowledged(sent, outcome)
        self._advance(partition)

    def _advance(self, partition: int) -> None:
        """``_PartitionPipeline.run`` after an outcome: answer, take new batches, or retry."""
        pipeline = self._pipelines[partition]
        while step := pipeline.step(self.env.now_ms):
            for answer in step.answers:
                self._accumulator.complete(answer.batch, answer.base_offset, answer.error)
            if step.retry is not None:
                self._retry(partition, step.retry)
                return
            for sent in pipeline.send_new(self._pop_ready(partition)):
                self._transmit(partition, sent)

    def _retry(self, partition: int, retry: Retry) -> None:
        self.env.count("producer_retries")
        if isinstance(retry.error, errors.UnknownProducer):
            self.env.count("producer_unknown_producer_retries")
        self.env.scheduler.after(retry.backoff_ms, lambda: self._refresh(partition))

    def _resend(self, partition: int) -> None:
        for sent in self._pipelines[partition].resend():
            self._transmit(partition, sent)

    # --- metadata ------------------------------------------------------------------------

    def _refresh(self, partition: int) -> None:
        """Read the metadata, then resend ``partition``'s batches (-1: start writing)."""
        request_id = self.env.request_id()
        self._refreshes[request_id] = partition
        self.env.network.send(self.name, COORDINATOR, m.MetadataRequest(request_id))
        self.env.scheduler.after(self.env.options.request_timeout_ms, lambda: self._refreshed(request_id))

    def _refreshed(self, request_id: int) -> None:
        """The refresh answered or gave up (then the old routes stay, or a start reads again)."""
        partition = self._refreshes.pop(request_id, None)
        if partition is None:
            return
        if partition >= 0:
            self._resend(partition)
        elif self._started:
            return
        elif self._leaders:
            self._started = True
            self._loop()
        else:
            self._refresh(-1)

    def _on_metadata(self, message: m.Metadata) -> None:
        for state in message.partitions:
            known = self._leaders.get(state.partition)
            if known is None or state.leader_epoch >= known.leader_epoch:
                self._leaders[state.partition] = state
        self._refreshed(message.request_id)

    def handle(self, source: str, message: object) -> None:
        if isinstance(message, m.Metadata):
            self._on_metadata(message)
            return
        if isinstance(message, m.LaneOpened):
            self._on_lane_opened(message)
            return
        assert isinstance(message, m.ProduceResult), message
        call = self._calls.get(message.request_id)
        if call is None:
            return  # a duplicate, or an answer after the call timed out
        partition, sent = call
        if message.failure is None:
            self._settle(partition, sent, message.base_offset)
        else:
            self._settle(partition, sent, error_of(message.failure), message.failure.retriable)
