"""The sender's partition pipeline (``client.sender``) against a scripted leader, no Ray running,
and its pure core (``client.sender_core``) driven step by step.

The fake leader records every produce call (producer id, sequence, acks) and hands the test the
call's future, so the test decides when and how each call is answered.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections import deque
from dataclasses import dataclass

from mafka4.batch_frame import read_header
from mafka4.batch_payload import decode_batch
from mafka4.client.sender import _PartitionPipeline
from mafka4.client.sender_core import PipelineCore, ProducerBatch
from mafka4.compression import Codec
from mafka4.errors import CorruptRecord, NotLeader, RequestTimedOut, UnknownProducer
from mafka4.limits import Acks, ProducerConfig
from mafka4.partition_gate import CLIENT, HEALED, NetworkFault, set_client_fault
from test_core_purity import forbidden_imports

POLLS_MAX = 5000  # a bound on waiting for the pipeline's thread hop (metadata refresh), not a timing claim


@dataclass
class Call:
    producer_id: int
    sequence: int
    acks: Acks
    future: concurrent.futures.Future
    encoded: bytes


class FakeLeader:
    """A leader's link, as ``client.leader_routes.LeaderLink``."""

    def __init__(self):
        self.calls: list[Call] = []

    def _record(self, encoded: bytes, acks: Acks) -> Call:
        header = read_header(encoded)
        call = Call(header.producer_id, header.base_sequence, acks, concurrent.futures.Future(), encoded)
        self.calls.append(call)
        return call

    async def produce(self, encoded: bytes, acks: Acks, timeout_ms: int) -> int:
        return await asyncio.wrap_future(self._record(encoded, acks).future)

    async def produce_unanswered(self, encoded: bytes, acks: Acks, timeout_ms: int) -> None:
        self._record(encoded, acks)  # acks=0: written, its answer unread


class FakeRoutes:
    def __init__(self, leader: FakeLeader):
        self._leader = leader

    async def leader(self, partition: int) -> FakeLeader:
        return self._leader

    def leader_id(self, partition: int) -> str:
        return "w0"

    def forget(self, partition: int) -> None:
        pass

    async def refresh(self) -> None:
        pass


class FakeAccumulator:
    def __init__(self, batches: int):
        created_ms = time.monotonic() * 1000  # the sender's clock; delivery_timeout_ms is far away
        self.ready = deque(ProducerBatch(0, created_ms, None, [(0, None, b"v%d" % i, None)]) for i in range(batches))

    def pop_ready(self, partition: int, now_ms: float) -> ProducerBatch | None:
        return self.ready.popleft() if self.ready else None


class FakeSender:
    topic = "t"

    def __init__(self, batches: int, acks: Acks | str = Acks.ALL, compression: str = "none"):
        self.config = ProducerConfig(acks=acks, compression=compression, retry_backoff_ms=0, retry_backoff_ms_max=0)
        self.leader = FakeLeader()
        self.routes = FakeRoutes(self.leader)
        self.accumulator = FakeAccumulator(batches)
        self.answers: list[tuple[int, int | None, BaseException | None]] = []

    def answer(self, batch: ProducerBatch, base_offset: int | None, error: BaseException | None) -> None:
        self.answers.append((batch.base_sequence, base_offset, error))


async def calls_reach(sender: FakeSender, count: int) -> None:
    for _ in range(POLLS_MAX):
        if len(sender.leader.calls) >= count:
            return
        await asyncio.sleep(0.001)
    raise AssertionError(f"{len(sender.leader.calls)} produce calls, expected {count}")


async def settle() -> None:
    """Let the pipeline run every step it can take without an answer."""
    for _ in range(50):
        await asyncio.sleep(0)


def run_pipeline(sender: FakeSender, scenario) -> None:
    async def main():
        pipeline = _PartitionPipeline(sender, 0)
        task = asyncio.get_running_loop().create_task(pipeline.run())
        pipeline.wakeup.set()
        try:
            await scenario(sender.leader.calls)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    asyncio.run(main())


def test_no_new_batch_is_sent_until_the_resent_ones_are_acknowledged():
    sender = FakeSender(batches=10)

    async def scenario(calls):
        await calls_reach(sender, 5)
        calls[0].future.set_exception(NotLeader("leader moved"))
        for offset, call in enumerate(calls[1:5], start=1):
            call.future.set_result(offset)
        await calls_reach(sender, 6)
        await settle()
        # Were batch 5 appended before the resent batch 0 arrives, batch 0 would leave the
        # leader's five-batch deduplication window although it may be in the log.
        assert [call.sequence for call in calls] == [0, 1, 2, 3, 4, 0]
        calls[5].future.set_result(0)
        await calls_reach(sender, 11)
        assert [call.sequence for call in calls[6:]] == [5, 6, 7, 8, 9]

    run_pipeline(sender, scenario)
    assert all(error is None for _, _, error in sender.answers)


