"""Where ``VpFetcher`` sends a VP's fetch when the metadata it holds names a node that serves no port;
and where it reads on when a node answers that its log diverged from what it read.

The chaos run's finding: a read node died while etcd was stalled, so the metadata a member read
still named the dead node as the VP's leader, without a client address. The fetcher avoided the
node but never asked for the metadata again (nothing failed: nothing was sent), so it never saw
the failover and stopped reading the VP. It must ask again until the metadata names a live node.

A real client port (SCRAM, the protocol) with stand-in handlers (``stand_in_ports``): no etcd, no Ray.
"""

from __future__ import annotations

import asyncio
import json

from mafka4.batch_frame import stamp
from mafka4.limits import ConsumerConfig
from mafka4.protocol.messages import ApiKey
from mafka4.protocol.metadata_api import NodeInfo
from mafka4.protocol.vp_api import VpDiverging, VpFetchAnswer, VpMetadataAnswer, VpReadAnswer, VpStateInfo
from mafka4.virtual.vp_records import SourcedRecord, encode_vp_batch

from tests.unit.stand_in_ports import (EPOCH, TOPIC, LongPolling, PairedLog, fetch_until, reads_come_to, state,
                                       vp_fetcher_against)


class FailingOver:
    """VP 0 is led by ``r0``, which serves no port, until ``failover_after`` metadata requests; then by ``r1`` (here)."""

    def __init__(self, failover_after: int):
        self.failover_after, self.metadata_asked, self.fetched, self.waits_ms = failover_after, 0, [], []
        self.address = ""

    def handlers(self) -> dict:
        return {ApiKey.VP_METADATA: self._metadata, ApiKey.VP_FETCH: self._fetch}

    async def _metadata(self, session, request, _buffers):
        self.metadata_asked += 1
        failed_over = self.metadata_asked > self.failover_after
        nodes = (NodeInfo("r1", "read", self.address),)
        return VpMetadataAnswer(TOPIC, (json.dumps(EPOCH),), (VpStateInfo(0, state("r1" if failed_over else "r0")),),
                                nodes), ()

    async def _fetch(self, session, request, _buffers):
        self.fetched.extend((read.vp, read.offset) for read in request.reads)
        self.waits_ms.append(request.wait_ms_max)
        await asyncio.sleep(0.05)
        return VpFetchAnswer(tuple(VpReadAnswer(b"", 0, 0, 0, None, None) for _ in request.reads)), ()


def test_a_vp_whose_leader_serves_no_port_is_read_once_the_metadata_names_a_live_leader():
    node = FailingOver(failover_after=3)
    with vp_fetcher_against(node, ConsumerConfig(fetch_wait_ms_max=50)) as fetcher:
        assert fetcher.states[0].leader == "r0"
        fetcher.seek(0, 0)
        fetcher.fetching.add(0)
        fetch_until(fetcher, lambda: node.fetched, 0.1)
        assert node.fetched, f"VP 0 was never fetched; the metadata was asked {node.metadata_asked} times"
        assert fetcher.states[0].leader == "r1" and node.metadata_asked > 3


def test_a_vp_added_while_its_nodes_fetch_is_out_is_sent_at_once_not_after_the_long_poll():
    """A VP claimed in a join must not wait up to ``fetch_wait_ms_max`` for the fetch out to its node."""
    node = LongPolling()
    with vp_fetcher_against(node, ConsumerConfig(fetch_wait_ms_max=60_000)) as fetcher:
        for vp in (0, 1):
            fetcher.seek(vp, 0)
        fetcher.fetching.add(0)
        fetch_until(fetcher, lambda: node.requests)
        fetcher.fetching.add(1)
        fetch_until(fetcher, lambda: len(node.requests) >= 2)
        assert node.requests == [[0], [0, 1]], "VP 1 joined the fetch out to r1 in a new fetch"
        assert node.waiting == 2, "while the first long poll was still out (its answer is dropped)"


def test_a_vp_sought_while_its_nodes_fetch_is_out_is_fetched_from_its_new_position_at_once():
    node = LongPolling()
    with vp_fetcher_against(node, ConsumerConfig(fetch_wait_ms_max=60_000)) as fetcher:
        fetcher.seek(0, 0)
        fetcher.fetching.add(0)
        fetch_until(fetcher, lambda: node.reads)
        fetcher.seek(0, 5)
        fetch_until(fetcher, lambda: len(node.reads) >= 2)
        assert node.reads == [[(0, 0)], [(0, 5)]]
        fetcher.fetch(0.05)
        assert len(node.reads) == 2, "nothing changed: the fetch out asks for what is wanted"


def test_an_idle_node_is_asked_with_longer_and_longer_waits_up_to_the_idle_bound():
    node = FailingOver(failover_after=0)  # answers every fetch empty, 50 ms after it came
    with vp_fetcher_against(node, ConsumerConfig(fetch_wait_ms_max=10, fetch_idle_wait_ms_max=45)) as fetcher:
        fetcher.seek(0, 0)
        fetcher.fetching.add(0)
        fetch_until(fetcher, lambda: len(node.waits_ms) >= 5, 0.2)
        assert node.waits_ms[:5] == [10, 20, 40, 45, 45]


