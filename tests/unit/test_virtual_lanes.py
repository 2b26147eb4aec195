"""Lanes in a topic's layout (``virtual.layout``): opening one, splitting and merging within one,
placing records in one, scaling one, and storing epochs with lanes (``virtual.vp_state``)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mafka4.errors import InvalidReshard, LanesExhausted, UnknownLane
from mafka4.limits import VirtualConfig
from mafka4.virtual.layout import TRUNK, TRUNK_ID, MergeStep, SplitStep, TopicLayout, next_scale_step
from mafka4.virtual.ranges import HashRange, RangeMap
from mafka4.virtual.vp_state import epoch_from_json, epoch_to_json, epochs_from_json, epochs_to_json

PARTITIONS = 3
HASH_MAX = 2**64 - 1


def laned(vps: int = 4, lanes: tuple[str, ...] = ("blue",), config: VirtualConfig = VirtualConfig()) -> TopicLayout:
    layout = TopicLayout.initial(PARTITIONS, vps, config)
    for lane in lanes:
        layout = layout.append(layout.plan_open_lane(lane))
    return layout


def test_opening_a_lane_gives_it_a_new_vp_owning_its_whole_hash_space_and_moves_nothing():
    layout = TopicLayout.initial(PARTITIONS, 4)
    split = layout.append(layout.plan_split(1, [5, 6, 7], [0, 0, 0]))
    epoch = split.plan_open_lane("blue")
    assert epoch.epoch == 2 and epoch.parents == () and epoch.children == (6,) and epoch.opens_lane
    assert epoch.cut == split.current.cut == (5, 6, 7), "opening a lane cuts nowhere new"
    assert epoch.ranges == split.current.ranges, "the trunk's layout is unchanged"
    assert epoch.lanes == (("blue", RangeMap.even(1, 6)),)
    opened = split.append(epoch)
    current = opened.current
    assert (current.lane_id("blue"), current.lane_id(TRUNK), current.lane_id("red")) == (1, 0, None)
    assert opened.current.lane_names == ("blue",)
    assert opened.lane_of(6) == "blue" and opened.lane_of(0) == TRUNK and opened.current.lane_of(1) is None
    assert opened.current.vp_ids == (0, 4, 5, 2, 3, 6)
    green = opened.append(opened.plan_open_lane("green")).current
    assert green.children == (7,) and green.lane_id("green") == 2 and green.lane_ranges(2) == RangeMap.even(1, 7)
    assert green.lane_ranges(3) is None


def test_a_lane_opens_at_where_the_feeds_stand_never_below_the_current_cut():
    layout = TopicLayout.initial(PARTITIONS, 2)
    split = layout.append(layout.plan_split(1, [5, 6, 7], [0, 0, 0]))
    epoch = split.plan_open_lane("blue", cut=[9, 2, 7])
    assert epoch.cut == (9, 6, 7), "each partition's offset, raised to the current cut"
    opened = split.append(epoch)
    assert opened.epoch_for(0, 8).epoch == 1 and opened.epoch_for(0, 9).epoch == 2
    assert opened.vp_for(0, 8, 0) == opened.vp_for(0, 9, 0), "the trunk's records land alike on either side of it"
    assert opened.source_bounds(opened.current.children[0], 0) == (9, None)
    later = opened.append(opened.plan_split(0, [10, 6, 7], [0, 0, 0]))
    assert later.current.cut == (10, 6, 7)


def test_no_lane_opens_past_lanes_max():
    layout = laned(lanes=("a", "b"), config=VirtualConfig(lanes_max=2))
    with pytest.raises(LanesExhausted, match="lanes_max=2"):
        layout.plan_open_lane("c")
    with pytest.raises(LanesExhausted):
        TopicLayout.initial(1, 1, VirtualConfig(lanes_max=0)).plan_open_lane("a")


def test_a_lane_counts_against_virtual_partitions_max():
    layout = TopicLayout.initial(PARTITIONS, 4, VirtualConfig(virtual_partitions_max=4))
    with pytest.raises(InvalidReshard, match="virtual_partitions_max=4"):
        layout.plan_open_lane("blue")


def test_splitting_a_lanes_vp_stays_in_that_lane_and_leaves_the_trunk_alone():
    layout = laned()
    (lane_vp,) = layout.current.lane_ranges(1).vp_ids
    epoch = layout.plan_split(lane_vp, [3, 3, 3], [0, 0, 0])
    after = layout.append(epoch)
    assert epoch.parents == (lane_vp,) and epoch.children == (5, 6)
    assert after.current.ranges == layout.current.ranges
    assert after.current.lane_ranges(1).vp_ids == (5, 6)
    assert after.lane_of(5) == after.lane_of(6) == after.lane_of(lane_vp) == "blue"
    # And again, one of the children: a lane splits like the trunk.
    again = after.append(after.plan_split(6, [3, 3, 3], [3, 3, 3]))
    assert again.current.lane_ranges(1).vp_ids == (5, 7, 8)
    # A trunk split leaves the lane alone.
    trunk_split = again.append(again.plan_split(0, [4, 4, 4], [3, 3, 3]))
    assert trunk_split.current.lanes == again.current.lanes


def test_merging_within_a_lane_is_allowed_and_across_lanes_refused():
    layout = laned(lanes=("blue", "red"))
    blue, red = layout.current.lane_ranges(1).vp_ids[0], layout.current.lane_ranges(2).vp_ids[0]
    with pytest.raises(InvalidReshard, match="different lanes"):
        layout.plan_merge(blue, red, [0, 0, 0], [0, 0, 0])
    with pytest.raises(InvalidReshard, match="different lanes"):
        layout.plan_merge(3, blue, [0, 0, 0], [0, 0, 0])
    split = layout.append(layout.plan_split(blue, [2, 2, 2], [0, 0, 0]))
    left, right = split.current.lane_ranges(1).vp_ids
    merged = split.append(split.plan_merge(left, right, [4, 4, 4], [2, 2, 2]))
    assert merged.current.lane_ranges(1) == RangeMap.even(1, merged.current.children[0])
    assert merged.current.ranges == layout.current.ranges
    assert merged.current.lane_ranges(2) == layout.current.lane_ranges(2), "the other lane is untouched"


def test_records_are_located_in_their_lanes_layout_of_their_epoch_and_an_unopened_lane_is_unknown():
    layout = TopicLayout.initial(PARTITIONS, 2)
    layout = layout.append(layout.plan_split(1, [10, 10, 10], [0, 0, 0]))  # epoch 1: VPs 0, 2, 3
    layout = layout.append(layout.plan_open_lane("blue"))  # epoch 2: VP 4, cut (10, 10, 10)
    layout = layout.append(layout.plan_split(4, [20, 20, 20], [10, 10, 10]))  # epoch 3: VPs 5, 6 of blue
    assert layout.locate(0, 15, HASH_MAX) == (2, 3)
    assert layout.locate(0, 15, HASH_MAX, 1) == (2, 4)
    assert layout.locate(0, 25, 0, 1) == (3, 5) and layout.locate(0, 25, HASH_MAX, 1) == (3, 6)
    assert layout.vp_for(0, 25, 0, TRUNK_ID) == 0
    with pytest.raises(UnknownLane, match="older than the record"):
        layout.locate(0, 5, 0, 1)  # epoch 1 has no lane: a layout that old cannot place it
    with pytest.raises(UnknownLane):
        layout.locate(0, 25, 0, 2)


def test_scaling_a_lane_splits_and_merges_its_vps_only():
    layout = laned(vps=2)
    assert next_scale_step(layout, 2) is None, "the trunk has its 2"
    step = next_scale_step(layout, 2, "blue")
    assert step == SplitStep(layout.current.lane_ranges(1).vp_ids[0])
    cut = [0] * PARTITIONS
    while (step := next_scale_step(layout, 4, "blue")) is not None:
        assert isinstance(step, SplitStep) and layout.lane_of(step.vp) == "blue"
        layout = layout.append(layout.plan_split(step.vp, cut, cut))
    assert len(layout.current.lane_ranges(1)) == 4 and len(layout.current.ranges) == 2
    step = next_scale_step(layout, 3, "blue")
    assert isinstance(step, MergeStep) and {layout.lane_of(step.first), layout.lane_of(step.second)} == {"blue"}
    with pytest.raises(UnknownLane, match="not open"):
        next_scale_step(layout, 2, "red")


@settings(max_examples=40, deadline=None)
@given(steps=st.lists(st.tuples(st.sampled_from(["open", "split", "merge"]), st.integers(0, 10**6)), max_size=12))
def test_epochs_with_lanes_round_trip_through_json(steps):
    layout = TopicLayout.initial(PARTITIONS, 2)
    for number, (kind, pick) in enumerate(steps):
        current = layout.current
        cut = list(current.cut)
        if kind == "open":
            epoch = layout.plan_open_lane(f"lane-{number}")
        elif kind == "split":
            vps = current.vp_ids
            epoch = layout.plan_split(vps[pick % len(vps)], cut, cut)
        else:
            pairs = []  # adjacent VPs of one lane
            for lane in (TRUNK, *current.lane_names):
                items = current.lane_ranges(current.lane_id(lane)).items()
                pairs += [(a, b) for (_, a), (_, b) in zip(items, items[1:])]
            if not pairs:
                continue
            epoch = layout.plan_merge(*pairs[pick % len(pairs)], cut, cut)
        layout = layout.append(epoch)
    for epoch in layout.epochs:
        value = epoch_to_json(epoch)
        assert ("lanes" in value) == bool(epoch.lanes)
        assert epoch_from_json(value) == epoch
    assert TopicLayout(PARTITIONS, [epoch_from_json(epoch_to_json(e)) for e in layout.epochs]) == layout
    # As etcd holds them: each epoch writes only the lanes it opened or reshaped, read after the one before.
    stored = epochs_to_json(layout.epochs)
    assert all(len(value.get("lanes", ())) <= 1 for value in stored[1:])
    assert epochs_from_json(reversed(stored)) == list(layout.epochs)


def test_a_stored_epoch_read_without_the_one_before_it_is_refused():
    layout = TopicLayout.initial(PARTITIONS, 1)
    for name in ("blue", "red"):
        layout = layout.append(layout.plan_open_lane(name))
    value = epochs_to_json(layout.epochs)[-1]
    assert value["lane_count"] == 2 and [lane[0] for lane in value["lanes"]] == ["red"]
    with pytest.raises(ValueError, match="read after split epoch 1"):
        epoch_from_json(value)
    assert epoch_from_json(value, layout.epochs[1]) == layout.current


def test_an_epoch_stored_before_lanes_reads_as_one_without_lanes():
    old = {"epoch": 0, "ranges": [[0, 2**63, 0], [2**63, 2**64, 1]], "cut": [0, 0], "parents": [],
           "children": [0, 1]}
    epoch = epoch_from_json(old)
    assert epoch.lanes == () and epoch.ranges.items() == ((HashRange(0, 2**63), 0), (HashRange(2**63, 2**64), 1))
    assert epoch_to_json(epoch) == old, "a topic without lanes stores what it stored before them"
