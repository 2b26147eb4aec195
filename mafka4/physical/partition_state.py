"""A physical partition's state and a topic's metadata, as plain values (pure).

A partition state also holds its *eligible leader replicas* (ELR, Kafka's KIP-966): the
replicas a leader removed from the ISR while the ISR fell below ``min_insync_replicas``.
The high watermark advances only while the ISR has at least ``min_insync_replicas``
members (``ReplicaState``), so every batch ever committed was on each ELR member when it
left the ISR, and the controller may elect an ELR member when no ISR member can lead
(``partition_decisions.decide_partition``). ELR and ISR are disjoint; the ELR is empty whenever
the ISR has ``min_insync_replicas`` members, because from then on batches commit without it.

``coordinator.metadata.topics`` stores them in etcd.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Iterable

from mafka4.limits import TopicConfig


@dataclass(frozen=True, slots=True)
class PartitionState:
    """Who leads a physical partition, in which epoch, and which replicas exist."""

    partition: int
    leader: str
    leader_epoch: int
    replicas: tuple[str, ...]
    isr: tuple[str, ...]
    # Eligible leader replicas (see the module docstring), in replica order.
    elr: tuple[str, ...] = ()

    def to_json(self) -> dict:
        return {"leader": self.leader, "leader_epoch": self.leader_epoch,
                "replicas": list(self.replicas), "isr": list(self.isr), "elr": list(self.elr)}

    @classmethod
    def from_json(cls, partition: int, value: dict) -> "PartitionState":
        # States written before the ELR existed have no "elr": an empty ELR.
        return cls(partition, value["leader"], value["leader_epoch"], tuple(value["replicas"]), tuple(value["isr"]),
                   tuple(value.get("elr", ())))

    def with_isr(self, isr: Iterable[str], min_insync_replicas: int) -> "PartitionState":
        """This state once its leader changed the ISR to ``isr``: members it removed join the ELR."""
        isr = tuple(isr)
        removed = [r for r in self.isr if r not in isr]
        elr = eligible_leader_replicas(self.replicas, [*self.elr, *removed], isr, min_insync_replicas)
        return replace(self, isr=isr, elr=elr)


def eligible_leader_replicas(replicas: Iterable[str], candidates: Iterable[str], isr: Iterable[str],
                             min_insync_replicas: int) -> tuple[str, ...]:
    """The ELR next to ``isr``: ``candidates`` (old ELR members and replicas leaving the ISR)
    that are still replicas and not in the ISR; none once the ISR has ``min_insync_replicas``."""
    isr_set = frozenset(isr)
    if len(isr_set) >= min_insync_replicas:
        return ()
    kept = frozenset(candidates) - isr_set
    return tuple(r for r in replicas if r in kept)


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    name: str
    config: TopicConfig
    partitions: tuple[PartitionState, ...]


def config_to_json(config: TopicConfig) -> dict:
    """``config`` as stored in etcd and sent in intents: plain JSON values, the read mode its string."""
    return {**asdict(config), "read_mode": config.read_mode.value}


def config_from_json(value: dict) -> TopicConfig:
    """A stored config; fields it lacks take their defaults (no ``read_mode``: a Mafka3 topic)."""
    known = {f.name for f in fields(TopicConfig)}
    return TopicConfig(**{k: v for k, v in value.items() if k in known})
