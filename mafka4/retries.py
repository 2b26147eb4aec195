"""Retries of nacked messages (issue 41): the group's retry topic, the headers a retry carries, and
the reserved lanes that open a topic's companions. Pure: values in, headers out.

A member of group G that nacks a message of topic T in the *unordered* mode
(``client.retry_policy``) sends a copy to T's delay topic (``mafka4.delays``) due after the back-off,
with the headers below. At its due time the delay scheduler releases it, not to T (every group
would see it again) but to G's *retry topic* ``<T>.<G>.retry`` (``retry_topic_name``), which G's
members read beside T. Delivery 1 is the original; a retry carries its delivery number.

A retry's headers, after the original's lane header (kept as a header: the retry topic has no
lanes, and the member reads the lane from it as from the original) and the original's own headers
(those not ``mafka4.``):

* ``mafka4.retry_group``: G, which tells the scheduler where to release it;
* ``mafka4.delivery_count``: the delivery it will be, ASCII decimal (2 for the first retry);
* ``mafka4.origin``: where delivery 1 was, ``PARTITION:OFFSET`` of T as its consumer saw it (a VP's
  in mafka4 mode), so a dead letter names the original wherever its last delivery came from;
* ``mafka4.deliver_at``: its due time (the delay topic's header).

Companions of a topic are created on first use through a lane open of a reserved lane name
(``frontend.topic_intents.open_lane``): ``DELAY_LANE`` for the delay topic, ``mafka4-retry.<G>``
(``retry_lane``) and ``mafka4-dlq.<G>`` (``dead_letter_lane``) for G's retry and dead-letter
topics. The retry and dead-letter topics get one physical partition (``companion_config``): they
carry the failures of one group, and each partition costs its replicas' actors.
"""

from __future__ import annotations

from typing import Sequence

from mafka4.batch_payload import LANE_HEADER, RESERVED_HEADER_PREFIX
from mafka4.dead_letters import dlq_topic_name, group_topic_name
from mafka4.delays import DELIVER_AT_HEADER, MessageId, encode_deliver_at
from mafka4.errors import CorruptRecord, InvalidMessageId
from mafka4.limits import ReadMode, TopicConfig, replace_config

RETRY_SUFFIX = ".retry"
RETRY_GROUP_HEADER = "mafka4.retry_group"
DELIVERY_COUNT_HEADER = "mafka4.delivery_count"
ORIGIN_HEADER = "mafka4.origin"
RETRY_LANE_PREFIX = "mafka4-retry."
DEAD_LETTER_LANE_PREFIX = "mafka4-dlq."
# A delivery count read from a header is at most this: RETRY_DELIVERIES_MAX is far below it, and a
# bound keeps a forged header from making a number of any size.
_DELIVERY_COUNT_DIGITS_MAX = 9

Headers = Sequence[tuple[str, bytes]]


def retry_topic_name(topic: str, group: str) -> str:
    """``<topic>.<group>.retry``: where ``group``'s retries of ``topic``'s messages are released."""
    return group_topic_name(topic, group, RETRY_SUFFIX, "retry")


def retry_lane(group: str) -> str:
    return RETRY_LANE_PREFIX + group


def dead_letter_lane(group: str) -> str:
    return DEAD_LETTER_LANE_PREFIX + group


def companion_of_lane(topic: str, lane: str) -> str | None:
    """The retry or dead-letter topic of ``topic`` a reserved ``lane`` asks for; None for another lane."""
    if lane.startswith(RETRY_LANE_PREFIX):
        return retry_topic_name(topic, lane[len(RETRY_LANE_PREFIX):])
    if lane.startswith(DEAD_LETTER_LANE_PREFIX):
        return dlq_topic_name(topic, lane[len(DEAD_LETTER_LANE_PREFIX):])
    return None


def companion_config(config: TopicConfig, partitions: int) -> TopicConfig:
    """The config of a companion topic of a topic configured ``config``: its replication and
    retention, ``partitions`` physical partitions, read from them (``read_mode='mafka3'``)."""
    return replace_config(config, partitions=partitions, read_mode=ReadMode.MAFKA3, virtual_partitions=None,
                          read_replicas=0).resolved()


def delivery_count_of(headers: Headers | None) -> int:
    """Which delivery a message is: its ``DELIVERY_COUNT_HEADER``, else 1 (the original)."""
    for name, value in headers or ():
        if name == DELIVERY_COUNT_HEADER:
            raw = bytes(value)
            if not raw.isdigit() or len(raw) > _DELIVERY_COUNT_DIGITS_MAX or int(raw) < 2:
                raise CorruptRecord(f"header {DELIVERY_COUNT_HEADER}={raw[:16]!r} is not a delivery number of 2 or "
                                    f"more: the record was not written by mafka4")
            return int(raw)
    return 1


def origin_of(headers: Headers | None, partition: int, offset: int) -> MessageId:
    """Where delivery 1 of a message was: its ``ORIGIN_HEADER``, else ``partition``/``offset`` (it is the original)."""
    for name, value in headers or ():
        if name == ORIGIN_HEADER:
            try:
                return MessageId.parse(bytes(value).decode("ascii"))
            except (UnicodeDecodeError, InvalidMessageId) as error:
                raise CorruptRecord(f"header {ORIGIN_HEADER}={value[:32]!r} is not PARTITION:OFFSET: the record was "
                                    f"not written by mafka4") from error
    return MessageId(partition, offset)


def retry_group_of(headers: Headers | None) -> str | None:
    """The group whose retry topic a scheduled record is released to; None for a delayed message."""
    for name, value in headers or ():
        if name == RETRY_GROUP_HEADER:
            return bytes(value).decode("utf-8", "replace")
    return None


def retry_headers(headers: Headers | None, *, group: str, delivery_count: int, origin: MessageId,
                  due_ms: int) -> list[tuple[str, bytes]]:
    """The headers of the retry that will be delivery ``delivery_count`` of a message with ``headers``
    (the module doc): its lane header first if it had one, its own headers, then the retry's."""
    assert delivery_count >= 2, delivery_count
    kept = [(name, value) for name, value in headers or ()
            if name == LANE_HEADER or not name.startswith(RESERVED_HEADER_PREFIX)]
    return [*kept, (RETRY_GROUP_HEADER, group.encode()), (DELIVERY_COUNT_HEADER, b"%d" % delivery_count),
            (ORIGIN_HEADER, str(origin).encode("ascii")), (DELIVER_AT_HEADER, encode_deliver_at(due_ms))]
