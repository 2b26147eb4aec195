"""Moving VP replicas between live read nodes: the plans (onto a new node, off a node to release)
and the step machine that carries one move out (add the target, wait for the RISR, move the
leadership, remove the source), with a randomized run of plans through their steps."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from mafka4.coordinator.control.replica_move_plans import (StuckOnLeavingNode, hosted_replicas, plan_moves_off,
                                                           plan_moves_onto)
from mafka4.coordinator.control.replica_moves import (MoveAbandoned, MoveAbandonedBecause, MoveDone, MovePurpose,
                                                      MoveStepKind, MoveWait, MoveWaits, ReplicaMove, WriteState,
                                                      check_step, next_move_step, take_back)
from mafka4.virtual.failover import decide_failover
from mafka4.virtual.ranges import HASH_SPACE, HashRange
from mafka4.virtual.vp_state import VirtualPartitionState


def vp_state(vp, replicas, risr=None, leader=None, sealed=None, retired=False, epoch=3) -> VirtualPartitionState:
    return VirtualPartitionState(vp, HashRange(0, HASH_SPACE), leader or replicas[0], epoch, tuple(replicas),
                                 tuple(replicas if risr is None else risr), sealed, retired)


def joined(state: VirtualPartitionState, node: str) -> VirtualPartitionState:
    """The VP leader's RISR write once ``node`` caught up: same leader, same epoch (``record_risr``)."""
    return dataclasses.replace(state, risr=(*state.risr, node))


LIVE = frozenset({"a", "b", "c", "d"})


# --- one move, step by step ---------------------------------------------------------------------


def test_a_lone_leader_moves_by_joining_the_target_then_handing_it_leadership_then_leaving():
    move = ReplicaMove("t", 0, "a", "d")
    state = vp_state(0, ["a"])
    added = next_move_step(move, state, LIVE)
    assert added == WriteState(MoveStepKind.ADD_TARGET, vp_state(0, ["a", "d"], risr=["a"], epoch=4))
    assert next_move_step(move, added.state, LIVE) == MoveWait(MoveWaits.TARGET_NOT_IN_SYNC)
    in_sync = joined(added.state, "d")
    handed = next_move_step(move, in_sync, LIVE)
    assert handed == WriteState(MoveStepKind.MOVE_LEADERSHIP, vp_state(0, ["a", "d"], leader="d", epoch=5))
    left = next_move_step(move, handed.state, LIVE)
    assert left == WriteState(MoveStepKind.REMOVE_SOURCE, vp_state(0, ["d"], epoch=6))
    assert next_move_step(move, left.state, LIVE) == MoveDone()


def test_a_follower_moves_without_a_leader_change_and_the_target_takes_its_place_in_the_preferred_order():
    move = ReplicaMove("t", 0, "b", "d")
    added = next_move_step(move, vp_state(0, ["a", "b", "c"]), LIVE)
    assert added.kind is MoveStepKind.ADD_TARGET and added.state.replicas == ("a", "b", "c", "d")
    left = next_move_step(move, joined(added.state, "d"), LIVE)
    assert left == WriteState(MoveStepKind.REMOVE_SOURCE,
                              vp_state(0, ["a", "d", "c"], risr=["a", "c", "d"], epoch=5))


def test_a_controller_that_died_mid_move_resumes_from_what_etcd_holds():
    """The machine reads only the stored state: asked twice, or after a lost answer, it says the same."""
    move = ReplicaMove("t", 0, "a", "d")
    states = [vp_state(0, ["a"])]
    while not isinstance(outcome := next_move_step(move, states[-1], LIVE), MoveDone):
        assert next_move_step(move, states[-1], LIVE) == outcome
        states.append(outcome.state if isinstance(outcome, WriteState) else joined(states[-1], "d"))
    assert [state.leader_epoch for state in states] == [3, 4, 4, 5, 6]


def test_a_target_that_falls_out_of_the_risr_before_leading_is_waited_for_again():
    move = ReplicaMove("t", 0, "a", "d")
    dropped = vp_state(0, ["a", "d"], risr=["a"], epoch=4)
    assert next_move_step(move, dropped, LIVE) == MoveWait(MoveWaits.TARGET_NOT_IN_SYNC)


