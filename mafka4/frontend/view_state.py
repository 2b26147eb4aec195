"""What a node knows of its cluster's metadata for answering clients: the pure state of a watched view.

A node answers clients' metadata requests from this state, as a Kafka broker answers from its
metadata cache, so that no client reads etcd. ``cluster_view.ClusterView`` loads it from etcd
and feeds it every change its watches see; this module only keeps the values:

- each topic's config and the state of each of its physical partitions (who leads, in which
  epoch, the replicas and the ISR);
- each mafka4-mode topic's split epochs and the state of each of its virtual partitions, as
  canonical JSON text (sorted keys), which is what a ``VP_METADATA`` answer carries and
  consumers parse: a VP's text is about a fifth of the memory of its parsed dict (1,240 bytes
  a VP in the view, its split epoch's share included), and every node holds every VP of the
  cluster;
- the read nodes alive and where each serves clients (their liveness keys);
- the physical replicas alive and where each serves clients (their liveness keys), so that a
  client learns where each partition's leader takes its produce;
- the stored user credentials and the ACL rules (their raw JSON; ``mafka4.security`` parses them).

Invariants: a topic's partitions, split epochs and VPs are shown only once its config is known
(a topic's config key is written last, with or after its other keys, which a watch may deliver
first; a deleted topic's keys go in one transaction). Changes must come in etcd's order: a load
at revision R, then the watch from R + 1 (a watch delivers in revision order). Keys this view does not track (feed
positions, holds, VP states) are ignored. Pure: no I/O.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field
from typing import Any, Iterable

from mafka4.metadata import keys
from mafka4.physical.partition_state import PartitionState, TopicMetadata, config_from_json


class Watched(enum.Enum):
    """The prefixes a view watches, each loaded and replaced whole after its watch broke."""

    TOPICS = "topics"
    READ_NODES = "read_nodes"
    REPLICAS = "replicas"
    USERS = "users"
    ACLS = "acls"


def watched_prefix(cluster: str, kind: Watched) -> str:
    return {
        Watched.TOPICS: keys.topics_prefix,
        Watched.READ_NODES: keys.read_nodes_prefix,
        Watched.REPLICAS: keys.replicas_prefix,
        Watched.USERS: keys.users_prefix,
        Watched.ACLS: keys.acls_prefix,
    }[kind](cluster)


@dataclass(frozen=True, slots=True)
class ReadNodeEndpoint:
    """A live read node and where it serves clients (None: it serves no client port yet)."""

    node_id: str
    client_address: str | None


@dataclass(slots=True)
class ViewState:
    """The metadata values of ``cluster`` a node serves clients from; see the module docstring."""

    cluster: str
    topic_configs: dict[str, dict] = field(default_factory=dict)
    # Per topic, its partitions' states by partition number: a topic is read without a scan of all.
    partitions: dict[str, dict[int, dict]] = field(default_factory=dict)
    split_epochs: dict[str, dict[int, str]] = field(default_factory=dict)  # topic -> epoch -> JSON text
    virtual_partitions: dict[str, dict[int, str]] = field(default_factory=dict)  # topic -> VP -> JSON text
    read_nodes: dict[str, dict] = field(default_factory=dict)
    replicas: dict[tuple[str, int, str], dict] = field(default_factory=dict)  # (topic, partition, replica id)
    users: dict[str, dict] = field(default_factory=dict)
    acls: dict[str, dict] = field(default_factory=dict)
    # Counts the changes of ``acls``, so that a reader rebuilds its rule table only after one.
    acls_version: int = 0

    def load(self, kind: Watched, items: Iterable[tuple[str, Any]]) -> None:
        """Replace everything of ``kind`` by ``items`` (key, JSON value), as read in one etcd read."""
        if kind is Watched.TOPICS:
            self.topic_configs.clear()
            self.partitions.clear()
            self.split_epochs.clear()
            self.virtual_partitions.clear()
        else:
            self._values_of(kind).clear()
            self.acls_version += kind is Watched.ACLS
        for key, value in items:
            self._set(key, value)

    def apply(self, changes: Iterable[tuple[str, Any]]) -> None:
        """Apply watched changes in order: (key, JSON value), the value None for a deleted key."""
        for key, value in changes:
            self._set(key, value)

    def topic_names(self) -> list[str]:
        return sorted(self.topic_configs)

    def topic(self, name: str) -> TopicMetadata | None:
        """The topic's config and partitions in partition order, or None if it is not known."""
        config = self.topic_configs.get(name)
        if config is None:
            return None
        held = self.partitions.get(name, {})
        states = [PartitionState.from_json(partition, held[partition]) for partition in sorted(held)]
        return TopicMetadata(name, config_from_json(config), tuple(states))

    def virtual_layout(self, name: str) -> tuple[list[str], dict[int, str]] | None:
        """The topic's split epochs (JSON text, in epoch order) and VP states (JSON text by VP); None
        if it has no split epoch, or no config yet (a creation still writing its keys)."""
        epochs = self.split_epochs.get(name)
        if not epochs or name not in self.topic_configs:
            return None
        return [epochs[epoch] for epoch in sorted(epochs)], dict(self.virtual_partitions.get(name, {}))

    def read_node_endpoints(self) -> list[ReadNodeEndpoint]:
        return [ReadNodeEndpoint(node_id, value.get("client")) for node_id, value in sorted(self.read_nodes.items())]

    def coordinator_candidates(self) -> list[tuple[str, str]]:
        """(node id, client address) of the nodes that may coordinate groups: the live read nodes
        serving clients, or, in a cluster without any, the live replicas' ports."""
        nodes = [(node_id, value["client"]) for node_id, value in sorted(self.read_nodes.items()) if value.get("client")]
        if nodes:
            return nodes
        return [(f"{topic}-{partition}/{replica_id}", value["client"])
                for (topic, partition, replica_id), value in sorted(self.replicas.items()) if value.get("client")]

    def replica_address(self, topic: str, partition: int, replica_id: str) -> str | None:
        """Where the live replica serves clients; None if it is not alive or serves no client port."""
        value = self.replicas.get((topic, partition, replica_id))
        return None if value is None else value.get("client")

    def _values_of(self, kind: Watched) -> dict:
        return {Watched.READ_NODES: self.read_nodes, Watched.REPLICAS: self.replicas, Watched.USERS: self.users,
                Watched.ACLS: self.acls}[kind]

    def _set(self, key: str, value: Any) -> None:
        cluster = self.cluster
        if (name := keys.topic_name_of(cluster, key)) is not None:
            _put(self.topic_configs, name, value)
            if value is None:  # the transaction that deleted the config deleted the rest
                for children in (self.partitions, self.split_epochs, self.virtual_partitions):
                    children.pop(name, None)
        elif (partition := keys.parse_physical_partition(cluster, key)) is not None:
            _put_child(self.partitions, *partition, value)
        elif (epoch := keys.parse_split_epoch(cluster, key)) is not None:
            _put_child(self.split_epochs, *epoch, _text(value))
        elif (vp := keys.parse_virtual_partition(cluster, key)) is not None:
            _put_child(self.virtual_partitions, *vp, _text(value))
        elif (node_id := keys.parse_read_node_liveness(cluster, key)) is not None:
            _put(self.read_nodes, node_id, value)
        elif (replica := keys.parse_replica_liveness(cluster, key)) is not None:
            _put(self.replicas, replica, value)
        elif (user := keys.user_name_of(cluster, key)) is not None:
            _put(self.users, user, value)
        elif (rule_id := keys.acl_id_of(cluster, key)) is not None:
            _put(self.acls, rule_id, value)
            self.acls_version += 1


def _text(value: Any) -> str | None:
    """A JSON value as canonical text (None stays None: a deleted key)."""
    return None if value is None else json.dumps(value, sort_keys=True)


def _put_child(children: dict[str, dict[int, Any]], topic: str, number: int, value: Any) -> None:
    """Set (or, for None, drop) one numbered child of ``topic``; a topic left with none is dropped."""
    _put(children.setdefault(topic, {}), number, value)
    if not children[topic]:
        del children[topic]


def _put(values: dict, key: Any, value: Any) -> None:
    if value is None:
        values.pop(key, None)
    else:
        values[key] = value
