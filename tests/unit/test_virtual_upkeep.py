"""The read path's upkeep decisions: read nodes gone for good, replica moves, merges when groups
shrink, and retiring closed VPs."""

from __future__ import annotations

import json

import pytest

from mafka4.coordinator.control.upkeep_decisions import (MoveBlocked, NodeAbsence, ShrinkWatch, StuckReplica,
                                                         merge_step, plan_replica_moves, retirable,
                                                         target_virtual_partitions)
from mafka4.errors import InvalidConfig
from mafka4.limits import VirtualConfig
from mafka4.limits.servers import ControllerConfig
from mafka4.virtual.layout import MergeStep, TopicLayout
from mafka4.virtual.ranges import HASH_SPACE, HashRange
from mafka4.virtual.vp_state import VirtualPartitionState


def vp_state(vp, replicas, risr=None, leader=None, sealed=None, retired=False, epoch=3) -> VirtualPartitionState:
    return VirtualPartitionState(vp, HashRange(0, HASH_SPACE), leader or replicas[0], epoch, tuple(replicas),
                                 tuple(replicas if risr is None else risr), sealed, retired)


# --- limits --------------------------------------------------------------------------------------


def test_the_upkeep_limits_default_to_ten_minutes_and_a_minute_and_refuse_nonsense():
    config = ControllerConfig()
    assert (config.read_node_gone_ms, config.vp_merge_delay_ms) == (600_000, 60_000)
    with pytest.raises(InvalidConfig, match="read_node_gone_ms=0 must be at least 1"):
        ControllerConfig(read_node_gone_ms=0)
    with pytest.raises(InvalidConfig, match="vp_merge_delay_ms=-5 must be at least 1"):
        ControllerConfig(vp_merge_delay_ms=-5)


# --- gone for good --------------------------------------------------------------------------------


def test_a_read_node_missing_longer_than_the_limit_is_gone_for_good():
    absence = NodeAbsence(read_node_gone_ms=1000)
    absence.observe({"r0", "r1"}, now_ms=0)
    absence.observe({"r0"}, now_ms=100)
    absence.observe({"r0"}, now_ms=900)
    assert absence.gone(1100) == frozenset(), "missing exactly as long as the limit is not longer than it"
    assert absence.gone(1101) == {"r1"}


def test_a_node_back_before_the_deadline_keeps_its_replicas_and_its_clock_starts_afresh():
    absence = NodeAbsence(read_node_gone_ms=1000)
    absence.observe({"r0", "r1"}, now_ms=0)
    absence.observe({"r0"}, now_ms=100)
    absence.observe({"r0", "r1"}, now_ms=1000)  # a restart within the limit
    assert absence.gone(1500) == frozenset()
    absence.observe({"r0"}, now_ms=1600)
    assert absence.gone(2600) == frozenset() and absence.gone(2601) == {"r1"}
    absence.observe({"r0", "r1"}, now_ms=3000)
    assert absence.gone(10_000) == frozenset(), "a gone node that registers again is not gone"


def test_a_node_never_seen_is_not_tracked_but_one_the_metadata_names_is():
    absence = NodeAbsence(read_node_gone_ms=1000)
    # A controller that took over while r2 was down never saw it registered; a VP still names it.
    absence.observe({"r0"}, now_ms=0, named_nodes={"r0", "r2"})
    absence.observe({"r0"}, now_ms=500)
    assert absence.gone(1001) == {"r2"}, "r9 (never registered, never named) is not gone"


def test_the_absence_clock_never_goes_back():
    absence = NodeAbsence(read_node_gone_ms=1000)
    absence.observe({"r0"}, now_ms=50)
    with pytest.raises(AssertionError, match="clock went back"):
        absence.gone(49)


# --- replica moves --------------------------------------------------------------------------------


def test_a_follower_on_a_gone_node_moves_in_place_to_the_least_loaded_live_node_and_leaves_the_risr():
    states = [vp_state(0, ("r0", "r2", "r3"), risr=("r0", "r2")), vp_state(1, ("r1", "r3")), vp_state(2, ("r3", "r4"))]
    # Hosted: r0 1, r1 1, r3 3, r4 1; v0's candidates r1, r4 tie at 1: the smaller id wins.
    moves = plan_replica_moves(states, live_read_nodes={"r0", "r1", "r3", "r4"}, gone_nodes={"r2"})
    assert moves.stuck == ()
    (moved,) = moves.states
    assert moved.replicas == ("r0", "r1", "r3") and moved.risr == ("r0",)
    assert (moved.vp, moved.leader, moved.leader_epoch, moved.hash_range) == (0, "r0", 3, states[0].hash_range)
    assert VirtualPartitionState.from_json(0, json.loads(json.dumps(moved.to_json()))) == moved


def test_moves_count_the_replicas_already_planned_so_they_spread():
    states = [vp_state(0, ("r0", "r2")), vp_state(1, ("r0", "r2")), vp_state(2, ("r0", "r2"))]
    moves = plan_replica_moves(states, live_read_nodes={"r0", "r1", "r3"}, gone_nodes={"r2"})
    assert [s.replicas for s in moves.states] == [("r0", "r1"), ("r0", "r3"), ("r0", "r1")]


