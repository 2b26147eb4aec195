"""The controller's read-node scaling shell against a real etcd (one lone member for the module, each
test below a cluster name of its own) and a stand-in for Ray's autoscaler and read nodes: what it asks
Ray's autoscaler for, what it records for ``mafka4 status``, and how it carries replica moves
out step by step (recorded in etcd, fenced, resumable), down to stopping a released node."""

from __future__ import annotations

import dataclasses
import itertools
import json
import logging
import uuid

import pytest

from mafka4.coordinator.control.read_node_scaling import read_node_bundles
from mafka4.coordinator.control.read_path_decisions import VirtualPartitionItem
from mafka4.coordinator.control.read_scaling import RayResourceRequests, ReadScaling, busy_vps
from mafka4.coordinator.control.replica_move_records import MoveRecord
from mafka4.coordinator.control.replica_moves import MovePurpose, ReplicaMove
from mafka4.limits.servers import ControllerConfig
from mafka4.metadata import keys
from mafka4.metadata.read_node_load import ReadNodeLoad
from mafka4.metadata.store import MetadataStore
from mafka4.virtual.ranges import HASH_SPACE, HashRange
from mafka4.virtual.vp_state import VirtualPartitionState
from mafka4.virtual.vp_store import VirtualStore

T0_MS = 1_700_000_000_000


class FakeRay:
    """``ResourceRequests`` and ``ReadNodeActions``: records what was asked (no Ray: the
    autoscaler and read nodes are what the shell talks to, not what it is)."""

    def __init__(self) -> None:
        self.requested: list[int] = []
        self.dropped: list[tuple[str, str, int]] = []
        self.stopped: list[str] = []

    def request_read_nodes(self, target_read_nodes: int) -> None:
        self.requested.append(target_read_nodes)

    def drop(self, topic: str, node: str, vp: int) -> None:
        self.dropped.append((topic, node, vp))

    def stop(self, node: str) -> None:
        self.stopped.append(node)


def vp_state(vp, replicas, risr=None, leader=None, epoch=3) -> VirtualPartitionState:
    return VirtualPartitionState(vp, HashRange(0, HASH_SPACE), leader or replicas[0], epoch, tuple(replicas),
                                 tuple(replicas if risr is None else risr))


class Cluster:
    """The etcd the controller sees: registered read nodes with liveness keys, VP states, load reports."""

    def __init__(self, store: MetadataStore, config: ControllerConfig, nodes=("r1", "r2")):
        self.name = f"c{uuid.uuid4().hex[:8]}"  # the etcd is shared by the module
        self.store, self.ray, self.config = store, FakeRay(), config
        self.fence_key = keys.controller(self.name)
        self.fence = (self.fence_key, self.store.put(self.fence_key, {"controller_id": "x"}))
        self.registered = set(nodes)
        for node in nodes:
            self.store.put(keys.read_node_liveness(self.name, node), {})
        self.virtual = VirtualStore(self.store, self.name)
        self.scaling = ReadScaling(self.store, self.name, config, self.ray, self.ray)
        self.wall_ms = T0_MS

    def add_node(self, node: str) -> None:
        self.registered.add(node)
        self.store.put(keys.read_node_liveness(self.name, node), {})

    def set_states(self, topic: str, states) -> None:
        for state in states:
            self.store.put(keys.virtual_partition(self.name, topic, state.vp), state.to_json())

    def state(self, topic: str, vp: int) -> VirtualPartitionState:
        return self.virtual.state(topic, vp)[0]

    def report(self, node: str, hosted=0, fed_bytes_per_s=0.0, fetch_cpu_cores=0.0, sealed=0) -> None:
        self.store.put(keys.read_node_load(self.name, node),
                       ReadNodeLoad(node, hosted, fed_bytes_per_s, fetch_cpu_cores, 10_000, self.wall_ms,
                                    sealed_vp_replicas=sealed).to_json())

    def join_risr(self, topic: str, vp: int, node: str) -> None:
        """The VP leader's RISR write once ``node`` caught up (same leader, same epoch)."""
        state, revision = self.virtual.state(topic, vp)
        assert self.virtual.swap(topic, dataclasses.replace(state, risr=(*state.risr, node)), revision)

    def records(self):
        return self.scaling.records()

    def run(self, advance_ms: int = 1000, topics=("t",)) -> set[VirtualPartitionItem]:
        self.wall_ms += advance_ms
        states = {topic: self.virtual.states(topic) for topic in topics}
        return self.scaling.run(states, sorted(self.registered), self.records(), self.fence, self.wall_ms)

    def last_decision(self) -> dict:
        return self.store.get(keys.read_scaling(self.name)).value


