"""The producer's sender: an asyncio loop on its own thread that ships closed batches.

One pipeline per partition keeps up to ``in_flight_batches_max`` batches in flight and
answers them in order. Every batch carries (producer id, sequence), so the leader
refuses gaps and answers retries with the original offset: a retried batch is never
appended twice, and order holds because the leader only accepts the next sequence.

When the oldest batch in flight fails, the pipeline lets the rest settle, then resends
all unanswered batches in sequence order after a backoff and a metadata refresh. No new
batch is sent until every resent one is acknowledged: a new batch appended before a resent
one arrives (Ray may start calls out of order, or the resend fails again) would push the
resent batch out of the leader's deduplication window (``producer_batches_remembered``)
although it may be in the log, and every retry of it would then be refused as out of order.

A batch that fails for good (non-retriable error, or ``delivery_timeout_ms`` passed) leaves
a gap in the sequence, so the partition continues under a fresh producer id. So does a
pipeline whose oldest unacknowledged batch is answered ``UnknownProducer``: the leader has
no state of this producer id (expired, or a leader that never had its batches), so its
sequence cannot continue there; the unanswered batches are resent from sequence 0 under a
fresh id, as Kafka's producer does on UNKNOWN_PRODUCER_ID.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import threading
import time
from collections import deque

import ray

from mafka4.clocks import wall_ms_fine
from mafka4.client.accumulator import ProducerBatch, RecordAccumulator
from mafka4.client.routing import Routing
from mafka4.errors import MafkaError, ProducerClosed, RequestTimedOut, UnknownProducer
from mafka4.limits import Acks, ProducerConfig
from mafka4.records import HEADER_BYTES, encode_batch
from mafka4.runtime.remote_errors import unwrap

logger = logging.getLogger(__name__)

SEQUENCE_MAX = 2**31 - 1


def new_producer_id() -> int:
    """A random 63-bit producer id; collisions between producers are negligible at this size."""
    return secrets.randbits(63)


def _monotonic_ms() -> float:
    return time.monotonic() * 1000


def _is_retriable(error: BaseException) -> bool:
    if isinstance(error, MafkaError):
        return error.retriable
    # A dead or unreachable actor: the partition gets a new leader; resend after a refresh.
    return isinstance(error, (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError,
                              ray.exceptions.GetTimeoutError))


class _PartitionPipeline:
    """In-order delivery of one partition's batches."""

    def __init__(self, sender: "Sender", partition: int):
        self._sender = sender
        self._partition = partition
        self._producer_id = new_producer_id()
        self._next_sequence = 0
        self._in_flight: deque[tuple[ProducerBatch, asyncio.Future]] = deque()
        self.wakeup = asyncio.Event()

    def _assign_sequence(self, batch: ProducerBatch) -> None:
        if self._next_sequence + len(batch.records) > SEQUENCE_MAX:
            self._producer_id, self._next_sequence = new_producer_id(), 0
        batch.producer_id, batch.base_sequence = self._producer_id, self._next_sequence
        codec = self._sender.config.compression
        assert codec is not None, "the Producer resolves the default codec before the sender starts"
        batch.encoded = encode_batch(batch.records, batch.producer_id, batch.base_sequence, codec)
        self._next_sequence += len(batch.records)

    def _send(self, batch: ProducerBatch) -> asyncio.Future:
        batch.attempts += 1
        if batch.attempts == 1:
            batch.sent_time_ms = wall_ms_fine()
        config = self._sender.config
        try:
            leader = self._sender.routing.leader(self._partition)
            ref = leader.produce.remote(batch.encoded, config.acks, config.delivery_timeout_ms)
        except Exception as error:  # no leader known: fail this attempt, the pipeline retries
            future = asyncio.get_running_loop().create_future()
            future.set_exception(error)
            return future
        if config.acks is Acks.NONE:
            future = asyncio.get_running_loop().create_future()
            future.set_result(-1)
            return future
        return asyncio.wrap_future(ref.future())

    async def run(self) -> None:
        accumulator, limit = self._sender.accumulator, self._sender.config.in_flight_batches_max
        while True:
            while (len(self._in_flight) < limit and not self._resend_in_flight()
                   and (batch := accumulator.pop_ready(self._partition, _monotonic_ms())) is not None):
                self._assign_sequence(batch)
                self._in_flight.append((batch, self._send(batch)))
            if not self._in_flight:
                self.wakeup.clear()
                await self.wakeup.wait()
                continue
            batch, future = self._in_flight[0]
            try:
                base_offset = await future
            except Exception as error:
                await self._recover(unwrap(error))
                continue
            self._in_flight.popleft()
            self._sender.answer(batch, base_offset, None)

    def _resend_in_flight(self) -> bool:
        """A resent batch is not acknowledged yet: new batches wait (see the module docstring)."""
        return any(batch.attempts > 1 for batch, _ in self._in_flight)

    async def _recover(self, error: BaseException) -> None:
        """Settle every batch in flight, then resend the unanswered ones in order."""
        settled = await asyncio.gather(*(future for _, future in self._in_flight), return_exceptions=True)
        unanswered = []
        for (batch, _), outcome in zip(self._in_flight, settled):
            if isinstance(outcome, BaseException):
                unanswered.append((batch, unwrap(outcome)))
            else:
                self._sender.answer(batch, outcome, None)
        self._in_flight.clear()
        now_ms = _monotonic_ms()
        # The oldest unanswered batch is next in sequence: refused as unknown, the leader
        # has no state of this producer id and never will (see the module docstring).
        state_lost = bool(unanswered) and isinstance(unanswered[0][1], UnknownProducer)
        gap = False
        resend = []
        for batch, outcome in unanswered:
            expired = now_ms - batch.created_ms > self._sender.config.delivery_timeout_ms
            fatal = expired or not _is_retriable(outcome)
            if gap or not fatal:
                resend.append(batch)
                continue
            final = outcome if not expired else RequestTimedOut(
                f"{self._sender.topic}-{self._partition}: not acknowledged within delivery_timeout_ms="
                f"{self._sender.config.delivery_timeout_ms} after {batch.attempts} attempt(s); last error: {outcome}"
            )
            self._sender.answer(batch, None, final)
            gap = True
        renumber = gap or state_lost
        if renumber:
            self._producer_id, self._next_sequence = new_producer_id(), 0
        if resend:
            await self._backoff(resend[0].attempts, error)
        for batch in resend:
            if renumber:
                self._assign_sequence(batch)
            self._in_flight.append((batch, self._send(batch)))

    def abandon(self) -> list[ProducerBatch]:
        batches = [batch for batch, _ in self._in_flight]
        self._in_flight.clear()
        return batches

    async def _backoff(self, attempts: int, error: BaseException) -> None:
        config = self._sender.config
        delay_ms = min(config.retry_backoff_ms * 2 ** min(attempts - 1, 16), config.retry_backoff_ms_max)
        logger.info("%s-%s: retrying after %s: %s", self._sender.topic, self._partition, type(error).__name__, error)
        await asyncio.sleep(delay_ms / 1000)
        self._sender.routing.forget(self._partition)
        try:
            await asyncio.get_running_loop().run_in_executor(None, self._sender.routing.refresh)
        except MafkaError as refresh_error:  # etcd briefly away: keep the old routes and retry
            logger.info("metadata refresh failed: %s", refresh_error)


