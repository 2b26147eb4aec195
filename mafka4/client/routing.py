"""Where a client sends requests: the leader actor of each physical partition.

Metadata is read from etcd and cached; ``refresh()`` re-reads it (after ``NotLeader``,
``StaleEpoch`` or a dead actor). Handles are looked up by actor name.
"""

from __future__ import annotations

import threading

from mafka4.coordinator.topics import TopicMetadata, TopicStore
from mafka4.errors import NotLeader
from mafka4.physical.launcher import replica_handle
from mafka4.runtime.connect import Connection


class Routing:
    def __init__(self, connection: Connection, topic: str):
        self._connection = connection
        self._topics = TopicStore(connection.store, connection.cluster)
        self._topic = topic
        self._lock = threading.Lock()
        self._handles: dict[int, object] = {}
        self.metadata: TopicMetadata = self._topics.get(topic)

    def refresh(self) -> TopicMetadata:
        metadata = self._topics.get(self._topic)
        with self._lock:
            self.metadata = metadata
            self._handles.clear()
        return metadata

    def leader(self, partition: int):
        with self._lock:
            handle = self._handles.get(partition)
        if handle is not None:
            return handle
        state = self.metadata.partitions[partition]
        handle = replica_handle(self._connection.cluster, self._topic, partition, state.leader)
        if handle is None:
            raise NotLeader(
                f"leader {state.leader} of {self._topic}-{partition} (epoch {state.leader_epoch}) is not running; "
                f"retrying after a metadata refresh"
            )
        with self._lock:
            self._handles[partition] = handle
        return handle

    def forget(self, partition: int) -> None:
        with self._lock:
            self._handles.pop(partition, None)
