"""``Admin``: create, list, describe and delete topics; split, merge and scale virtual partitions.

Until the controller exists, Admin itself starts a new topic's replica actors (pinned to
live write nodes chosen by ``placement``) and then records the topic in etcd in one
transaction; if anything fails in between, the actors it started are removed again.
A mafka4-mode topic also gets its read path (``mafka4.virtual``): VP replicas on live read
nodes and one feeder per physical partition, with the split epoch and VP keys recorded in
the same transaction. Splits, merges and scaling are carried out by ``virtual.resharding``.
"""

from __future__ import annotations

import ray

from mafka4.coordinator.topics import TopicMetadata, TopicStore
from mafka4.errors import InvalidConfig, TopicExists
from mafka4.limits import TopicConfig, replace_config
from mafka4.names import validate_topic_name
from mafka4.physical.launcher import replica_handle, start_partition, stop_partition
from mafka4.physical.placement import assign_replicas, topic_start
from mafka4.runtime.connect import Connection, connect
from mafka4.virtual.launcher import describe_virtual_partitions, start_read_path, stop_read_path, vp_handle
from mafka4.virtual.metadata import VirtualStore, plan_read_path, read_path_values
from mafka4.virtual.reshard import SplitEpoch
from mafka4.virtual.resharding import Resharder

DESCRIBE_TIMEOUT_S = 10


def new_topic_config(name: str, partitions: int = 1, replication_factor: int = 1, virtual_partitions: int | None = None,
                     read_replicas: int = 1, read_mode: str = "mafka3", **overrides) -> TopicConfig:
    """The resolved config of a topic to create, or ``InvalidTopicName``/``InvalidConfig``.

    Needs no cluster, so callers (the CLI) can refuse a bad request before connecting.
    """
    validate_topic_name(name)
    return replace_config(TopicConfig(), partitions=partitions, replication_factor=replication_factor,
                          virtual_partitions=virtual_partitions, read_replicas=read_replicas, read_mode=read_mode,
                          **overrides).resolved()