def test_the_oldest_batch_refused_as_unknown_producer_continues_under_a_new_producer_id_from_0():
    sender = FakeSender(batches=4)

    async def scenario(calls):
        await calls_reach(sender, 4)
        old_id = calls[0].producer_id
        calls[0].future.set_result(0)
        calls[1].future.set_result(1)
        # A new leader that never had this producer's batches: its state is gone.
        calls[2].future.set_exception(UnknownProducer("producer unknown, sequence 2"))
        calls[3].future.set_exception(UnknownProducer("producer unknown, sequence 3"))
        await calls_reach(sender, 6)
        await settle()
        assert len(calls) == 6
        assert {call.producer_id for call in calls[4:]} != {old_id}
        assert calls[4].producer_id == calls[5].producer_id
        assert [call.sequence for call in calls[4:]] == [0, 1]
        calls[4].future.set_result(2)
        calls[5].future.set_result(3)
        await settle()

    run_pipeline(sender, scenario)
    assert sorted(offset for _, offset, _ in sender.answers) == [0, 1, 2, 3]
    assert all(error is None for _, _, error in sender.answers), "nothing fails for the user"


def test_unknown_producer_behind_a_failed_older_batch_resends_in_order_under_the_same_id():
    sender = FakeSender(batches=2)

    async def scenario(calls):
        await calls_reach(sender, 2)
        calls[0].future.set_exception(NotLeader("leader moved"))
        # The new leader saw batch 1 first; batch 0 failed on the old one: 1 is refused.
        calls[1].future.set_exception(UnknownProducer("producer unknown, sequence 1"))
        await calls_reach(sender, 4)
        assert [(call.producer_id, call.sequence) for call in calls[2:]] == \
            [(calls[0].producer_id, 0), (calls[0].producer_id, 1)]
        calls[2].future.set_result(0)
        calls[3].future.set_result(1)
        await settle()

    run_pipeline(sender, scenario)
    assert [(sequence, offset) for sequence, offset, _ in sender.answers] == [(0, 0), (1, 1)]


def test_acks_given_as_a_string_reaches_the_leader_as_the_enum_itself():
    sender = FakeSender(batches=1, acks="1")  # as a user gives it: Producer(topic, acks="1")

    async def scenario(calls):
        await calls_reach(sender, 1)
        assert calls[0].acks is Acks.LEADER, "converted once, at the config, and sent as it is"
        calls[0].future.set_result(0)
        await settle()

    run_pipeline(sender, scenario)
    assert sender.answers == [(0, 0, None)]


def test_batches_are_sent_compressed_with_the_configured_codec():
    sender = FakeSender(batches=1, compression="zstd")  # as a user gives it: Producer(topic, compression="zstd")

    async def scenario(calls):
        await calls_reach(sender, 1)
        assert read_header(calls[0].encoded).codec is Codec.ZSTD
        assert [record.value for record in decode_batch(calls[0].encoded)] == [b"v0"]
        calls[0].future.set_result(0)
        await settle()

    run_pipeline(sender, scenario)
    assert sender.answers == [(0, 0, None)]


def test_a_batch_waiting_to_be_resent_when_the_producer_closes_is_answered():
    """``Sender.stop`` answers every batch the pipeline still holds with ``ProducerClosed``,
    those waiting out the backoff before a resend included."""
    sender = FakeSender(batches=1)
    sender.config = ProducerConfig(compression="none", retry_backoff_ms=60_000, retry_backoff_ms_max=60_000)

    async def main():
        pipeline = _PartitionPipeline(sender, 0)
        task = asyncio.get_running_loop().create_task(pipeline.run())
        pipeline.wakeup.set()
        await calls_reach(sender, 1)
        sender.leader.calls[0].future.set_exception(NotLeader("leader moved"))
        await settle()  # the pipeline now sleeps out the backoff
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return pipeline.abandon()

    abandoned = asyncio.run(main())
    assert [batch.base_sequence for batch in abandoned] == [0]


def test_a_produce_whose_answer_a_network_fault_lost_is_resent_with_its_sequence_and_answered_once():
    """The leader appended the batch, its answer never came back (``mafka4.partition_gate``): the
    call fails as a timed-out one and the resend carries the same (producer id, sequence), which
    the leader answers with the original offset."""
    sender = FakeSender(batches=1)
    set_client_fault(NetworkFault.between(["w0"], [CLIENT], both_ways=False, lost_after_ms=1))

    async def scenario(calls):
        try:
            await calls_reach(sender, 1)
        finally:
            set_client_fault(HEALED)  # the call out already met the fault; the resend will not
        calls[0].future.set_result(0)  # appended at 0; this answer is lost
        await calls_reach(sender, 2)
        assert (calls[1].producer_id, calls[1].sequence) == (calls[0].producer_id, calls[0].sequence)
        calls[1].future.set_result(0)  # the leader's answer to a duplicate: the original offset
        await settle()

    try:
        run_pipeline(sender, scenario)
    finally:
        set_client_fault(HEALED)
    assert sender.answers == [(0, 0, None)]


