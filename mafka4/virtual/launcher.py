"""Starting, finding and stopping the read path's actors: VP replicas and feeders.

Like the physical replicas (``physical.launcher``), both are detached named actors with
``num_cpus=0`` pinned by a node's custom resource: VP replica ``v`` on read node ``r`` is
``<cluster>/<topic>/vp/<v>/<r>`` on ``r``; the feeder of physical partition ``p`` is
``<cluster>/<topic>/feeder/<p>`` on read node ``feeder_node(...)``, never on a write node.
``start_read_path`` / ``stop_read_path`` bring up and remove a whole topic's read path;
``announce_roles`` tells one VP's replicas their roles (at creation and after a failover).
"""

from __future__ import annotations

import os
import time
from typing import Sequence

import ray

from mafka4.coordinator.topics import TopicMetadata
from mafka4.limits import FeederConfig, LogConfig, ReplicaConfig
from mafka4.risr.state import RisrConfig
from mafka4.runtime.ray_cluster import node_resource
from mafka4.virtual.actor import NAMESPACE, VirtualPartition, VirtualReplicaSpec, vp_actor_name
from mafka4.virtual.feeder import Feeder, FeederSpec, feeder_actor_name
from mafka4.virtual.metadata import VirtualPartitionState

STOP_TIMEOUT_S = 30
ROLE_TIMEOUT_S = 60  # announcing roles to running replicas after a failover


def vp_directory(data_root: str, node_id: str, topic: str, vp: int) -> str:
    return os.path.join(data_root, node_id, f"{topic}-v{vp}")


def start_vp_replica(cluster: str, etcd_endpoint: str, topic: TopicMetadata, vp: int, replica_id: str, data_root: str,
                     log_config: LogConfig | None = None, replica_config: ReplicaConfig | None = None):
    """Start (not announce) one VP replica on read node ``replica_id``; returns its handle."""
    config = topic.config
    spec = VirtualReplicaSpec(
        cluster=cluster, topic=topic.name, vp=vp, replica_id=replica_id,
        directory=vp_directory(data_root, replica_id, topic.name, vp),
        log_config=config.log_config(log_config),
        replica_config=replica_config or ReplicaConfig(),
        risr_config=RisrConfig(read_replica_lag_ms_max=config.read_replica_lag_ms_max),
        etcd_endpoint=etcd_endpoint,
    )
    return VirtualPartition.options(
        name=vp_actor_name(cluster, topic.name, vp, replica_id), namespace=NAMESPACE, lifetime="detached",
        num_cpus=0, resources={node_resource(replica_id): 1}, max_restarts=0,
    ).remote(spec)


def vp_handle(cluster: str, topic: str, vp: int, replica_id: str):
    """The live actor of one VP replica, or None if it is not running."""
    try:
        return ray.get_actor(vp_actor_name(cluster, topic, vp, replica_id), namespace=NAMESPACE)
    except ValueError:
        return None


def announce_roles(cluster: str, topic: str, states: Sequence[VirtualPartitionState], replicas: set[str] | None = None,
                   timeout_s: float | None = ROLE_TIMEOUT_S) -> None:
    """Tell each VP's leader, then its followers (only those in ``replicas``, if given), their roles."""
    leaders = [vp_handle(cluster, topic, s.vp, s.leader).become_leader.remote(s.leader_epoch, list(s.replicas), list(s.risr))
               for s in states]
    ray.get(leaders, timeout=timeout_s)
    followers = []
    for state in states:
        for replica in state.replicas:
            if replica != state.leader and (replicas is None or replica in replicas):
                handle = vp_handle(cluster, topic, state.vp, replica)
                if handle is not None:
                    followers.append(handle.become_follower.remote(state.leader_epoch, state.leader))
    ray.get(followers, timeout=timeout_s)


def feeder_node(read_nodes: Sequence[str], partition: int, start: int = 0) -> str:
    """The read node that runs the feeder of ``partition``: feeders spread round robin."""
    nodes = sorted(read_nodes)
    assert nodes, "a mafka4-mode topic needs a live read node"
    return nodes[(start + partition) % len(nodes)]


def start_feeder(cluster: str, etcd_endpoint: str, topic: str, partition: int, node_id: str,
                 config: FeederConfig | None = None, timeout_s: float | None = ROLE_TIMEOUT_S):
    """Start the feeder of one physical partition on read node ``node_id``; returns once it feeds.

    Waits for ``start`` to be answered: a driver that exits right after (the CLI) must not
    take the unsent call with it and leave a feeder that never feeds.
    """
    spec = FeederSpec(cluster, topic, partition, node_id, etcd_endpoint, config or FeederConfig())
    handle = Feeder.options(
        name=feeder_actor_name(cluster, topic, partition), namespace=NAMESPACE, lifetime="detached",
        num_cpus=0, resources={node_resource(node_id): 1}, max_restarts=0,
    ).remote(spec)
    ray.get(handle.start.remote(), timeout=timeout_s)
    return handle


