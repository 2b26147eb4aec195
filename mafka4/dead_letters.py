"""Dead letters (issue 41): the topic a group's exhausted messages go to, the headers that say where
each came from and why it died, and the headers of its replay. Pure: values in, headers out.

The topic. A message a group nacked on its ``RetryPolicy.deliveries_max``-th delivery goes to
``<topic>.<group>.dlq`` (``dlq_topic_name``), a normal topic created on first use, and the group
commits past the original. Topic and group names share their characters, so only the length can
fail (a topic name has at most ``TOPIC_NAME_CHARS_MAX`` characters): the error names the group
and how long it may be. Two pairs can name one topic (topic "a.b" with group "c", topic "a" with
group "b.c"), so every dead letter also says its group and topic in headers: ``dlq list GROUP
TOPIC`` shows only the records whose headers name that pair.

A dead letter is the original record (key, value, timestamp) with these headers, in this order:

* ``mafka4.dlq.group``, ``mafka4.dlq.topic``: the group that gave up and the original's topic;
* ``mafka4.dlq.partition``, ``mafka4.dlq.offset``: where the original is (physical partition and
  offset, ASCII decimal; the source a VP record carries, or the partition read in Mafka3 mode);
* ``mafka4.dlq.delivery_count``: deliveries to the group, the last one included (ASCII decimal);
* ``mafka4.dlq.error``: the last error's text, UTF-8, cut to ``DEAD_LETTER_ERROR_BYTES_MAX`` bytes
  at a character boundary (then ending in "…");
* ``mafka4.dlq.dead_at_ms``: when it was dead-lettered, epoch ms (ASCII decimal);
* ``mafka4.dlq.lane``: the original's lane, only if it had one (its ``LANE_HEADER``). The dead
  letter itself is in the dead-letter topic's trunk: carrying ``mafka4.lane`` would open a lane of
  that name there;
* then the original's headers, in their order, without any ``mafka4.`` header (the lane, moved
  above; a source or replay key a reader may have seen).

``mafka4.`` headers are mafka4's own: the Producer and the Kafka listener refuse them from users
(``RESERVED_HEADER_PREFIX``), so no user can forge a dead letter, and whoever writes one needs
the system's own way to send these headers.

Replay. ``replay_headers`` gives the original's headers back with one more, ``mafka4.replay``:
``<topic>/<partition>/<offset>`` of the original (``replay_key``; '/' is in no topic name, so the
key reads back unambiguously), the same however often the dead letter is replayed and whichever
group's dead letter of that original is replayed. The lane goes back as the send's lane
(``DeadLetter.lane``), not as a header: only a send in a lane routes the record into its lane.
What recognises a second replay with it (the report of issue 41 weighs them): the replayer,
which skips dead letters it already replayed, and a consumer, which drops a message whose
``replay_key_of`` it has handled. The producer's idempotence (``log.producer_state``) only
spans one producer's retries of its in-flight batches, not two runs of ``dlq replay``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

from mafka4.batch_payload import RESERVED_HEADER_PREFIX, lane_of_headers
from mafka4.errors import InvalidDeadLetter, InvalidGroupName
from mafka4.limits import DEAD_LETTER_ERROR_BYTES_MAX, TOPIC_NAME_CHARS_MAX
from mafka4.names import name_problem, validate_topic_name

DLQ_SUFFIX = ".dlq"
GROUP_HEADER = "mafka4.dlq.group"
TOPIC_HEADER = "mafka4.dlq.topic"
PARTITION_HEADER = "mafka4.dlq.partition"
OFFSET_HEADER = "mafka4.dlq.offset"
DELIVERY_COUNT_HEADER = "mafka4.dlq.delivery_count"
ERROR_HEADER = "mafka4.dlq.error"
DEAD_AT_HEADER = "mafka4.dlq.dead_at_ms"
ORIGINAL_LANE_HEADER = "mafka4.dlq.lane"
REPLAY_KEY_HEADER = "mafka4.replay"
_ELLIPSIS = "…".encode()
_TEXT_HEADERS = (GROUP_HEADER, TOPIC_HEADER)
_NUMBER_HEADERS = (PARTITION_HEADER, OFFSET_HEADER, DELIVERY_COUNT_HEADER, DEAD_AT_HEADER)
_REQUIRED = (*_TEXT_HEADERS, *_NUMBER_HEADERS, ERROR_HEADER)
_KNOWN = frozenset((*_REQUIRED, ORIGINAL_LANE_HEADER))
assert all(name.startswith(RESERVED_HEADER_PREFIX) for name in (*_KNOWN, REPLAY_KEY_HEADER))

Headers = Sequence[tuple[str, bytes]]


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """What a dead letter's headers say (``parse_dead_letter``), for ``dlq list``, ``show`` and ``replay``."""

    group: str
    topic: str
    partition: int
    offset: int
    delivery_count: int
    error: str
    dead_at_ms: int
    lane: str  # "" the trunk
    headers: tuple[tuple[str, bytes], ...]  # the original's own, in order

    @property
    def replay_key(self) -> bytes:
        return replay_key(self.topic, self.partition, self.offset)


