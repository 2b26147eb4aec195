"""Rack-aware placement by maximum flow: replicas on distinct racks, balanced replicas and leaders."""

import numpy as np
import pytest

from mafka4.errors import PlacementInfeasible
from simulations.fleet.placement import place


@pytest.mark.parametrize("partitions, replication_factor, nodes, racks", [
    (10, 3, 6, 3), (500, 3, 12, 6), (301, 3, 7, 3), (64, 2, 9, 4), (40, 1, 5, 5),
])
def test_no_two_replicas_of_a_partition_share_a_rack(partitions, replication_factor, nodes, racks):
    placement = place(partitions, replication_factor, nodes, racks)
    assert len(placement.replicas) == partitions
    for replica_nodes in placement.replicas:
        assert len(replica_nodes) == replication_factor
        assert len({placement.node_racks[n] for n in replica_nodes}) == replication_factor


@pytest.mark.parametrize("partitions, nodes, racks", [(500, 12, 6), (1000, 30, 3), (97, 6, 3)])
def test_replicas_and_leaders_are_balanced_on_equal_racks(partitions, nodes, racks):
    placement = place(partitions, 3, nodes, racks)
    replicas, leaders = placement.replicas_per_node(), placement.leaders_per_node()
    assert replicas.max() - replicas.min() <= 1
    assert leaders.max() - leaders.min() <= 1
    assert leaders.sum() == partitions and replicas.sum() == 3 * partitions


def test_unequal_racks_still_place_rack_aware_with_balanced_leaders():
    placement = place(301, 3, 7, 3)  # racks of 3, 2 and 2 nodes: each rack holds one replica of everything
    replicas = placement.replicas_per_node()
    by_rack = {rack: replicas[[n for n in range(7) if placement.node_racks[n] == rack]] for rack in range(3)}
    assert all(counts.sum() == 301 for counts in by_rack.values())
    leaders = placement.leaders_per_node()
    assert leaders.max() == int(np.ceil(301 / 7))


def test_leaders_are_balanced_even_when_racks_differ_in_size():
    placement = place(100, 2, 5, 2)  # racks of 3 and 2 nodes
    leaders = placement.leaders_per_node()
    assert leaders.max() - leaders.min() <= 1
    assert all(len(set(nodes)) == 2 for nodes in placement.replicas)


def test_node_loads_add_leader_and_follower_load():
    placement = place(4, 2, 2, 2)
    loads = placement.node_loads(np.array([1.0, 1.0, 1.0, 1.0]), np.array([0.5, 0.5, 0.5, 0.5]))
    assert loads.sum() == pytest.approx(6.0)
    assert sorted(loads) == [3.0, 3.0]  # two leaders and two followers each


def test_placement_is_deterministic():
    assert place(200, 3, 9, 3) == place(200, 3, 9, 3)


def test_fewer_racks_than_replicas_is_refused():
    with pytest.raises(PlacementInfeasible, match="needs 3 racks"):
        place(10, 3, 6, 2)


def test_fewer_nodes_than_racks_is_refused():
    with pytest.raises(PlacementInfeasible, match="at least 6"):
        place(10, 3, 4, 6)
