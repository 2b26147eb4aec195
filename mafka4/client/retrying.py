"""A group member's nacks (issue 41): retries with back-off, and dead letters once a message is exhausted.

``Consumer.nack(message)`` hands the message here with the group's ``RetryPolicy``
(``client.retry_policy``). Delivery ``n`` of a message (``Message.delivery_count``; 1 the original)
that is nacked:

* is *dead-lettered* when ``policy.exhausted(n)``: a copy goes to ``<topic>.<group>.dlq``
  (``mafka4.dead_letters``, created on first use) with where it came from, ``n``, the error and
  the time; the member then reads on past it, as past a handled message;
* else, in the **unordered** mode, is *retried*: a copy (``mafka4.retries``) goes to the topic's
  delay topic, due after ``policy.delay_ms_after(n)``; the delay scheduler releases it to the
  group's retry topic ``<topic>.<group>.retry`` as delivery ``n + 1``, which the group's members
  read beside the topic (``retry_reader``, as members of group ``<group>.mafka4-retry``: a group
  reads one topic). Later messages flow on meanwhile;
* else, in the **ordered** mode, *holds its partition*: the member seeks back to it and fetches
  nothing of that partition (VP in mafka4 mode) until the back-off passes, then reads it again as
  delivery ``n + 1`` (counted here, in memory: a member that takes the partition over counts from
  1 again, so a message is still handled at most ``deliveries_max`` times per owner). Other
  partitions flow on; per-key order holds.

Nothing nacked is lost: a copy's send is awaited (``settle``) before the member's next poll,
commit or close, i.e. before any commit can pass the original; a copy whose send failed makes the
member seek back to the original, which is then delivered again (at least once).
"""

from __future__ import annotations

import logging
import time
from typing import Protocol

from mafka4.client.cluster_access import ClusterAccess
from mafka4.client.futures import RecordFuture
from mafka4.client.message import Message
from mafka4.client.partition_consumer import PartitionConsumer
from mafka4.client.producer import Producer
from mafka4.client.retry_policy import RetryMode, RetryPolicy
from mafka4.client.topic_admin import open_companion
from mafka4.dead_letters import dead_letter_headers, dlq_topic_name
from mafka4.delays import DELAY_LANE, MessageId, delay_topic_name
from mafka4.errors import MafkaError, PartitionNotAssigned, UnknownTopic
from mafka4.limits import RETRY_TOPIC_CHECK_INTERVAL_S, ConsumerConfig, OffsetReset, replace_config
from mafka4.retries import (DELIVERY_COUNT_HEADER, dead_letter_lane, delivery_count_of, origin_of, retry_headers,
                            retry_lane, retry_topic_name)

log = logging.getLogger(__name__)


class Reader(Protocol):
    def assignment(self) -> list[int]: ...
    def seek(self, partition: int, offset: int) -> None: ...
    def hold(self, partition: int, held: bool) -> None: ...