class Admin:
    def __init__(self, connection: Connection | None = None):
        self._connection = connection or connect()
        self._topics = TopicStore(self._connection.store, self._connection.cluster)

    @property
    def cluster(self) -> str:
        return self._connection.cluster

    def create_topic(self, name: str, partitions: int = 1, replication_factor: int = 1, virtual_partitions: int | None = None,
                     read_replicas: int = 1, read_mode: str = "mafka3", **overrides) -> TopicMetadata:
        """Create a topic; ``overrides`` are other ``TopicConfig`` fields (e.g. min_insync_replicas).

        ``read_mode="mafka3"``: consumers read the physical partitions; no VPs, no feeders.
        ``"mafka4"``: consumers read ``virtual_partitions`` VPs (default one per physical
        partition), each on ``read_replicas`` read nodes. The library keeps "mafka3" as its
        default so that Mafka3-mode callers and experiments stay as they are; ``mafka4 topic
        create`` defaults to "mafka4".
        """
        config = new_topic_config(name, partitions, replication_factor, virtual_partitions, read_replicas, read_mode,
                                  **overrides)
        if self._topics.exists(name):
            raise TopicExists(f"topic {name!r} already exists: delete it first or choose another name")
        read_nodes = self._topics.live_nodes("read")
        read_plan = plan_read_path(config, read_nodes, start=topic_start(name))
        assignment = assign_replicas(partitions, replication_factor, self._topics.live_nodes("write"), start=topic_start(name))
        metadata = TopicStore.initial_metadata(name, config, assignment)
        data_root = self._topics.data_root()
        endpoint = self._connection.store.endpoint
        started = []
        try:
            for state in metadata.partitions:
                started.append(state)
                start_partition(self.cluster, endpoint, metadata, state, data_root)
            if read_plan is None:
                return self._topics.create(metadata)
            start_read_path(self.cluster, endpoint, metadata, read_plan.states, data_root, read_nodes, topic_start(name))
            return self._topics.create(metadata, read_path_values(self.cluster, name, read_plan))
        except BaseException:
            if read_plan is not None:
                stop_read_path(self.cluster, name, partitions, read_plan.states, delete_data=True)
            for state in started:
                stop_partition(self.cluster, name, state, delete_data=True)
            raise

    def split_virtual_partition(self, topic: str, vp: int) -> SplitEpoch:
        """Split active VP ``vp`` of a mafka4-mode topic into two (``virtual.resharding``); returns the new epoch."""
        return Resharder(self._connection.store, self.cluster).split(topic, vp)

    def merge_virtual_partitions(self, topic: str, first: int, second: int) -> SplitEpoch:
        """Merge two active VPs with adjacent hash ranges into one; returns the new epoch."""
        return Resharder(self._connection.store, self.cluster).merge(topic, first, second)

    def scale(self, topic: str, virtual_partitions: int) -> list[SplitEpoch]:
        """Split or merge until the topic has ``virtual_partitions`` active VPs; returns the epochs opened."""
        return Resharder(self._connection.store, self.cluster).scale(topic, virtual_partitions)

    def list_topics(self) -> list[str]:
        return self._topics.names()

    def topic_metadata(self, name: str) -> TopicMetadata:
        return self._topics.get(name)

    def describe_topic(self, name: str) -> dict:
        """Config and, per partition, the etcd state plus what the live leader reports."""
        metadata = self._topics.get(name)
        partitions = []
        for state in metadata.partitions:
            leader = replica_handle(self.cluster, name, state.partition, state.leader)
            live = None
            if leader is not None:
                try:
                    live = ray.get(leader.describe.remote(), timeout=DESCRIBE_TIMEOUT_S)
                except (ray.exceptions.RayError, TimeoutError) as error:
                    live = {"error": type(error).__name__}
            partitions.append({**state.to_json(), "partition": state.partition, "live": live})
        virtual = describe_virtual_partitions(self.cluster, name, self._virtual_states(name))
        if virtual:
            config = metadata.config
            layout = VirtualStore(self._connection.store, self.cluster).layout(
                name, config.partitions, config.virtual_config())
            virtual = [{**v, "active": layout.is_active(v["virtual_partition"])} for v in virtual]
        return {"topic": name, "config": metadata.config, "partitions": partitions, "virtual_partitions": virtual}

    def _virtual_states(self, name: str) -> list:
        found = VirtualStore(self._connection.store, self.cluster).states(name)
        return [state for _, (state, _) in sorted(found.items())]

    def inject_fault(self, topic: str, kind: str = "physical", partition: int = 0, replica: str | None = None,
                     delay_ms: int = 0, paused: bool = False) -> dict:
        """Delay or pause one replica's fetch and serve loops (``mafka4.faults``); (0, False) clears it.

        ``kind="physical"``: a replica of physical partition ``partition``; ``"virtual"``: a
        replica of virtual partition ``partition``. ``replica`` is its node id (default: the leader).
        """
        if kind == "physical":
            state = self._topics.get(topic).partitions[partition]
            handle = replica_handle(self.cluster, topic, partition, replica or state.leader)
        elif kind == "virtual":
            state = next((s for s in self._virtual_states(topic) if s.vp == partition), None)
            if state is None:
                raise InvalidConfig(f"topic {topic!r} has no virtual partition {partition}")
            handle = vp_handle(self.cluster, topic, partition, replica or state.leader)
        else:
            raise InvalidConfig(f"kind={kind!r} is not valid: use 'physical' or 'virtual'")
        if handle is None:
            raise InvalidConfig(f"replica {replica or state.leader} of {topic} {kind} partition {partition} is not running")
        return ray.get(handle.set_fault.remote(delay_ms, paused), timeout=DESCRIBE_TIMEOUT_S)

    def delete_topic(self, name: str) -> None:
        metadata = self._topics.get(name)
        virtual_states = self._virtual_states(name)
        self._topics.delete(name)
        stop_read_path(self.cluster, name, len(metadata.partitions), virtual_states, delete_data=True)
        for state in metadata.partitions:
            stop_partition(self.cluster, name, state, delete_data=True)
