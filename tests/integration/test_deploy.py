"""``mafka4 deploy``, ``status --address`` and ``undeploy`` on real Ray and real etcd, through the command line.

A Ray cluster on loopback per test, built as ``mafka4 up`` builds its own
(``ray_cluster.start_ray_cluster``): a head without mafka4 resources, a write node "wa" and a read
node "ra" that offer ``write_node`` / ``read_node`` and ``mafka4_node_<id>``. Nothing else runs:
no etcd, no controller, no agent. Deploy must bring them all up from the Ray address alone; a
client then creates a topic, produces and consumes through the read node's client port only;
undeploy leaves no process and no named actor of the cluster behind.

* No node offers ``mafka4_head``: one etcd member, on Ray's head, said loudly.
* All three nodes offer it: three members, one per node; undeploy then deploy starts them again
  on their data (recorded peers), and the topic is still there.
* ``deploy --no-wait`` (as ``ray_cluster.yaml``'s head runs it) returns without waiting for the
  nodes, which the controller then brings in.
"""

from __future__ import annotations

import json
import logging
import os

import psutil
import pytest
import ray

from mafka4 import cli
from mafka4.client.bootstrap import client_credential
from mafka4.client.cluster_access import ClusterAccess
from mafka4.client.consumer import Consumer
from mafka4.client.producer import Producer
from mafka4.client.topic_admin import create_topic
from mafka4.errors import TopicExists
from mafka4.metadata.endpoints import parse_endpoints
from mafka4.runtime.environment import apply_ray_environment, ensure_ray_token, ray_temp_dir, use_ray_token
from mafka4.runtime.ray_cluster import node_resource, start_ray_cluster, stop_ray_cluster
from mafka4.runtime.temporary import temporary_home
from mafka4.transport.ray_names import HEAD_NODE_RESOURCE, NAMESPACE

from wait_helpers import wait_until

CLUSTER = "deployed"
# Variables the fixture changes (Ray's token and temp dir): restored for later tests.
RAY_VARIABLES = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH", "RAY_AUTH_TOKEN", "RAY_TMPDIR")
MESSAGES = [(f"k{i % 3}".encode(), f"message-{i}".encode()) for i in range(12)]


@pytest.fixture
def ray_only(monkeypatch):
    """(home, Ray address, {node id: Ray node id}) of a head, "wa" and "ra"; the driver joined."""
    yield from ray_cluster_only(monkeypatch, None)


@pytest.fixture
def three_head_type_nodes(monkeypatch):
    """As ``ray_only``, every node (the head too) offering ``mafka4_head``."""
    yield from ray_cluster_only(monkeypatch, {HEAD_NODE_RESOURCE: 1})


def ray_cluster_only(monkeypatch, every_node_resources):
    saved = {name: os.environ.get(name) for name in RAY_VARIABLES}
    with temporary_home(prefix="m4dp-") as home:
        monkeypatch.setenv("MAFKA4_HOME", str(home))  # where deploy writes the admin's credential
        cluster = None
        try:
            apply_ray_environment()
            use_ray_token(ensure_ray_token(home))
            cluster = start_ray_cluster(ray_temp_dir(home), ["wa"], ["ra"], every_node_resources=every_node_resources)
            if ray.is_initialized():  # a driver joins one Ray at a time: leave what an earlier test joined
                ray.shutdown()        # (the shared clusters have stopped: tests that use none run last)
            ray.init(address=cluster.address, namespace=NAMESPACE, logging_level=logging.WARNING, log_to_driver=False)
            ray_ids = {node_id: node["NodeID"] for node in ray.nodes() for node_id in ("wa", "ra")
                       if node_resource(node_id) in node["Resources"]}
            yield home, cluster.address, ray_ids
        finally:
            if ray.is_initialized():
                ray.shutdown()
            if cluster is not None:
                stop_ray_cluster(cluster)
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value


