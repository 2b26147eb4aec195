"""``Consumer``: reads committed messages of a topic, alone or as a member of a consumer group.

    consumer = Consumer("orders", from_beginning=True)          # every partition, no group
    consumer = Consumer("orders", group="billing")              # a group member
    for message in consumer.poll(timeout_ms=500): ...
    consumer.commit(); consumer.seek(0, 1234); consumer.seek_to_time(1_700_000_000_000)
    consumer.close()                                            # commits and leaves the group

The topic's read mode decides what is read, and ``Consumer`` hands every call to the reader
that reads it:

* a mafka3-mode topic is read from its physical partitions, by a ``PartitionConsumer`` (alone,
  or a member of a group with Kafka's eager rebalance);
* a mafka4-mode topic is read from its virtual partitions, by a ``VirtualConsumer`` (no group)
  or a ``VirtualGroupConsumer`` (a group whose members own VPs, without eager rebalances);
  ``partition`` / offsets then mean VP ids and VP offsets.

The readers share their skeleton (``client.reading``: the poll loop, seeking by time;
``client.positions``: where a partition starts, when auto-commit is due; ``client.group_commits``)
and differ in where they fetch from (``PartitionFetcher``, ``VpFetcher``) and in their group.
In a group, ``poll()`` does the group's work in the caller's thread, so positions never move
while they are committed; positions are committed every ``auto_commit_interval_ms`` by
``poll()`` (not again while they have not moved since a commit the coordinator answered), by
``commit()``, before a partition is released and on ``close()``. Delivery is
at-least-once: messages returned but not yet committed are returned again to the next owner
after a crash. A commit never moves an offset backwards.
"""

from __future__ import annotations

from typing import Any

from mafka4.client.cluster_access import cluster_access
from mafka4.client.cluster_metadata import topic_metadata
from mafka4.client.message import Message
from mafka4.client.partition_consumer import PartitionConsumer
from mafka4.client.virtual_consumer import VirtualConsumer
from mafka4.client.virtual_group_consumer import VirtualGroupConsumer
from mafka4.coordinator.groups.partition_protocol import validate_group_name
from mafka4.errors import CommitFailed
from mafka4.limits import ConsumerConfig, OffsetReset, ReadMode
from mafka4.names import validate_topic_name


class Consumer:
    def __init__(self, topic: str, group: str | None = None, connection: object = None,
                 from_beginning: bool = False, **settings: Any):
        """``connection``: which cluster, as ``client.cluster_access`` reads it (None: the environment's or the
        local one). ``settings`` are ``ConsumerConfig`` fields (fetch_bytes_max, auto_commit_interval_ms, ...)."""
        self.topic = validate_topic_name(topic)
        if group is not None and from_beginning:
            settings = {**settings, "auto_offset_reset": OffsetReset.EARLIEST}
        self.config = ConsumerConfig(**settings)
        self.group = None if group is None else validate_group_name(group)
        access = cluster_access(connection)
        metadata = topic_metadata(access, topic)
        self._reader: PartitionConsumer | VirtualConsumer | VirtualGroupConsumer
        if metadata.config.read_mode is not ReadMode.MAFKA4:
            self._reader = PartitionConsumer(topic, self.group, access, self.config, from_beginning)
        elif self.group is None:
            self._reader = VirtualConsumer(topic, access, from_beginning, **settings)
        else:
            self._reader = VirtualGroupConsumer(metadata, self.group, access, self.config)

    @property
    def member_id(self) -> str | None:
        return self._reader.member_id

    def assignment(self) -> list[int]:
        return self._reader.assignment()

    def position(self, partition: int) -> int:
        return self._reader.position(partition)

    def seek(self, partition: int, offset: int) -> None:
        self._reader.seek(partition, offset)

    def seek_to_time(self, timestamp_ms: int) -> None:
        """Move every assigned partition to its first message at or after ``timestamp_ms`` (or its end)."""
        self._reader.seek_to_time(timestamp_ms)

    def poll(self, timeout_ms: int = 1000) -> list[Message]:
        """Messages that arrived, up to ``poll_messages_max``; waits at most ``timeout_ms`` for some."""
        return self._reader.poll(timeout_ms)

    def commit(self) -> dict[int, int]:
        """Commit the positions of every owned partition now; returns the offsets written.

        Raises ``CommitFailed`` if a rebalance took a partition away first (its new owner starts
        from the last committed offset). Positions behind the committed offset are not written.
        """
        if self.group is None:
            raise CommitFailed(f"consumer of {self.topic!r} has no group: create it with group=NAME to commit offsets")
        assert not isinstance(self._reader, VirtualConsumer), "a VirtualConsumer is read without a group"
        return self._reader.commit()

    def close(self) -> None:
        """Leave the group (committing and releasing every owned partition) and stop fetching."""
        self._reader.close()

    def __enter__(self) -> "Consumer":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
