"""mafka4 deployed on Ray's fake multi-node cluster of ``ray_cluster.yaml``, read nodes following a group (issue 38).

The cluster is the yaml's (``fake_ray_cluster``): its head and its minimum workers (three write
nodes, two read nodes), each a local raylet offering its node type's resources only, so every
mafka4 node is known by its Ray node id. ``mafka4 deploy`` runs on it from the Ray address alone
with read-node scaling on and small bounds; a producer writes through the read nodes' client
ports while a group grows from 2 to 32 members (the topic splits to 32 VPs, 64 VP replicas: over
two read nodes' bound of 24 each). Then:

* the controller asks Ray's autoscaler for a third read node, which the autoscaler launches; its
  node agent starts by itself and VP replicas move onto it;
* the group shrinks to 2, the VPs merge back, and the controller releases the idle read node:
  it moves the node's replicas off and stops its read node; Ray's autoscaler ends the node once
  it has been idle for the fake cluster's idle timeout;
* a write node's raylet is killed while the producer writes: Ray's autoscaler replaces the node,
  the controller restores the replicas it hosted;

and no acknowledged message is lost, repeated in a VP or reordered per key.

Experiment-scale (a fake fleet of six raylets and 32 consumers, minutes): marked ``experiment``, so
the README's suite leaves it to CI's second step.

    PYTHONPATH=$PWD python3 -m pytest -q -p no:cacheprovider -m experiment tests/integration/test_fake_cluster_deploy.py
"""

from __future__ import annotations

import json
import os
import signal

import psutil
import pytest
import ray

from mafka4 import cli
from mafka4.client.bootstrap import client_credential
from mafka4.client.cluster_access import ClusterAccess
from mafka4.client.topic_admin import create_topic
from mafka4.metadata import keys
from mafka4.metadata.endpoints import parse_endpoints
from mafka4.metadata.store import MetadataStore
from mafka4.physical.topics import TopicStore
from mafka4.runtime.connect import Connection
from mafka4.runtime.temporary import temporary_home
from mafka4.transport.ray_names import READ_NODE_RESOURCE, WRITE_NODE_RESOURCE, pinned_ray_node
from mafka4.virtual.vp_store import VirtualStore

from conftest import away_from_session_ray
from fake_ray_cluster import fake_ray_cluster
from virtual_helpers import Deliveries, Member, ProduceLoop, check_exactly_once, topic_name
from wait_helpers import wait_until

CLUSTER = "fake"
# Small bounds, so that 32 VPs of two read replicas (64) need a third read node (3 x 24 >= 64 > 2 x 24),
# and a quick release once the group shrank.
SETTINGS = {"read_node_scaling": 1, "upkeep_interval_ms": 500, "read_node_vp_replicas_max": 24,
            "read_nodes_min": 2, "read_nodes_max": 3, "read_node_idle_release_delay_ms": 20_000,
            "vp_merge_delay_ms": 5_000}
MEMBERS_AT_START, MEMBERS_AT_MOST = 2, 32
# The autoscaler's delay before it ends an idle node, instead of the yaml's 30 minutes.
IDLE_TIMEOUT_MINUTES = 0.5
WAIT_S = 300


