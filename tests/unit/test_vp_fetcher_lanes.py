"""How ``VpFetcher`` serves VPs of lanes of different priorities (``client.lane_shares``): strict, a
lower lane is neither fetched nor taken while a higher one has a backlog; weighted, each poll takes
every lane's share, and the rest of the poll from the lanes cut short. Nothing is skipped: a VP's
messages not taken are fetched again, in order.

A real client port with a stand-in read node (``stand_in_ports``): no etcd, no Ray.
"""

from __future__ import annotations

import asyncio
import json

from mafka4.batch_frame import stamp
from mafka4.limits import ConsumerConfig
from mafka4.protocol.messages import ApiKey
from mafka4.protocol.metadata_api import NodeInfo
from mafka4.protocol.vp_api import VpFetchAnswer, VpMetadataAnswer, VpReadAnswer, VpStateInfo
from mafka4.virtual.vp_records import SourcedRecord, encode_vp_batch

from tests.unit.stand_in_ports import EPOCH, TOPIC, state, vp_fetcher_against

TRUNK_VP, GOLD_VP = 0, 1
# Epoch 1 opens lane "gold" (priority 9) with VP 1; the trunk (priority 0) keeps VP 0.
GOLD_OPENS = {"epoch": 1, "ranges": [[0, 1 << 64, 0]], "cut": [0], "parents": [], "children": [1],
              "lanes": [["gold", [[0, 1 << 64, 1]], {"fallback": "trunk", "priority": 9}]]}
BATCH = 10


class TwoLanes:
    """Read node ``r1`` leading trunk VP 0 and gold VP 1, whose logs hold ``ends[vp]`` records in
    batches of ten; a fetch is answered with every batch from the one holding its offset, at once,
    or after its wait when no VP asked has anything. ``requests``: the VPs of each fetch."""

    def __init__(self, ends: dict[int, int]):
        self.address, self.ends, self.requests = "", ends, []

    def handlers(self) -> dict:
        return {ApiKey.VP_METADATA: self._metadata, ApiKey.VP_FETCH: self._fetch}

    async def _metadata(self, session, request, _buffers):
        return VpMetadataAnswer(TOPIC, (json.dumps(EPOCH), json.dumps(GOLD_OPENS)),
                                tuple(VpStateInfo(vp, state("r1")) for vp in (TRUNK_VP, GOLD_VP)),
                                (NodeInfo("r1", "read", self.address),)), ()

    async def _fetch(self, session, request, _buffers):
        self.requests.append(sorted(read.vp for read in request.reads))
        if all(read.offset >= self.ends[read.vp] for read in request.reads):
            await asyncio.sleep(request.wait_ms_max / 1000)
        return VpFetchAnswer(tuple(self._answer(read.vp, read.offset) for read in request.reads)), ()

    def _answer(self, vp: int, offset: int) -> VpReadAnswer:
        end, data = self.ends[vp], bytearray()
        for base in range(offset - offset % BATCH, end, BATCH):
            records = [SourcedRecord(0, base + i, 0, 1_000, b"k", b"%d-%d" % (vp, base + i))
                       for i in range(min(BATCH, end - base))]
            batch = bytearray(encode_vp_batch(records))
            stamp(batch, base, 1)
            data += batch
        return VpReadAnswer(bytes(data), end, 0, end, None, None)


def _polls(fetcher, count: int) -> list[list[tuple[int, int]]]:
    return [[(m.partition, m.offset) for m in fetcher.fetch(5)] for _ in range(count)]


def _read(fetcher, ends: dict[int, int], node: TwoLanes) -> list[list[tuple[int, int]]]:
    for vp in ends:
        fetcher.seek(vp, 0)
        fetcher.fetching.add(vp)
    polls = []
    while sum(len(poll) for poll in polls) < sum(ends.values()) and len(polls) < 100:
        polls += _polls(fetcher, 1)
    return polls


def _each_once_in_order(polls: list[list[tuple[int, int]]], ends: dict[int, int]) -> None:
    for vp, end in ends.items():
        assert [offset for poll in polls for v, offset in poll if v == vp] == list(range(end)), vp


def test_strict_reads_a_lower_lane_only_once_the_higher_one_is_read_to_its_end():
    ends = {TRUNK_VP: 30, GOLD_VP: 30}
    node = TwoLanes(ends)
    with vp_fetcher_against(node, ConsumerConfig(fetch_wait_ms_max=50, poll_messages_max=10)) as fetcher:
        polls = _read(fetcher, ends, node)
        assert [{vp for vp, _ in poll} for poll in polls] == [{GOLD_VP}] * 3 + [{TRUNK_VP}] * 3
        assert node.requests[:3] == [[GOLD_VP]] * 3, "the trunk is not fetched while gold has a backlog"
        assert [TRUNK_VP, GOLD_VP] in node.requests
        _each_once_in_order(polls, ends)


def test_strict_holds_no_lane_back_while_the_higher_one_is_caught_up():
    ends = {TRUNK_VP: 30, GOLD_VP: 0}
    node = TwoLanes(ends)
    with vp_fetcher_against(node, ConsumerConfig(fetch_wait_ms_max=50, poll_messages_max=10)) as fetcher:
        polls = _read(fetcher, ends, node)
        assert polls[0] == [], "gold was not answered yet: it may have a backlog"
        assert [len(poll) for poll in polls[1:]] == [10, 10, 10]
        _each_once_in_order(polls, ends)


def test_weighted_gives_each_lane_its_share_of_every_poll_and_skips_nothing():
    ends = {TRUNK_VP: 40, GOLD_VP: 100}
    node = TwoLanes(ends)
    config = ConsumerConfig(fetch_wait_ms_max=50, poll_messages_max=11, lane_order="weighted")
    with vp_fetcher_against(node, config) as fetcher:
        polls = _read(fetcher, ends, node)
        assert all(len(poll) <= 11 for poll in polls)
        # 9 past one message each, by 1 : 10: the trunk 1 + 0 (+1, the larger remainder), gold 1 + 8
        assert [sum(vp == TRUNK_VP for vp, _ in poll) for poll in polls[:5]] == [2] * 5, "the trunk never starves"
        assert [sum(vp == GOLD_VP for vp, _ in poll) for poll in polls[:5]] == [9] * 5
        _each_once_in_order(polls, ends)


def test_weighted_gives_what_a_lane_leaves_of_its_share_to_the_others():
    ends = {TRUNK_VP: 100, GOLD_VP: 3}
    node = TwoLanes(ends)
    config = ConsumerConfig(fetch_wait_ms_max=50, poll_messages_max=20, lane_order="weighted")
    with vp_fetcher_against(node, config) as fetcher:
        polls = _read(fetcher, ends, node)
        assert sorted(polls[0]) == [(TRUNK_VP, offset) for offset in range(17)] + [(GOLD_VP, offset) for offset in range(3)]
        assert [len(poll) for poll in polls[1:]] == [20, 20, 20, 20, 3], "a caught-up lane slows nobody"
        _each_once_in_order(polls, ends)
