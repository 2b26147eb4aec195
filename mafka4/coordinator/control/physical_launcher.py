"""Starting and stopping the replica actors of physical partitions (the controller's job).

Replica actors are detached and named (``replica_actor_name``), so they outlive the
process that created them and any client finds them by name. Each replica is pinned to
its write node (``transport.node_pinning``).
"""

from __future__ import annotations

import os

import ray

from mafka4.limits import PHYSICAL_REPLICA_STOP_TIMEOUT_S
from mafka4.limits.servers import LogConfig, ReplicaConfig, topic_log_config, topic_replica_config
from mafka4.physical.actor import PhysicalPartition, ReplicaSpec
from mafka4.physical.handles import replica_handle
from mafka4.physical.partition_state import PartitionState, TopicMetadata
from mafka4.transport.node_pinning import pinned_options
from mafka4.transport.ray_names import NAMESPACE, WRITE_NODE_RESOURCE, replica_actor_name


def replica_directory(data_root: str, node_id: str, topic: str, partition: int) -> str:
    return os.path.join(data_root, node_id, f"{topic}-{partition}")


def start_replica(cluster: str, etcd_endpoint: str, topic: TopicMetadata, partition: int, replica_id: str,
                  data_root: str, log_config: LogConfig | None = None, replica_config: ReplicaConfig | None = None):
    spec = ReplicaSpec(
        cluster=cluster,
        etcd_endpoint=etcd_endpoint,
        topic=topic.name,
        partition=partition,
        replica_id=replica_id,
        directory=replica_directory(data_root, replica_id, topic.name, partition),
        log_config=topic_log_config(topic.config, log_config),
        replica_config=topic_replica_config(topic.config, replica_config),
        read_mode=topic.config.read_mode,
    )
    return PhysicalPartition.options(
        name=replica_actor_name(cluster, topic.name, partition, replica_id),
        namespace=NAMESPACE,
        lifetime="detached",
        num_cpus=0,
        **pinned_options(replica_id, WRITE_NODE_RESOURCE),
        max_restarts=0,
    ).remote(spec)


def start_partition(cluster: str, etcd_endpoint: str, topic: TopicMetadata, state: PartitionState, data_root: str,
                    log_config: LogConfig | None = None, replica_config: ReplicaConfig | None = None) -> list:
    """Start every replica of one partition and give each its role; returns the handles."""
    handles = {r: start_replica(cluster, etcd_endpoint, topic, state.partition, r, data_root, log_config, replica_config)
               for r in state.replicas}
    ray.get(handles[state.leader].become_leader.remote(state.leader_epoch, list(state.replicas), list(state.isr)))
    ray.get([handles[r].become_follower.remote(state.leader_epoch, state.leader) for r in state.replicas if r != state.leader])
    return list(handles.values())


def stop_partition(cluster: str, topic: str, state: PartitionState, delete_data: bool) -> None:
    """Close and kill every live replica of one partition (deleting its data if asked)."""
    handles = [h for h in (replica_handle(cluster, topic, state.partition, r) for r in state.replicas) if h is not None]
    closing = [h.close.remote(delete_data) for h in handles]
    try:
        ray.get(closing, timeout=PHYSICAL_REPLICA_STOP_TIMEOUT_S)
    except (ray.exceptions.RayError, TimeoutError):
        pass  # a dead replica has nothing to close; kill below still frees its name
    for handle in handles:
        ray.kill(handle)