def config(**changes) -> ControllerConfig:
    return ControllerConfig(read_node_scaling=1, **changes)


@pytest.fixture
def store(lone_etcd_store):
    return lone_etcd_store


@pytest.fixture
def new_cluster(store):
    """Builds a ``Cluster`` of its own name on the module's etcd."""
    return lambda controller_config, **kwargs: Cluster(store, controller_config, **kwargs)


def test_scaling_is_off_by_default_and_the_shell_is_built_only_when_on():
    assert ControllerConfig().read_node_scaling == 0
    with pytest.raises(AssertionError, match="off"):
        ReadScaling(None, "c", ControllerConfig(), FakeRay(), FakeRay())


def test_load_past_the_bound_asks_ray_for_read_nodes_once_and_records_the_decision_with_its_reason(new_cluster, caplog):
    cluster = new_cluster(config(read_node_vp_replicas_max=4, read_nodes_min=1, read_nodes_max=4))
    cluster.set_states("t", [vp_state(vp, ("r1", "r2")) for vp in range(6)])
    cluster.report("r1", hosted=6)
    cluster.report("r2", hosted=6)
    with caplog.at_level(logging.INFO, logger="mafka4.controller"):
        cluster.run()
    assert cluster.ray.requested == [3]
    decision = cluster.last_decision()
    assert decision["kind"] == "add" and decision["target_read_nodes"] == 3 and decision["moves"] == 0
    assert "12 VP replicas in all" in decision["reason"] and decision["decided_ms"] == cluster.wall_ms
    assert any("add 1 read node (to 3)" in line for line in caplog.messages)
    cluster.report("r1", hosted=6)
    cluster.report("r2", hosted=6)
    cluster.run()
    assert cluster.ray.requested == [3], "while the node starts, the standing request is not sent again"
    assert cluster.last_decision()["kind"] == "hold"


def test_a_new_empty_read_node_takes_replicas_one_move_at_a_time_under_the_in_flight_bound_and_nothing_is_lost(new_cluster):
    cluster = new_cluster(config(read_nodes_min=1, replica_moves_in_flight_max=2))
    cluster.set_states("t", [vp_state(vp, ("r1", "r2") if vp % 2 else ("r2", "r1")) for vp in range(4)])
    cluster.add_node("r3")
    cluster.run()
    records = cluster.records()
    assert len(records) == 2 and cluster.last_decision()["moves"] == 2
    assert {record.move.target for record, _ in records.values()} == {"r3"}
    assert all(record.move.purpose is MovePurpose.BALANCE for record, _ in records.values())
    assert busy_vps(records) == {"t": frozenset(vp for _, vp in records)}
    for _ in range(8):  # add, join, (hand over), remove; then the next batch
        announced = cluster.run()
        for topic, vp in cluster.records():
            state = cluster.state(topic, vp)
            if "r3" in state.replicas and "r3" not in state.risr:
                cluster.join_risr(topic, vp, "r3")
        assert all(item.topic == "t" for item in announced)
    assert cluster.records() == {}
    states = [cluster.state("t", vp) for vp in range(4)]
    hosted = {node: sum(node in state.replicas for state in states) for node in ("r1", "r2", "r3")}
    assert sorted(hosted.values()) == [2, 3, 3], hosted
    assert all(len(state.replicas) == 2 and set(state.risr) == set(state.replicas) for state in states)
    assert len(cluster.ray.dropped) == hosted["r3"], "each source dropped its copy once its move was done"
    assert all(node != "r3" for _, node, _ in cluster.ray.dropped)


