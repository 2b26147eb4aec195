"""``Admin``: create, list, describe and delete topics.

Until the controller exists, Admin itself starts a new topic's replica actors (pinned to
live write nodes chosen by ``placement``) and then records the topic in etcd in one
transaction; if anything fails in between, the actors it started are removed again.
"""

from __future__ import annotations

import ray

from mafka4.coordinator.topics import TopicMetadata, TopicStore
from mafka4.errors import TopicExists
from mafka4.hashing import key_hash
from mafka4.limits import TopicConfig, replace_config
from mafka4.names import validate_topic_name
from mafka4.physical.launcher import replica_handle, start_partition, stop_partition
from mafka4.physical.placement import assign_replicas
from mafka4.runtime.connect import Connection, connect

DESCRIBE_TIMEOUT_S = 10


class Admin:
    def __init__(self, connection: Connection | None = None):
        self._connection = connection or connect()
        self._topics = TopicStore(self._connection.store, self._connection.cluster)

    @property
    def cluster(self) -> str:
        return self._connection.cluster

    def create_topic(self, name: str, partitions: int = 1, replication_factor: int = 1, **overrides) -> TopicMetadata:
        """Create a topic; ``overrides`` are other ``TopicConfig`` fields (e.g. min_insync_replicas)."""
        validate_topic_name(name)
        config = replace_config(TopicConfig(), partitions=partitions, replication_factor=replication_factor, **overrides)
        if self._topics.exists(name):
            raise TopicExists(f"topic {name!r} already exists: delete it first or choose another name")
        assignment = assign_replicas(partitions, replication_factor, self._topics.live_nodes("write"), start=hash_start(name))
        metadata = TopicStore.initial_metadata(name, config, assignment)
        data_root = self._topics.data_root()
        started = []
        try:
            for state in metadata.partitions:
                started.append(state)
                start_partition(self.cluster, self._connection.store.endpoint, metadata, state, data_root)
            return self._topics.create(metadata)
        except BaseException:
            for state in started:
                stop_partition(self.cluster, name, state, delete_data=True)
            raise

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
        return {"topic": name, "config": metadata.config, "partitions": partitions}

    def delete_topic(self, name: str) -> None:
        metadata = self._topics.get(name)
        self._topics.delete(name)
        for state in metadata.partitions:
            stop_partition(self.cluster, name, state, delete_data=True)


def hash_start(name: str) -> int:
    """A stable per-topic start node, so the leaders of many small topics spread out."""
    return key_hash(name.encode()) % 1024
