"""How one poll of a reader of lanes of several priorities shares its messages (``client.lane_shares``),
and the consumer setting that chooses strict or weighted order."""

from __future__ import annotations

import collections

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mafka4.client.lane_shares import (STRICT, WEIGHTED, LaneReading, fetch_order, has_backlog, lane_readings,
                                      lane_shares)
from mafka4.errors import InvalidConfig
from mafka4.limits import ConsumerConfig

BACKLOGS = st.sampled_from([True, False, None])
LANES = st.dictionaries(st.sampled_from(["", "a", "b", "c", "d", "e", "f"]),
                        st.builds(LaneReading, st.integers(0, 9), BACKLOGS), min_size=1)
MESSAGES_MAX = st.integers(1, 20_000)


def _mixed(lanes: dict[str, LaneReading]) -> bool:
    return len({reading.priority for reading in lanes.values()}) > 1


@given(LANES, st.sampled_from([STRICT, WEIGHTED]), MESSAGES_MAX)
def test_lanes_of_one_priority_are_not_capped(lanes, order, messages_max):
    shares = lane_shares(lanes, order, messages_max)
    assert (shares is None) == (not _mixed(lanes))


def test_one_lane_or_one_priority_is_read_as_today():
    assert lane_shares({"": LaneReading(0, True)}, STRICT, 10) is None
    assert lane_shares({"a": LaneReading(3, True), "b": LaneReading(3, False)}, WEIGHTED, 10) is None


@given(LANES, MESSAGES_MAX)
def test_strict_reads_only_the_highest_priority_with_a_backlog_and_whatever_is_above_it(lanes, messages_max):
    shares = lane_shares(lanes, STRICT, messages_max)
    if shares is None:
        return
    waiting = [reading.priority for reading in lanes.values() if has_backlog(reading)]
    for lane, reading in lanes.items():
        held_back = any(priority > reading.priority for priority in waiting)
        assert shares.caps[lane] == (0 if held_back else messages_max), (lane, reading)
    assert shares.rest_order == () and shares.paused() == {lane for lane, cap in shares.caps.items() if cap == 0}
    assert any(cap for cap in shares.caps.values()), "some lane is always read"


def test_strict_lets_a_lower_lane_read_once_the_higher_one_caught_up():
    behind = {"": LaneReading(0, True), "urgent": LaneReading(9, True)}
    assert lane_shares(behind, STRICT, 100).caps == {"": 0, "urgent": 100}
    assert lane_shares(behind, STRICT, 100).paused() == {""}
    caught_up = {"": LaneReading(0, True), "urgent": LaneReading(9, False)}
    assert lane_shares(caught_up, STRICT, 100).caps == {"": 100, "urgent": 100}, "new urgent messages are not held back"
    not_answered_yet = {"": LaneReading(0, True), "urgent": LaneReading(9, None)}
    assert lane_shares(not_answered_yet, STRICT, 100).caps == {"": 0, "urgent": 100}, "unknown counts as a backlog"


@given(LANES, MESSAGES_MAX)
def test_weighted_gives_every_lane_its_share_by_priority(lanes, messages_max):
    shares = lane_shares(lanes, WEIGHTED, messages_max)
    if shares is None:
        return
    assert all(cap >= 1 for cap in shares.caps.values()), "no lane starves"
    assert set(shares.caps) == set(lanes) and sum(shares.caps.values()) == max(messages_max, len(lanes))
    rest = max(0, messages_max - len(lanes))
    weights = sum(reading.priority + 1 for reading in lanes.values())
    for lane, reading in lanes.items():
        exact = 1 + rest * (reading.priority + 1) / weights
        assert abs(shares.caps[lane] - exact) < 1, (lane, shares.caps[lane], exact)
    for first, high in lanes.items():
        for second, low in lanes.items():
            if high.priority > low.priority:
                assert shares.caps[first] >= shares.caps[second], "a higher priority never gets less"
    assert shares.rest_order == tuple(sorted(lanes, key=lambda lane: (-lanes[lane].priority, lane)))
    assert shares.paused() == frozenset(), "weighted fetches every lane"


def test_weighted_shares_by_priority_plus_one():
    lanes = {"": LaneReading(0, True), "gold": LaneReading(9, True), "silver": LaneReading(4, None)}
    shares = lane_shares(lanes, WEIGHTED, 1_000)
    assert shares.caps == {"": 1 + 62, "gold": 1 + 623, "silver": 1 + 312}  # 997 split 1 : 10 : 5, largest remainders
    assert shares.rest_order == ("gold", "silver", "")
    idle = lane_shares({"": LaneReading(0, True), "gold": LaneReading(9, False)}, WEIGHTED, 1_000)
    assert idle.caps == {"": 92, "gold": 908}, "a caught-up lane keeps its share for its new messages"
    assert idle.rest_order == ("gold", ""), "what it leaves goes to the others"


def test_weighted_gives_one_message_a_lane_when_the_poll_is_smaller_than_the_lanes():
    lanes = {name: LaneReading(priority, True) for priority, name in enumerate("abcde")}
    assert lane_shares(lanes, WEIGHTED, 2).caps == dict.fromkeys("abcde", 1)


@given(st.lists(st.tuples(st.sampled_from(["", "a", "b"]), BACKLOGS), max_size=12))
def test_a_lane_has_a_backlog_if_one_vp_has_none_if_none_may_have(vps):
    priorities = {"": 0, "a": 5, "b": 9}
    lanes = lane_readings((lane, priorities[lane], backlog) for lane, backlog in vps)
    assert set(lanes) == {lane for lane, _ in vps}
    for lane, reading in lanes.items():
        backlogs = [backlog for name, backlog in vps if name == lane]
        expected = True if True in backlogs else None if None in backlogs else False
        assert reading == LaneReading(priorities[lane], expected)


def test_the_consumer_chooses_strict_or_weighted_strict_by_default():
    assert ConsumerConfig().lane_order == STRICT
    assert ConsumerConfig(lane_order=WEIGHTED).lane_order == WEIGHTED
    with pytest.raises(InvalidConfig, match="'strict'.*'weighted'"):
        ConsumerConfig(lane_order="fair")


def test_under_weighted_order_each_lane_leads_the_fetch_in_proportion_to_its_weight():
    lanes = {"": LaneReading(0, True), "urgent": LaneReading(9, True), "mid": LaneReading(4, True)}
    credits: dict[str, int] = {}
    leads: collections.Counter = collections.Counter()
    for _ in range(160):  # 10 + 5 + 1 = 16 per cycle
        order, credits = fetch_order(lanes, credits)
        assert sorted(order) == sorted(lanes) and order[1:] == tuple(sorted(order[1:], key=lambda l: -lanes[l].priority))
        leads[order[0]] += 1
    assert leads == {"urgent": 100, "mid": 50, "": 10}


def test_an_idle_reader_keeps_its_fetch_order():
    lanes = {"": LaneReading(0, False), "urgent": LaneReading(9, None)}
    order, credits = fetch_order(lanes, {"": 3, "urgent": -2})
    assert order == ("", "urgent") and credits == {"": 3, "urgent": -2}
