"""Where ``mafka4 deploy`` runs etcd's members, which nodes it needs, and what a second deploy starts (pure core)."""

from __future__ import annotations

import pytest

from mafka4.errors import NotDeployable
from mafka4.runtime.agent_plan import RayNode
from mafka4.runtime.deploy_plan import (ETCD_MEMBERS_SPREAD, RAY_HEAD_NODE_RESOURCE, DeployStep, MemberPlace,
                                        head_type_nodes, member_names, place_etcd_members, plan_deploy,
                                        require_mafka4_nodes)
from mafka4.runtime.node_identity import NodeRole
from mafka4.runtime.ray_cluster import node_resources
from mafka4.transport.ray_names import HEAD_NODE_RESOURCE


def node(ray_node_id: str, alive: bool = True, **resources: float) -> RayNode:
    return RayNode(ray_node_id, alive, {"CPU": 1.0, **resources})


RAY_HEAD = node("ray-head", **{RAY_HEAD_NODE_RESOURCE: 0.001})
WRITE = RayNode("w-ray", True, node_resources("write", "w0"))
READ = RayNode("r-ray", True, node_resources("read", "r0"))


def marked(ray_node_id: str, alive: bool = True) -> RayNode:
    return node(ray_node_id, alive, **{HEAD_NODE_RESOURCE: 1})


# --- head-type nodes and the etcd members ---------------------------------------------------------

def test_three_head_type_nodes_get_one_member_each_and_no_warning():
    placement = place_etcd_members([RAY_HEAD, WRITE, marked("c"), marked("a"), marked("b"), READ])
    assert placement.members == (MemberPlace("mafka4-0", "a"), MemberPlace("mafka4-1", "b"),
                                 MemberPlace("mafka4-2", "c"))
    assert placement.warning is None
    assert placement.controller_ray_node_id == "a"


def test_more_than_three_head_type_nodes_still_get_three_members_the_same_ones_every_time():
    nodes = [marked(name) for name in ("e", "d", "c", "b", "a")]
    assert place_etcd_members(nodes) == place_etcd_members(list(reversed(nodes)))
    assert [member.ray_node_id for member in place_etcd_members(nodes).members] == ["a", "b", "c"]


@pytest.mark.parametrize("heads", [1, 2])
def test_fewer_than_three_marked_nodes_get_one_member_on_the_first_said_loudly(heads):
    placement = place_etcd_members([RAY_HEAD, *(marked(name) for name in "ab"[:heads])])
    assert placement.members == (MemberPlace("mafka4", "a"),)
    assert placement.warning.startswith("WARNING: etcd runs as ONE member, on Ray node a")
    assert f"{heads} Ray node" in placement.warning and HEAD_NODE_RESOURCE in placement.warning
    assert "'mafka4 undeploy' and 'mafka4 deploy'" in placement.warning


def test_without_marked_nodes_rays_head_is_the_head_type_node_said_loudly():
    placement = place_etcd_members([WRITE, RAY_HEAD, READ])
    assert placement.members == (MemberPlace("mafka4", "ray-head"),)
    assert "Ray's head is the only head-type node" in placement.warning


def test_dead_nodes_are_never_head_type():
    nodes = [marked("a", alive=False), marked("b"), marked("c"), marked("d", alive=False), RAY_HEAD]
    assert [n.ray_node_id for n in head_type_nodes(nodes)] == ["b", "c"]
    assert place_etcd_members(nodes).members == (MemberPlace("mafka4", "b"),)
    with pytest.raises(NotDeployable, match="no alive head-type node"):
        place_etcd_members([node("ray-head", alive=False, **{RAY_HEAD_NODE_RESOURCE: 0.001}), WRITE, READ])


def test_member_names_are_a_local_clusters_for_one_and_numbered_for_three():
    assert member_names(1) == ("mafka4",)
    assert member_names(ETCD_MEMBERS_SPREAD) == ("mafka4-0", "mafka4-1", "mafka4-2")


# --- the mafka4 nodes -----------------------------------------------------------------------------

def test_the_alive_write_and_read_nodes_are_found():
    other_read = RayNode("r1-ray", True, node_resources("read", "r1"))
    dead_write = RayNode("w9-ray", False, node_resources("write", "w9"))
    assert require_mafka4_nodes([RAY_HEAD, READ, WRITE, other_read, dead_write]) == {
        NodeRole.WRITE: ["w0"], NodeRole.READ: ["r0", "r1"]}


@pytest.mark.parametrize("nodes, missing", [
    ([RAY_HEAD, READ], "no alive write_node node"),
    ([RAY_HEAD, WRITE], "no alive read_node node"),
    ([RAY_HEAD], "no alive write_node and no read_node node"),
    ([RAY_HEAD, RayNode("w-dead", False, node_resources("write", "w0")), READ], "no alive write_node node"),
])
def test_a_cluster_without_write_or_read_nodes_is_refused_saying_how_to_add_them(nodes, missing):
    with pytest.raises(NotDeployable) as raised:
        require_mafka4_nodes(nodes)
    assert missing in raised.value.message and "ray start --resources '{\"" in raised.value.message


def test_a_node_whose_resources_name_no_usable_id_does_not_count():
    two_ids = RayNode("x", True, {"write_node": 1000.0, "mafka4_node_a": 1000.0, "mafka4_node_b": 1000.0})
    with pytest.raises(NotDeployable, match="no alive write_node node"):
        require_mafka4_nodes([RAY_HEAD, two_ids, READ])


def test_a_node_offering_only_its_role_counts_under_its_ray_node_id():
    # What Ray's autoscaler launches from ray_cluster.yaml's write_node type.
    launched = RayNode("f" * 56, True, {"CPU": 1.0, "write_node": 1000.0})
    assert require_mafka4_nodes([RAY_HEAD, launched, READ])[NodeRole.WRITE] == ["ray-" + "f" * 56]


# --- what a deploy starts -------------------------------------------------------------------------

THREE = place_etcd_members([marked("a"), marked("b"), marked("c")])
ONE = place_etcd_members([RAY_HEAD])


def test_a_first_deploy_starts_every_member_and_the_controller():
    assert plan_deploy(THREE, (), controller_running=False) == DeployStep(THREE.members, (), True)


def test_a_second_deploy_starts_nothing_new():
    assert plan_deploy(THREE, ("mafka4-0", "mafka4-1", "mafka4-2"), controller_running=True) == DeployStep(
        (), ("mafka4-0", "mafka4-1", "mafka4-2"), False)
    assert plan_deploy(ONE, ("mafka4",), controller_running=True) == DeployStep((), ("mafka4",), False)


def test_a_deploy_after_the_controller_went_starts_only_the_controller():
    step = plan_deploy(ONE, ("mafka4",), controller_running=False)
    assert step.start_members == () and step.start_controller


def test_a_running_etcd_is_kept_when_the_head_type_nodes_changed_and_the_deploy_says_so():
    step = plan_deploy(THREE, ("mafka4",), controller_running=True)
    assert step.start_members == () and step.keep_members == ("mafka4",)
    assert "keeps its 1 running member" in step.note and "now call for 3" in step.note
    assert plan_deploy(ONE, ("mafka4-0", "mafka4-1", "mafka4-2"), True).note.startswith("etcd keeps its 3 running")


@pytest.mark.parametrize("running", [("mafka4-0",), ("mafka4-0", "mafka4-2"), ("mafka4", "mafka4-1"), ("other",)])
def test_part_of_a_member_set_running_is_refused(running):
    with pytest.raises(NotDeployable, match="run 'mafka4 undeploy'"):
        plan_deploy(THREE, running, controller_running=True)