class Sender:
    """Owns the event-loop thread and the partition pipelines."""

    def __init__(self, topic: str, config: ProducerConfig, accumulator: RecordAccumulator, routing: Routing):
        self.topic = topic
        self.config = config
        self.accumulator = accumulator
        self.routing = routing
        self._pipelines: dict[int, _PartitionPipeline] = {}
        self._tasks: list[asyncio.Task] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"mafka4-sender-{topic}", daemon=True)
        self._thread.start()

    def answer(self, batch: ProducerBatch, base_offset: int | None, error: BaseException | None) -> None:
        batch.encoded = None
        records_bytes = batch.size_bytes - HEADER_BYTES
        batch.records = []
        batch.result.sent_time_ms = batch.sent_time_ms
        batch.result.complete(base_offset, error)
        self.accumulator.answered(batch, records_bytes)

    # --- called from the producer's threads -------------------------------------------

    def batch_ready(self, partition: int) -> None:
        self._loop.call_soon_threadsafe(self._wake, partition)

    def batch_opened(self, partition: int) -> None:
        self._loop.call_soon_threadsafe(self._arm_linger, partition, float(self.config.linger_ms))

    def flush_all(self) -> None:
        for partition in self.accumulator.close_all():
            self.batch_ready(partition)

    def stop(self) -> None:
        """Stop sending; every batch not answered yet fails with ``ProducerClosed``."""
        async def cancel() -> None:
            for task in self._tasks:
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            closed = ProducerClosed(f"producer for {self.topic!r} closed before this message was acknowledged")
            for pipeline in self._pipelines.values():
                for batch in pipeline.abandon():
                    self.answer(batch, None, closed)
            for batch in self.accumulator.take_all():
                self.answer(batch, None, closed)

        asyncio.run_coroutine_threadsafe(cancel(), self._loop).result(timeout=30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)

    # --- on the loop thread -------------------------------------------------------------

    def _wake(self, partition: int) -> None:
        pipeline = self._pipelines.get(partition)
        if pipeline is None:
            pipeline = self._pipelines[partition] = _PartitionPipeline(self, partition)
            self._tasks.append(self._loop.create_task(pipeline.run()))
        pipeline.wakeup.set()

    def _arm_linger(self, partition: int, delay_ms: float) -> None:
        self._loop.call_later(delay_ms / 1000, self._linger_expired, partition)

    def _linger_expired(self, partition: int) -> None:
        remaining_ms = self.accumulator.linger_remaining_ms(partition, _monotonic_ms())
        if remaining_ms:
            self._arm_linger(partition, remaining_ms)
        else:
            self._wake(partition)
