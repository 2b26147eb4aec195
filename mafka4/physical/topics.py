"""Topic metadata in etcd: a topic's config and the state of each physical partition.

A topic's config key is its commit point: it is written last, with or after every other key of
the topic, so a reader that finds the config finds the whole topic, and one that does not finds
none (``TopicStore.create``). Partition state changes are
compare-and-swap on the partition key's ``mod_revision``: the controller's elections, and a
leader's ISR (``record_isr``, which writes only while the key names that leader and epoch).
The values are ``physical.partition_state``'s.
"""

from __future__ import annotations

from typing import Sequence

from mafka4.errors import TopicExists
from mafka4.limits import ISR_WRITE_ATTEMPTS_MAX, TopicConfig
from mafka4.metadata import keys
from mafka4.metadata.store import MetadataStore, Update, Versioned
from mafka4.names import validate_topic_name
from mafka4.physical.partition_state import PartitionState, TopicMetadata, config_from_json, config_to_json
from mafka4.physical.topic_leftovers import absent_topic


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
        """Record a whole topic, all or nothing as readers see it; ``TopicExists`` if the name is taken.

        ``extra_values`` are more keys of the topic (the read path's split epoch and virtual
        partitions, ``vp_store.read_path_values``). One transaction when the keys fit one (with
        everyday names, a topic of every bound does); else the other keys go first, in runs, and
        the config key last (``MetadataStore.create_with_children``): every reader looks a topic
        up by its config key (``exists``, ``get``, ``names``, the nodes' view), so until it is
        written the topic is absent to all of them. What a creation that died between runs left
        is deleted by the next creation of the name (the controller's retry of the intent), or by
        a delete of the name (``delete_leftovers``).
        """
        name, config, partitions = metadata.name, metadata.config, metadata.partitions
        values = {keys.physical_partition(self._cluster, name, state.partition): state.to_json() for state in partitions}
        values.update(extra_values or {})
        if not self._store.create_with_children(keys.topic(self._cluster, name), config_to_json(config), values,
                                                keys.topic_children_prefix(self._cluster, name),
                                                keys.topic_creation(self._cluster, name)):
            raise TopicExists(f"topic {name!r} already exists: delete it first or choose another name")
        return metadata

    def exists(self, name: str) -> bool:
        return self._store.get(keys.topic(self._cluster, name)) is not None

    def get(self, name: str) -> TopicMetadata:
        validate_topic_name(name)
        config = self.config_from(name, self._store.get(keys.topic(self._cluster, name)))
        prefix = keys.physical_prefix(self._cluster, name)
        partitions = sorted(
            (PartitionState.from_json(int(item.key[len(prefix):]), item.value) for item in self._store.get_prefix(prefix)),
            key=lambda state: state.partition,
        )
        return TopicMetadata(name, config, tuple(partitions))

    @staticmethod
    def config_from(name: str, found: Versioned | None) -> TopicConfig:
        """The config of topic ``name`` from its key (``keys.topic``) as read; ``UnknownTopic`` if it was absent."""
        if found is None:
            raise absent_topic(name)
        return config_from_json(found.value)

    def record_isr(self, topic: str, partition: int, leader: str, leader_epoch: int, isr: Sequence[str],
                   min_insync_replicas: int) -> bool:
        """CAS ``isr``, with the ELR it implies (``PartitionState.with_isr``), into the partition key
        if it still names ``leader`` at ``leader_epoch``.

        False when it names another leader or epoch (the writer is fenced) or the topic is gone.
        """
        def with_isr(value: dict) -> dict | Update:
            state = PartitionState.from_json(partition, value)
            if state.leader != leader or state.leader_epoch != leader_epoch:
                return Update.REFUSE
            new_state = state.with_isr(isr, min_insync_replicas)
            return Update.KEEP if new_state == state else {**value, **new_state.to_json()}

        return self._store.update(keys.physical_partition(self._cluster, topic, partition), with_isr,
                                  ISR_WRITE_ATTEMPTS_MAX, f"ISR write for {topic}-{partition}")

    def names(self) -> list[str]:
        found = (keys.topic_name_of(self._cluster, item.key) for item in self._store.get_prefix(keys.topics_prefix(self._cluster)))
        return sorted(name for name in found if name)

    def delete(self, name: str) -> None:
        validate_topic_name(name)
        deleted = self._store.delete_keys_and_prefixes(
            [keys.topic(self._cluster, name)], [keys.topic_children_prefix(self._cluster, name)]
        )
        if not deleted:
            raise absent_topic(name)

    def keys_below(self, name: str) -> int:
        """How many keys are below topic ``name``'s config key (as one etcd member holds them; it may
        lag by a few writes). Below an absent config key: leftovers (``physical.topic_leftovers``)
        or a creation under way."""
        return self._store.count_prefix(keys.topic_children_prefix(self._cluster, name))

    def delete_leftovers(self, name: str) -> int:
        """Delete the keys below topic ``name``'s config key while it is absent; how many. Only for a
        caller that knows no creation of ``name`` is under way (the controller, between intents):
        ``physical.topic_leftovers``."""
        return self._store.delete_children_of_absent(keys.topic(self._cluster, name),
                                                     keys.topic_children_prefix(self._cluster, name))

    def live_nodes(self, role: str) -> list[str]:
        """Ids of nodes of ``role`` ("write" or "read") whose lease-bound registration exists."""
        return self.nodes_from(self._store.get_prefix(keys.nodes_prefix(self._cluster)), role)

    @staticmethod
    def nodes_from(items: Sequence[Versioned], role: str) -> list[str]:
        """Ids of the nodes of ``role`` among the registrations read below ``keys.nodes_prefix``."""
        return sorted(item.value["node_id"] for item in items if item.value.get("role") == role)

    def data_root(self) -> str:
        config = self._store.get(keys.cluster_config(self._cluster))
        assert config is not None, "the cluster config key is written by 'mafka4 up' before it reports ready"
        return config.value["data_root"]
