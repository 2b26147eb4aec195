"""The node agent (``python -m mafka4.runtime.node``) as a real process against real etcd.

Registration, the cluster config and etcd outages use an etcd of their own. The topic test
runs the agents against the session cluster's etcd and Ray under another mafka4 cluster
name: there the only registered nodes are the agents', on Ray nodes that carry
``mafka4_node_<id>`` as a worker of ``ray_cluster.yaml`` does, and a controller of its own runs
for that name, as on a ``ray_cluster.yaml`` head. That avoids a second Ray cluster on the machine.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import time

import pytest

from mafka4 import errors
from mafka4.client.admin import Admin
from mafka4.client.producer import Producer
from mafka4.client.virtual_consumer import VirtualConsumer
from mafka4.coordinator.control.physical_launcher import replica_directory
from mafka4.limits import CLIENT_PORT_DEFAULT
from mafka4.metadata import keys
from mafka4.metadata.store import MetadataStore
from mafka4.runtime.connect import Connection
from mafka4.runtime.etcd_server import restart_etcd, start_etcd, stop_etcd
from mafka4.runtime.node import validate_node_id
from mafka4.runtime.ports import free_loopback_port
from mafka4.runtime.ray_cluster import node_resource
from mafka4.virtual.hosted_vp import VpId, vp_directory

from process_helpers import REPO_ROOT, Agent, ControllerProcess, agent_environment, clients_as_admin_of, node_command
from wait_helpers import wait_until

OUTAGE_LEASE_TTL_S = 4
WAIT_S = 60


@pytest.fixture
def etcd(tmp_path):
    server = start_etcd(tmp_path / "etcd")
    store = MetadataStore(server.endpoint)
    try:
        # etcd listens before it serves: the test's first read must not fail for that.
        assert wait_until(lambda: _answers(store)), f"etcd at {server.endpoint} does not answer"
        yield server, store
    finally:
        store.close()
        stop_etcd(server)


def _answers(store: MetadataStore) -> bool:
    try:
        store.get("/")
        return True
    except errors.CoordinatorUnavailable:
        return False


def registered(store: MetadataStore, cluster: str) -> dict[str, dict]:
    return {item.value["node_id"]: item.value for item in store.get_prefix(keys.nodes_prefix(cluster))}


def test_agents_register_their_nodes_and_revoke_on_sigterm(etcd, tmp_path):
    server, store = etcd
    data_dir = tmp_path / "data"
    writer = Agent(server.endpoint, "c1", "write", "ip-10-0-0-7", data_dir, tmp_path / "w.log")
    reader = Agent(server.endpoint, "c1", "read", "ip-10-0-0-8", data_dir, tmp_path / "r.log")
    try:
        assert wait_until(lambda: len(registered(store, "c1")) == 2), writer.log_text() + reader.log_text()
        assert registered(store, "c1") == {
            "ip-10-0-0-7": {"node_id": "ip-10-0-0-7", "role": "write", "resource": node_resource("ip-10-0-0-7")},
            "ip-10-0-0-8": {"node_id": "ip-10-0-0-8", "role": "read", "resource": node_resource("ip-10-0-0-8"),
                            "client_port": CLIENT_PORT_DEFAULT},
        }
        assert store.get(keys.cluster_config("c1")).value == {"data_root": str(data_dir)}
        assert data_dir.is_dir()

        assert writer.stop() == 0
        # The lease would live for minutes: the key is gone because the agent revoked it.
        assert set(registered(store, "c1")) == {"ip-10-0-0-8"}
        assert reader.stop() == 0
        assert registered(store, "c1") == {}
    finally:
        writer.close()
        reader.close()


def test_config_only_command_writes_the_data_root_once_and_agents_keep_it(etcd, tmp_path):
    server, store = etcd
    first, second = tmp_path / "first", tmp_path / "second"
    for data_dir in (first, second):
        written = subprocess.run(node_command(server.endpoint, "c2", "--data-dir", str(data_dir)), cwd=REPO_ROOT,
                                 env=agent_environment(), capture_output=True, text=True, timeout=WAIT_S)
        assert written.returncode == 0, written.stderr
        assert store.get(keys.cluster_config("c2")).value == {"data_root": str(first)}
    assert registered(store, "c2") == {}

    agent = Agent(server.endpoint, "c2", "write", "w7", second, tmp_path / "agent.log")
    try:
        assert wait_until(lambda: "w7" in registered(store, "c2")), agent.log_text()
        assert store.get(keys.cluster_config("c2")).value == {"data_root": str(first)}
        assert f"--data-dir {second} is ignored" in agent.log_text()
        assert first.is_dir() and not second.exists()
        assert agent.stop() == 0
    finally:
        agent.close()


def test_config_only_command_gives_up_when_etcd_does_not_answer(tmp_path):
    nothing_listens = f"127.0.0.1:{free_loopback_port()}"
    result = subprocess.run(node_command(nothing_listens, "c3", "--wait-s", "0"), cwd=REPO_ROOT,
                            env=agent_environment(), capture_output=True, text=True, timeout=WAIT_S)
    assert result.returncode == 1
    assert f"etcd at {nothing_listens} did not answer" in result.stderr and "gave up" in result.stderr


@pytest.mark.parametrize("node_id", ["", "-w0", "w/0", "w.0", "node:w0", "w 0", "x" * 64])
def test_invalid_node_ids_are_refused_with_the_rule(node_id):
    with pytest.raises(errors.InvalidNodeId, match="node id"):
        validate_node_id(node_id)


def test_agent_refuses_an_invalid_node_id_before_touching_etcd(tmp_path):
    result = subprocess.run(node_command("127.0.0.1:1", "c4", "--role", "write", "--node-id", "w/0"), cwd=REPO_ROOT,
                            env=agent_environment(), capture_output=True, text=True, timeout=WAIT_S)
    assert result.returncode == 2
    assert "node id 'w/0' is not valid" in result.stderr


def test_agent_registers_again_after_an_etcd_outage(etcd, tmp_path):
    server, store = etcd
    key = keys.node("c5", "r5")
    agent = Agent(server.endpoint, "c5", "read", "r5", tmp_path / "data", tmp_path / "agent.log",
                  lease_ttl_s=OUTAGE_LEASE_TTL_S)
    try:
        assert wait_until(lambda: store.get(key) is not None), agent.log_text()
        before = store.get(key).mod_revision
        stop_etcd(server)
        assert wait_until(lambda: "etcd does not answer" in agent.log_text()), agent.log_text()
        server = restart_etcd(server)
        # Written again under a new lease, from a new client: a later revision of the key.
        assert wait_until(lambda: _mod_revision(store, key) > before), agent.log_text()
        assert agent.process.poll() is None
        assert agent.stop() == 0
        assert store.get(key) is None
    finally:
        agent.close()
        stop_etcd(server)  # the fixture's stop_etcd would only see the first server's PID


def _mod_revision(store: MetadataStore, key: str) -> int:
    try:
        found = store.get(key)
    except errors.CoordinatorUnavailable:
        return 0
    return 0 if found is None else found.mod_revision


@pytest.fixture
def agents_cluster_name(cluster):
    """A fresh cluster name, whose clients authenticate as its admin (what ``mafka4 up`` sets up for a local cluster)."""
    name = f"agents-{secrets.token_hex(3)}"
    with clients_as_admin_of(cluster.store, name):
        yield name


def test_topic_round_trips_on_nodes_registered_by_agents(cluster, agents_cluster_name, tmp_path):
    """The session cluster's Ray nodes w1 and r0, registered by agents under a fresh cluster name."""
    name = agents_cluster_name
    connection = Connection(cluster=name, store=cluster.store, state=None)
    admin = Admin(connection)
    topic = f"agent-{secrets.token_hex(3)}"
    data_dir = tmp_path / "data"
    controller = ControllerProcess(cluster.store.endpoint, cluster.state.ray_address, name, tmp_path / "controller.log")
    writer = reader = None
    created = False
    try:
        with pytest.raises(errors.NotEnoughReadNodes, match="0 are live"):
            admin.create_topic(topic, read_mode="mafka4")
        writer = Agent(cluster.store.endpoint, name, "write", "w1", data_dir, tmp_path / "w1.log")
        reader = Agent(cluster.store.endpoint, name, "read", "r0", data_dir, tmp_path / "r0.log")
        assert wait_until(lambda: set(registered(cluster.store, name)) == {"w1", "r0"}), writer.log_text()
        metadata = admin.create_topic(topic, read_mode="mafka4")
        created = True
        assert metadata.partitions[0].replicas == ("w1",)
        # Each replica where its agent registered it, under the data root the agent recorded.
        assert os.path.isdir(replica_directory(str(data_dir), "w1", topic, 0))
        assert os.path.isdir(vp_directory(str(data_dir), "r0", VpId(topic, 0)))
        with Producer(topic, connection=connection, acks="all") as producer:
            sent = [producer.send(f"m{i}".encode(), key=f"k{i % 3}".encode()) for i in range(20)]
            producer.flush()
            for future in sent:
                future.result()  # raises unless acknowledged
        messages = []
        with VirtualConsumer(topic, connection=connection, from_beginning=True) as consumer:
            deadline = time.monotonic() + WAIT_S
            while len(messages) < len(sent) and time.monotonic() < deadline:
                messages.extend(consumer.poll(timeout_ms=500))
        assert sorted(m.value for m in messages) == sorted(f"m{i}".encode() for i in range(20))
    finally:
        if created:
            admin.delete_topic(topic)
        for agent in (writer, reader):
            if agent is not None:
                agent.close()
        controller.close()
