"""The producer's sender: an asyncio loop on its own thread that ships closed batches.

One pipeline per partition runs a ``sender_core.PipelineCore``, which holds the rules (in-flight
limit, sequences and producer ids, in-order answers, what is resent, backoff, when a batch
fails for good); this module only carries them out with calls to the partition's leader, the
event loop's clock and timers, and a metadata refresh before every resend. The deterministic
simulator runs the same core (``simulations.dst.producer``). While a network fault cuts or slows
this process's link to a leader's node (``mafka4.partition_gate``), calls pass the process's
gate; a lost call fails as a timed-out one, which the core retries.

Batches go to the leader's client port (``client.leader_routes``: the client protocol, the batch
out of band); a link that broke is opened afresh, to the leader the refreshed metadata names.
Calls of one partition are written in the order the core sends them (a link already open is
written to before the call first yields), and the leader holds an early batch for its turn
(``physical.sequencer``) should a reconnect reorder two. Imports neither ``ray`` nor ``etcd3``.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from typing import Awaitable

from mafka4.client.accumulator import RecordAccumulator
from mafka4.client.leader_routes import LeaderLink, LeaderRoutes
from mafka4.client.loop_thread import LoopThread
from mafka4.client.node_links import NodeLinks
from mafka4.client.sender_core import InFlight, PipelineCore, ProducerBatch, Retry
from mafka4.clocks import wall_ms_fine
from mafka4.errors import MafkaError, ProducerClosed
from mafka4.limits import Acks, ProducerConfig
from mafka4.partition_gate import client_gate

logger = logging.getLogger(__name__)


def new_producer_id() -> int:
    """A random 63-bit producer id; collisions between producers are negligible at this size."""
    return secrets.randbits(63)


def _monotonic_ms() -> float:
    return time.monotonic() * 1000


def _is_retriable(error: BaseException) -> bool:
    # A leader gone, a link lost or timed out (``StreamLost``, ``RequestTimedOut``, a gate's
    # ``CallLost``), a stale leader (``NotLeader``): resend after a refresh.
    return isinstance(error, MafkaError) and error.retriable


async def _written(request: Awaitable[None] | None) -> int:
    """An acks=0 send: offset -1 once its request was written to the leader's link (so a
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

    def _send(self, sent: InFlight) -> None:
        batch = sent.batch
        if batch.attempts == 1:
            batch.sent_time_ms = wall_ms_fine()
        sent.request = asyncio.ensure_future(self._call(batch.encoded))

    async def _call(self, encoded: bytes) -> int:
        """The produce call of one attempt, as the links between this process and the leader let it through."""
        config, routes = self._sender.config, self._sender.routes
        leader: LeaderLink = await routes.leader(self._partition)  # no leader known: this attempt fails, retried
        gate = client_gate()
        if config.acks is Acks.NONE:  # fire and forget: a lost request is simply never sent
            lost = gate.active and gate.plan(routes.leader_id(self._partition)).request_lost
            return await _written(None if lost else leader.produce_unanswered(encoded, config.acks,
                                                                              config.delivery_timeout_ms))
        if gate.active:
            return await gate.call(routes.leader_id(self._partition),
                                   lambda: leader.produce(encoded, config.acks, config.delivery_timeout_ms))
        return await leader.produce(encoded, config.acks, config.delivery_timeout_ms)

    def _settle(self, sent: InFlight, outcome: object) -> None:
        if isinstance(outcome, BaseException):
            self._core.failed(sent, outcome, _is_retriable(outcome))
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
        self._sender.routes.forget(self._partition)
        try:
            await self._sender.routes.refresh()
        except MafkaError as refresh_error:  # no node answered: keep the old routes and retry
            logger.info("metadata refresh failed: %s", refresh_error)


class Sender:
    """Runs the partition pipelines on the producer's loop thread."""

    def __init__(self, topic: str, config: ProducerConfig, accumulator: RecordAccumulator, routes: LeaderRoutes,
                 links: NodeLinks, loop_thread: LoopThread):
        self.topic = topic
        self.config = config
        self.accumulator = accumulator
        self.routes = routes
        self.links = links
        self._pipelines: dict[int, _PartitionPipeline] = {}
        self._tasks: list[asyncio.Task] = []
        self._loop_thread = loop_thread
        self._loop = loop_thread.loop

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
            self.links.close()
            closed = ProducerClosed(f"producer for {self.topic!r} closed before this message was acknowledged")
            for pipeline in self._pipelines.values():
                for batch in pipeline.abandon():
                    self.answer(batch, None, closed)
            for batch in self.accumulator.take_all():
                self.answer(batch, None, closed)

        self._loop_thread.run(cancel(), timeout_s=30)
        self._loop_thread.stop()

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
