"""Which write nodes hold the replicas of each physical partition (pure).

Kafka's round-robin assignment: partition ``p`` starts at node ``(start + p) % n`` and its
followers follow at a per-round shift, so leaders (the first replica) are spread evenly
and no node holds two replicas of one partition. ``topic_start`` is the ``start`` of a
topic's placements (write and read path), so the leaders of many small topics spread out.
"""

from __future__ import annotations

from typing import Sequence

from mafka4.errors import NotEnoughWriteNodes
from mafka4.hashing import key_hash

TOPIC_STARTS = 1024  # distinct start nodes a topic name can map to


def topic_start(name: str) -> int:
    """A stable per-topic start node for the placements of topic ``name``."""
    return key_hash(name.encode()) % TOPIC_STARTS


def assign_replicas(partitions: int, replication_factor: int, nodes: Sequence[str], start: int = 0) -> list[list[str]]:
    """Replica lists, leader first, one per partition."""
    nodes = sorted(nodes)
    if replication_factor > len(nodes):
        live = ", ".join(nodes) or "none"
        raise NotEnoughWriteNodes(
            f"replication factor {replication_factor} needs {replication_factor} live write nodes, "
            f"{len(nodes)} are live ({live}): lower --replication-factor or start more write "
            f"nodes ('mafka4 up --write-nodes {replication_factor}')"
        )
    count = len(nodes)
    assignment = []
    for partition in range(partitions):
        first = (start + partition) % count
        # The shift changes every `count` partitions so follower sets vary, as in Kafka;
        # followers are taken modulo count-1 after the leader, so none repeats the leader.
        shift = (partition // count) % max(count - 1, 1)
        replicas = [nodes[first]]
        for follower in range(replication_factor - 1):
            replicas.append(nodes[(first + 1 + (shift + follower) % (count - 1)) % count])
        assert len(set(replicas)) == replication_factor, replicas
        assignment.append(replicas)
    return assignment
