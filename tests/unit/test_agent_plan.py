"""Which Ray nodes are mafka4 nodes, which node agents to start, which registrations to drop (pure cores)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mafka4 import errors
from mafka4.runtime.agent_plan import AgentStart, RayNode, plan_agents
from mafka4.runtime.node_identity import NodeIdentity, NodeRole, identify_node, validate_node_id
from mafka4.runtime.ray_cluster import node_resources
from mafka4.transport.ray_names import ray_node_node_id

# Ray node ids are 28 bytes of hex; a letter repeated makes one readable in a failure.
def hex_id(letter: str) -> str:
    return letter * 56


def ray_node(ray_node_id: str, role: str | None, node_id: str | None, alive: bool = True, **extra) -> RayNode:
    resources = {"CPU": 1.0, "memory": 1e9, **extra}
    if role is not None:
        resources[f"{role}_node"] = 1000.0
    if node_id is not None:
        resources[f"mafka4_node_{node_id}"] = 1000.0
    return RayNode(ray_node_id, alive, resources)


HEAD = ray_node("head", None, None)


# --- identify_node --------------------------------------------------------------------------

def test_a_node_is_named_by_its_node_resource_and_its_role_resource():
    assert identify_node(node_resources("write", "ip-10-0-0-7"), hex_id("a")) == NodeIdentity("ip-10-0-0-7",
                                                                                               NodeRole.WRITE)
    assert identify_node(node_resources("read", "r0"), hex_id("a")) == NodeIdentity("r0", NodeRole.READ)


def test_a_node_with_a_role_and_no_node_resource_is_named_after_its_ray_node():
    # What Ray's autoscaler launches: every node of a type offers the type's resources only.
    identity = identify_node({"CPU": 1.0, "read_node": 1000}, hex_id("b"))
    assert identity == NodeIdentity("ray-" + hex_id("b"), NodeRole.READ) == NodeIdentity(ray_node_node_id(hex_id("b")),
                                                                                         NodeRole.READ)
    assert validate_node_id(identity.node_id) == identity.node_id


def test_the_head_is_no_mafka4_node():
    assert identify_node({"CPU": 2.0, "memory": 1e9, "node:127.0.0.1": 1.0, "node:__internal_head__": 1.0},
                         hex_id("c")) is None


@pytest.mark.parametrize("resources, says", [
    ({"write_node": 1000, "read_node": 1000, "mafka4_node_x": 1000}, "both write_node and read_node"),
    ({"read_node": 1000, "mafka4_node_a": 1000, "mafka4_node_b": 1000}, "2 node ids \\(mafka4_node_a, mafka4_node_b\\)"),
    ({"write_node": 1000, "mafka4_node_w/0": 1000}, "node id 'w/0' is not valid"),
    ({"write_node": 1000, "mafka4_node_ray-w0": 1000}, "starts with 'ray-'"),
])
def test_a_node_with_a_role_but_no_single_valid_id_is_refused_with_the_fix(resources, says):
    with pytest.raises(errors.InvalidNodeId, match=says):
        identify_node(resources, hex_id("d"))


@pytest.mark.parametrize("node_id", ["", "-w0", "w/0", "w.0", "node:w0", "w 0", "x" * 64, None])
def test_invalid_node_ids_are_refused_with_the_rule(node_id):
    with pytest.raises(errors.InvalidNodeId, match="node id"):
        validate_node_id(node_id)


# --- plan_agents: examples ------------------------------------------------------------------

def test_every_alive_write_and_read_node_without_an_agent_gets_one_on_its_own_ray_node():
    nodes = [HEAD, ray_node("a", "write", "w0"), ray_node("b", "read", "r0"), ray_node("c", "read", "r1")]
    plan = plan_agents(nodes, agents={"r1": "c"}, registered=["r1"])
    assert plan.start == (AgentStart("r0", NodeRole.READ, "b"), AgentStart("w0", NodeRole.WRITE, "a"))
    assert plan.drop == () and plan.skipped == ()


def test_a_node_that_died_loses_its_registration_and_gets_no_agent():
    nodes = [HEAD, ray_node("a", "write", "w0", alive=False), ray_node("b", "read", "r0")]
    plan = plan_agents(nodes, agents={"r0": "b"}, registered=["w0", "r0"])
    assert plan.start == () and plan.drop == ("w0",)


def test_a_node_that_came_back_on_a_new_ray_node_keeps_its_registration_and_gets_an_agent_there():
    nodes = [ray_node("old", "write", "w0", alive=False), ray_node("new", "write", "w0")]
    plan = plan_agents(nodes, agents={}, registered=["w0"], homes={"w0": "old"})
    assert plan.start == (AgentStart("w0", NodeRole.WRITE, "new"),) and plan.drop == ()


def test_a_node_gone_from_rays_list_is_dropped_only_if_its_agent_was_seen_there():
    nodes = [HEAD]
    assert plan_agents(nodes, {}, registered=["w0"], homes={"w0": "gone"}).drop == ("w0",)
    # Never shown by Ray: a shell agent's registration, or a node still joining. Its lease decides.
    assert plan_agents(nodes, {}, registered=["w0"]).drop == ()


def test_a_node_list_without_any_alive_node_is_a_failed_read_and_drops_nothing():
    assert plan_agents([], {}, registered=["w0"], homes={"w0": "gone"}).drop == ()
    assert plan_agents([ray_node("a", "write", "w0", alive=False)], {}, registered=["w0"]).drop == ()


def test_an_answering_agent_keeps_its_registration_even_if_rays_list_lags():
    nodes = [ray_node("a", "write", "w0", alive=False)]
    assert plan_agents(nodes, agents={"w0": "a"}, registered=["w0"]).drop == ()


def test_two_alive_nodes_with_one_id_get_no_second_agent():
    nodes = [ray_node("a", "write", "w0"), ray_node("b", "write", "w0")]
    unowned = plan_agents(nodes, agents={}, registered=[])
    assert unowned.start == () and {s.ray_node_id for s in unowned.skipped} == {"a", "b"}
    owned = plan_agents(nodes, agents={"w0": "a"}, registered=["w0"])
    assert owned.start == () and [s.ray_node_id for s in owned.skipped] == ["b"]
    assert "2 alive Ray nodes offer node id 'w0'" in owned.skipped[0].reason


def test_a_node_without_a_usable_id_is_skipped_with_the_reason_and_the_others_go_on():
    nodes = [ray_node("a", "read", None, mafka4_node_x=1000, mafka4_node_y=1000), ray_node("b", "read", "r0")]
    plan = plan_agents(nodes, agents={}, registered=[])
    assert plan.start == (AgentStart("r0", NodeRole.READ, "b"),)
    assert [s.ray_node_id for s in plan.skipped] == ["a"] and "mafka4_node_<id>" in plan.skipped[0].reason


def test_a_node_named_after_its_ray_node_gets_an_agent_there_and_is_dropped_once_that_node_is_gone():
    a = ray_node(hex_id("a"), "read", None)
    node_id = ray_node_node_id(hex_id("a"))
    assert plan_agents([HEAD, a], {}, registered=[]).start == (AgentStart(node_id, NodeRole.READ, hex_id("a")),)
    # Dead (Ray 2.60 lists a dead node without its resources), or no longer listed: the id says which node it was.
    dead = RayNode(hex_id("a"), False, {})
    assert plan_agents([HEAD, dead], {}, registered=[node_id]).drop == (node_id,)
    assert plan_agents([HEAD], {}, registered=[node_id]).drop == (node_id,)
    assert plan_agents([HEAD, a], {}, registered=[node_id]).drop == ()


def test_a_released_read_node_gets_its_agent_stopped_none_started_and_its_mark_forgotten_once_gone():
    released = ray_node(hex_id("a"), "read", None)
    node_id = ray_node_node_id(hex_id("a"))
    answering = plan_agents([HEAD, released], {node_id: hex_id("a")}, [node_id], withheld=[node_id])
    assert answering.stop == (node_id,) and answering.start == () and answering.forget == ()
    stopped = plan_agents([HEAD, released], {}, [], withheld=[node_id])
    assert stopped.start == () and stopped.stop == () and stopped.forget == ()
    gone = plan_agents([HEAD], {}, [], withheld=[node_id])
    assert gone.forget == (node_id,)
    assert plan_agents([], {}, [], withheld=[node_id]).forget == (), "a failed read forgets nothing"


# --- plan_agents: properties ----------------------------------------------------------------

NODE_IDS = ["w0", "w1", "r0", "r1"]
RAY_IDS = [hex_id(letter) for letter in "012345"]
NAMED_AFTER_RAY_NODES = [ray_node_node_id(ray_id) for ray_id in RAY_IDS[:3]]


@st.composite
def situations(draw):
    nodes = [HEAD]
    for ray_id in draw(st.lists(st.sampled_from(RAY_IDS), unique=True, max_size=len(RAY_IDS))):
        node_id = draw(st.sampled_from(NODE_IDS + [None]))
        role = draw(st.sampled_from(["write", "read"])) if node_id is None else ("write" if node_id[0] == "w" else "read")
        nodes.append(ray_node(ray_id, role, node_id, alive=draw(st.booleans())))
    known_ids = NODE_IDS + NAMED_AFTER_RAY_NODES
    agents = draw(st.dictionaries(st.sampled_from(known_ids), st.sampled_from(RAY_IDS), max_size=3))
    registered = draw(st.sets(st.sampled_from(known_ids)))
    homes = draw(st.dictionaries(st.sampled_from(known_ids), st.sampled_from(RAY_IDS), max_size=3))
    return nodes, agents, registered, homes


def offers(node: RayNode, node_id: str) -> bool:
    """Whether ``node`` is mafka4 node ``node_id``: by its node resource, or, offering none, by its Ray node id."""
    if node.resources.get(f"mafka4_node_{node_id}", 0) > 0:
        return True
    unnamed = not any(name.startswith("mafka4_node_") for name in node.resources)
    has_role = any(node.resources.get(role, 0) > 0 for role in ("write_node", "read_node"))
    return unnamed and has_role and node_id == ray_node_node_id(node.ray_node_id)


@settings(max_examples=150, deadline=None)
@given(situations())
def test_starts_are_one_per_id_on_an_alive_node_of_that_id_and_role_and_never_beside_an_agent(situation):
    nodes, agents, registered, homes = situation
    plan = plan_agents(nodes, agents, registered, homes)
    started = [start.node_id for start in plan.start]
    assert len(started) == len(set(started))
    by_ray_id = {node.ray_node_id: node for node in nodes}
    for start in plan.start:
        assert start.node_id not in agents
        node = by_ray_id[start.ray_node_id]
        assert node.alive and offers(node, start.node_id)
        assert identify_node(node.resources, node.ray_node_id) == NodeIdentity(start.node_id, start.role)


@settings(max_examples=150, deadline=None)
@given(situations())
def test_a_drop_is_only_of_a_registered_id_no_alive_node_offers_and_no_agent_answers_for(situation):
    nodes, agents, registered, homes = situation
    plan = plan_agents(nodes, agents, registered, homes)
    for node_id in plan.drop:
        assert node_id in registered and node_id not in agents
        assert not any(node.alive and offers(node, node_id) for node in nodes)


@settings(max_examples=150, deadline=None)
@given(situations())
def test_every_registered_id_only_dead_nodes_offer_is_dropped(situation):
    nodes, agents, registered, homes = situation
    plan = plan_agents(nodes, agents, registered, homes)
    for node_id in registered - set(agents):
        alive = any(node.alive and offers(node, node_id) for node in nodes)
        dead = any(not node.alive and offers(node, node_id) for node in nodes)
        if dead and not alive:
            assert node_id in plan.drop


@settings(max_examples=100, deadline=None)
@given(situations())
def test_a_second_pass_after_the_starts_answered_starts_nothing(situation):
    nodes, agents, registered, homes = situation
    first = plan_agents(nodes, agents, registered, homes)
    answered = {**agents, **{start.node_id: start.ray_node_id for start in first.start}}
    assert plan_agents(nodes, answered, registered | set(answered), homes).start == ()
