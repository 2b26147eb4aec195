"""The producer's sender: an asyncio loop on its own thread that ships closed batches.

One pipeline per partition runs a ``sender_core.PipelineCore``, which holds the rules (in-flight
limit, sequences and producer ids, in-order answers, what is resent, backoff, when a batch
fails for good); this module only carries them out with Ray calls, the event loop's clock and
timers, and a metadata refresh before every resend. The deterministic simulator runs the same
core (``simulations.dst.producer``). While a network fault cuts or slows this process's link to
a leader's node (``mafka4.partition_gate``), calls pass the process's gate; a lost call fails as
a timed-out one, which the core retries.

Batches go to the leader over a TCP stream (``mafka4.transport.stream_calls``), not as Ray calls:
a Ray call carrying a 1 MiB batch cost about 3 ms of CPU on each side here, the stream under
1 ms. Ray still finds the leader (by name) and tells where it listens; each retry opens the
stream afresh, to the leader the refreshed metadata names.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import threading
import time
from typing import Awaitable

import ray

from mafka4.client.accumulator import RecordAccumulator
from mafka4.client.routing import Routing
from mafka4.client.sender_core import InFlight, PipelineCore, ProducerBatch, Retry
from mafka4.clocks import wall_ms_fine
from mafka4.errors import MafkaError, ProducerClosed
from mafka4.limits import Acks, ProducerConfig
from mafka4.partition_gate import PartitionGate, client_gate
from mafka4.transport.remote_errors import unwrap
from mafka4.transport.stream_calls import StreamHandle, actor_stream

logger = logging.getLogger(__name__)


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


async def _written(request: Awaitable[None] | None) -> int:
    """An acks=0 send: offset -1 once its request was written to the leader's stream (so a
    ``flush`` and ``close`` after it do not drop it); what the leader did with it is never heard of."""
    if request is not None:
        try:
            await request
        except Exception as error:  # a leader gone: with acks=0 the batch is lost unannounced
            logger.debug("an acks=0 batch was not sent: %s", error)
    return -1


class _PartitionPipeline:
    """Runs one partition's ``PipelineCore``: awaits the oldest call, then every call once the
    oldest failed, and backs off and refreshes the metadata when the core says to retry."""

    def __init__(self, sender: "Sender", partition: int):
        self._sender = sender
        self._partition = partition
        self._core = PipelineCore(sender.topic, partition, sender.config, new_producer_id)
        self.wakeup = asyncio.Event()
        self._leader_stream: StreamHandle | None = None

    def _leader(self) -> StreamHandle:
        """The stream to the partition's leader, opened on first use after each retry."""
        if self._leader_stream is None:
            self._leader_stream = self._sender.open_stream(
                self._sender.routing.leader(self._partition), f"the leader of {self._sender.topic}-{self._partition}")
        return self._leader_stream

    def close_stream(self) -> None:
        if self._leader_stream is not None:
            self._leader_stream.close()
            self._leader_stream = None

    def _send(self, sent: InFlight) -> None:
        batch = sent.batch
        if batch.attempts == 1:
            batch.sent_time_ms = wall_ms_fine()
        config = self._sender.config
        loop = asyncio.get_running_loop()
        gate = client_gate()
        try:
            leader = self._leader()
        except Exception as error:  # no leader known: fail this attempt, the pipeline retries
            sent.request = loop.create_future()
            sent.request.set_exception(error)
            return
        if gate.active:
            sent.request = self._send_through(gate, leader, batch.encoded)
            return
        if config.acks is Acks.NONE:
            sent.request = asyncio.ensure_future(_written(
                leader.produce.send(batch.encoded, config.acks, config.delivery_timeout_ms)))
            return
        sent.request = asyncio.ensure_future(leader.produce.remote(batch.encoded, config.acks, config.delivery_timeout_ms))

    def _send_through(self, gate: PartitionGate, leader, encoded: bytes) -> asyncio.Future:
        """The produce call as the links between this process and the leader's node let it through."""
        config = self._sender.config
        leader_id = self._sender.routing.metadata.partitions[self._partition].leader
        if config.acks is Acks.NONE:  # fire and forget: a lost request is simply never sent
            lost = gate.plan(leader_id).request_lost
            return asyncio.ensure_future(_written(
                None if lost else leader.produce.send(encoded, config.acks, config.delivery_timeout_ms)))
        return asyncio.ensure_future(gate.call(
            leader_id, lambda: leader.produce.remote(encoded, config.acks, config.delivery_timeout_ms)))

    def _settle(self, sent: InFlight, outcome: object) -> None:
        if isinstance(outcome, BaseException):
            error = unwrap(outcome)
            self._core.failed(sent, error, _is_retriable(error))
        else:
            self._core.acknowledged(sent, outcome)

    async def run(self) -> None:
        core, accumulator = self._core, self._sender.accumulator

        def pop_ready() -> ProducerBatch | None:
            return accumulator.pop_ready(self._partition, _monotonic_ms())

        while True:
            for sent in core.send_new(pop_ready):
                self._send(sent)
            oldest = core.oldest
            if oldest is None:
                self.wakeup.clear()
                await self.wakeup.wait()
                continue
            try:
                outcome = await oldest.request
            except Exception as error:
                self._settle(oldest, error)
                # Let every batch in flight settle before the core decides what to resend.
                unsettled = [sent for sent in core.in_flight if not sent.settled]
                outcomes = await asyncio.gather(*(sent.request for sent in unsettled), return_exceptions=True)
                for sent, outcome in zip(unsettled, outcomes):
                    self._settle(sent, outcome)
            else:
                self._settle(oldest, outcome)
            step = core.step(_monotonic_ms())
            for answer in step.answers:
                self._sender.answer(answer.batch, answer.base_offset, answer.error)
            if step.retry is not None:
                await self._backoff(step.retry)
                for sent in core.resend():
                    self._send(sent)

    def abandon(self) -> list[ProducerBatch]:
        return self._core.abandon()

    async def _backoff(self, retry: Retry) -> None:
        error = retry.error
        logger.info("%s-%s: retrying after %s: %s", self._sender.topic, self._partition, type(error).__name__, error)
        await asyncio.sleep(retry.backoff_ms / 1000)
        self.close_stream()
        self._sender.routing.forget(self._partition)
        try:
            await asyncio.get_running_loop().run_in_executor(None, self._sender.routing.refresh)
        except MafkaError as refresh_error:  # etcd briefly away: keep the old routes and retry
            logger.info("metadata refresh failed: %s", refresh_error)


class Sender:
    """Owns the event-loop thread and the partition pipelines."""

    open_stream = staticmethod(actor_stream)  # a leader's actor handle -> the stream batches go over

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
        self.accumulator.complete(batch, base_offset, error)

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
            for pipeline in self._pipelines.values():
                pipeline.close_stream()
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