def test_a_vp_whose_leader_is_gone_is_left_for_the_failover():
    states = [vp_state(0, ("r2", "r0", "r3")), vp_state(1, ("r0", "r1", "r3"))]
    moves = plan_replica_moves(states, live_read_nodes={"r0", "r1"}, gone_nodes={"r2", "r3"})
    assert moves.states == ()
    assert moves.stuck == (StuckReplica(0, "r2", MoveBlocked.LEADER_GONE), StuckReplica(0, "r3", MoveBlocked.LEADER_GONE),
                           StuckReplica(1, "r3", MoveBlocked.NO_SPARE_NODE))
    assert str(moves.stuck[0]) == "replica of v0 on gone read node r2 stays: its leader is on a gone read node: " \
                                  "the VP fails over first"


def test_read_replicas_equal_to_the_node_count_leave_no_spare_node_so_the_replica_stays():
    states = [vp_state(0, ("r0", "r1", "r2"))]
    moves = plan_replica_moves(states, live_read_nodes={"r0", "r1"}, gone_nodes={"r2"})
    assert moves.states == () and moves.stuck == (StuckReplica(0, "r2", MoveBlocked.NO_SPARE_NODE),)
    joined = plan_replica_moves(states, live_read_nodes={"r0", "r1", "r9"}, gone_nodes={"r2"})
    assert joined.states[0].replicas == ("r0", "r1", "r9") and joined.stuck == (), "a new read node takes it"


def test_with_one_spare_node_for_two_gone_followers_the_first_moves_and_the_second_stays_in_the_risr():
    states = [vp_state(0, ("r0", "r2", "r3"), risr=("r0", "r2", "r3"))]
    moves = plan_replica_moves(states, live_read_nodes={"r0", "r1"}, gone_nodes={"r2", "r3"})
    assert moves.states[0].replicas == ("r0", "r1", "r3") and moves.states[0].risr == ("r0", "r3")
    assert moves.stuck == (StuckReplica(0, "r3", MoveBlocked.NO_SPARE_NODE),)


def test_retired_vps_move_nothing_and_weigh_on_no_node():
    states = [vp_state(0, ("r1", "r2"), sealed=10, retired=True), vp_state(1, ("r0", "r2"))]
    moves = plan_replica_moves(states, live_read_nodes={"r0", "r1", "r5"}, gone_nodes={"r2"})
    assert [(s.vp, s.replicas) for s in moves.states] == [(1, ("r0", "r1"))] and moves.stuck == ()


def test_nothing_moves_without_gone_nodes():
    states = [vp_state(0, ("r0", "r1")), vp_state(1, ("r1", "r2"))]
    moves = plan_replica_moves(states, live_read_nodes={"r0", "r1", "r3"}, gone_nodes=set())
    assert moves.states == () and moves.stuck == (), "r2 is missing but not gone yet: its replica stays"


def test_a_vp_with_a_move_in_flight_keeps_its_gone_replica_until_the_move_ended_but_weighs_on_its_nodes():
    # v0 is mid-move (r3 joined as the move's target): replacing r2 now could race the move's own writes.
    states = [vp_state(0, ("r0", "r2", "r3"), risr=("r0", "r2")), vp_state(1, ("r0", "r2"))]
    moves = plan_replica_moves(states, live_read_nodes={"r0", "r1", "r3"}, gone_nodes={"r2"}, busy={0})
    assert moves.stuck == (StuckReplica(0, "r2", MoveBlocked.MOVE_IN_FLIGHT),)
    assert [(s.vp, s.replicas) for s in moves.states] == [(1, ("r0", "r1"))], "r3 hosts v0's target: r1 is emptier"
    after = plan_replica_moves(states, live_read_nodes={"r0", "r1", "r3"}, gone_nodes={"r2"})
    assert [s.vp for s in after.states] == [0, 1], "once the move ended, its VP is moved like any other"


# --- merging when groups shrink ------------------------------------------------------------------


def test_the_target_is_the_creation_count_or_the_largest_group():
    assert target_virtual_partitions(4, [2, 7, 3]) == 7
    assert target_virtual_partitions(4, [2, 0]) == 4
    assert target_virtual_partitions(4, [0]) == 4, "an empty group counts for nothing"
    assert target_virtual_partitions(4, []) == 4, "a topic nobody reads keeps its creation count"


def test_merge_step_names_the_narrowest_adjacent_pair_only_above_the_target():
    layout = TopicLayout.initial(partitions=1, virtual_partitions=4, config=VirtualConfig(virtual_partitions_max=4))
    assert merge_step(layout, 2) == MergeStep(0, 1)
    assert merge_step(layout, 4) is None
    assert merge_step(layout, 9) is None, "below the target is the groups' to split, and past the maximum is no error"