def test_a_dead_leader_is_failed_over_by_the_repair_before_the_move_writes():
    move = ReplicaMove("t", 0, "b", "d")
    state = vp_state(0, ["a", "b", "d"], risr=["a", "b", "d"])
    assert next_move_step(move, state, LIVE - {"a"}) == MoveWait(MoveWaits.LEADER_NOT_LIVE)
    assert next_move_step(move, vp_state(0, ["a", "b"]), LIVE - {"a"}) == MoveWait(MoveWaits.LEADER_NOT_LIVE)


def test_a_source_leader_that_dies_once_the_target_is_in_sync_is_failed_over_and_the_move_ends():
    move = ReplicaMove("t", 0, "a", "d")
    in_sync = vp_state(0, ["a", "d"], epoch=4)
    assert next_move_step(move, in_sync, LIVE - {"a"}) == MoveWait(MoveWaits.LEADER_NOT_LIVE)
    failed_over = decide_failover(in_sync, LIVE - {"a"})
    assert (failed_over.leader, failed_over.risr) == ("d", ("d",))
    assert next_move_step(move, failed_over, LIVE - {"a"}) == WriteState(MoveStepKind.REMOVE_SOURCE,
                                                                          vp_state(0, ["d"], epoch=6))


def test_a_source_follower_that_dies_while_the_target_catches_up_does_not_stop_the_move():
    move = ReplicaMove("t", 0, "b", "d")
    joining = vp_state(0, ["a", "b", "d"], risr=["a", "b"], epoch=4)
    assert next_move_step(move, joining, LIVE - {"b"}) == MoveWait(MoveWaits.TARGET_NOT_IN_SYNC)
    assert next_move_step(move, joined(joining, "d"), LIVE - {"b"}).kind is MoveStepKind.REMOVE_SOURCE


# --- abandoned moves ----------------------------------------------------------------------------


def test_a_move_of_a_deleted_or_retired_vp_is_abandoned_with_nothing_to_write():
    move = ReplicaMove("t", 0, "a", "d")
    assert next_move_step(move, None, LIVE) == MoveAbandoned(MoveAbandonedBecause.VP_GONE)
    retired = vp_state(0, ["a", "d"], risr=["a"], sealed=10, retired=True)
    assert next_move_step(move, retired, LIVE) == MoveAbandoned(MoveAbandonedBecause.VP_RETIRED)


def test_a_move_whose_replicas_changed_otherwise_is_abandoned():
    move = ReplicaMove("t", 0, "b", "d")
    replaced = vp_state(0, ["a", "c"])  # the gone-node upkeep replaced b by c
    assert next_move_step(move, replaced, LIVE) == MoveAbandoned(MoveAbandonedBecause.REPLICAS_CHANGED)


@pytest.mark.parametrize("dead", ["a", "d"])
def test_a_move_not_started_is_abandoned_without_a_write_when_its_source_or_target_is_not_live(dead):
    reason = MoveAbandonedBecause.SOURCE_NOT_LIVE if dead == "a" else MoveAbandonedBecause.TARGET_NOT_LIVE
    assert next_move_step(ReplicaMove("t", 0, "a", "d"), vp_state(0, ["a"]), LIVE - {dead}) == MoveAbandoned(reason)


def test_a_joining_target_whose_source_leader_died_is_taken_back_out_since_it_can_copy_from_nobody():
    move = ReplicaMove("t", 0, "a", "d")
    joining = vp_state(0, ["a", "d"], risr=["a"], epoch=4)
    assert next_move_step(move, joining, LIVE - {"a"}) == MoveAbandoned(MoveAbandonedBecause.SOURCE_NOT_LIVE,
                                                                        vp_state(0, ["a"], epoch=5))


def test_a_dead_target_is_taken_back_out_even_from_the_risr_while_the_leader_keeps_every_record():
    move = ReplicaMove("t", 0, "b", "d")
    for state in (vp_state(0, ["a", "b", "d"], risr=["a", "b"], epoch=4), vp_state(0, ["a", "b", "d"], epoch=4)):
        assert next_move_step(move, state, LIVE - {"d"}) == MoveAbandoned(
            MoveAbandonedBecause.TARGET_NOT_LIVE, vp_state(0, ["a", "b"], epoch=5))