def dlq_topic_name(topic: str, group: str) -> str:
    """``<topic>.<group>.dlq``, the dead-letter topic of ``group``'s messages of ``topic``.

    ``InvalidTopicName`` for a bad topic name; ``InvalidGroupName`` for a group name that is bad
    or too long for that topic, saying how long it may be."""
    return group_topic_name(topic, group, DLQ_SUFFIX, "dead-letter")


def group_topic_name(topic: str, group: str, suffix: str, what: str) -> str:
    """``<topic>.<group><suffix>``, a topic of ``group``'s own beside ``topic`` (its ``what`` topic:
    "dead-letter", "retry"); errors as ``dlq_topic_name``'s."""
    validate_topic_name(topic)
    problem = name_problem(group, "group name", TOPIC_NAME_CHARS_MAX)
    if problem is not None:
        raise InvalidGroupName(problem)
    name = f"{topic}.{group}{suffix}"
    if len(name) > TOPIC_NAME_CHARS_MAX:
        room = TOPIC_NAME_CHARS_MAX - len(topic) - 1 - len(suffix)
        fix = (f"use a group name of at most {room} characters" if room >= 1 else
               f"no group name fits: a topic whose groups need a {what} topic needs a name of at most "
               f"{TOPIC_NAME_CHARS_MAX - 2 - len(suffix)} characters")
        raise InvalidGroupName(
            f"group {group!r} cannot have a {what} topic of topic {topic!r}: '<topic>.<group>{suffix}' would "
            f"have {len(name)} characters, a topic name at most {TOPIC_NAME_CHARS_MAX}; {fix}")
    return validate_topic_name(name)


def replay_key(topic: str, partition: int, offset: int) -> bytes:
    """The idempotency key of a replay of the original at ``topic``'s ``partition@offset``."""
    return f"{topic}/{partition}/{offset}".encode()


def replay_key_of(headers: Headers | None) -> bytes | None:
    """The replay key a message carries (it is a replayed dead letter), else None."""
    return next((value for name, value in headers or () if name == REPLAY_KEY_HEADER), None)


def error_text(error: str) -> bytes:
    """``error`` as UTF-8 of at most ``DEAD_LETTER_ERROR_BYTES_MAX`` bytes, cut at a character
    boundary and ending in "…" when cut (a character UTF-8 cannot hold reads as '?')."""
    data = error.encode("utf-8", "replace")
    if len(data) <= DEAD_LETTER_ERROR_BYTES_MAX:
        return data
    kept = data[:DEAD_LETTER_ERROR_BYTES_MAX - len(_ELLIPSIS)].decode("utf-8", "ignore")  # drops a cut character
    return kept.encode() + _ELLIPSIS


