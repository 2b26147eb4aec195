"""What any node tells a client of its cluster: the nodes and the topics (the METADATA API).

Answered from the node's watched view of etcd; topics the user may not describe are left out of
a listing. Imports neither ``ray`` nor ``etcd3``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from mafka4.client.cluster_access import ClusterAccess
from mafka4.client.node_connection import call_once
from mafka4.protocol.metadata_api import MetadataAnswer, MetadataRequest

if TYPE_CHECKING:
    from mafka4.physical.partition_state import TopicMetadata


def cluster_metadata(topics: tuple[str, ...] | None = None, home: Path | None = None) -> MetadataAnswer:
    """The cluster's nodes and ``topics`` (None: every topic the user may describe)."""
    return call_once(MetadataRequest(None if topics is None else tuple(topics)), home)


def list_topics(home: Path | None = None) -> list[str]:
    """The names of the topics the user may describe, sorted."""
    return sorted(topic.name for topic in cluster_metadata(home=home).topics)


def topic_metadata(access: ClusterAccess, topic: str) -> TopicMetadata:
    """``topic``'s config and partitions, as any node of ``access`` tells; ``UnknownTopic`` if it does not exist."""
    # Imported here: they bring the data APIs (produce, fetch), which listing topics never sends.
    from mafka4.client.client_loop import client_loop
    from mafka4.client.leader_routes import LeaderRoutes
    from mafka4.client.node_links import NodeLinks

    async def ask() -> TopicMetadata:
        links = NodeLinks(access)
        try:
            return await LeaderRoutes(links, topic).refresh()
        finally:
            links.close()

    return client_loop().run(ask())