def test_a_move_a_previous_controller_started_is_resumed_from_its_record(new_cluster):
    cluster = new_cluster(config(read_nodes_min=1))
    cluster.set_states("t", [vp_state(0, ("r1",))])
    cluster.add_node("r2")
    record = MoveRecord(ReplicaMove("t", 0, "r1", "r2", MovePurpose.BALANCE), "evening out", T0_MS)
    cluster.store.put(keys.replica_move(cluster.name, "t", 0), record.to_json())
    cluster.set_states("t", [vp_state(0, ("r1", "r2"), risr=("r1",), epoch=4)])  # its ADD_TARGET was written
    assert cluster.run() == set(), "the target copies the log: nothing to write"
    cluster.join_risr("t", 0, "r2")
    assert cluster.run() == {VirtualPartitionItem("t", 0)}
    assert cluster.state("t", 0).leader == "r2" and cluster.state("t", 0).leader_epoch == 5
    cluster.run()
    assert cluster.state("t", 0).replicas == ("r2",) and cluster.records() == {}
    assert cluster.ray.dropped == [("t", "r1", 0)]


def test_a_move_whose_target_died_is_taken_back_and_the_target_drops_its_copy(new_cluster):
    cluster = new_cluster(config(read_nodes_min=1))
    cluster.add_node("r3")
    cluster.set_states("t", [vp_state(0, ("r1", "r2", "r3"), risr=("r1", "r2"), epoch=4)])
    record = MoveRecord(ReplicaMove("t", 0, "r2", "r3"), "evening out", T0_MS)
    cluster.store.put(keys.replica_move(cluster.name, "t", 0), record.to_json())
    cluster.registered.discard("r3")
    assert cluster.run() == {VirtualPartitionItem("t", 0)}
    state = cluster.state("t", 0)
    assert state.replicas == ("r1", "r2") and state.leader_epoch == 5
    assert cluster.records() == {} and cluster.ray.dropped == [("t", "r3", 0)]


def test_a_move_waiting_past_its_bound_is_taken_back(new_cluster):
    cluster = new_cluster(config(read_nodes_min=1, replica_move_time_ms_max=60_000))
    cluster.add_node("r3")
    cluster.set_states("t", [vp_state(0, ("r1", "r2", "r3"), risr=("r1", "r2"), epoch=4)])
    record = MoveRecord(ReplicaMove("t", 0, "r2", "r3"), "evening out", T0_MS)
    cluster.store.put(keys.replica_move(cluster.name, "t", 0), record.to_json())
    cluster.run(advance_ms=60_000)
    assert cluster.records() != {}, "within the bound it waits for the target to catch up"
    cluster.run(advance_ms=1)
    assert cluster.records() == {} and cluster.state("t", 0).replicas == ("r1", "r2")


