"""Ray's fake multi-node cluster derived from ray_cluster.yaml starts the yaml's node types with their resources,
grows a read node on request through Ray's real autoscaler, and leaves no process behind
(``fake_ray_cluster``, the harness of issue 38's checks)."""

from __future__ import annotations

import psutil
import ray
import yaml
from ray.autoscaler.sdk import request_resources

from mafka4.runtime.fake_cluster_config import FAKE_HEAD_NODE_ID, OBJECT_STORE_RESOURCE
from mafka4.runtime.fake_ray_cluster import fake_ray_cluster
from mafka4.transport.ray_names import READ_NODE_RESOURCE

from conftest import away_from_session_ray
from process_helpers import CLUSTER_YAML
from wait_helpers import wait_until

# The autoscaler decides every 5 s and a new worker is a raylet start: generous, reached only when broken.
SCALE_UP_WAIT_S = 120


def running(pid: int, started_at: float) -> bool:
    """True if ``pid`` still is the process that had it (not gone, not a zombie, not a reused PID)."""
    try:
        process = psutil.Process(pid)
        return process.status() != psutil.STATUS_ZOMBIE and process.create_time() == started_at
    except psutil.NoSuchProcess:
        return False


def start_times(pids) -> dict[int, float]:
    times = {}
    for pid in pids:
        try:
            times[pid] = psutil.Process(pid).create_time()
        except psutil.NoSuchProcess:
            continue
    return times


def mentions(process: psutil.Process, marker: str) -> bool:
    try:
        return marker in " ".join(process.cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def is_raylet(pid: int) -> bool:
    try:
        return psutil.Process(pid).name() == "raylet"
    except psutil.NoSuchProcess:
        return False


def test_the_yaml_s_node_types_start_a_read_node_is_added_on_request_and_nothing_is_left_behind():
    cluster_yaml = yaml.safe_load(CLUSTER_YAML.read_text())
    worker_types = {name: node_type for name, node_type in cluster_yaml["available_node_types"].items()
                    if name != cluster_yaml["head_node_type"]}
    read_type = next(name for name, node_type in worker_types.items() if READ_NODE_RESOURCE in node_type["resources"])
    reads_at_start = worker_types[read_type]["min_workers"]

    with away_from_session_ray(), fake_ray_cluster(CLUSTER_YAML) as cluster:
        assert ray.get_runtime_context().gcs_address == cluster.address
        assert cluster.workers_by_type() == {name: node_type["min_workers"] for name, node_type in worker_types.items()}
        workers = [node for node in ray.nodes() if node["Alive"] and node["NodeID"] != FAKE_HEAD_NODE_ID]
        assert len(workers) == sum(node_type["min_workers"] for node_type in worker_types.values())
        for node in workers:
            assert node["NodeManagerAddress"] == "127.0.0.1"
            offered = {key: amount for key, amount in node["Resources"].items() if key != OBJECT_STORE_RESOURCE}
            assert any(all(offered.get(key) == amount for key, amount in node_type["resources"].items())
                       for node_type in worker_types.values()), offered

        # Ray's autoscaler sees a demand for one more read node than run, and launches exactly one.
        request_resources(bundles=[{READ_NODE_RESOURCE: worker_types[read_type]["resources"][READ_NODE_RESOURCE]}]
                          * (reads_at_start + 1))
        grown = wait_until(lambda: cluster.workers_by_type()[read_type] == reads_at_start + 1, SCALE_UP_WAIT_S)
        assert grown, f"no read node was added: {cluster.workers_by_type()}"
        # The request grows no other type. (Ray's fake autoscaler now and then launches one node more of a
        # type it just started, unasked: CI saw a fourth write node here once. One more is its quirk, not growth.)
        assert all(worker_types[name]["min_workers"] <= count <= worker_types[name]["min_workers"] + 1
                   for name, count in cluster.workers_by_type().items() if name != read_type), \
            f"only the read node type grows: {cluster.workers_by_type()}"

        seen = start_times(cluster.pids())
        nodes_alive = sum(1 for node in ray.nodes() if node["Alive"])
        # What the exit stops by PID must hold every node, the autoscaler's fake ones too (they are the
        # monitor's children, in the head's session), or they would outlive the cluster.
        assert len([pid for pid in seen if is_raylet(pid)]) == nodes_alive, "a node's raylet is not in the session"
        temp_dir = str(cluster.temp_dir)

    assert not ray.is_initialized() or ray.get_runtime_context().gcs_address != cluster.address
    assert not [pid for pid, started_at in seen.items() if running(pid, started_at)], "a process outlived the exit"
    assert not [process.pid for process in psutil.process_iter() if mentions(process, temp_dir)], (
        "a process still runs on the cluster's temp dir")
    assert not cluster.config_path.exists() and not cluster.temp_dir.exists()