def restart_feeder(cluster: str, etcd_endpoint: str, topic: str, partition: int, node_id: str,
                   config: FeederConfig | None = None, timeout_s: float = STOP_TIMEOUT_S):
    """Kill the feeder of ``partition`` if it runs and start a new one: it resumes where the VPs stand."""
    old = feeder_handle(cluster, topic, partition)
    if old is not None:
        ray.kill(old)
    deadline = time.monotonic() + timeout_s
    while feeder_handle(cluster, topic, partition) is not None:  # the name is freed once Ray saw it die
        if time.monotonic() > deadline:
            raise TimeoutError(f"feeder of {topic}-{partition} did not stop within {timeout_s} s")
        time.sleep(0.05)
    return start_feeder(cluster, etcd_endpoint, topic, partition, node_id, config)


def feeder_handle(cluster: str, topic: str, partition: int):
    try:
        return ray.get_actor(feeder_actor_name(cluster, topic, partition), namespace=NAMESPACE)
    except ValueError:
        return None


def start_read_path(cluster: str, etcd_endpoint: str, topic: TopicMetadata, states: Sequence[VirtualPartitionState],
                    data_root: str, read_nodes: Sequence[str], start: int = 0) -> None:
    """Start every VP replica (with roles) and every feeder of a new topic.

    Feeders wait (backing off) until the topic's metadata is in etcd, so this may run
    before the topic's transaction.
    """
    for state in states:
        for replica in state.replicas:
            start_vp_replica(cluster, etcd_endpoint, topic, state.vp, replica, data_root)
    announce_roles(cluster, topic.name, states, timeout_s=None)  # new actors start slowly on a busy node
    for partition in range(topic.config.partitions):
        start_feeder(cluster, etcd_endpoint, topic.name, partition, feeder_node(read_nodes, partition, start),
                     timeout_s=None)


def stop_read_path(cluster: str, topic: str, partitions: int, states: Sequence[VirtualPartitionState],
                   delete_data: bool) -> None:
    """Stop the feeders, then close and kill every live VP replica (deleting data if asked)."""
    feeders = [h for h in (feeder_handle(cluster, topic, p) for p in range(partitions)) if h is not None]
    replicas = [h for h in (vp_handle(cluster, topic, s.vp, r) for s in states for r in s.replicas) if h is not None]
    _close_and_kill(feeders, [h.close.remote() for h in feeders])
    _close_and_kill(replicas, [h.close.remote(delete_data) for h in replicas])


def stop_vp_replicas(cluster: str, topic: str, states: Sequence[VirtualPartitionState], delete_data: bool,
                     timeout_s: float = STOP_TIMEOUT_S) -> None:
    """Close and kill every live replica of ``states`` and wait until their names are free."""
    named = [(s.vp, r) for s in states for r in s.replicas]
    handles = [h for h in (vp_handle(cluster, topic, vp, r) for vp, r in named) if h is not None]
    _close_and_kill(handles, [h.close.remote(delete_data) for h in handles])
    deadline = time.monotonic() + timeout_s
    while any(vp_handle(cluster, topic, vp, r) is not None for vp, r in named):  # Ray frees a name once it saw the death
        if time.monotonic() > deadline:
            raise TimeoutError(f"VP replicas {named} of {topic} did not stop within {timeout_s} s")
        time.sleep(0.05)


def _close_and_kill(handles: list, closing: list) -> None:
    try:
        ray.get(closing, timeout=STOP_TIMEOUT_S)
    except (ray.exceptions.RayError, TimeoutError):
        pass  # a dead actor has nothing to close; kill below still frees its name
    for handle in handles:
        ray.kill(handle)


def describe_virtual_partitions(cluster: str, topic: str, states: Sequence[VirtualPartitionState],
                                timeout_s: float = 10) -> list[dict]:
    """Per VP: its etcd state plus what its live leader reports (or the error reaching it)."""
    described = []
    for state in states:
        leader = vp_handle(cluster, topic, state.vp, state.leader)
        live = None
        if leader is not None:
            try:
                live = ray.get(leader.describe.remote(), timeout=timeout_s)
            except (ray.exceptions.RayError, TimeoutError) as error:
                live = {"error": type(error).__name__}
        described.append({**state.to_json(), "virtual_partition": state.vp, "live": live})
    return described
