"""Nodes join by themselves: node agents as Ray actors on real Ray and real etcd (``runtime.node_agents``).

One Ray cluster on loopback, built as ``mafka4 up`` builds its own (``ray_cluster.start_ray_cluster``):
a head without mafka4 resources, a write node "wa" and a read node "ra" that offer
``write_node`` / ``read_node`` and ``mafka4_node_<id>``; an etcd of its own; no daemon, so no
registration exists that an agent did not write. Each test uses its own mafka4 cluster name, so
their agents and keys never meet. The second test removes both nodes from Ray: it runs last.
Registrations live under a lease of ``LONG_LEASE_TTL_S``, so one that disappears was dropped or
revoked, never expired.
"""

from __future__ import annotations

import logging
import os

import pytest
import ray

from mafka4.metadata import keys
from mafka4.metadata.store import MetadataStore
from mafka4.runtime.environment import apply_ray_environment, ensure_ray_token, ray_temp_dir, use_ray_token
from mafka4.runtime.etcd_server import start_etcd, stop_etcd
from mafka4.runtime.node_agents import AgentSettings, NodeAgentKeeper, agent_reports, stop_node_agents
from mafka4.runtime.node_identity import NodeRole
from mafka4.runtime.ray_cluster import node_resource, start_ray_cluster, stop_ray_cluster
from mafka4.runtime.temporary import temporary_home
from mafka4.transport.ray_names import NAMESPACE

from process_helpers import LONG_LEASE_TTL_S, ControllerProcess
from wait_helpers import wait_until

# Variables the fixture changes (Ray's token and temp dir): restored for later tests.
RAY_VARIABLES = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH", "RAY_AUTH_TOKEN", "RAY_TMPDIR")


@pytest.fixture(scope="module")
def ray_nodes():
    """(home, etcd endpoint, RayCluster, {node id: Ray node id}) of a head, "wa" and "ra"; the driver joined."""
    saved = {name: os.environ.get(name) for name in RAY_VARIABLES}
    with temporary_home(prefix="m4ag-") as home:
        server = start_etcd(home / "etcd")
        cluster = None
        try:
            apply_ray_environment()
            use_ray_token(ensure_ray_token(home))
            cluster = start_ray_cluster(ray_temp_dir(home), ["wa"], ["ra"])
            if ray.is_initialized():  # a driver joins one Ray at a time: leave what an earlier test joined
                ray.shutdown()        # (the shared clusters have stopped: tests that use none run last)
            ray.init(address=cluster.address, namespace=NAMESPACE, logging_level=logging.WARNING, log_to_driver=False)
            ray_ids = {node_id: node["NodeID"] for node in ray.nodes() for node_id in ("wa", "ra")
                       if node_resource(node_id) in node["Resources"]}
            assert set(ray_ids) == {"wa", "ra"}, ray.nodes()
            yield home, server.endpoint, cluster, ray_ids
        finally:
            if ray.is_initialized():
                ray.shutdown()
            if cluster is not None:
                stop_ray_cluster(cluster)
            stop_etcd(server)
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value


def registered(store: MetadataStore, cluster: str) -> dict[str, dict]:
    return {item.value["node_id"]: item.value for item in store.get_prefix(keys.nodes_prefix(cluster))}


def agents_running(cluster: str) -> dict[str, str]:
    """Node id -> Ray node id of every agent of ``cluster`` that answers and still registers."""
    return {node_id: report.ray_node_id for node_id, (report, _) in agent_reports(cluster).items()
            if report.failure is None}


def test_the_keeper_starts_one_agent_per_node_pinned_there_and_each_registers_its_node(ray_nodes):
    home, endpoint, _, ray_ids = ray_nodes
    store = MetadataStore(endpoint)
    keeper = NodeAgentKeeper(AgentSettings("kept", endpoint, str(home / "data"), LONG_LEASE_TTL_S, client_port=0),
                             store)
    try:
        plan = keeper.reconcile()
        assert {(start.node_id, start.role, start.ray_node_id) for start in plan.start} == {
            ("wa", NodeRole.WRITE, ray_ids["wa"]), ("ra", NodeRole.READ, ray_ids["ra"])}
        assert wait_until(lambda: len(registered(store, "kept")) == 2), registered(store, "kept")
        # What the shell agent writes (a read node given port 0 names none: its server takes any),
        # and the Ray node the agent runs on.
        assert registered(store, "kept") == {
            "wa": {"node_id": "wa", "role": "write", "resource": node_resource("wa"), "ray_node_id": ray_ids["wa"]},
            "ra": {"node_id": "ra", "role": "read", "resource": node_resource("ra"), "ray_node_id": ray_ids["ra"]},
        }
        assert store.get(keys.cluster_config("kept")).value == {"data_root": str(home / "data")}
        # Each agent runs on the Ray node whose resource names it: node affinity, not chance.
        assert agents_running("kept") == ray_ids

        again = keeper.reconcile()
        assert again.start == () and again.drop == () and again.skipped == ()

        stop_node_agents("kept")
        # Revoked by the agents as they stopped: the lease would have lived for minutes.
        assert registered(store, "kept") == {}
        assert wait_until(lambda: agent_reports("kept") == {}), agent_reports("kept")
    finally:
        stop_node_agents("kept")
        store.close()


def test_a_controller_with_node_agents_registers_nodes_and_drops_one_that_leaves_ray(ray_nodes, tmp_path):
    """The whole path: no command on the workers, the controller's process runs the agents."""
    home, endpoint, cluster, ray_ids = ray_nodes
    store = MetadataStore(endpoint)
    controller = ControllerProcess(endpoint, cluster.address, "joined", tmp_path / "controller.log", arguments=[
        "--node-agents", "--node-data-dir", str(home / "data"), "--node-lease-ttl-s", str(LONG_LEASE_TTL_S),
        "--node-client-port", "0"])
    try:
        assert wait_until(lambda: set(registered(store, "joined")) == {"wa", "ra"}), controller.log_text()
        assert wait_until(lambda: agents_running("joined") == ray_ids), controller.log_text()
        # The controller serves the registered read node as any other: it starts its ReadNode there.
        read_nodes = keys.read_nodes_prefix("joined")
        assert wait_until(lambda: [item.key[len(read_nodes):] for item in store.get_prefix(read_nodes)] == ["ra"]), \
            controller.log_text()

        read_node = next(node for node in cluster.handle.worker_nodes if node.node_id == ray_ids["ra"])
        cluster.handle.remove_node(read_node)
        # Gone long before its lease could end: the keeper saw the Ray node die and dropped it.
        assert wait_until(lambda: set(registered(store, "joined")) == {"wa"}), controller.log_text()
        assert "node ra left Ray: its registration is dropped" in controller.log_text()
        assert agents_running("joined") == {"wa": ray_ids["wa"]}

        # A keeper that never saw the agent (the controller restarted) learns its Ray node from the
        # registration: the write node leaves while no controller runs, and a new keeper drops it.
        controller.close()
        write_node = next(node for node in cluster.handle.worker_nodes if node.node_id == ray_ids["wa"])
        cluster.handle.remove_node(write_node)
        keeper = NodeAgentKeeper(AgentSettings("joined", endpoint, str(home / "data"), LONG_LEASE_TTL_S), store)
        assert wait_until(lambda: keeper.reconcile().drop == ("wa",)), registered(store, "joined")
        assert registered(store, "joined") == {}
    finally:
        controller.close()
        stop_node_agents("joined")
        store.close()
