"""Creating and deleting topics, as the controller does when it executes an intent.

**Create.** Place the partition replicas on live write nodes and the VP replicas on live read
nodes (``control.placement``, ``control.placement.plan_read_path``), start the physical replica
actors (a physical partition stays one actor per replica) and give them their roles, record the
whole topic in etcd, all or nothing as readers see it (config, partitions and, in mafka4 mode, its
split epoch 0 and VP states: ``TopicStore.create``, its config key last), then tell the read
nodes to host the VPs (logs opened in running nodes: no process starts). Actors started before a
failed record are stopped again. Repeatable: a topic already recorded with the same config is the
success of an earlier try (a controller that died after recording it); leftovers of a try that
died before are stopped first (actors) or deleted by the record (etcd keys below the topic).

**Delete.** Remove the topic's keys (one transaction), then stop its physical replicas and drop
its VPs on every read node that hosts them, deleting their data. Of a name with no topic, delete
what a creation that died between its etcd transactions left (``physical.topic_leftovers``) and
answer ``UnknownTopic`` saying so: intents run one at a time, so no creation is under way then.
A failed creation stopped its actors itself, and hosted no VP (VPs are hosted after the record),
so leftovers are etcd keys only.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import ray

from mafka4.coordinator.control.physical_launcher import start_partition, stop_partition
from mafka4.coordinator.control.placement import (assign_replicas, leaving_read_nodes, placeable_read_nodes,
                                                  plan_read_path, topic_start)
from mafka4.coordinator.control.read_node_launcher import drop_everywhere, ensure_read_node, host_states
from mafka4.errors import TopicExists
from mafka4.limits import TopicConfig
from mafka4.metadata import keys
from mafka4.metadata.store import MetadataStore
from mafka4.physical.partition_state import TopicMetadata
from mafka4.physical.topic_leftovers import absent_topic
from mafka4.physical.topics import TopicStore
from mafka4.virtual.vp_store import VirtualStore, read_path_values

log = logging.getLogger("mafka4.controller")


@dataclass(frozen=True, slots=True)
class Created:
    """A created topic, and the VPs a read node did not take yet (the controller repairs them)."""

    metadata: TopicMetadata
    unhosted: tuple[int, ...] = ()


def _placeable(store: MetadataStore, cluster: str, registered: list[str], read_replicas: int) -> list[str]:
    """The registered read nodes a new topic's VP replicas go to, as a split's children do
    (``placement.placeable_read_nodes``): serving ones not being released first."""
    found = store.get_prefixes([keys.read_nodes_prefix(cluster), keys.released_read_nodes_prefix(cluster)],
                               keys=[keys.read_scaling(cluster)])
    serving = {node for item in found[keys.read_nodes_prefix(cluster)]
               if (node := keys.parse_read_node_liveness(cluster, item.key)) is not None}
    leaving = leaving_read_nodes(cluster, found[keys.released_read_nodes_prefix(cluster)],
                                 found[keys.read_scaling(cluster)])
    return placeable_read_nodes(registered, serving, leaving, read_replicas)


def create_topic(store: MetadataStore, cluster: str, etcd_endpoint: str, name: str, config: TopicConfig) -> Created:
    topics = TopicStore(store, cluster)
    if topics.exists(name):
        metadata = topics.get(name)
        if metadata.config == config:
            return Created(metadata)
        raise TopicExists(f"topic {name!r} already exists: delete it first or choose another name")
    read_nodes = topics.live_nodes("read")
    read_plan = plan_read_path(config, _placeable(store, cluster, read_nodes, config.read_replicas),
                               start=topic_start(name))
    assignment = assign_replicas(config.partitions, config.replication_factor, topics.live_nodes("write"),
                                 start=topic_start(name))
    metadata = TopicStore.initial_metadata(name, config, assignment)
    for state in metadata.partitions:  # leftovers of a try that died before recording the topic
        stop_partition(cluster, name, state, delete_data=True)
    if read_plan is not None:
        drop_everywhere(cluster, name, read_nodes)
    data_root = topics.data_root()
    started = []
    try:
        for state in metadata.partitions:
            started.append(state)
            start_partition(cluster, etcd_endpoint, metadata, state, data_root)
        if read_plan is None:
            return Created(topics.create(metadata))
        topics.create(metadata, read_path_values(cluster, name, read_plan))
    except BaseException:
        for state in started:
            stop_partition(cluster, name, state, delete_data=True)
        raise
    for node_id in {replica for state in read_plan.states for replica in state.replicas}:
        try:
            ensure_read_node(cluster, etcd_endpoint, node_id, data_root)
        except (ValueError, ray.exceptions.RayError) as error:  # left for the controller's repair
            log.warning("%s: read node %s not running yet: %s", name, node_id, error)
    refused = host_states(cluster, name, config, read_plan.states)
    unhosted = sorted({vp for failures in refused.values() for vp in failures if vp >= 0}
                      | {s.vp for s in read_plan.states if any(-1 in refused.get(r, {}) for r in s.replicas)})
    if unhosted:
        log.warning("%s: VPs %s not hosted yet (%s); the controller repairs them", name, unhosted, refused)
    return Created(metadata, tuple(unhosted))


def delete_topic(store: MetadataStore, cluster: str, name: str) -> None:
    topics = TopicStore(store, cluster)
    if not topics.exists(name):
        raise absent_topic(name, topics.delete_leftovers(name))
    metadata = topics.get(name)
    states = [state for state, _ in VirtualStore(store, cluster).states(name).values()]
    topics.delete(name)
    hosts = {replica for state in states for replica in state.replicas} | set(topics.live_nodes("read"))
    if states:
        drop_everywhere(cluster, name, hosts)
    for state in metadata.partitions:
        stop_partition(cluster, name, state, delete_data=True)
