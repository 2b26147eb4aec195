"""The cluster as Kafka clients see it: brokers, and each topic's partitions with their leaders (pure).

**Brokers** are the live read nodes that serve the Kafka listener. A Kafka broker id is an
int32 and a mafka4 node id a name, so a node's broker id is the CRC-32 of its name (31 bits):
every node derives the same id for the same name without asking anyone, and a node keeps its id
across restarts. Two names of one cluster with the same CRC would share an id; the later of the
two (by name) is then left out of the brokers and logged by the listener (a chance of about one
in 4 billion per pair of read nodes).

**Partitions.**
- A Mafka4-mode topic (one with a virtual-partition layout) shows its VPs as its partitions:
  Kafka partition ``i`` is VP ``v{i}``, for every VP the topic ever had (a child VP's id is the
  next free one, so the list only grows, as Kafka clients expect of partitions). A VP's leader is
  the read node that leads it; its replicas and in-sync replicas are its read replicas and RISR.
  A VP whose leader serves no Kafka listener is ``LEADER_NOT_AVAILABLE`` (the client retries).
  A retired VP (its records are past retention and its logs deleted) keeps its partition, led by
  a live broker chosen by its number: a fetch there finds it empty at its sealed end.
- A Mafka3-mode topic shows its physical partitions. Their leaders are replica actors, which
  serve no Kafka listener, so each partition is led, for Kafka clients, by a broker chosen by its
  number, which forwards its produce and fetch requests to the physical leader.

Produce requests may go to any partition's leader: the listener routes each record by its key
with mafka4's own partitioner (``kafka.produce_routing``), whatever partition the client chose.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Iterable, Mapping

from mafka4.kafka import error_codes
from mafka4.virtual.vp_state import VirtualPartitionState


@dataclass(frozen=True, slots=True)
class KafkaBroker:
    node_id: int
    read_node: str
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class KafkaPartition:
    index: int
    leader: int  # broker id; -1: none
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    error_code: int = error_codes.NONE


def broker_id(read_node: str) -> int:
    """The Kafka broker id of read node ``read_node``; see the module docstring."""
    return zlib.crc32(read_node.encode()) & 0x7FFF_FFFF


def brokers(listeners: Iterable[tuple[str, str | None]]) -> tuple[list[KafkaBroker], list[str]]:
    """The brokers of ``listeners`` ((read node, Kafka listener address ``host:port`` or None)), in
    name order; and the read nodes left out because an earlier name has their broker id."""
    found: dict[int, KafkaBroker] = {}
    clashing = []
    for read_node, address in sorted(listeners):
        if not address:
            continue
        host, _, port = address.rpartition(":")
        node_id = broker_id(read_node)
        if node_id in found:
            clashing.append(read_node)
            continue
        found[node_id] = KafkaBroker(node_id, read_node, host, int(port))
    return list(found.values()), clashing


def vp_partitions(states: Mapping[int, VirtualPartitionState], live: Mapping[str, int]) -> list[KafkaPartition]:
    """A Mafka4-mode topic's partitions from its VP states; ``live``: broker id by read node."""
    ordered = sorted(live.values())
    partitions = []
    for vp in range(max(states, default=-1) + 1):
        state = states.get(vp)
        if state is None or state.retired:
            partitions.append(_forwarded(vp, ordered, epoch=-1 if state is None else state.leader_epoch))
            continue
        replicas = tuple(live[node] for node in state.replicas if node in live)
        isr = tuple(live[node] for node in state.risr if node in live)
        leader = live.get(state.leader)
        if leader is None:
            partitions.append(KafkaPartition(vp, -1, state.leader_epoch, replicas, isr,
                                             error_codes.LEADER_NOT_AVAILABLE))
        else:
            partitions.append(KafkaPartition(vp, leader, state.leader_epoch, replicas, isr))
    return partitions


def physical_partitions(count: int, live: Mapping[str, int]) -> list[KafkaPartition]:
    """A Mafka3-mode topic's ``count`` partitions, each led by the broker that forwards it."""
    ordered = sorted(live.values())
    return [_forwarded(partition, ordered, epoch=-1) for partition in range(count)]


def forwarding_broker(partition: int, live: Mapping[str, int]) -> int | None:
    """The broker that leads ``partition`` of a topic whose leader serves no Kafka listener."""
    ordered = sorted(live.values())
    return ordered[partition % len(ordered)] if ordered else None


def _forwarded(partition: int, ordered: list[int], epoch: int) -> KafkaPartition:
    if not ordered:
        return KafkaPartition(partition, -1, epoch, (), (), error_codes.LEADER_NOT_AVAILABLE)
    leader = ordered[partition % len(ordered)]
    return KafkaPartition(partition, leader, epoch, (leader,), (leader,))
