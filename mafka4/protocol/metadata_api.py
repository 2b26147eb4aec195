"""The METADATA API: which nodes a cluster has, where they serve clients, and its topics.

Any node answers from its watched view of etcd (``frontend.cluster_view``), as any Kafka broker
answers from its metadata cache, so a client learns the cluster from whichever node it reached
first. A request names the topics it wants, or none for every topic the principal may describe
(topics it may not describe are left out, as Kafka leaves them out); a named topic that does not
exist is ``UnknownTopic``, one it may not describe ``NotAuthorized``.

A topic's config travels as the JSON text etcd holds (``partition_state.config_to_json``): the
client parses it with ``config_from_json``, so a config field added later needs no new message.
A topic and its ``TopicInfo`` are converted by ``protocol.metadata_topics``: a client that only
lists topics reads their names and builds no topic. Pure: message types.
"""

from __future__ import annotations

from dataclasses import dataclass

from mafka4.protocol.messages import ApiKey, register


@dataclass(frozen=True, slots=True)
class MetadataRequest:
    """``topics``: the topics wanted; None for every topic the principal may describe."""

    topics: tuple[str, ...] | None


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """A live node: its id, its role ("write" or "read") and its client address (None: it serves
    no client port yet)."""

    node_id: str
    role: str
    address: str | None


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """A physical partition: who leads it in which epoch, its replicas and its ISR, and where the
    leader serves clients (None: not known to be alive, or not serving yet; ask again)."""

    partition: int
    leader: str
    leader_epoch: int
    replicas: tuple[str, ...]
    isr: tuple[str, ...]
    leader_address: str | None


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    config_json: str
    partitions: tuple[PartitionInfo, ...]


@dataclass(frozen=True, slots=True)
class MetadataAnswer:
    cluster: str
    nodes: tuple[NodeInfo, ...]
    topics: tuple[TopicInfo, ...]


register(ApiKey.METADATA, MetadataRequest, MetadataAnswer)