def test_a_target_that_leads_is_never_taken_back_a_dead_one_waits_for_the_failover():
    move = ReplicaMove("t", 0, "a", "d")
    leading = vp_state(0, ["a", "d"], leader="d", epoch=5)
    assert take_back(move, leading, LIVE) is None
    assert next_move_step(move, leading, LIVE - {"d"}) == MoveWait(MoveWaits.LEADER_NOT_LIVE)
    assert take_back(move, vp_state(0, ["a"]), LIVE) is None  # nothing to take back


def test_a_dead_target_in_the_risr_stays_while_the_leader_is_down_too_it_may_be_the_next_leader():
    move = ReplicaMove("t", 0, "a", "d")
    in_sync = vp_state(0, ["a", "d"], epoch=4)
    assert next_move_step(move, in_sync, LIVE - {"a", "d"}) == MoveWait(MoveWaits.LEADER_NOT_LIVE)
    assert take_back(move, in_sync, LIVE - {"a", "d"}) is None
    assert take_back(move, in_sync, LIVE - {"d"}) == vp_state(0, ["a"], epoch=5)


def test_a_sealed_vp_is_not_moved_for_balance_but_a_started_move_and_a_release_go_on():
    sealed = vp_state(0, ["a"], sealed=42)
    balance, release = ReplicaMove("t", 0, "a", "d"), ReplicaMove("t", 0, "a", "d", MovePurpose.RELEASE)
    assert next_move_step(balance, sealed, LIVE) == MoveAbandoned(MoveAbandonedBecause.VP_SEALED)
    assert next_move_step(release, sealed, LIVE).kind is MoveStepKind.ADD_TARGET
    started = vp_state(0, ["a", "d"], sealed=42, epoch=4)
    assert next_move_step(balance, started, LIVE).kind is MoveStepKind.MOVE_LEADERSHIP


def test_a_step_that_drops_another_risr_member_or_elects_an_out_of_sync_target_breaks_an_invariant():
    move = ReplicaMove("t", 0, "b", "d")
    before = vp_state(0, ["a", "b", "c", "d"])
    with pytest.raises(AssertionError):
        check_step(move, before, MoveStepKind.REMOVE_SOURCE, vp_state(0, ["a", "d"], epoch=4))
    joining = vp_state(0, ["b", "d"], risr=["b"])
    with pytest.raises(AssertionError):
        check_step(move, joining, MoveStepKind.MOVE_LEADERSHIP, vp_state(0, ["b", "d"], leader="d", epoch=4))
    with pytest.raises(AssertionError):  # the epoch must grow
        check_step(move, joining, MoveStepKind.ADD_TARGET, joining)


# --- plans --------------------------------------------------------------------------------------


def test_a_new_node_takes_an_even_share_of_single_replica_vps_from_the_busiest_nodes():
    states = {"t": [vp_state(v, [node]) for v, node in enumerate("aaaabbbbcccc")]}
    moves = plan_moves_onto(states, {"a", "b", "c", "e"}, "e")
    assert moves == (ReplicaMove("t", 0, "a", "e"), ReplicaMove("t", 4, "b", "e"), ReplicaMove("t", 8, "c", "e"))
    assert all(move.purpose is MovePurpose.BALANCE for move in moves)


def test_followers_move_before_leaders_and_never_onto_a_node_holding_the_vp():
    states = {"t": [vp_state(0, ["a", "b"]), vp_state(1, ["b", "a"]), vp_state(2, ["a", "e"])]}
    moves = plan_moves_onto(states, {"a", "b", "e"}, "e")
    assert moves == (ReplicaMove("t", 1, "a", "e"),)


def test_retired_sealed_busy_and_repaired_vps_do_not_move_onto_a_new_node_and_retired_ones_count_for_nobody():
    states = {"t": [vp_state(0, ["a"], sealed=5, retired=True), vp_state(1, ["a"], sealed=5),
                    vp_state(2, ["a"]), vp_state(3, ["a", "x"]), vp_state(4, ["a"])]}
    assert hosted_replicas(states, {"a", "e"}) == {"a": 3, "e": 0}, "open VPs only: the measure the scaling decides on"
    assert hosted_replicas(states, {"a", "e"}, sealed_too=True) == {"a": 4, "e": 0}
    assert plan_moves_onto(states, {"a", "e"}, "e", busy={("t", 2)}) == (ReplicaMove("t", 4, "a", "e"),)


