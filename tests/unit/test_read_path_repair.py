"""The controller's read-path decisions: which items to examine, and what to do for a VP."""

from __future__ import annotations

import dataclasses

from mafka4.coordinator import keys
from mafka4.coordinator.read_path_repair import (
    FEEDER_EVENTS,
    READ_REPLICA_EVENTS,
    ReadPathPart,
    VirtualPartitionRepair,
    decide_virtual_partition,
    feeder_item,
    item_for_event,
    items_to_examine,
    leaderless_text,
    virtual_partition_item,
)
from mafka4.virtual.metadata import VirtualPartitionState
from mafka4.virtual.ranges import HASH_SPACE, HashRange

READ_NODES = ("r0", "r1", "r2")


def vp_state(vp=0, leader="r0", replicas=("r0", "r1", "r2"), risr=None, epoch=2) -> VirtualPartitionState:
    return VirtualPartitionState(vp, HashRange(0, HASH_SPACE), leader, epoch, tuple(replicas),
                                 tuple(replicas if risr is None else risr))


# --- which items -------------------------------------------------------------------------------


def test_liveness_keys_name_their_items_and_other_keys_none():
    replica_key = keys.read_replica_liveness("c", "orders", 3, "r1")
    feeder_key = keys.feeder_liveness("c", "orders", 1)
    assert item_for_event("c", READ_REPLICA_EVENTS, replica_key) == virtual_partition_item("orders", 3)
    assert item_for_event("c", FEEDER_EVENTS, feeder_key) == feeder_item("orders", 1)
    assert item_for_event("c", READ_REPLICA_EVENTS, feeder_key) is None
    assert item_for_event("c", FEEDER_EVENTS, replica_key) is None
    assert item_for_event("other", READ_REPLICA_EVENTS, replica_key) is None, "another cluster's key"
    assert item_for_event("c", READ_REPLICA_EVENTS, keys.read_replicas_prefix("c") + "orders/x/r1") is None
    assert str(virtual_partition_item("orders", 3)) == "orders/v3" and str(feeder_item("orders", 1)) == "orders-1 feeder"
    assert virtual_partition_item("orders", 1) != feeder_item("orders", 1)
    assert virtual_partition_item("orders", 1).part is ReadPathPart.VIRTUAL_PARTITION


def test_a_reconcile_examines_only_items_with_a_missing_liveness_key():
    states = [vp_state(0, replicas=("r0", "r1"), risr=("r0", "r1")), vp_state(1, leader="r1", replicas=("r1", "r2"))]
    replicas = {("t", 0, "r0"), ("t", 0, "r1"), ("t", 1, "r1")}  # v1's r2 is missing
    feeders = {("t", 0)}  # the feeder of partition 1 is missing
    assert items_to_examine("t", states, 2, replicas, feeders, activation=False) == {
        virtual_partition_item("t", 1), feeder_item("t", 1)}
    everything_registered = replicas | {("t", 1, "r2")}
    assert items_to_examine("t", states, 1, everything_registered, feeders, activation=False) == set(), "no ping"


def test_on_activation_every_vp_is_examined_and_feeders_only_if_missing():
    states = [vp_state(0), vp_state(1)]
    replicas = {("t", vp, r) for vp in (0, 1) for r in READ_NODES}
    assert items_to_examine("t", states, 2, replicas, {("t", 0), ("t", 1)}, activation=True) == {
        virtual_partition_item("t", 0), virtual_partition_item("t", 1)}


def test_keys_of_another_topic_do_not_count_for_this_one():
    states = [vp_state(0, replicas=("r0",))]
    assert items_to_examine("t", states, 1, {("t2", 0, "r0")}, {("t2", 0)}, activation=False) == {
        virtual_partition_item("t", 0), feeder_item("t", 0)}


def test_a_retired_vp_is_never_examined_even_with_every_liveness_key_gone():
    retired = dataclasses.replace(vp_state(0), sealed_end_offset=40, retired=True)
    for activation in (False, True):
        assert items_to_examine("t", [retired, vp_state(1)], 0, set(), set(), activation) == {
            virtual_partition_item("t", 1)}


# --- one VP ------------------------------------------------------------------------------------


def test_a_healthy_vp_needs_nothing():
    repair = decide_virtual_partition(vp_state(), {"r0", "r1", "r2"}, READ_NODES)
    assert repair == VirtualPartitionRepair() and repair.complete


def test_a_retired_vp_needs_nothing_when_its_replicas_are_dead_or_their_nodes_gone():
    retired = dataclasses.replace(vp_state(), sealed_end_offset=40, retired=True)
    assert decide_virtual_partition(retired, set(), ("r0",)).complete, "its logs are deleted: nothing to restart"


def test_a_dead_follower_is_restarted_on_its_node_and_the_leader_stays():
    repair = decide_virtual_partition(vp_state(), {"r0", "r2"}, READ_NODES)
    assert repair == VirtualPartitionRepair(restart=("r1",)) and not repair.failover


def test_a_dead_leader_with_a_live_risr_member_fails_over_and_is_restarted_as_a_follower():
    repair = decide_virtual_partition(vp_state(risr=("r0", "r2")), {"r1", "r2"}, READ_NODES)
    assert repair.failover and not repair.leaderless and repair.restart == ("r0",)


def test_a_dead_leader_whose_only_live_replicas_are_outside_the_risr_leaves_the_vp_leaderless():
    repair = decide_virtual_partition(vp_state(risr=("r0",)), {"r1", "r2"}, READ_NODES)
    assert repair.leaderless and not repair.failover and repair.restart == ("r0",)


def test_a_restarted_leader_is_not_left_to_carry_on_in_its_old_epoch():
    repair = decide_virtual_partition(vp_state(replicas=("r0",)), {"r0"}, READ_NODES, restarted={"r0"})
    assert repair.failover and repair.restart == ()


def test_replicas_on_unregistered_read_nodes_wait_for_their_node():
    repair = decide_virtual_partition(vp_state(risr=("r0",)), {"r1"}, ("r1",))
    assert repair.leaderless and repair.restart == () and repair.waiting_for_node == ("r0", "r2")
    text = leaderless_text(vp_state(risr=("r0",)), {"r1"}, repair.waiting_for_node)
    assert "no RISR member of ['r0'] is live (live replicas: ['r1'])" in text and "['r0', 'r2'] are not registered" in text


def test_an_etcd_outage_changes_nothing_when_every_replica_answers():
    """The shell counts a replica whose key expired but whose actor answers as live."""
    for state in (vp_state(), vp_state(risr=("r0",)), vp_state(leader="r2", replicas=("r2",))):
        assert decide_virtual_partition(state, set(state.replicas), ()).complete, "no registered node needed"