def test_an_idle_node_is_released_its_replicas_move_off_then_its_actor_stops(new_cluster):
    cluster = new_cluster(config(read_nodes_min=1, read_node_idle_release_delay_ms=5_000))
    cluster.set_states("t", [vp_state(0, ("r1",)), vp_state(1, ("r2",)), vp_state(2, ("r2",))])
    for _ in range(7):
        cluster.report("r1", hosted=1)
        cluster.report("r2", hosted=2)
        cluster.run()
        if cluster.records():
            break
    decision = cluster.last_decision()
    assert decision["kind"] == "release" and decision["releasing"] == "r1" and decision["target_read_nodes"] == 1
    assert cluster.ray.requested == [2, 1]
    ((record, _),) = cluster.records().values()
    assert record.move == ReplicaMove("t", 0, "r1", "r2") and record.move.purpose is MovePurpose.RELEASE
    assert "r1 idle for" in record.reason
    cluster.run()  # the target joins
    cluster.join_risr("t", 0, "r2")
    cluster.run()  # it leads
    cluster.run()  # the source leaves
    assert cluster.state("t", 0).replicas == ("r2",) and cluster.ray.stopped == []
    cluster.run()
    assert cluster.ray.stopped == ["r1"] and cluster.scaling.stopped_read_nodes == {"r1"}
    released = keys.released_read_node(cluster.name, "r1")
    assert cluster.store.get(released) is not None, "marked: the node agent keeper withholds r1's agent"
    cluster.run()
    assert cluster.ray.stopped == ["r1"], "stopped once"
    # Still registered, r1 may take a new topic's replica: it is started again and the replica moves off.
    cluster.set_states("u", [vp_state(0, ("r1",))])
    cluster.run(topics=("t", "u"))
    assert cluster.scaling.stopped_read_nodes == frozenset()
    ((record, _),) = cluster.records().values()
    assert record.move == ReplicaMove("u", 0, "r1", "r2")
    for _ in range(4):
        cluster.run(topics=("t", "u"))
        if "r2" in cluster.state("u", 0).replicas and "r2" not in cluster.state("u", 0).risr:
            cluster.join_risr("u", 0, "r2")
    assert cluster.state("u", 0).replicas == ("r2",) and cluster.ray.stopped == ["r1", "r1"]
    cluster.registered.discard("r1")  # Ray ended the idle node
    cluster.run()
    assert cluster.scaling.stopped_read_nodes == frozenset()


def test_a_node_hosting_only_sealed_replicas_is_released_they_move_off_then_its_actor_stops(new_cluster):
    # Two replicas of open VPs a node at most: r1's four replicas of sealed VPs would ask for a third
    # node if they counted (5 over 2 x 2), and would keep r1 until their retention. r2's one open
    # replica is as even as it gets (one above r1's none): no balancing move.
    cluster = new_cluster(config(read_nodes_min=1, read_node_idle_release_delay_ms=5_000, read_node_vp_replicas_max=2))
    sealed = [dataclasses.replace(vp_state(vp, ("r1",)), sealed_end_offset=10) for vp in range(4)]
    cluster.set_states("t", sealed + [vp_state(4, ("r2",))])
    for _ in range(8):
        cluster.report("r1", hosted=0, sealed=4)
        cluster.report("r2", hosted=1, fed_bytes_per_s=1024 * 1024.0)
        cluster.run()
        if cluster.records():
            break
        assert "(and 4 replicas of sealed VPs, not counted)" in cluster.last_decision()["reason"]
    decision = cluster.last_decision()
    assert decision["kind"] == "release" and decision["releasing"] == "r1" and decision["target_read_nodes"] == 1, \
        decision
    assert cluster.ray.requested == [2, 1], "no add: the sealed replicas count for no bound"
    moves = sorted(record.move for record, _ in cluster.records().values())
    assert moves == [ReplicaMove("t", vp, "r1", "r2", MovePurpose.RELEASE) for vp in range(4)]
    assert all("hosts 4 replicas of sealed VPs (they move off too)" in record.reason
               for record, _ in cluster.records().values())
    for _ in range(6):  # add, join, lead, remove
        assert cluster.ray.stopped == [], "not stopped while it hosts a replica of a sealed VP"
        cluster.run()
        for vp in range(4):
            state = cluster.state("t", vp)
            if "r2" in state.replicas and "r2" not in state.risr:
                cluster.join_risr("t", vp, "r2")
        if cluster.ray.stopped:
            break
    assert [cluster.state("t", vp).replicas for vp in range(4)] == [("r2",)] * 4
    assert all(cluster.state("t", vp).sealed_end_offset == 10 for vp in range(4)), "moved, still sealed"
    assert cluster.ray.stopped == ["r1"] and cluster.records() == {}