def test_a_node_heavy_with_sealed_replicas_gives_a_new_node_no_more_than_its_share_of_open_ones():
    # a: 4 open and 6 sealed, b: 4 open. Counted with the sealed ones, a would give all its 4 open
    # replicas to e (10 - 4 > 1 until it has none left to move): e would be fed and read the most.
    states = {"t": [vp_state(vp, ["a"]) for vp in range(4)] + [vp_state(vp, ["b"]) for vp in range(4, 8)]
              + [vp_state(vp, ["a"], sealed=9) for vp in range(8, 14)]}
    moves = plan_moves_onto(states, {"a", "b", "e"}, "e")
    assert moves == (ReplicaMove("t", 0, "a", "e"), ReplicaMove("t", 4, "b", "e"))
    after = {"t": [dataclasses.replace(s, replicas=("e",), risr=("e",), leader="e")
                   if any(m.vp == s.vp for m in moves) else s for s in states["t"]]}
    assert hosted_replicas(after, {"a", "b", "e"}) == {"a": 3, "b": 3, "e": 2}
    assert hosted_replicas(after, {"a", "b", "e"}, sealed_too=True) == {"a": 9, "b": 3, "e": 2}


def test_a_released_node_spreads_its_sealed_replicas_over_the_nodes_hosting_as_few_open_ones():
    # a and b host one open replica each; a holds two sealed ones as well. r's open replica goes to b
    # (as few open ones as a, fewer in all), its sealed ones where the fewest are held in all.
    states = {"t": [vp_state(0, ["a"]), vp_state(1, ["b"]), vp_state(2, ["a"], sealed=1), vp_state(3, ["a"], sealed=1),
                    vp_state(4, ["r"]), vp_state(5, ["r"], sealed=1), vp_state(6, ["r"], sealed=1),
                    vp_state(7, ["r"], sealed=1)]}
    planned = plan_moves_off(states, {"a", "b", "r"}, "r")
    assert [(move.vp, move.target) for move in planned.moves] == [(4, "b"), (5, "b"), (6, "a"), (7, "b")]
    assert planned.releasable


def test_a_released_node_sends_each_replica_to_the_least_loaded_eligible_node_or_reports_it_stuck():
    states = {"t": [vp_state(0, ["r", "a"]), vp_state(1, ["r"]), vp_state(2, ["b", "r"]),
                    vp_state(3, ["a", "b", "r"]), vp_state(4, ["a"], sealed=7)],
              "u": [vp_state(0, ["r"], sealed=3)]}
    planned = plan_moves_off(states, {"a", "b", "r"}, "r")
    assert planned.moves == (ReplicaMove("t", 0, "r", "b", MovePurpose.RELEASE),
                             ReplicaMove("t", 1, "r", "a", MovePurpose.RELEASE),
                             ReplicaMove("t", 2, "r", "a", MovePurpose.RELEASE),
                             ReplicaMove("u", 0, "r", "b", MovePurpose.RELEASE))
    assert planned.stuck == (StuckOnLeavingNode("t", 3, "r"),) and not planned.releasable
    assert "every other live read node already holds a replica" in str(planned.stuck[0])


# --- plans run through their steps, at random -------------------------------------------------------

NODES = ("n0", "n1", "n2", "n3", "n4", "n5")


@st.composite
def vp_states(draw, vp: int) -> VirtualPartitionState:
    replicas = draw(st.lists(st.sampled_from(NODES), min_size=1, max_size=3, unique=True))
    leader = draw(st.sampled_from(replicas))
    risr = [leader] + [node for node in replicas if node != leader and draw(st.booleans())]
    sealed = draw(st.none() | st.integers(0, 100))
    retired = sealed is not None and draw(st.booleans())
    return VirtualPartitionState(vp, HashRange(0, HASH_SPACE), leader, draw(st.integers(0, 5)), tuple(replicas),
                                 tuple(risr), sealed, retired)


