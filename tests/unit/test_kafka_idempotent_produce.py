"""An idempotent producer's batches at the Kafka listener's Produce: a retry that arrives (on another
connection) while the first send is still being appended waits for it and is answered its offset,
never appended twice; refusals carry Kafka's codes. The physical leaders are a stand-in that holds
every append until the test releases it."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from mafka4.kafka import error_codes
from mafka4.kafka.data_handlers import KafkaDataHandlers, _as_mafka4_records
from mafka4.kafka.record_batches import KafkaRecord, read_kafka_batches, write_kafka_batch
from mafka4.limits import Acks

PID = 2**62 + 17
METADATA = SimpleNamespace(name="orders", partitions=(SimpleNamespace(leader="replica-0"),))


class HeldLeaders:
    """Physical leaders whose appends wait for ``release``; each answers the next offset."""

    def __init__(self):
        self.appended: list[bytes] = []
        self.release = asyncio.Event()

    async def physical_call(self, topic, partition, leader, method, batch, acks, timeout_ms):
        assert method == "produce"
        await self.release.wait()
        self.appended.append(batch)
        return 100 * len(self.appended)


def batch_of(base_sequence: int, epoch: int = 0, values=(b"a", b"b")):
    records = [KafkaRecord(n, 1_700_000_000_000, b"key", value) for n, value in enumerate(values)]
    encoded = write_kafka_batch(0, 0, records, producer_id=PID, producer_epoch=epoch, base_sequence=base_sequence)
    (batch,) = read_kafka_batches(encoded, 100)
    return batch


def sent(handlers: KafkaDataHandlers, batch) -> asyncio.Task:
    records = _as_mafka4_records([batch])
    return asyncio.create_task(handlers._produce_idempotent("orders", 0, 0, METADATA, batch, records, Acks.ALL, 1000))


def test_a_retry_during_the_first_append_waits_for_it_and_gets_its_offset():
    async def scenario():
        leaders = HeldLeaders()
        handlers = KafkaDataHandlers(None, None, leaders, "r0", "c")
        first, retry = sent(handlers, batch_of(0)), sent(handlers, batch_of(0))
        following = sent(handlers, batch_of(2))
        for _ in range(10):  # every send runs up to where it waits
            await asyncio.sleep(0)
        assert not leaders.appended and not first.done() and not retry.done()
        leaders.release.set()
        answers = await asyncio.gather(first, retry, following)
        assert [answer["error_code"] for answer in answers] == [0, 0, 0]
        assert [answer["base_offset"] for answer in answers] == [100, 100, 200]
        assert len(leaders.appended) == 2, "the retry was answered, not appended"
        assert handlers._entry_locks == {}, "no lock outlives its requests"
    asyncio.run(scenario())


def test_a_gap_and_an_old_epoch_are_refused_with_kafkas_codes_and_nothing_appended():
    async def scenario():
        leaders = HeldLeaders()
        leaders.release.set()
        handlers = KafkaDataHandlers(None, None, leaders, "r0", "c")
        await sent(handlers, batch_of(0, epoch=1))
        gap = await sent(handlers, batch_of(6, epoch=1))
        assert gap["error_code"] == error_codes.OUT_OF_ORDER_SEQUENCE_NUMBER
        assert "expects sequence 2" in gap["error_message"]
        fenced = await sent(handlers, batch_of(2, epoch=0))
        assert fenced["error_code"] == error_codes.INVALID_PRODUCER_EPOCH
        assert len(leaders.appended) == 1
    asyncio.run(scenario())