def mafka4(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def named_actors() -> list[str]:
    return sorted(entry["name"] for entry in ray.util.list_named_actors(all_namespaces=True)
                  if entry["namespace"] == NAMESPACE and entry["name"].startswith(f"{CLUSTER}/"))


def runs(pid: int, name: str) -> bool:
    try:
        process = psutil.Process(pid)
        return process.status() != psutil.STATUS_ZOMBIE and name in " ".join(process.cmdline())
    except psutil.NoSuchProcess:
        return False


def deploy(capsys, home, address) -> tuple[str, str]:
    data_dir = home / "data"
    code, out, err = mafka4(capsys, "deploy", "--address", address, "--cluster", CLUSTER, "--data-dir", str(data_dir),
                            "--client-port", "0", "--ready-timeout-s", "300")
    controller_log = data_dir / "controller.log"
    assert code == 0, (out, err, controller_log.read_text() if controller_log.exists() else "no controller log")
    return out, err


def deployment_status(capsys, address) -> dict:
    code, out, _ = mafka4(capsys, "status", "--address", address, "--cluster", CLUSTER)
    status = json.loads(out)
    assert (code == 0) == status["running"]
    return status


def produce_and_consume(access: ClusterAccess) -> None:
    """Through the client port only: a topic, messages produced with acks=all, all read back in order per key."""
    create_topic("orders", partitions=2, virtual_partitions=2, where=access)
    with Producer("orders", connection=access, acks="all") as producer:
        for key, value in MESSAGES:
            producer.send_sync(value, key=key, timeout_s=60)
    received = []
    with Consumer("orders", group="billing", connection=access, from_beginning=True) as consumer:
        assert wait_until(lambda: received.extend(consumer.poll(timeout_ms=500)) or len(received) >= len(MESSAGES),
                          120), received
    assert sorted((m.key, m.value) for m in received) == sorted(MESSAGES)
    for key in {key for key, _ in MESSAGES}:
        assert [m.value for m in received if m.key == key] == [v for k, v in MESSAGES if k == key]


def undeploy_leaves_nothing(capsys, address, pids: dict[str, int]) -> str:
    code, out, _ = mafka4(capsys, "undeploy", "--address", address, "--cluster", CLUSTER)
    assert code == 0 and "stopped controller" in out, out
    assert named_actors() == []
    assert not any(runs(pid, name) for pid, name in pids.items()), pids
    assert deployment_status(capsys, address)["deployed"] is False
    return out


def client_access(status: dict, home) -> ClusterAccess:
    return ClusterAccess(parse_endpoints(status["serving_read_nodes"]["ra"]), client_credential(home))


def test_deploy_serves_clients_from_the_ray_address_alone_and_undeploy_leaves_nothing(ray_only, capsys):
    home, address, ray_ids = ray_only
    try:
        out, err = deploy(capsys, home, address)
        assert "started etcd member mafka4 on 127.0.0.1:" in out and "controller" in out
        # One member, on Ray's head: the cluster has no mafka4_head node, and deploy says so loudly.
        assert "WARNING: etcd runs as ONE member" in err and "Ray's head is the only head-type node" in err

        again, _ = deploy(capsys, home, address)
        assert "it already ran, nothing new started" in again, again

        status = deployment_status(capsys, address)
        assert status["running"], status
        [member] = status["etcd_members"]
        assert member["name"] == "mafka4" and member["healthy"] and runs(member["pid"], "etcd")
        assert member["ray_node_id"] not in ray_ids.values(), "on the head"
        assert status["controller"]["running"] and runs(status["controller"]["pid"], "controller_process")
        assert set(status["registered_nodes"]) == {"wa", "ra"}
        assert {node_id: agent["ray_node_id"] for node_id, agent in status["node_agents"].items()} == ray_ids
        assert list(status["serving_read_nodes"]) == ["ra"]

        produce_and_consume(client_access(status, home))

        # The deployment's actors die without undeploy (a worker crash, `ray stop` on the head): a deploy
        # brings etcd and the controller back, stopping any process they left behind; the etcd member
        # keeps its client port, so the agents, read node and replicas that outlived it go on.
        old = {member["pid"]: "etcd", status["controller"]["pid"]: "controller_process"}
        for name in named_actors():
            if name.startswith(f"{CLUSTER}/deploy/"):
                ray.kill(ray.get_actor(name, namespace=NAMESPACE))
        assert wait_until(lambda: not [name for name in named_actors() if name.startswith(f"{CLUSTER}/deploy/")])
        out, _ = deploy(capsys, home, address)
        assert f"started etcd member mafka4 on {member['endpoint']}" in out and "controller" in out, out
        assert not any(runs(pid, name) for pid, name in old.items()), old
        status = deployment_status(capsys, address)
        assert status["running"] and set(status["registered_nodes"]) == {"wa", "ra"}, status
        [member] = status["etcd_members"]
        with pytest.raises(TopicExists):
            create_topic("orders", partitions=2, where=client_access(status, home))

        out = undeploy_leaves_nothing(capsys, address, {member["pid"]: "etcd",
                                                         status["controller"]["pid"]: "controller_process"})
        assert "etcd member mafka4" in out and "node agent wa" in out and "node agent ra" in out
    finally:
        if named_actors():
            cli.main(["undeploy", "--address", address, "--cluster", CLUSTER])


def test_deploy_no_wait_returns_at_once_and_the_controller_brings_the_nodes_in(ray_only, capsys):
    """As ray_cluster.yaml's head deploys, before Ray adds its workers: deploy --no-wait returns once etcd and the
    controller run; the controller then gives each node its agent, and status shows them registered and serving."""
    home, address, _ = ray_only
    try:
        code, out, err = mafka4(capsys, "deploy", "--address", address, "--cluster", CLUSTER, "--no-wait",
                                "--data-dir", str(home / "data"), "--client-port", "0")
        assert code == 0 and "controller" in out and "nodes join as Ray adds them" in out, (out, err)

        def nodes_in() -> dict | None:
            status = deployment_status(capsys, address)
            return status if (set(status.get("registered_nodes", ())) == {"wa", "ra"}
                              and list(status.get("serving_read_nodes", ())) == ["ra"]) else None

        status = wait_until(nodes_in, 300, 1.0)
        assert status, deployment_status(capsys, address)
        undeploy_leaves_nothing(capsys, address, {**{m["pid"]: "etcd" for m in status["etcd_members"]},
                                                  status["controller"]["pid"]: "controller_process"})
    finally:
        if named_actors():
            cli.main(["undeploy", "--address", address, "--cluster", CLUSTER])


def test_three_head_type_nodes_get_three_members_which_start_again_on_their_data(three_head_type_nodes, capsys):
    home, address, ray_ids = three_head_type_nodes
    try:
        out, err = deploy(capsys, home, address)
        assert "WARNING" not in err and "(3 members)" in out, (out, err)
        status = deployment_status(capsys, address)
        assert status["running"], status
        members = status["etcd_members"]
        assert [m["name"] for m in members] == ["mafka4-0", "mafka4-1", "mafka4-2"] and all(m["healthy"] for m in members)
        assert len({m["ray_node_id"] for m in members}) == 3 and set(ray_ids.values()) < {m["ray_node_id"] for m in members}
        assert status["etcd_endpoint"].count(",") == 2, "clients are given every member"
        produce_and_consume(client_access(status, home))
        undeploy_leaves_nothing(capsys, address, {**{m["pid"]: "etcd" for m in members},
                                                  status["controller"]["pid"]: "controller_process"})

        # The members start again on their data, with the peers they recorded: the metadata is still there.
        out, _ = deploy(capsys, home, address)
        assert "started etcd member mafka4-0" in out
        status = deployment_status(capsys, address)
        with pytest.raises(TopicExists):
            create_topic("orders", partitions=2, where=client_access(status, home))
        undeploy_leaves_nothing(capsys, address, {**{m["pid"]: "etcd" for m in status["etcd_members"]},
                                                  status["controller"]["pid"]: "controller_process"})
    finally:
        if named_actors():
            cli.main(["undeploy", "--address", address, "--cluster", CLUSTER])
