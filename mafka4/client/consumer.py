"""``Consumer``: reads committed messages of a topic, alone or as a member of a consumer group.

    consumer = Consumer("orders", from_beginning=True)          # every partition, no group
    consumer = Consumer("orders", group="billing")              # a group member
    consumer = Consumer("orders", group="billing", lane="swimlane-17")   # reads that lane only
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

Lanes (mafka4 mode; ``virtual.layout``): a group member reads the lane it names (``lane``), the
lanes it names (``lanes``, "" the trunk), or, naming none, the trunk and every lane whose
fallback is "trunk" and that has no member of its own in the group
(``coordinator.groups.vp_ownership``); a reader without a group reads every lane unless told.
A mafka3-mode topic keeps a lane as a topic of its own, ``<topic>.<lane>``: read that topic.
A lane has a priority (0..9, higher first; the trunk's is 0). A reader of lanes of several
priorities orders them by ``ConsumerConfig.lane_order`` (``client.lane_shares``): "strict" reads
a lane only while no lane of higher priority has a backlog; "weighted" gives every lane a share
of each poll by priority + 1, one message at least, so none starves. Order then means per key
within a lane, never across lanes; nothing is skipped (what a poll leaves is fetched again).

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

from typing import Any, Iterable

from mafka4.client.cluster_access import cluster_access
from mafka4.client.cluster_metadata import topic_metadata
from mafka4.client.message import Message
from mafka4.client.partition_consumer import PartitionConsumer
from mafka4.client.virtual_consumer import VirtualConsumer
from mafka4.client.virtual_group_consumer import VirtualGroupConsumer
from mafka4.coordinator.groups.partition_protocol import validate_group_name
from mafka4.errors import CommitFailed, InvalidConfig, WrongReadMode
from mafka4.limits import ConsumerConfig, OffsetReset, ReadMode
from mafka4.names import lane_topic_name, validate_reader_lanes, validate_topic_name


class Consumer:
    def __init__(self, topic: str, group: str | None = None, connection: object = None,
                 from_beginning: bool = False, lane: str | None = None, lanes: Iterable[str] | None = None,
                 **settings: Any):
        """``connection``: which cluster, as ``client.cluster_access`` reads it (None: the environment's or the
        local one). ``lane`` / ``lanes``: read only that lane / those lanes ("" the trunk; see the module
        docstring). ``settings`` are ``ConsumerConfig`` fields (fetch_bytes_max, auto_commit_interval_ms, ...)."""
        self.topic = validate_topic_name(topic)
        if lane is not None and lanes is not None:
            raise InvalidConfig(f"lane={lane!r} and lanes={lanes!r}: give one of them")
        named = None if lane is None and lanes is None else validate_reader_lanes([lane] if lane is not None else lanes)
        if group is not None and from_beginning:
            settings = {**settings, "auto_offset_reset": OffsetReset.EARLIEST}
        self.config = ConsumerConfig(**settings)
        self.group = None if group is None else validate_group_name(group)
        access = cluster_access(connection)
        metadata = topic_metadata(access, topic)
        self._reader: PartitionConsumer | VirtualConsumer | VirtualGroupConsumer
        if metadata.config.read_mode is not ReadMode.MAFKA4:
            if named:
                raise WrongReadMode(
                    f"topic {topic!r} is in read_mode='mafka3', where a lane is a topic of its own: read lane "
                    f"{named[-1]!r} as Consumer({lane_topic_name(topic, named[-1])!r}) without a lane")
            self._reader = PartitionConsumer(topic, self.group, access, self.config, from_beginning)
        elif self.group is None:
            self._reader = VirtualConsumer(topic, access, from_beginning, lanes=None if named is None else named or ("",),
                                           **settings)
        else:
            self._reader = VirtualGroupConsumer(metadata, self.group, access, self.config, named or ())

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