def released_r1(new_cluster):
    """A cluster of r1 (idle) and r2 (hosting one VP) whose controller released r1 (its actor stopped)."""
    cluster = new_cluster(config(read_nodes_min=1, read_node_idle_release_delay_ms=2_000, read_node_vp_replicas_max=2))
    cluster.set_states("t", [vp_state(0, ("r2",))])
    for _ in range(4):
        cluster.report("r1")
        cluster.report("r2", hosted=1)
        cluster.run()
    return cluster


def test_load_growing_back_during_a_release_calls_it_off_and_the_stopped_node_serves_again(new_cluster):
    cluster = released_r1(new_cluster)
    assert cluster.scaling.stopped_read_nodes == {"r1"} and cluster.ray.stopped == ["r1"]
    cluster.set_states("t", [vp_state(vp, ("r2",)) for vp in range(3)])
    cluster.report("r2", hosted=3)
    cluster.run()
    decision = cluster.last_decision()
    assert decision["kind"] == "add" and decision["releasing"] is None
    assert cluster.scaling.stopped_read_nodes == frozenset(), "the controller's repair may start r1's actor again"
    assert cluster.store.get(keys.released_read_node(cluster.name, "r1")) is None, "its node agent may start again"


def test_an_add_after_a_release_ended_gives_the_released_node_still_up_its_agent_back(new_cluster):
    cluster = released_r1(new_cluster)
    released = keys.released_read_node(cluster.name, "r1")
    assert cluster.store.get(released) is not None
    cluster.registered.discard("r1")  # its agent stopped: the release has ended, Ray has not ended the node yet
    cluster.run()
    assert cluster.last_decision()["releasing"] is None and cluster.store.get(released) is not None
    cluster.set_states("t", [vp_state(vp, ("r2",)) for vp in range(3)])
    cluster.report("r2", hosted=3)
    cluster.run()
    assert cluster.last_decision()["kind"] == "add"
    assert cluster.store.get(released) is None, "Ray counts the idle released node for the new bundle: it must serve"


def test_a_deposed_controller_starts_no_move_and_records_no_decision(new_cluster):
    cluster = new_cluster(config(read_nodes_min=1))
    cluster.set_states("t", [vp_state(vp, ("r1",)) for vp in range(4)])
    cluster.add_node("r2")
    cluster.store.put(cluster.fence_key, {"controller_id": "another"})
    cluster.run()
    assert cluster.records() == {} and cluster.store.get(keys.read_scaling(cluster.name)) is None


def test_ray_errors_are_logged_never_raised_and_the_request_is_one_bundle_per_read_node(caplog):
    asked = []
    RayResourceRequests(lambda **kwargs: asked.append(kwargs)).request_read_nodes(3)
    assert asked == [{"bundles": read_node_bundles(3)}]

    def refuse(**_):
        raise ConnectionError("no autoscaler")
    with caplog.at_level(logging.WARNING, logger="mafka4.controller"):
        RayResourceRequests(refuse).request_read_nodes(2)
    assert any("asking Ray's autoscaler for 2 read nodes failed: ConnectionError" in line for line in caplog.messages)


def test_status_shows_the_last_decision_and_the_moves_in_flight_only_once_the_controller_decided(new_cluster):
    from mafka4.runtime.local import read_scaling_status

    cluster = new_cluster(config(read_nodes_min=1, replica_moves_in_flight_max=1))
    assert read_scaling_status(cluster.store, cluster.name) == {}, "scaling off (or not decided yet): nothing shown"
    cluster.set_states("t", [vp_state(vp, ("r1",)) for vp in range(4)])
    cluster.add_node("r2")
    cluster.run()
    shown = read_scaling_status(cluster.store, cluster.name)
    assert shown["read_scaling"]["kind"] == "hold" and shown["read_scaling"]["moves"] == 1
    (move,) = shown["replica_moves"]
    assert (move["topic"], move["source"], move["target"], move["purpose"]) == ("t", "r1", "r2", "onto")
    assert "evening out" in move["reason"]