def dead_letter_headers(original_headers: Headers | None, *, group: str, topic: str, partition: int, offset: int,
                        delivery_count: int, error: str, now_ms: int) -> list[tuple[str, bytes]]:
    """The headers of the dead letter of the original record at ``topic``'s ``partition@offset``
    with ``original_headers``, which ``group`` gave up on after ``delivery_count`` deliveries, the
    last failing with ``error``, at ``now_ms`` (see the module doc)."""
    assert partition >= 0 and offset >= 0, f"p{partition}@{offset} is no record's place"
    assert delivery_count >= 1 and now_ms >= 0, (delivery_count, now_ms)
    assert isinstance(error, str), f"error {error!r} is not text"
    lane = lane_of_headers(original_headers)
    headers = [(GROUP_HEADER, group.encode()), (TOPIC_HEADER, topic.encode()),
               (PARTITION_HEADER, b"%d" % partition), (OFFSET_HEADER, b"%d" % offset),
               (DELIVERY_COUNT_HEADER, b"%d" % delivery_count), (ERROR_HEADER, error_text(error)),
               (DEAD_AT_HEADER, b"%d" % now_ms)]
    if lane:
        headers.append((ORIGINAL_LANE_HEADER, lane.encode()))
    headers += _own_headers(original_headers)
    return headers


def parse_dead_letter(headers: Headers | None) -> DeadLetter:
    """What a dead letter's headers say; ``InvalidDeadLetter`` if they are not a dead letter's."""
    found: dict[str, bytes] = {}
    for name, value in headers or ():
        if name in _KNOWN:
            if name in found:
                raise InvalidDeadLetter(f"a dead letter carries header {name!r} twice: mafka4 did not write it")
            found[name] = value
    missing = [name for name in _REQUIRED if name not in found]
    if missing:
        raise InvalidDeadLetter(f"the record lacks the dead-letter header(s) {', '.join(missing)}: mafka4 did not "
                                f"dead-letter it (a record produced to the dead-letter topic directly?)")
    texts = {name: _text(name, found[name]) for name in (*_TEXT_HEADERS, ORIGINAL_LANE_HEADER) if name in found}
    numbers = {name: _number(name, found[name]) for name in _NUMBER_HEADERS}
    if numbers[DELIVERY_COUNT_HEADER] < 1:
        raise InvalidDeadLetter(f"header {DELIVERY_COUNT_HEADER}=0: a dead letter was delivered at least once")
    return DeadLetter(group=texts[GROUP_HEADER], topic=texts[TOPIC_HEADER], partition=numbers[PARTITION_HEADER],
                      offset=numbers[OFFSET_HEADER], delivery_count=numbers[DELIVERY_COUNT_HEADER],
                      error=found[ERROR_HEADER].decode("utf-8", "replace"), dead_at_ms=numbers[DEAD_AT_HEADER],
                      lane=texts.get(ORIGINAL_LANE_HEADER, ""), headers=tuple(_own_headers(headers)))


def replay_headers(dead_letter_headers: Headers | None) -> list[tuple[str, bytes]]:
    """The headers a replay sends to the original topic: the original's own and its replay key
    (the lane is the send's, ``parse_dead_letter(...).lane``)."""
    dead = parse_dead_letter(dead_letter_headers)
    return [*dead.headers, (REPLAY_KEY_HEADER, dead.replay_key)]


def _own_headers(headers: Iterable[tuple[str, bytes]] | None) -> list[tuple[str, bytes]]:
    return [(name, value) for name, value in headers or () if not name.startswith(RESERVED_HEADER_PREFIX)]


def _text(name: str, value: bytes) -> str:
    try:
        return value.decode()
    except UnicodeDecodeError:
        raise InvalidDeadLetter(f"header {name}={value[:64]!r} is not UTF-8") from None


def _number(name: str, value: bytes) -> int:
    if not value.isdigit() or len(value) > 19:  # ASCII digits of an int64 at most
        raise InvalidDeadLetter(f"header {name}={value[:64]!r} is not a non-negative decimal number")
    return int(value)
