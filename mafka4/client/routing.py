"""Where a client sends requests: the leader actor of each physical partition.

Metadata is read from etcd and cached. A watch on the topic's partition keys updates the
cache as soon as the controller elects a new leader; ``refresh()`` re-reads everything (after
``NotLeader``, ``StaleEpoch`` or a dead actor, and after the watch broke). Updates never move
a partition back to an older leader epoch, so a late watch event cannot undo a newer read.
The watch ends when etcd goes away; it is set up again on a thread of its own (never on the
caller's, which may be the producer's event loop) the next time the routing is used, followed
by a full read. Handles are looked up by actor name.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref

from mafka4.errors import MafkaError, NotLeader
from mafka4.limits import METADATA_REWATCH_BACKOFF_S
from mafka4.metadata import keys
from mafka4.metadata.store import WatchEvent
from mafka4.physical.handles import replica_handle
from mafka4.physical.partition_state import PartitionState, TopicMetadata
from mafka4.physical.topics import TopicStore
from mafka4.runtime.connect import Connection

logger = logging.getLogger(__name__)


class Routing:
    def __init__(self, connection: Connection, topic: str):
        self._connection = connection
        self._topics = TopicStore(connection.store, connection.cluster)
        self._topic = topic
        self._prefix = keys.physical_prefix(connection.cluster, topic)
        self._lock = threading.Lock()
        self._handles: dict[int, object] = {}
        self.metadata: TopicMetadata = self._topics.get(topic)
        self._watch_id: int | None = None
        self._rewatching = False
        self._next_rewatch = 0.0
        self._closed = False
        self._start_watch()

    def refresh(self) -> TopicMetadata:
        read = self._topics.get(self._topic)
        with self._lock:
            known = self.metadata.partitions
            if len(known) == len(read.partitions):  # keep what a watch event brought in meanwhile, if newer
                read = TopicMetadata(read.name, read.config, tuple(
                    old if old.leader_epoch > new.leader_epoch else new for old, new in zip(known, read.partitions)))
            self.metadata = read
            self._handles.clear()
        self._ensure_watch()
        return read

    def leader(self, partition: int):
        self._ensure_watch()
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
            if self.metadata.partitions[partition].leader == state.leader:
                self._handles[partition] = handle
        return handle

    def forget(self, partition: int) -> None:
        with self._lock:
            self._handles.pop(partition, None)

    def close(self) -> None:
        """Stop watching the topic's metadata."""
        self._closed = True
        with self._lock:
            watch_id, self._watch_id = self._watch_id, None
        if watch_id is not None:
            self._connection.store.cancel_watch(watch_id)

    # --- the watch ----------------------------------------------------------------------

    def _start_watch(self) -> None:
        """Watch the partition keys; without etcd, leave it to ``_ensure_watch`` later."""
        this = weakref.ref(self)  # the watch must not keep a forgotten Routing alive
        store = self._connection.store

        def on_events(events: list[WatchEvent]) -> None:
            routing = this()
            if routing is None:
                store.cancel_watch(watch_id)
            else:
                routing._apply(events)

        def on_broken() -> None:
            routing = this()
            if routing is not None:
                with routing._lock:
                    routing._watch_id = None

        try:
            watch_id = store.watch_prefix(self._prefix, on_events, on_broken)
        except MafkaError as error:
            logger.info("%s: metadata watch not set up yet: %s", self._topic, error)
            return
        with self._lock:
            self._watch_id = watch_id

    def _ensure_watch(self) -> None:
        if self._watch_id is not None or self._rewatching or self._closed or time.monotonic() < self._next_rewatch:
            return
        self._rewatching = True
        threading.Thread(target=self._rewatch, name=f"mafka4-routing-{self._topic}", daemon=True).start()

    def _rewatch(self) -> None:
        try:
            self._start_watch()
            if self._watch_id is not None:
                self.refresh()  # changes made while the watch was down
        except MafkaError as error:
            logger.info("%s: metadata refresh after re-watch failed: %s", self._topic, error)
        finally:
            self._next_rewatch = time.monotonic() + METADATA_REWATCH_BACKOFF_S
            self._rewatching = False

    def _apply(self, events: list[WatchEvent]) -> None:
        """Take partition states from watch events (on the etcd watch thread; no I/O here)."""
        with self._lock:
            partitions = list(self.metadata.partitions)
            for event in events:
                suffix = event.key[len(self._prefix):]
                if event.value is None or not suffix.isdigit() or int(suffix) >= len(partitions):
                    continue  # a deleted topic: requests fail with UnknownTopic on the next refresh
                state = PartitionState.from_json(int(suffix), event.value)
                if state.leader_epoch < partitions[state.partition].leader_epoch:
                    continue
                if state.leader != partitions[state.partition].leader:
                    self._handles.pop(state.partition, None)
                partitions[state.partition] = state
            self.metadata = TopicMetadata(self.metadata.name, self.metadata.config, tuple(partitions))
