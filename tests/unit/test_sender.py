"""The sender's partition pipeline (``client.sender``) against a scripted leader, no Ray running.

The fake leader records every produce call (producer id, sequence, acks) and hands the test the
call's future, so the test decides when and how each call is answered.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections import deque
from dataclasses import dataclass

from mafka4.client.accumulator import ProducerBatch
from mafka4.client.sender import _PartitionPipeline
from mafka4.compression import Codec
from mafka4.errors import NotLeader, UnknownProducer
from mafka4.limits import Acks, ProducerConfig
from mafka4.records import decode_batch, read_header

POLLS_MAX = 5000  # a bound on waiting for the pipeline's thread hop (metadata refresh), not a timing claim


@dataclass
class Call:
    producer_id: int
    sequence: int
    acks: Acks
    future: concurrent.futures.Future
    encoded: bytes


class FakeLeader:
    def __init__(self):
        self.calls: list[Call] = []
        self.produce = self  # leader.produce.remote(...)

    def remote(self, encoded: bytes, acks: Acks, timeout_ms: int):
        header = read_header(encoded)
        call = Call(header.producer_id, header.base_sequence, acks, concurrent.futures.Future(), encoded)
        self.calls.append(call)
        return self

    def future(self) -> concurrent.futures.Future:
        return self.calls[-1].future


class FakeRouting:
    def __init__(self, leader: FakeLeader):
        self._leader = leader

    def leader(self, partition: int) -> FakeLeader:
        return self._leader

    def forget(self, partition: int) -> None:
        pass

    def refresh(self) -> None:
        pass


class FakeAccumulator:
    def __init__(self, batches: int):
        created_ms = time.monotonic() * 1000  # the sender's clock; delivery_timeout_ms is far away
        self.ready = deque(ProducerBatch(0, created_ms, None, [(None, b"v%d" % i, 0, None)]) for i in range(batches))

    def pop_ready(self, partition: int, now_ms: float) -> ProducerBatch | None:
        return self.ready.popleft() if self.ready else None


class FakeSender:
    topic = "t"

    def __init__(self, batches: int, acks: Acks | str = Acks.ALL, compression: str = "none"):
        self.config = ProducerConfig(acks=acks, compression=compression, retry_backoff_ms=0, retry_backoff_ms_max=0)
        self.leader = FakeLeader()
        self.routing = FakeRouting(self.leader)
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
