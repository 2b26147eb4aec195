"""Where replicas go: write nodes for physical partitions, read nodes for virtual ones (pure).

Kafka's round-robin assignment: partition ``p`` starts at node ``(start + p) % n`` and its
followers follow at a per-round shift, so leaders (the first replica) are spread evenly
and no node holds two replicas of one partition. ``topic_start`` is the ``start`` of a
topic's placements (write and read path), so the leaders of many small topics spread out.

``plan_read_path`` decides a new mafka4-mode topic's layout and VP placement: epoch 0 with
``virtual_partitions`` even hash ranges, VP ``v`` replicated on ``read_replicas`` distinct
live read nodes in the same round-robin order, its first replica leading at epoch 0 with
every replica in the RISR. ``plan_children`` places the VPs a split or merge opens, on the read
nodes ``placeable_read_nodes`` picks: those serving and not being released (issue 38).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, AbstractSet, Iterable, Sequence

from mafka4.errors import NotEnoughReadNodes, NotEnoughWriteNodes
from mafka4.hashing import key_hash
from mafka4.limits import TopicConfig
from mafka4.metadata import keys
from mafka4.virtual.layout import SplitEpoch, TopicLayout
from mafka4.virtual.vp_state import ReadPathPlan, VirtualPartitionState

if TYPE_CHECKING:  # the items' type only: the store's module imports etcd's client
    from mafka4.metadata.store import Versioned

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


def plan_read_path(config: TopicConfig, read_nodes: Sequence[str], start: int = 0) -> ReadPathPlan | None:
    """The read path of a new topic with ``config`` (None in mafka3 mode: no VPs at all).

    Raises ``NotEnoughReadNodes`` when ``read_replicas`` is more than the live read nodes.
    """
    config = config.resolved()
    if config.virtual_partition_count == 0:
        return None
    replicas_per_vp = config.read_replica_count
    if replicas_per_vp > len(read_nodes):
        live = ", ".join(sorted(read_nodes)) or "none"
        raise NotEnoughReadNodes(
            f"read_replicas={replicas_per_vp} needs {replicas_per_vp} live read nodes, {len(read_nodes)} are "
            f"live ({live}): lower read_replicas, start more read nodes ('mafka4 up --read-nodes "
            f"{replicas_per_vp}'), or create the topic with read_mode='mafka3' (consumers read physical partitions)"
        )
    layout = TopicLayout.initial(config.partitions, config.virtual_partition_count, config.virtual_config())
    assignment = assign_replicas(len(layout.current.ranges), replicas_per_vp, read_nodes, start=start)
    states = tuple(
        VirtualPartitionState(vp, hash_range, replicas[0], 0, tuple(replicas), tuple(replicas))
        for (hash_range, vp), replicas in zip(layout.current.ranges.items(), assignment)
    )
    return ReadPathPlan(layout, states)


def leaving_read_nodes(cluster: str, released: Iterable["Versioned"], scaling: Iterable["Versioned"]) -> frozenset[str]:
    """The read nodes read-node scaling released (``keys.released_read_node`` items) or is releasing
    (the ``releasing`` of the ``keys.read_scaling`` item, if any)."""
    leaving = {node for item in released if (node := keys.parse_released_read_node(cluster, item.key))}
    for item in scaling:
        releasing = item.value.get("releasing") if isinstance(item.value, dict) else None
        if isinstance(releasing, str):
            leaving.add(releasing)
    return frozenset(leaving)


def placeable_read_nodes(registered: Sequence[str], serving: AbstractSet[str], leaving: AbstractSet[str],
                         read_replicas: int) -> list[str]:
    """The registered read nodes new VP replicas go to, in ``registered``'s order: those that serve
    (their ``ReadNode`` holds its liveness key) and are not leaving (being released by read-node
    scaling, or released: a child placed there would be moved off again, or led from a node
    whose read node stopped, which no consumer can reach). With fewer than ``read_replicas`` of
    those, the serving ones, leaving or not; then every registered one (a node whose read node
    has not started yet: hosting starts it), so that a split is not refused for this."""
    preferred = [node for node in registered if node in serving and node not in leaving]
    if len(preferred) >= read_replicas:
        return preferred
    serving_ones = [node for node in registered if node in serving]
    return serving_ones if len(serving_ones) >= read_replicas else list(registered)


def plan_children(epoch: SplitEpoch, read_replicas: int, read_nodes: Sequence[str]) -> tuple[VirtualPartitionState, ...]:
    """The initial state of the VPs ``epoch`` opens: placed like a new topic's (``plan_read_path``),
    starting at the first child's id so that consecutive splits spread over the read nodes."""
    if read_replicas > len(read_nodes):
        live = ", ".join(sorted(read_nodes)) or "none"
        raise NotEnoughReadNodes(
            f"read_replicas={read_replicas} needs {read_replicas} live read nodes for the new virtual partitions, "
            f"{len(read_nodes)} are live ({live}): start more read nodes ('mafka4 up --read-nodes {read_replicas}')"
        )
    assignment = assign_replicas(len(epoch.children), read_replicas, read_nodes, start=epoch.children[0])
    return tuple(
        VirtualPartitionState(vp, epoch.range_of(vp), replicas[0], 0, tuple(replicas), tuple(replicas))
        for vp, replicas in zip(epoch.children, assignment)
    )