def mafka4(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def read_nodes(store: MetadataStore) -> set[str]:
    return set(TopicStore(store, CLUSTER).live_nodes("read"))


def alive_ray_nodes(resource: str) -> set[str]:
    return {node["NodeID"] for node in ray.nodes() if node["Alive"] and node["Resources"].get(resource, 0) > 0}


def raylet_pid(ray_node_id: str) -> int:
    """The raylet process of one fake node, found by its node manager port (in its command line)."""
    [node] = [node for node in ray.nodes() if node["NodeID"] == ray_node_id]
    flag = f"--node_manager_port={node['NodeManagerPort']}"
    [pid] = [process.pid for process in psutil.process_iter(["name", "cmdline"])
             if process.info["name"] == "raylet" and flag in (process.info["cmdline"] or [])]
    return pid


@pytest.fixture
def deployed(capsys, monkeypatch):
    """(etcd Connection, client access, controller log path) of mafka4 deployed on the yaml's fake cluster."""
    with away_from_session_ray(), temporary_home(prefix="m4fd-") as home, \
            fake_ray_cluster(idle_timeout_minutes=IDLE_TIMEOUT_MINUTES) as fake:
        monkeypatch.setenv("MAFKA4_HOME", str(home))  # where deploy writes the admin's credential
        data_dir = home / "data"
        settings = [argument for name, value in SETTINGS.items() for argument in ("--controller-setting",
                                                                                    f"{name}={value}")]
        try:
            code, out, err = mafka4(capsys, "deploy", "--address", fake.address, "--cluster", CLUSTER,
                                    "--data-dir", str(data_dir), "--client-port", "0", "--ready-timeout-s", str(WAIT_S),
                                    *settings)
            controller_log = data_dir / "controller.log"
            assert code == 0, (out, err, controller_log.read_text() if controller_log.exists() else "")
            code, out, _ = mafka4(capsys, "status", "--address", fake.address, "--cluster", CLUSTER)
            status = json.loads(out)
            assert code == 0 and status["running"], status
            store = MetadataStore(status["etcd_endpoint"])
            access = ClusterAccess(parse_endpoints(",".join(status["serving_read_nodes"].values())),
                                   client_credential(home))
            yield Connection(cluster=CLUSTER, store=store, state=None), access, controller_log, status
        finally:
            cli.main(["undeploy", "--address", fake.address, "--cluster", CLUSTER])


@pytest.mark.experiment
def test_read_nodes_follow_a_group_from_2_to_32_and_a_killed_write_node_is_replaced_with_nothing_lost(deployed):
    connection, access, controller_log, status = deployed
    store = connection.store
    # Every node is one the autoscaler launched from a node type: known by its Ray node id.
    assert all(pinned_ray_node(node_id) for node_id in status["registered_nodes"]), status["registered_nodes"]
    assert len(read_nodes(store)) == 2

    topic, group = topic_name("fleet"), topic_name("g")
    create_topic(topic, partitions=2, replication_factor=2, virtual_partitions=2, read_replicas=2,
                 read_mode="mafka4", where=access)
    virtual = VirtualStore(store, CLUSTER)

    def states():
        return {vp: state for vp, (state, _) in virtual.states(topic).items() if not state.retired}

    deliveries = Deliveries()
    loop = ProduceLoop(access, topic, pause_s=0.05)
    members = [Member(access, topic, group, f"m{i}", deliveries, auto_commit_interval_ms=500)
               for i in range(MEMBERS_AT_START)]
    try:
        # The group grows: a third read node is asked for, launched by Ray's autoscaler, and replicas move onto it.
        members += [Member(access, topic, group, f"m{i}", deliveries, auto_commit_interval_ms=500)
                    for i in range(MEMBERS_AT_START, MEMBERS_AT_MOST)]
        assert wait_until(lambda: len(states()) == MEMBERS_AT_MOST, WAIT_S), f"{len(states())} VPs"
        assert wait_until(lambda: len(read_nodes(store)) == 3, WAIT_S), \
            f"no third read node joined: {read_nodes(store)}; {store.get(keys.read_scaling(CLUSTER))}"
        log = controller_log.read_text()
        assert "read nodes: add 1 read node (to 3)" in log and "asked Ray's autoscaler for 3 read nodes" in log
        assert len(alive_ray_nodes(READ_NODE_RESOURCE)) == 3
        [added] = read_nodes(store) - set(status["registered_nodes"])
        assert wait_until(lambda: sum(added in state.replicas for state in states().values()) > 0
                          and not store.get_prefix(keys.replica_moves_prefix(CLUSTER)), WAIT_S), \
            f"no replica moved onto {added}: {states()}"

        # The group shrinks: the VPs merge back, and the idle read node is released and ended by Ray.
        for member in members[MEMBERS_AT_START:]:
            member.leave()
        members = members[:MEMBERS_AT_START]
        assert wait_until(lambda: len(read_nodes(store)) == 2, WAIT_S), \
            f"no read node was released: {read_nodes(store)}; {store.get(keys.read_scaling(CLUSTER))}"
        assert "read nodes: release" in controller_log.read_text()
        assert wait_until(lambda: len(alive_ray_nodes(READ_NODE_RESOURCE)) == 2, WAIT_S), \
            "Ray's autoscaler did not end the released read node"
        assert all(set(state.replicas) <= read_nodes(store) for state in states().values()), states()

        # A write node's raylet dies mid-stream: the autoscaler replaces it, the controller restores its replicas.
        writes_before = alive_ray_nodes(WRITE_NODE_RESOURCE)
        victim = sorted(writes_before)[0]
        os.kill(raylet_pid(victim), signal.SIGKILL)
        assert wait_until(lambda: victim not in alive_ray_nodes(WRITE_NODE_RESOURCE)
                          and len(alive_ray_nodes(WRITE_NODE_RESOURCE)) == len(writes_before), WAIT_S), \
            "Ray's autoscaler did not replace the killed write node"
        gone = f"ray-{victim}"
        topics = TopicStore(store, CLUSTER)
        assert wait_until(lambda: all(gone not in state.replicas and len(state.isr) == 2
                                      for state in topics.get(topic).partitions), WAIT_S), \
            f"the replicas of {gone} were not restored: {topics.get(topic).partitions}"

        loop.wait_for(len(loop.acknowledged) + 200)  # the producer goes on after the repair
        acknowledged = loop.stop()
        expected = {value for _, _, _, value in acknowledged}
        assert wait_until(lambda: expected <= deliveries.values(), WAIT_S), \
            f"{len(expected - deliveries.values())} acknowledged messages never consumed"
    finally:
        loop.stop()
        for member in members:
            member.leave()
    deliveries.check_per_key_order()
    check_exactly_once(connection, topic, acknowledged)
