"""When ``PartitionFetcher`` (Mafka3 mode) sends a partition's next fetch: at once after an answer
that brought messages, from the position it moved to; and what a seek or a stop meanwhile does
to that fetch (nothing taken twice, nothing skipped).

A real client port (SCRAM, the protocol) with a stand-in leader: no etcd, no Ray.
"""

from __future__ import annotations

from mafka4 import batch_frame, batch_payload
from mafka4.client.partition_fetcher import PartitionFetcher
from mafka4.limits import ConsumerConfig, TopicConfig
from mafka4.physical.partition_state import PartitionState, TopicMetadata
from mafka4.protocol.data_api import FetchAnswer
from mafka4.protocol.messages import ApiKey
from mafka4.protocol.metadata_api import MetadataAnswer, NodeInfo
from mafka4.protocol.metadata_topics import topic_info

from tests.unit.stand_in_ports import TOPIC, PairedLog, client_of, reads_come_to


class Leader(PairedLog):
    """Node ``r1`` leading partition 0, whose log is a ``PairedLog`` of ``batches`` batches."""

    def handlers(self) -> dict:
        return {ApiKey.METADATA: self._metadata, ApiKey.FETCH: self._fetch}

    async def _metadata(self, session, request, _buffers):
        topic = TopicMetadata(TOPIC, TopicConfig(partitions=1), (PartitionState(0, "r1", 1, ("r1",), ("r1",)),))
        return MetadataAnswer("c1", (NodeInfo("r1", "write", self.address),), (topic_info(topic, [self.address]),)), ()

    async def _fetch(self, session, request, _buffers):
        base = await self.batch_at(request.offset, request.wait_ms_max)
        if base is None:
            return FetchAnswer(b"", self.end, 0, self.end), ()
        batch = bytearray(batch_payload.encode_batch([(b"k", value, 1_000, None) for value in self.values(base)]))
        batch_frame.stamp(batch, base, 1)
        return FetchAnswer(bytes(batch), self.end, 0, self.end), ()


def fetcher_against(node: Leader):
    """A ``PartitionFetcher`` of user alice whose only node is ``node``."""
    return client_of(node, lambda access: PartitionFetcher(access, TOPIC, ConsumerConfig(fetch_wait_ms_max=60_000)))


def test_a_partition_whose_answer_brought_messages_is_sent_the_next_fetch_before_the_poll_returns():
    node = Leader(batches=3)
    with fetcher_against(node) as fetcher:
        fetcher.seek(0, 0)
        offsets = []
        for poll in range(3):
            offsets += [m.offset for m in fetcher.fetch(5)]
            reads_come_to(node, poll + 2)
            assert node.reads == [2 * n for n in range(poll + 2)], "the next fetch went out with the messages"
        assert offsets == list(range(6)), "each offset once, in order"
        assert fetcher.fetch(0.05) == [] and node.reads == [0, 2, 4, 6], "the fetch out was not sent again"


def test_a_partition_sought_while_its_next_fetch_is_out_is_read_from_where_it_was_sought():
    node = Leader(batches=3)
    with fetcher_against(node) as fetcher:
        fetcher.seek(0, 0)
        assert [m.offset for m in fetcher.fetch(5)] == [0, 1]
        reads_come_to(node, 2)  # the fetch from 2 is out (and answered)
        fetcher.seek(0, 1)
        assert [m.offset for m in fetcher.fetch(5)] == [1], "the answer from 2 was not taken"
        assert [m.offset for m in fetcher.fetch(5)] == [2, 3]
        assert node.reads[:4] == [0, 2, 1, 2]


def test_a_partition_stopped_while_its_next_fetch_is_out_returns_nothing_more():
    node = Leader(batches=3)
    with fetcher_against(node) as fetcher:
        fetcher.seek(0, 0)
        assert [m.offset for m in fetcher.fetch(5)] == [0, 1]
        reads_come_to(node, 2)
        fetcher.stop(0)
        assert fetcher.fetch(0.05) == [] and 0 not in fetcher.positions
        fetcher.seek(0, 2)  # as a member that claims it again starts from its committed offset
        assert [m.offset for m in fetcher.fetch(5)] == [2, 3]