# --- the core alone: no event loop, the test is the driver -------------------------------------


def core(config: ProducerConfig | None = None) -> PipelineCore:
    ids = iter(range(100, 200))
    config = config or ProducerConfig(compression="none", retry_backoff_ms=10, retry_backoff_ms_max=35)
    return PipelineCore("t", 0, config, lambda: next(ids))


def ready(count: int, created_ms: float = 0):
    batches = deque(ProducerBatch(0, created_ms, None, [(0, None, b"v%d" % i, None)]) for i in range(count))
    return lambda: batches.popleft() if batches else None


def test_the_core_imports_no_clock_randomness_or_io():
    assert forbidden_imports("mafka4.client.sender_core") == []


def test_new_batches_go_out_up_to_the_in_flight_limit_and_only_when_woken_idle_or_after_an_answer():
    pipeline = core()
    pop = ready(8)
    sent = pipeline.woken(pop)
    assert [s.batch.base_sequence for s in sent] == [0, 1, 2, 3, 4]
    assert pipeline.woken(pop) == [], "busy: a ready batch waits for an answer"
    pipeline.acknowledged(sent[1], 1)
    assert not pipeline.step(0), "the oldest is unanswered: nothing is answered out of order"
    pipeline.acknowledged(sent[0], 0)
    assert [answer.base_offset for answer in pipeline.step(0).answers] == [0]
    assert [answer.base_offset for answer in pipeline.step(0).answers] == [1]
    assert [s.batch.base_sequence for s in pipeline.send_new(pop)] == [5, 6]


def test_a_failed_oldest_batch_waits_for_every_call_then_resends_the_unanswered_in_order():
    pipeline = core()
    sent = pipeline.woken(ready(3))
    pipeline.failed(sent[0], NotLeader("moved"), retriable=True)
    assert not pipeline.step(0), "the others have not settled"
    pipeline.acknowledged(sent[1], 11)
    pipeline.failed(sent[2], NotLeader("moved"), retriable=True)
    step = pipeline.step(0)
    assert [(a.batch.base_sequence, a.base_offset) for a in step.answers] == [(1, 11)]
    assert step.retry.backoff_ms == 10 and isinstance(step.retry.error, NotLeader)
    assert pipeline.send_new(ready(1)) == [], "nothing new while a retry is out"
    resent = pipeline.resend()
    assert [(s.batch.producer_id, s.batch.base_sequence, s.batch.attempts) for s in resent] == [(100, 0, 2), (100, 2, 2)]
    assert pipeline.send_new(ready(1)) == [], "nothing new until the resent batches are acknowledged"


def test_backoff_doubles_with_each_attempt_up_to_its_bound():
    pipeline = core()
    [sent] = pipeline.woken(ready(1))
    backoffs = []
    for _ in range(4):
        pipeline.failed(sent, NotLeader("moved"), retriable=True)
        backoffs.append(pipeline.step(0).retry.backoff_ms)
        [sent] = pipeline.resend()
    assert backoffs == [10, 20, 35, 35]


def test_a_batch_failed_for_good_is_answered_and_the_rest_continue_under_a_fresh_producer_id():
    pipeline = core(ProducerConfig(compression="none", delivery_timeout_ms=1000))
    sent = pipeline.woken(ready(3, created_ms=0))
    pipeline.failed(sent[0], NotLeader("moved"), retriable=True)
    pipeline.failed(sent[1], CorruptRecord("bad crc"), retriable=False)
    pipeline.failed(sent[2], NotLeader("moved"), retriable=True)
    step = pipeline.step(500)
    assert [(a.batch.base_sequence, type(a.error)) for a in step.answers] == [(1, CorruptRecord)]
    assert [(s.batch.producer_id, s.batch.base_sequence) for s in pipeline.resend()] == [(101, 0), (101, 1)]


def test_a_batch_past_delivery_timeout_fails_as_timed_out():
    pipeline = core(ProducerConfig(compression="none", delivery_timeout_ms=1000))
    [sent] = pipeline.woken(ready(1, created_ms=0))
    pipeline.failed(sent, NotLeader("moved"), retriable=True)
    step = pipeline.step(1001)
    assert step.retry is None and isinstance(step.answers[0].error, RequestTimedOut)
    assert "delivery_timeout_ms=1000 after 1 attempt(s)" in str(step.answers[0].error)
    assert pipeline.idle


def test_abandon_returns_batches_in_flight_and_waiting_to_be_resent():
    pipeline = core()
    sent = pipeline.woken(ready(2))
    pipeline.failed(sent[0], NotLeader("moved"), retriable=True)
    pipeline.failed(sent[1], NotLeader("moved"), retriable=True)
    assert pipeline.step(0).retry is not None
    assert [batch.base_sequence for batch in pipeline.abandon()] == [0, 1]
    assert pipeline.idle