class LostTail:
    """Read node ``r1`` leading VP 0 after a power loss: epoch 1 now ends at 4 (the records after it
    were fed again in epoch 2). A fetch naming epoch 1 past 4 is answered "diverging"; any other
    gets one epoch-2 batch from offset 4. ``reads``: each fetch's (offset, last epoch)."""

    def __init__(self):
        self.address, self.reads = "", []

    def handlers(self) -> dict:
        return {ApiKey.VP_METADATA: self._metadata, ApiKey.VP_FETCH: self._fetch}

    async def _metadata(self, session, request, _buffers):
        return VpMetadataAnswer(TOPIC, (json.dumps(EPOCH),), (VpStateInfo(0, state("r1")),),
                                (NodeInfo("r1", "read", self.address),)), ()

    async def _fetch(self, session, request, _buffers):
        (read,) = request.reads
        self.reads.append((read.offset, read.last_epoch))
        if read.last_epoch == 1 and read.offset > 4:
            return VpFetchAnswer((VpReadAnswer(b"", 6, 0, 6, None, VpDiverging(1, 4)),)), ()
        batch = bytearray(encode_vp_batch([SourcedRecord(0, 40 + i, 0, 1_000, b"k", b"again-%d" % i) for i in range(2)]))
        stamp(batch, 4, 2)
        return VpFetchAnswer((VpReadAnswer(bytes(batch), 6, 0, 6, None, None),)), ()


def test_a_reader_answered_diverging_moves_back_and_reads_on_naming_the_epoch_it_read():
    node = LostTail()
    with vp_fetcher_against(node, ConsumerConfig(fetch_wait_ms_max=50)) as fetcher:
        fetcher.seek(0, 9, last_epoch=1)  # a committed offset in the lost tail, with its epoch
        fetcher.fetching.add(0)
        assert fetcher.fetch(5) == [] and (fetcher.positions[0], fetcher.position_epoch(0)) == (4, 1)
        messages = fetcher.fetch(5)
        assert [(m.offset, m.value) for m in messages] == [(4, b"again-0"), (5, b"again-1")]
        assert (fetcher.positions[0], fetcher.position_epoch(0)) == (6, 2)
        # (then, the answer having brought messages, the next fetch from (6, 2) may be out already)
        assert node.reads[:2] == [(9, 1), (4, 1)], "back to where epoch 1 ends, never forward"


class Backlog(PairedLog):
    """Read node ``r1`` leading VP 0, whose log is a ``PairedLog`` of ``batches`` batches."""

    def handlers(self) -> dict:
        return {ApiKey.VP_METADATA: self._metadata, ApiKey.VP_FETCH: self._fetch}

    async def _metadata(self, session, request, _buffers):
        return VpMetadataAnswer(TOPIC, (json.dumps(EPOCH),), (VpStateInfo(0, state("r1")),),
                                (NodeInfo("r1", "read", self.address),)), ()

    async def _fetch(self, session, request, _buffers):
        (read,) = request.reads
        base = await self.batch_at(read.offset, request.wait_ms_max)
        if base is None:
            return VpFetchAnswer((VpReadAnswer(b"", self.end, 0, self.end, None, None),)), ()
        records = [SourcedRecord(0, base + i, 0, 1_000, b"k", value) for i, value in enumerate(self.values(base))]
        batch = bytearray(encode_vp_batch(records))
        stamp(batch, base, 1)
        return VpFetchAnswer((VpReadAnswer(bytes(batch), self.end, 0, self.end, None, None),)), ()


def test_a_node_whose_answer_brought_messages_is_sent_the_next_fetch_before_the_poll_returns():
    node = Backlog(batches=3)
    with vp_fetcher_against(node, ConsumerConfig(fetch_wait_ms_max=60_000)) as fetcher:
        fetcher.seek(0, 0)
        fetcher.fetching.add(0)
        offsets = []
        for poll in range(3):
            offsets += [m.offset for m in fetcher.fetch(5)]
            reads_come_to(node, poll + 2)
            assert node.reads == [2 * n for n in range(poll + 2)], "the next fetch went out with the messages"
        assert offsets == list(range(6)), "each offset once, in order"
        assert fetcher.fetch(0.05) == [] and node.reads == [0, 2, 4, 6], "the fetch out was not sent again"


def test_a_vp_sought_while_its_next_fetch_is_out_is_read_from_where_it_was_sought():
    node = Backlog(batches=3)
    with vp_fetcher_against(node, ConsumerConfig(fetch_wait_ms_max=60_000)) as fetcher:
        fetcher.seek(0, 0)
        fetcher.fetching.add(0)
        assert [m.offset for m in fetcher.fetch(5)] == [0, 1]
        reads_come_to(node, 2)  # the fetch from 2 is out (and answered)
        fetcher.seek(0, 1)
        assert [m.offset for m in fetcher.fetch(5)] == [1], "the answer from 2 was not taken"
        assert [m.offset for m in fetcher.fetch(5)] == [2, 3]
        assert node.reads[:4] == [0, 2, 1, 2]


def test_a_vp_stopped_while_its_next_fetch_is_out_is_read_on_from_its_position_once_fetched_again():
    node = Backlog(batches=3)
    with vp_fetcher_against(node, ConsumerConfig(fetch_wait_ms_max=60_000)) as fetcher:
        fetcher.seek(0, 0)
        fetcher.fetching.add(0)
        assert [m.offset for m in fetcher.fetch(5)] == [0, 1]
        reads_come_to(node, 2)
        fetcher.stop(0)
        assert fetcher.fetch(0.05) == [] and fetcher.positions[0] == 2, "the answer out moved nothing"
        fetcher.fetching.add(0)
        assert [m.offset for m in fetcher.fetch(5)] == [2, 3], "nothing skipped, nothing twice"