@st.composite
def clusters(draw) -> dict[str, list[VirtualPartitionState]]:
    counts = draw(st.lists(st.integers(0, 6), min_size=1, max_size=3))
    return {f"t{topic}": [draw(vp_states(vp)) for vp in range(count)] for topic, count in enumerate(counts)}


def run_move(move: ReplicaMove, state: VirtualPartitionState, live: frozenset[str], data) -> VirtualPartitionState:
    """Carry ``move`` out against a simulated leader, repair and controller; the state it ends with."""
    start = state
    dropped_once = False
    for _ in range(12):  # at most: add, a join (and one drop and rejoin), a failover, lead, remove
        outcome = next_move_step(move, state, live)
        assert next_move_step(move, state, live) == outcome, "a resumed controller sees the same step"
        if isinstance(outcome, MoveDone):
            assert move.target in state.replicas and move.source not in state.replicas
            assert len(state.replicas) == len(start.replicas)
            event("a move ended done")
            return state
        if isinstance(outcome, MoveAbandoned):
            assert outcome.reason is not MoveAbandonedBecause.TARGET_NOT_LIVE, "plans pick live targets"
            event(f"a move abandoned: {outcome.reason.name}")
            end = outcome.rollback or state
            assert move.target not in end.replicas or end.leader == move.target
            return end
        if isinstance(outcome, WriteState):
            after = outcome.state
            assert after.leader_epoch == state.leader_epoch + 1
            assert set(state.risr) - set(after.risr) <= ({move.source} if outcome.kind is
                                                         MoveStepKind.REMOVE_SOURCE else set())
            state = after
        elif outcome.reason is MoveWaits.TARGET_NOT_IN_SYNC:
            state = joined(state, move.target)  # the VP leader counts the target in sync
            if not dropped_once and data.draw(st.booleans(), "the leader drops the target once"):
                dropped_once = True
                state = dataclasses.replace(state, risr=tuple(n for n in state.risr if n != move.target))
        else:  # the leader is not live: the repair fails the VP over, if a live RISR member can lead
            failed_over = decide_failover(state, live)
            if failed_over is None:  # leaderless: the controller gives the move up after its deadline
                event("a move given up: leaderless")
                assert not set(state.risr) & live
                return take_back(move, state, live) or state
            assert failed_over.leader_epoch > state.leader_epoch
            state = failed_over
    raise AssertionError(f"{move} did not end from {start}")


@settings(max_examples=100, deadline=None)
@given(clusters(), st.sets(st.sampled_from(NODES), max_size=2), st.sampled_from(NODES + ("n6",)),
       st.booleans(), st.data())
def test_every_planned_move_ends_with_the_invariants_held_at_every_step(states_by_topic, down, node, onto, data):
    live = frozenset(NODES) - down
    if onto:
        live |= {node}
        moves = plan_moves_onto(states_by_topic, live, node)
    else:
        planned = plan_moves_off(states_by_topic, live, node)
        moves = planned.moves
        for stuck in planned.stuck:
            vp = next(s for s in states_by_topic[stuck.topic] if s.vp == stuck.vp)
            assert set(live) - {node} <= set(vp.replicas)
    current = {(topic, state.vp): state for topic, states in states_by_topic.items() for state in states}
    assert len({(move.topic, move.vp) for move in moves}) == len(moves)
    for move in moves:
        before = current[(move.topic, move.vp)]
        assert not before.retired and move.source in before.replicas and move.target not in before.replicas
        assert move.target in live and move.target != node or onto
        current[(move.topic, move.vp)] = run_move(move, before, live, data)
    if onto:
        by_topic = {topic: [s for (t, _), s in current.items() if t == topic] for topic in states_by_topic}
        load = hosted_replicas(by_topic, live)
        for (topic, vp), state in current.items():
            movable = (not state.retired and state.sealed_end_offset is None and set(state.replicas) <= live
                       and node not in state.replicas)
            if movable:  # the plan stopped while no node with a movable replica was two above the new node
                assert all(load[r] - load[node] <= 1 for r in state.replicas), (load, state)