# The group the members of group G read G's retry topic in: a group reads one topic (and a
# mafka4-mode group never reads physical partitions), so the retry topic's readers have their own.
RETRY_READERS_GROUP_SUFFIX = ".mafka4-retry"


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class MemberRetries:
    """The retries and dead letters of one group member of ``topic`` (the module docstring)."""

    def __init__(self, topic: str, group: str, policy: RetryPolicy, access: ClusterAccess, connection: object,
                 config: ConsumerConfig):
        self.topic, self.group, self.policy = topic, group, policy
        self.retry_topic = retry_topic_name(topic, group)
        self._access, self._connection, self._config = access, connection, config
        self._producers: dict[str, Producer] = {}  # delay or dead-letter topic -> its producer
        self._sent: list[tuple[RecordFuture, Reader, Message]] = []  # copies not yet settled
        self.retry_reader: PartitionConsumer | None = None
        self._next_check_s = 0.0
        self._holds: dict[int, tuple[int, int]] = {}  # ordered: partition -> (offset held at, until ms)
        self._counts: dict[tuple[int, int], int] = {}  # ordered: (partition, offset) -> its next delivery

    # --- reading ---------------------------------------------------------------------------

    def open_retry_reader(self, force: bool = False) -> PartitionConsumer | None:
        """The reader of the group's retry topic, opened once the topic exists (looked for every
        ``RETRY_TOPIC_CHECK_INTERVAL_S``, or now if ``force``); None before, and in the ordered mode."""
        if self.retry_reader is not None or self.policy.mode is RetryMode.ORDERED:
            return self.retry_reader
        now_s = time.monotonic()
        if not force and now_s < self._next_check_s:
            return None
        self._next_check_s = now_s + RETRY_TOPIC_CHECK_INTERVAL_S
        try:
            config = replace_config(self._config, auto_offset_reset=OffsetReset.EARLIEST)
            self.retry_reader = PartitionConsumer(self.retry_topic, self.group + RETRY_READERS_GROUP_SUFFIX,
                                                  self._access, config, True)
        except UnknownTopic:
            return None  # no member nacked yet
        return self.retry_reader

    def wait_ms(self, timeout_ms: int) -> int:
        """How long a poll may wait: not past the end of a hold."""
        if not self._holds:
            return timeout_ms
        until_ms = min(until for _, until in self._holds.values())
        return max(0, min(timeout_ms, until_ms - _now_ms()))

    def release_holds(self, reader: Reader) -> None:
        """End the holds whose back-off passed (and those of partitions no longer owned)."""
        if not self._holds:
            return
        now_ms, owned = _now_ms(), set(reader.assignment())
        for partition, (_, until_ms) in list(self._holds.items()):
            if until_ms <= now_ms or partition not in owned:
                del self._holds[partition]
                reader.hold(partition, False)

    def held(self, message: Message) -> bool:
        """True if ``message`` is of a partition an ordered retry holds: not to be handled now (it
        is read again after the retried message)."""
        return message.topic == self.topic and message.partition in self._holds

    def counted(self, messages: list[Message]) -> list[Message]:
        """``messages`` with the delivery number of each one an ordered retry reads again."""
        if not self._counts:
            return messages
        return [message if (count := self._counts.get((message.partition, message.offset))) is None or
                message.topic != self.topic else
                message._replace(headers=(*message.headers, (DELIVERY_COUNT_HEADER, b"%d" % count)))
                for message in messages]

    # --- nacks -------------------------------------------------------------------------------

    def nack(self, message: Message, reader: Reader, retry_after_ms: int | None, error: str) -> None:
        """Retry, hold or dead-letter ``message``, which ``reader`` returned (the module docstring)."""
        if message.partition not in reader.assignment():
            raise PartitionNotAssigned(
                f"nack of {message.topic}-{message.partition}@{message.offset}: this member of group {self.group!r} "
                f"does not own partition {message.partition} (any more): its new owner reads the message again")
        count = self._counts.get((message.partition, message.offset)) or delivery_count_of(message.headers)
        origin = origin_of(message.headers, message.partition, message.offset)
        if self.policy.exhausted(count):
            self._counts.pop((message.partition, message.offset), None)
            self._dead_letter(message, reader, count, origin, error)
            return
        delay_ms = self.policy.delay_ms_after(count, retry_after_ms)
        if self.policy.mode is RetryMode.ORDERED:
            self._counts[(message.partition, message.offset)] = count + 1
            reader.seek(message.partition, message.offset)
            reader.hold(message.partition, True)
            self._holds[message.partition] = (message.offset, _now_ms() + delay_ms)
            return
        if self.retry_reader is None:
            open_companion(self.topic, retry_lane(self.group), where=self._connection)
            self.open_retry_reader(force=True)
        headers = retry_headers(message.headers, group=self.group, delivery_count=count + 1, origin=origin,
                                due_ms=_now_ms() + delay_ms)
        delays = delay_topic_name(self.topic)
        if delays not in self._producers:
            open_companion(self.topic, DELAY_LANE, where=self._connection)
        future = self._producer(delays)._send_system(message.value, message.key, None, headers, message.timestamp_ms,
                                                     None, None)
        self._sent.append((future, reader, message))

    def _dead_letter(self, message: Message, reader: Reader, count: int, origin: MessageId, error: str) -> None:
        name = dlq_topic_name(self.topic, self.group)
        if name not in self._producers:
            open_companion(self.topic, dead_letter_lane(self.group), where=self._connection)
        headers = dead_letter_headers(message.headers, group=self.group, topic=self.topic, partition=origin.partition,
                                      offset=origin.offset, delivery_count=count, error=error, now_ms=_now_ms())
        future = self._producer(name)._send_system(message.value, message.key, None, headers, message.timestamp_ms,
                                                   None, None)
        self._sent.append((future, reader, message))

    def _producer(self, topic: str) -> Producer:
        producer = self._producers.get(topic)
        if producer is None:
            producer = self._producers[topic] = Producer(topic, self._connection, acks="all", linger_ms=1)
        return producer

    def settle(self) -> None:
        """Wait for every copy sent; a partition whose copy failed is read again from the original."""
        if not self._sent:
            return
        for producer in list(self._producers.values()):
            producer.flush()
        sent, self._sent = self._sent, []
        rewinds: dict[tuple[int, int], tuple[Reader, int]] = {}
        for future, reader, message in sent:
            try:
                future.result(0)
            except Exception as error:  # the copy is not written: the original must be delivered again
                log.warning("group %s: the copy of nacked %s-%d@%d was not written (%s); it is read again",
                            self.group, message.topic, message.partition, message.offset, error)
                key = (id(reader), message.partition)
                if key not in rewinds or message.offset < rewinds[key][1]:
                    rewinds[key] = (reader, message.offset)
        for (_, partition), (reader, offset) in rewinds.items():
            if partition in reader.assignment():
                reader.seek(partition, offset)

    def close(self) -> None:
        try:
            self.settle()
        finally:
            for producer in self._producers.values():
                try:
                    producer.close()
                except MafkaError as error:
                    log.warning("group %s: closing a producer of retries failed: %s", self.group, error)
            if self.retry_reader is not None:
                self.retry_reader.close()