def test_a_merge_is_due_only_after_the_topic_stayed_above_its_target_for_the_delay():
    watch = ShrinkWatch(vp_merge_delay_ms=1000)
    assert not watch.observe(active=4, target=2, now_ms=0)
    assert not watch.observe(active=4, target=2, now_ms=999)
    assert watch.observe(active=4, target=2, now_ms=1000)


def test_after_a_merge_step_the_next_waits_a_full_delay_again():
    watch = ShrinkWatch(vp_merge_delay_ms=1000)
    watch.observe(4, 2, 0)
    assert watch.observe(4, 2, 1000)
    assert not watch.observe(4, 2, 1001), "the merge just reported has not settled"
    assert not watch.observe(3, 2, 1999)
    assert watch.observe(3, 2, 2000)
    assert not watch.observe(2, 2, 5000) and not watch.observe(2, 2, 10_000), "at the target: nothing more"


def test_the_delay_restarts_whenever_the_topic_is_back_at_its_target():
    watch = ShrinkWatch(vp_merge_delay_ms=1000)
    watch.observe(4, 2, 0)
    assert not watch.observe(4, 4, 900), "a member joined back"
    assert not watch.observe(4, 2, 950)
    assert not watch.observe(4, 2, 1900)
    assert watch.observe(4, 2, 1950)


def test_a_topic_below_its_target_is_never_merged():
    watch = ShrinkWatch(vp_merge_delay_ms=1000)
    assert not any(watch.observe(2, 4, now_ms) for now_ms in range(0, 100_000, 500))


def test_the_target_of_several_groups_decides_when_and_how_far_a_topic_shrinks():
    layout = TopicLayout.initial(partitions=1, virtual_partitions=2)
    layout = layout.append(layout.plan_split(0, (0,), (0,)))
    layout = layout.append(layout.plan_split(1, (0,), (0,)))  # 4 active VPs for a group of 4
    watch = ShrinkWatch(vp_merge_delay_ms=1000)
    target = target_virtual_partitions(2, [3, 1, 0])  # the group of 4 shrank to 3; another group has 1
    assert target == 3
    assert not watch.observe(len(layout.current.ranges), target, 0)
    assert watch.observe(len(layout.current.ranges), target, 1000)
    step = merge_step(layout, target)
    layout = layout.append(layout.plan_merge(step.first, step.second, (0,), (0,)))
    assert merge_step(layout, target) is None and not watch.observe(len(layout.current.ranges), target, 5000)


# --- retiring closed VPs --------------------------------------------------------------------------


def two_splits() -> TopicLayout:
    """VPs 0 and 1 split into 2, 3 and 4, 5: 0 and 1 are closed, 2..5 active."""
    layout = TopicLayout.initial(partitions=1, virtual_partitions=2)
    layout = layout.append(layout.plan_split(0, (10,), (10,)))
    return layout.append(layout.plan_split(1, (20,), (20,)))


DAY_MS = 24 * 3600 * 1000


def test_a_sealed_closed_vp_whose_newest_record_passed_retention_is_retired_and_a_newer_one_is_not():
    layout = two_splits()
    states = [vp_state(0, ("r0",), sealed=7), vp_state(1, ("r1",), sealed=9)]
    newest = {0: 1_000, 1: 1_000 + DAY_MS}
    assert retirable(layout, states, newest, retention_ms=DAY_MS, now_ms=1_000 + DAY_MS) == ()
    assert retirable(layout, states, newest, retention_ms=DAY_MS, now_ms=1_001 + DAY_MS) == (0,)
    assert retirable(layout, states, newest, retention_ms=DAY_MS, now_ms=1_001 + 2 * DAY_MS) == (0, 1)


def test_an_empty_closed_vp_is_retired_at_once_and_an_unknown_one_never():
    layout = two_splits()
    states = [vp_state(0, ("r0",), sealed=0), vp_state(1, ("r1",), sealed=5)]
    assert retirable(layout, states, {0: None}, retention_ms=DAY_MS, now_ms=0) == (0,)
    assert retirable(layout, states, {}, retention_ms=DAY_MS, now_ms=10 * DAY_MS) == (), "no timestamps: unknown"


def test_nothing_is_retired_without_retention():
    layout = two_splits()
    states = [vp_state(0, ("r0",), sealed=0), vp_state(1, ("r1",), sealed=5)]
    assert retirable(layout, states, {0: None, 1: 0}, retention_ms=None, now_ms=100 * DAY_MS) == ()


def test_unsealed_closed_vps_active_vps_and_retired_vps_are_never_retired():
    layout = two_splits()
    states = [vp_state(0, ("r0",)),  # closed, not sealed: records below the cut may still come
              vp_state(1, ("r1",), sealed=5, retired=True),
              vp_state(2, ("r0",)), vp_state(3, ("r1",), sealed=4)]  # active: they still receive records
    newest = {0: 0, 1: 0, 2: 0, 3: None}
    assert retirable(layout, states, newest, retention_ms=1, now_ms=100 * DAY_MS) == ()
