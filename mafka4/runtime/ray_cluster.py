"""A multi-node Ray cluster on one machine, one Ray node per simulated mafka4 node.

Owns the custom-resource naming that pins actors to a simulated node, and the start/stop of
the cluster through ``ray.cluster_utils.Cluster``. Layout: a head node (``num_cpus=2``, no
write/read resources: drivers and controllers run there) plus one Ray node per write node
("w0", "w1", ...) and read node ("r0", ...), each with ``num_cpus=1`` and

    write node:  {"write_node": 1000, "mafka4_node_<id>": 1000}
    read node:   {"read_node": 1000,  "mafka4_node_<id>": 1000}

A partition actor is pinned with ``num_cpus=0, resources={node_resource(node_id): 1}``; the
1000 units bound how many such actors fit on one node. Every process binds 127.0.0.1.
Processes are stopped only by ``stop_ray_cluster`` (``shutdown_at_exit=False``: the daemon
owns the cluster's lifetime and its own signal handlers, not Ray's exit hooks).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from mafka4.limits import OBJECT_STORE_BYTES_PER_NODE, RAY_INLINE_OBJECT_BYTES_MAX, RAY_NODE_START_TIMEOUT_S
from mafka4.runtime.environment import apply_ray_environment
from mafka4.runtime.node_identity import ROLE_RESOURCES, NodeRole
from mafka4.runtime.ports import LOOPBACK
from mafka4.transport.ray_names import NODE_RESOURCE_UNITS, node_resource

HEAD_CPUS = 2
NODE_CPUS = 1


def ray_system_config() -> dict[str, int]:
    """Ray settings the head gives the whole cluster (``ray_cluster.yaml`` passes the same to
    ``ray start --head --system-config``): batches and fetch answers travel inline
    (``limits.RAY_INLINE_OBJECT_BYTES_MAX``)."""
    return {"max_direct_call_object_size": RAY_INLINE_OBJECT_BYTES_MAX}


def node_resources(role: NodeRole | str, node_id: str) -> dict[str, float]:
    return {ROLE_RESOURCES[NodeRole(role)]: NODE_RESOURCE_UNITS, node_resource(node_id): NODE_RESOURCE_UNITS}


def node_ids(role: NodeRole | str, count: int) -> list[str]:
    """Ids of the ``count`` simulated nodes of one role: w0, w1, ... or r0, r1, ..."""
    prefix = "w" if NodeRole(role) is NodeRole.WRITE else "r"
    return [f"{prefix}{index}" for index in range(count)]


@dataclass(frozen=True, slots=True)
class RayCluster:
    """A started local Ray cluster; ``handle`` is the ``ray.cluster_utils.Cluster``."""

    address: str  # GCS address "127.0.0.1:<port>", what ray.init(address=...) takes
    temp_dir: str
    handle: Any


def start_ray_cluster(
    temp_dir: Path,
    write_nodes: list[str],
    read_nodes: list[str],
    object_store_bytes: int = OBJECT_STORE_BYTES_PER_NODE,
    every_node_resources: Mapping[str, float] | None = None,
) -> RayCluster:
    """Start the head and one Ray node per simulated node; return once all are alive.

    ``every_node_resources``: offered by every node, the head too, besides its own (a test that
    makes every node head-type for ``mafka4 deploy`` gives ``{"mafka4_head": 1}``).
    On failure the nodes already started are stopped before the error propagates.
    """
    apply_ray_environment()
    from ray.cluster_utils import Cluster  # after the environment: Ray reads it at import

    # Cluster writes the head's address to $RAY_TMPDIR/ray/ray_current_cluster (default
    # /tmp/ray, shared with every other Ray on the machine); keep it inside our temp dir.
    os.environ["RAY_TMPDIR"] = str(temp_dir)
    (Path(temp_dir) / "ray").mkdir(parents=True, exist_ok=True)
    common = {
        "node_ip_address": LOOPBACK,
        "temp_dir": str(temp_dir),
        "object_store_memory": object_store_bytes,
        # No log monitor: it tails the workers' log files to send their lines to drivers, and every
        # mafka4 process joins Ray with log_to_driver=False (runtime.connect), so nobody read them.
        # It used 2-3% of a core with the cluster idle, and more as the files of finished workers
        # pile up. The files stay in the session's logs directory.
        "include_log_monitor": False,
    }
    cluster = Cluster(initialize_head=False, shutdown_at_exit=False)
    try:
        extra = dict(every_node_resources or {})
        cluster.add_node(num_cpus=HEAD_CPUS, include_dashboard=False, _system_config=ray_system_config(),
                         **({"resources": extra} if extra else {}), **common)
        for role, ids in ((NodeRole.WRITE, write_nodes), (NodeRole.READ, read_nodes)):
            for node_id in ids:
                cluster.add_node(wait=False, num_cpus=NODE_CPUS, resources={**node_resources(role, node_id), **extra},
                                 **common)
        cluster.wait_for_nodes(timeout=RAY_NODE_START_TIMEOUT_S)
    except BaseException:
        cluster.shutdown()
        raise
    return RayCluster(address=cluster.address, temp_dir=str(temp_dir), handle=cluster)


def stop_ray_cluster(cluster: RayCluster) -> None:
    """Stop every node's processes (raylets first, then the head's GCS) and wait for them."""
    cluster.handle.shutdown()


def ray_process_pids(cluster: RayCluster) -> list[int]:
    """PIDs of the processes Ray started for the nodes (not the workers raylets spawn)."""
    pids = []
    for node in cluster.handle.list_all_nodes():
        for infos in node.all_processes.values():
            pids.extend(info.process.pid for info in infos)
    return sorted(pids)
