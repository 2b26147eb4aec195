"""``mafka4 deploy``, ``status --address`` and ``undeploy`` on real Ray and real etcd, through the command line.

One Ray cluster on loopback, built as ``mafka4 up`` builds its own (``ray_cluster.start_ray_cluster``):
a head without mafka4 resources, a write node "wa" and a read node "ra" that offer
``write_node`` / ``read_node`` and ``mafka4_node_<id>``. Nothing else runs: no etcd, no
controller, no agent. Deploy must bring them all up from the Ray address alone (one etcd member
on Ray's head, since no node offers ``mafka4_head``, said loudly); a client then creates a
topic, produces and consumes through the read node's client port only; undeploy leaves no
process and no named actor of the cluster behind.
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
from mafka4.metadata.endpoints import parse_endpoints
from mafka4.runtime.environment import apply_ray_environment, ensure_ray_token, ray_temp_dir, use_ray_token
from mafka4.runtime.ray_cluster import node_resource, start_ray_cluster, stop_ray_cluster
from mafka4.runtime.temporary import temporary_home
from mafka4.transport.ray_names import NAMESPACE

from wait_helpers import wait_until

CLUSTER = "deployed"
# Variables the fixture changes (Ray's token and temp dir): restored for later tests.
RAY_VARIABLES = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH", "RAY_AUTH_TOKEN", "RAY_TMPDIR")
MESSAGES = [(f"k{i % 3}".encode(), f"message-{i}".encode()) for i in range(12)]


@pytest.fixture
def ray_only(monkeypatch):
    """(home, Ray address, {node id: Ray node id}) of a Ray cluster with a head, "wa" and "ra"; the driver joined."""
    saved = {name: os.environ.get(name) for name in RAY_VARIABLES}
    with temporary_home(prefix="m4dp-") as home:
        monkeypatch.setenv("MAFKA4_HOME", str(home))  # where deploy writes the admin's credential
        cluster = None
        try:
            apply_ray_environment()
            use_ray_token(ensure_ray_token(home))
            cluster = start_ray_cluster(ray_temp_dir(home), ["wa"], ["ra"])
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


def test_deploy_serves_clients_from_the_ray_address_alone_and_undeploy_leaves_nothing(ray_only, capsys):
    home, address, ray_ids = ray_only
    data_dir = home / "data"
    controller_log = data_dir / "controller.log"
    where = ("--address", address, "--cluster", CLUSTER)
    try:
        code, out, err = mafka4(capsys, "deploy", *where, "--data-dir", str(data_dir), "--client-port", "0",
                                "--ready-timeout-s", "300")
        assert code == 0, (out, err, controller_log.read_text() if controller_log.exists() else "no controller log")
        assert "started etcd member mafka4 on 127.0.0.1:" in out and "controller" in out
        # One member, on Ray's head: the cluster has no mafka4_head node, and deploy says so loudly.
        assert "WARNING: etcd runs as ONE member" in err and "Ray's head is the only head-type node" in err

        code, again, _ = mafka4(capsys, "deploy", *where, "--data-dir", str(data_dir), "--client-port", "0")
        assert code == 0 and "it already ran, nothing new started" in again, again

        code, out, _ = mafka4(capsys, "status", *where)
        status = json.loads(out)
        assert code == 0 and status["running"], status
        [member] = status["etcd_members"]
        assert member["name"] == "mafka4" and member["healthy"] and runs(member["pid"], "etcd")
        assert status["controller"]["running"] and runs(status["controller"]["pid"], "controller_process")
        assert set(status["registered_nodes"]) == {"wa", "ra"}
        assert {node_id: agent["ray_node_id"] for node_id, agent in status["node_agents"].items()} == ray_ids
        assert list(status["serving_read_nodes"]) == ["ra"]
        pids = {"etcd": member["pid"], "controller_process": status["controller"]["pid"]}

        # A client with nothing but the read node's client address and the admin's credential.
        access = ClusterAccess(parse_endpoints(status["serving_read_nodes"]["ra"]), client_credential(home))
        create_topic("orders", partitions=2, virtual_partitions=2, where=access)
        with Producer("orders", connection=access, acks="all") as producer:
            for key, value in MESSAGES:
                producer.send_sync(value, key=key, timeout_s=60)
        received = []
        with Consumer("orders", group="billing", connection=access, from_beginning=True) as consumer:
            assert wait_until(lambda: received.extend(consumer.poll(timeout_ms=500)) or len(received) >= len(MESSAGES),
                              120), received
        assert sorted((m.key, m.value) for m in received) == sorted(MESSAGES)
        for key in {key for key, _ in MESSAGES}:  # per-key order
            assert [m.value for m in received if m.key == key] == [v for k, v in MESSAGES if k == key]

        code, out, _ = mafka4(capsys, "undeploy", *where)
        assert code == 0 and "stopped controller" in out and "etcd member mafka4" in out, out
        assert named_actors() == []
        assert not any(runs(pid, name) for name, pid in pids.items()), pids
        code, out, _ = mafka4(capsys, "status", *where)
        assert code == 1 and json.loads(out)["deployed"] is False
    finally:
        if named_actors():
            cli.main(["undeploy", *where])
