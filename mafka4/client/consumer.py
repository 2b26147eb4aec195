"""``Consumer``: reads committed messages of a topic, alone or as a member of a consumer group.

    consumer = Consumer("orders", from_beginning=True)          # every partition, no group
    consumer = Consumer("orders", group="billing")              # a group member
    consumer = Consumer("orders", group="billing", lane="swimlane-17")   # reads that lane only
    for message in consumer.poll(timeout_ms=500): ...
    consumer.commit(); consumer.seek(0, 1234); consumer.seek_to_time(1_700_000_000_000)
    consumer.nack(message)                                      # deliver it again later (a group's)
    consumer.run(handle)                                        # handle each message; an exception nacks it
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

Retries (``client.retrying``, issue 41): a group member may ``nack(message)`` a message it failed
to handle, or ``run(handler)``, where a handler's exception is a nack. The group's
``retry_policy`` (``client.retry_policy``: back-off steps, ``deliveries_max``, the unordered or
ordered mode) decides when it comes again (``Message.delivery_count`` counts) and when it goes to
``<topic>.<group>.dlq`` instead. In the unordered mode retries come from the group's retry topic
``<topic>.<group>.retry`` (their ``topic``), which a member reads once it retries (given a
``retry_policy``, or at its first nack or ``run``): give every member of a group that retries its
policy. In the ordered mode a nack holds its partition (VP) until the back-off passes.

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

import threading
import time
from typing import Any, Callable, Iterable

from mafka4.client.cluster_access import cluster_access
from mafka4.client.cluster_metadata import topic_metadata
from mafka4.client.message import Message
from mafka4.client.partition_consumer import PartitionConsumer
from mafka4.client.retry_policy import RetryPolicy
from mafka4.client.retrying import MemberRetries
from mafka4.client.virtual_consumer import VirtualConsumer
from mafka4.client.virtual_group_consumer import VirtualGroupConsumer
from mafka4.coordinator.groups.partition_protocol import validate_group_name
from mafka4.errors import CommitFailed, InvalidConfig, PartitionNotAssigned, WrongReadMode
from mafka4.limits import RETRY_READERS_POLL_SLICE_MS, ConsumerConfig, OffsetReset, ReadMode
from mafka4.names import lane_topic_name, validate_reader_lanes, validate_topic_name


class Consumer:
    def __init__(self, topic: str, group: str | None = None, connection: object = None,
                 from_beginning: bool = False, lane: str | None = None, lanes: Iterable[str] | None = None,
                 retry_policy: RetryPolicy | dict | None = None, **settings: Any):
        """``connection``: which cluster, as ``client.cluster_access`` reads it (None: the environment's or the
        local one). ``lane`` / ``lanes``: read only that lane / those lanes ("" the trunk; see the module
        docstring). ``retry_policy``: the group's ``RetryPolicy`` (or its JSON) for ``nack`` and ``run``; a
        member given one reads the group's retries from the start. ``settings`` are ``ConsumerConfig``
        fields (fetch_bytes_max, auto_commit_interval_ms, ...)."""
        self.topic = validate_topic_name(topic)
        if lane is not None and lanes is not None:
            raise InvalidConfig(f"lane={lane!r} and lanes={lanes!r}: give one of them")
        named = None if lane is None and lanes is None else validate_reader_lanes([lane] if lane is not None else lanes)
        if group is not None and from_beginning:
            settings = {**settings, "auto_offset_reset": OffsetReset.EARLIEST}
        self.config = ConsumerConfig(**settings)
        self.group = None if group is None else validate_group_name(group)
        access = cluster_access(connection)
        self._access, self._connection = access, connection
        self._retry_policy = (retry_policy if retry_policy is None or isinstance(retry_policy, RetryPolicy)
                              else RetryPolicy.from_json(retry_policy))
        self._retries: MemberRetries | None = None
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
        if self._retry_policy is not None:
            self._member_retries()

    @property
    def member_id(self) -> str | None:
        return self._reader.member_id

    def assignment(self) -> list[int]:
        return self._reader.assignment()

    def position(self, partition: int) -> int:
        return self._reader.position(partition)

    def seek(self, partition: int, offset: int) -> None:
        self._reader.seek(partition, offset)

    def end_offsets(self) -> dict[int, int]:
        """The high watermark of every partition this consumer reads, asked now (Kafka's ``endOffsets``):
        a reader whose positions reach them has read what was committed when it asked. Mafka3 mode
        (physical partitions) only: ``WrongReadMode`` for a mafka4-mode topic."""
        if not isinstance(self._reader, PartitionConsumer):
            raise WrongReadMode(f"end_offsets of {self.topic!r}: its consumers read virtual partitions, whose ends "
                                f"'mafka4 group describe' shows as lag; end_offsets reads physical partitions "
                                f"(read_mode='mafka3')")
        return self._reader.end_offsets()

    def seek_to_time(self, timestamp_ms: int) -> None:
        """Move every assigned partition to its first message at or after ``timestamp_ms`` (or its end)."""
        self._reader.seek_to_time(timestamp_ms)

    def poll(self, timeout_ms: int = 1000) -> list[Message]:
        """Messages that arrived, up to ``poll_messages_max`` (and as many of the group's retries);
        waits at most ``timeout_ms`` for some."""
        retries = self._retries
        if retries is None:
            return self._reader.poll(timeout_ms)
        retries.settle()
        retries.release_holds(self._reader)
        retry_reader = retries.open_retry_reader()
        if retry_reader is None:
            return retries.counted(self._reader.poll(retries.wait_ms(timeout_ms)))
        # Both the topic and the retry topic: neither poll may wait while the other has messages.
        deadline_s = time.monotonic() + timeout_ms / 1000
        while True:
            remaining_ms = max(0, int((deadline_s - time.monotonic()) * 1000))
            messages = self._reader.poll(min(remaining_ms, RETRY_READERS_POLL_SLICE_MS))
            messages += retry_reader.poll(0)
            if messages or remaining_ms == 0:
                return messages

    def nack(self, message: Message, retry_after_ms: int | None = None, error: str = "") -> None:
        """This member failed to handle ``message`` (one its last polls returned): deliver it again
        after the group's back-off (or ``retry_after_ms``), or, on its ``deliveries_max``-th delivery,
        send it to the group's dead-letter topic with ``error`` (``client.retrying``). Needs a group;
        ``PartitionNotAssigned`` if this member no longer owns the message's partition."""
        retries = self._member_retries()
        if message.topic == self.topic:
            reader = self._reader
        elif message.topic == retries.retry_topic and retries.retry_reader is not None:
            reader = retries.retry_reader
        else:
            raise PartitionNotAssigned(f"nack of a message of {message.topic!r}: this consumer reads {self.topic!r} "
                                       f"and the retries of group {self.group!r}")
        retries.nack(message, reader, retry_after_ms, error)

    def run(self, handler: Callable[[Message], object], stop: threading.Event | None = None,
            max_messages: int | None = None, poll_timeout_ms: int = 500) -> int:
        """Poll and call ``handler`` with each message until ``stop`` is set (or ``max_messages`` were
        handled); a handler that raises (an ``Exception``) nacks its message with the error's text.
        Returns how many messages were handled. Needs a group."""
        retries = self._member_retries()
        handled = 0
        while (stop is None or not stop.is_set()) and (max_messages is None or handled < max_messages):
            for message in self.poll(poll_timeout_ms):
                if retries.held(message):
                    continue  # after an ordered retry of its partition: read again after it
                try:
                    handler(message)
                except Exception as error:
                    self.nack(message, error=f"{type(error).__name__}: {error}")
                handled += 1
        return handled

    def _member_retries(self) -> MemberRetries:
        if self.group is None:
            raise InvalidConfig(f"consumer of {self.topic!r} has no group: retries are a group's (create it with "
                                f"group=NAME to nack or run a handler)")
        if self._retries is None:
            self._retries = MemberRetries(self.topic, self.group, self._retry_policy or RetryPolicy(), self._access,
                                          self._connection, self.config)
            self._retries.open_retry_reader(force=True)
        return self._retries

    def commit(self) -> dict[int, int]:
        """Commit the positions of every owned partition now; returns the offsets written.

        Raises ``CommitFailed`` if a rebalance took a partition away first (its new owner starts
        from the last committed offset). Positions behind the committed offset are not written.
        """
        if self.group is None:
            raise CommitFailed(f"consumer of {self.topic!r} has no group: create it with group=NAME to commit offsets")
        assert not isinstance(self._reader, VirtualConsumer), "a VirtualConsumer is read without a group"
        if self._retries is not None:
            self._retries.settle()
            if self._retries.retry_reader is not None:
                self._retries.retry_reader.commit()
        return self._reader.commit()

    def close(self) -> None:
        """Leave the group (committing and releasing every owned partition) and stop fetching."""
        try:
            if self._retries is not None:
                self._retries.close()
        finally:
            self._reader.close()

    def __enter__(self) -> "Consumer":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
