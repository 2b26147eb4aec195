"""The controller's read-path decisions: which items to examine, and what to do for a VP."""

from __future__ import annotations

import dataclasses

from mafka4.coordinator.control.read_path_decisions import (READ_NODE_EVENTS, ReadNodeItem, VirtualPartitionItem,
                                                            VirtualPartitionRepair, decide_virtual_partition,
                                                            item_for_event, items_to_examine, leaderless_text,
                                                            node_items)
from mafka4.metadata import keys
from mafka4.virtual.ranges import HASH_SPACE, HashRange
from mafka4.virtual.vp_state import VirtualPartitionState

READ_NODES = ("r0", "r1", "r2")


def vp_state(vp=0, leader="r0", replicas=("r0", "r1", "r2"), risr=None, epoch=2) -> VirtualPartitionState:
    return VirtualPartitionState(vp, HashRange(0, HASH_SPACE), leader, epoch, tuple(replicas),
                                 tuple(replicas if risr is None else risr))


# --- which items -------------------------------------------------------------------------------


def test_a_read_node_liveness_key_names_its_node_and_other_keys_none():
    key = keys.read_node_liveness("c", "r1")
    assert item_for_event("c", READ_NODE_EVENTS, key) == ReadNodeItem("r1")
    assert item_for_event("other", READ_NODE_EVENTS, key) is None, "another cluster's key"
    assert item_for_event("c", READ_NODE_EVENTS, keys.read_nodes_prefix("c") + "r1/x") is None
    assert item_for_event("c", "nodes", key) is None
    assert str(ReadNodeItem("r1")) == "read node r1" and str(VirtualPartitionItem("orders", 3)) == "orders/v3"


def test_registered_read_nodes_without_a_liveness_key_are_examined():
    assert node_items(["r0", "r1", "r2"], {"r0", "r2"}) == {ReadNodeItem("r1")}
    assert node_items(["r0"], {"r0", "r9"}) == set(), "a key without a registration starts nothing"


def test_a_reconcile_examines_only_vps_with_a_replica_on_a_node_without_its_key():
    states = [vp_state(0, replicas=("r0", "r1"), risr=("r0", "r1")), vp_state(1, leader="r1", replicas=("r1", "r2"))]
    assert items_to_examine("t", states, {"r0", "r1"}, activation=False) == {VirtualPartitionItem("t", 1)}
    assert items_to_examine("t", states, {"r0", "r1", "r2"}, activation=False) == set(), "no ping"


def test_on_activation_every_vp_is_examined():
    states = [vp_state(0), vp_state(1)]
    assert items_to_examine("t", states, set(READ_NODES), activation=True) == {
        VirtualPartitionItem("t", 0), VirtualPartitionItem("t", 1)}


def test_a_retired_vp_is_never_examined_even_with_every_liveness_key_gone():
    retired = dataclasses.replace(vp_state(0), sealed_end_offset=40, retired=True)
    for activation in (False, True):
        assert items_to_examine("t", [retired, vp_state(1)], set(), activation) == {VirtualPartitionItem("t", 1)}


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
