"""An actor is pinned to a mafka4 node by the node's resource, or, for a node named after its Ray node, by node affinity."""

from __future__ import annotations

from mafka4.transport.node_pinning import pinned_options
from mafka4.transport.ray_names import pinned_ray_node, ray_node_node_id


def test_a_node_with_its_own_resource_is_asked_for_a_unit_of_it_and_of_its_role():
    assert pinned_options("r0", "read_node") == {"resources": {"mafka4_node_r0": 1, "read_node": 1}}


def test_a_node_named_after_its_ray_node_is_pinned_by_hard_node_affinity_and_a_unit_of_its_role():
    ray_node_id = "0123456789abcdef" * 3 + "01234567"
    options = pinned_options(ray_node_node_id(ray_node_id), "write_node")
    assert options["resources"] == {"write_node": 1}
    strategy = options["scheduling_strategy"]
    assert strategy.node_id == ray_node_id and strategy.soft is False


def test_only_the_exact_ray_node_form_is_taken_for_a_ray_node():
    assert pinned_ray_node("ray-" + "ab" * 28) == "ab" * 28
    for node_id in ("ray-w0", "ray-" + "AB" * 28, "ray-" + "ab" * 27, "w-" + "ab" * 28, "r0"):
        assert pinned_ray_node(node_id) is None, node_id
