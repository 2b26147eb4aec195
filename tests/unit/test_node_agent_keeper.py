"""The node agent keeper's pass against a fake Ray and a fake etcd: what it starts, drops, remembers and logs."""

from __future__ import annotations

import logging

import pytest

from mafka4.metadata import keys
from mafka4.metadata.store import Versioned
from mafka4.runtime import node_agents
from mafka4.runtime.agent_plan import RayNode
from mafka4.runtime.node_agents import AgentReport, AgentSettings, NodeAgentKeeper

SETTINGS = AgentSettings("c", "127.0.0.1:2379", "/data", 10)


class FakeStore:
    def __init__(self) -> None:
        self.values: dict[str, Versioned] = {}
        self.revision = 0

    def register(self, node_id: str, ray_node_id: str | None = None) -> None:
        self.revision += 1
        value = {"node_id": node_id, "role": "write", "resource": f"mafka4_node_{node_id}"}
        if ray_node_id is not None:
            value["ray_node_id"] = ray_node_id
        self.values[keys.node("c", node_id)] = Versioned(keys.node("c", node_id), value, self.revision)

    def get_prefix(self, prefix: str) -> list[Versioned]:
        return [item for key, item in sorted(self.values.items()) if key.startswith(prefix)]

    def delete_if(self, key: str, mod_revision: int) -> bool:
        if key in self.values and self.values[key].mod_revision == mod_revision:
            del self.values[key]
            return True
        return False


class FakeRay:
    """Ray's node list and the agents, as the keeper's module functions see them."""

    def __init__(self, monkeypatch) -> None:
        self.nodes: list[RayNode] = [RayNode("head", True, {"CPU": 2.0})]
        self.agents: dict[str, str] = {}  # node id -> Ray node id of a running agent
        self.started: list[tuple[str, str]] = []
        monkeypatch.setattr(node_agents, "list_ray_nodes", lambda: list(self.nodes))
        monkeypatch.setattr(node_agents, "agent_reports", lambda cluster: {
            node_id: (AgentReport(node_id, ray_node_id, None), None) for node_id, ray_node_id in self.agents.items()})
        monkeypatch.setattr(node_agents, "start_node_agent", self._start)

    def _start(self, settings: AgentSettings, start) -> None:
        self.started.append((start.node_id, start.ray_node_id))

    def add(self, ray_node_id: str, node_id: str) -> None:
        self.nodes.append(RayNode(ray_node_id, True, {"write_node": 1000.0, f"mafka4_node_{node_id}": 1000.0}))

    def kill(self, ray_node_id: str) -> None:
        # As Ray 2.60 lists a removed node: dead, and without what it offered.
        self.nodes = [RayNode(n.ray_node_id, False, {}) if n.ray_node_id == ray_node_id else n for n in self.nodes]
        self.agents = {node_id: home for node_id, home in self.agents.items() if home != ray_node_id}


@pytest.fixture
def fakes(monkeypatch):
    return FakeRay(monkeypatch), FakeStore()


def test_a_started_agent_is_remembered_so_its_node_is_dropped_when_it_dies_before_registering_its_ray_node(fakes):
    ray, store = fakes
    ray.add("n1", "w0")
    keeper = NodeAgentKeeper(SETTINGS, store)
    assert keeper.reconcile().start and ray.started == [("w0", "n1")]
    ray.agents["w0"] = "n1"
    store.register("w0")  # as a shell agent or an older agent would: no Ray node named
    assert keeper.reconcile().start == ()
    ray.kill("n1")
    assert keeper.reconcile().drop == ("w0",) and store.values == {}


def test_a_new_keeper_drops_a_dead_nodes_registration_by_the_ray_node_it_names(fakes):
    ray, store = fakes
    ray.add("n1", "w0")
    store.register("w0", ray_node_id="n1")
    ray.kill("n1")
    assert NodeAgentKeeper(SETTINGS, store).reconcile().drop == ("w0",) and store.values == {}


def test_a_registration_ray_never_showed_is_left_to_its_lease(fakes):
    ray, store = fakes
    store.register("w9")
    assert NodeAgentKeeper(SETTINGS, store).reconcile().drop == () and set(store.values) == {keys.node("c", "w9")}


def test_a_node_without_a_usable_id_is_logged_once_while_it_lasts(fakes, caplog):
    ray, store = fakes
    ray.nodes.append(RayNode("bad", True, {"read_node": 1000.0, "mafka4_node_a": 1000.0, "mafka4_node_b": 1000.0}))
    keeper = NodeAgentKeeper(SETTINGS, store)
    with caplog.at_level(logging.WARNING, logger="mafka4.node_agents"):
        keeper.reconcile()
        keeper.reconcile()
    assert [record.getMessage() for record in caplog.records if "gets no node agent" in record.getMessage()] == [
        "Ray node bad gets no node agent: the Ray node offers read_node and 2 node ids (mafka4_node_a, "
        "mafka4_node_b): offer one mafka4_node_<id>, or none to be known by the Ray node's id"]
