"""Topic metadata in etcd: a topic's config and the state of each physical partition.

A topic is created in one transaction (its config key and every partition key), so a
reader sees either the whole topic or none of it. Partition state changes are
compare-and-swap on the partition key's ``mod_revision``.

A partition state also holds its *eligible leader replicas* (ELR, Kafka's KIP-966): the
replicas a leader removed from the ISR while the ISR fell below ``min_insync_replicas``.
The high watermark advances only while the ISR has at least ``min_insync_replicas``
members (``ReplicaState``), so every batch ever committed was on each ELR member when it
left the ISR, and the controller may elect an ELR member when no ISR member can lead
(``election.decide_partition``). ELR and ISR are disjoint; the ELR is empty whenever the
ISR has ``min_insync_replicas`` members, because from then on batches commit without it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Iterable

from mafka4.coordinator import keys
from mafka4.coordinator.store import MetadataStore
from mafka4.errors import TopicExists, UnknownTopic
from mafka4.limits import TopicConfig
from mafka4.names import validate_topic_name


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


def config_from_json(value: dict) -> TopicConfig:
    known = {f.name for f in fields(TopicConfig)}
    return TopicConfig(**{k: v for k, v in value.items() if k in known})


class TopicStore:
    """Reads and writes topic metadata of one cluster."""

    def __init__(self, store: MetadataStore, cluster: str):
        self._store = store
        self._cluster = cluster

    @staticmethod
    def initial_metadata(name: str, config: TopicConfig, assignment: list[list[str]]) -> TopicMetadata:
        """A new topic's metadata: epoch 0, the first replica leads, every replica in the ISR."""
        assert len(assignment) == config.partitions
        partitions = tuple(
            PartitionState(p, replicas[0], 0, tuple(replicas), tuple(replicas))
            for p, replicas in enumerate(assignment)
        )
        return TopicMetadata(validate_topic_name(name), config, partitions)

    def create(self, metadata: TopicMetadata, extra_values: dict[str, object] | None = None) -> TopicMetadata:
        """Record a whole topic in one transaction; ``TopicExists`` if the name is taken.

        ``extra_values`` are more keys of the topic created in the same transaction (the
        read path's split epoch and virtual partitions, ``virtual.metadata.read_path_values``).
        """
        name, config, partitions = metadata.name, metadata.config, metadata.partitions
        values = {keys.topic(self._cluster, name): asdict(config), **(extra_values or {})}
        for state in partitions:
            values[keys.physical_partition(self._cluster, name, state.partition)] = state.to_json()
        if not self._store.create_all(values):
            raise TopicExists(f"topic {name!r} already exists: delete it first or choose another name")
        return metadata

    def exists(self, name: str) -> bool:
        return self._store.get(keys.topic(self._cluster, name)) is not None

    def get(self, name: str) -> TopicMetadata:
        validate_topic_name(name)
        config = self._store.get(keys.topic(self._cluster, name))
        if config is None:
            raise UnknownTopic(f"topic {name!r} does not exist: create it with 'mafka4 topic create {name}'")
        prefix = keys.physical_prefix(self._cluster, name)
        partitions = sorted(
            (PartitionState.from_json(int(item.key[len(prefix):]), item.value) for item in self._store.get_prefix(prefix)),
            key=lambda state: state.partition,
        )
        return TopicMetadata(name, config_from_json(config.value), tuple(partitions))

    def names(self) -> list[str]:
        found = (keys.topic_name_of(self._cluster, item.key) for item in self._store.get_prefix(keys.topics_prefix(self._cluster)))
        return sorted(name for name in found if name)

    def delete(self, name: str) -> None:
        validate_topic_name(name)
        deleted = self._store.delete_keys_and_prefixes(
            [keys.topic(self._cluster, name)], [keys.topic_children_prefix(self._cluster, name)]
        )
        if not deleted:
            raise UnknownTopic(f"topic {name!r} does not exist")

    def live_nodes(self, role: str) -> list[str]:
        """Ids of nodes of ``role`` ("write" or "read") whose lease-bound registration exists."""
        items = self._store.get_prefix(keys.nodes_prefix(self._cluster))
        return sorted(item.value["node_id"] for item in items if item.value.get("role") == role)

    def data_root(self) -> str:
        config = self._store.get(keys.cluster_config(self._cluster))
        assert config is not None, "the cluster config key is written by 'mafka4 up' before it reports ready"
        return config.value["data_root"]
