"""Delayed delivery: where a delayed message waits, the headers it carries, and message ids.

A delayed message (``Producer.send(..., delay_ms=...)``) is written, acknowledged and replicated
like any other, but to its topic's *delay topic*, ``<topic>.mafka4-delays`` (``delay_topic_name``),
with the header ``(DELIVER_AT_HEADER, due time in epoch ms as ASCII decimal)``. The delay topic is
created with the topic's own config on the first delayed message (``DELAY_LANE`` asks for it, as
a lane's first message asks for its lane), is read from its physical partitions
(``read_mode='mafka3'``: its one reader is the scheduler) and is deleted with its topic. Only the
cluster's delay scheduler (``mafka4.scheduling``) reads it: it holds each scheduled message until
its due time, then produces a *release copy* to the topic itself (same key, value, timestamp and
headers, the due time header kept so a consumer can tell how late it came, in the lane it was sent
in), and once that is acknowledged appends a *release marker* to the delay topic's same
partition: a record with no key and an empty value whose header ``(RELEASE_OF_HEADER, the
scheduled record's offset)`` names it. A scheduler that starts (after a crash, on another
controller) rebuilds its schedule from the delay topic: scheduled records that no release marker
or cancel marker names are pending. A *cancel marker* (``Admin.cancel_delayed``) names the
cancelled message with ``(CANCEL_OF_HEADER, "P:OFFSET")``.

Delivery is at least once, as for any message: a scheduler that dies between a release copy's
acknowledgement and its marker's releases that message again when it restarts.

A delayed message's id (``MessageId``) is the delay topic partition and offset its producer's
acknowledgement gives, written ``PARTITION:OFFSET`` (``Admin.cancel_delayed`` takes it).

Header values are strict: only ASCII digits, no sign, no spaces, no leading zero, at most an
int64. The scheduler reads them from logs other processes wrote, and a value two readers could
parse differently (" 12", "012", "1_2", Unicode digits) would let them disagree on a due time.

Pure: no I/O, no clock (``now_ms`` is an argument).
"""

from __future__ import annotations

from dataclasses import dataclass

from mafka4.batch_frame import TIMESTAMP_MS_MAX
from mafka4.errors import CorruptRecord, DelayOutOfRange, InvalidMessageId, InvalidRecord
from mafka4.limits import DELAY_MS_MIN, ReadMode, TopicConfig, replace_config
from mafka4.names import validate_topic_name

__all__ = ["CANCEL_OF_HEADER", "DELAY_LANE", "DELAY_MS_MIN", "DELAY_TOPIC_SUFFIX", "DELIVER_AT_HEADER",
           "RELEASE_OF_HEADER", "MessageId", "delay_topic_config", "delay_topic_name", "delayed_topic_of",
           "decode_cancel_of", "decode_deliver_at", "decode_release_of", "due_time_ms", "encode_cancel_of",
           "encode_deliver_at", "encode_release_of"]

# All three are under batch_payload.RESERVED_HEADER_PREFIX: a producer cannot send them as its own
# headers (it asks for a delay with send's delay_ms or deliver_at_ms instead).
DELIVER_AT_HEADER = "mafka4.deliver_at"  # a delayed message's due time: epoch ms, ASCII decimal
RELEASE_OF_HEADER = "mafka4.release_of"  # a release marker's scheduled record: its offset, ASCII decimal
CANCEL_OF_HEADER = "mafka4.cancel_of"  # a cancel marker's message: its MessageId, "P:OFFSET" in ASCII
# The suffix of a delay topic's name, and the reserved lane name a producer opens it with (LANE_OPEN).
DELAY_TOPIC_SUFFIX = ".mafka4-delays"
DELAY_LANE = "mafka4-delays"


def delay_topic_name(topic: str) -> str:
    """``<topic>.mafka4-delays``: where ``topic``'s delayed messages wait (the module docstring)."""
    return validate_topic_name(topic + DELAY_TOPIC_SUFFIX)


def delay_topic_config(config: TopicConfig) -> TopicConfig:
    """The config of the delay topic of a topic configured ``config``: the same partitions,
    replication and retention, read from its physical partitions (its one reader is the scheduler)."""
    return replace_config(config, read_mode=ReadMode.MAFKA3, virtual_partitions=None, read_replicas=0).resolved()


def delayed_topic_of(name: str) -> str | None:
    """The topic whose delay topic ``name`` is; None if ``name`` is no delay topic."""
    if name.endswith(DELAY_TOPIC_SUFFIX) and len(name) > len(DELAY_TOPIC_SUFFIX):
        return name[:-len(DELAY_TOPIC_SUFFIX)]
    return None


def due_time_ms(*, delay_ms: int | None, deliver_at_ms: int | None, now_ms: int, delay_ms_max: int) -> int | None:
    """When a message sent at ``now_ms`` with ``delay_ms`` or ``deliver_at_ms`` is due (epoch ms);
    None when neither is given (the message is not delayed).

    ``InvalidRecord`` when both are given or one is not an integer; ``DelayOutOfRange`` when the
    message would be due less than ``DELAY_MS_MIN`` or more than ``delay_ms_max`` (the topic's)
    after ``now_ms``.
    """
    if delay_ms is not None and deliver_at_ms is not None:
        raise InvalidRecord(
            f"delay_ms={delay_ms!r} and deliver_at_ms={deliver_at_ms!r} were both given: a delayed message "
            f"takes one of them (delay_ms: after how long; deliver_at_ms: at what epoch time)")
    if delay_ms is None and deliver_at_ms is None:
        return None
    name, value = ("delay_ms", delay_ms) if delay_ms is not None else ("deliver_at_ms", deliver_at_ms)
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidRecord(f"{name}={value!r} must be an integer number of milliseconds")
    delay = value if name == "delay_ms" else value - now_ms
    if not DELAY_MS_MIN <= delay <= delay_ms_max:
        raise DelayOutOfRange(_out_of_range(name, value, delay, delay_ms_max))
    return now_ms + delay


def _out_of_range(name: str, value: int, delay: int, delay_ms_max: int) -> str:
    given = (f"{name}={value}" if name == "delay_ms" else
             f"{name}={value} ({delay} ms from now)" if delay >= 0 else f"{name}={value} ({-delay} ms ago)")
    allowed = f"a delayed message is due {DELAY_MS_MIN} to {delay_ms_max} ms after it is sent"
    if delay > delay_ms_max:
        fix = ("send it with a shorter delay, or to a topic created with a larger delay_ms_max (below its "
               "retention_ms, so that the scheduled message outlives its delay)")
    elif delay >= 0:
        fix = f"send it without {name} to deliver it at once, or with a delay of at least {DELAY_MS_MIN} ms"
    else:
        fix = f"that time is past: send it without {name} to deliver it at once"
    return f"{given} is out of range: {allowed} (the topic's delay_ms_max={delay_ms_max}); {fix}"


def encode_deliver_at(due_ms: int) -> bytes:
    """The value of a message's ``DELIVER_AT_HEADER``."""
    return _encode(DELIVER_AT_HEADER, due_ms)


def decode_deliver_at(value: bytes) -> int:
    """A ``DELIVER_AT_HEADER`` value's due time; ``CorruptRecord`` unless it is what
    ``encode_deliver_at`` writes."""
    return _decode(DELIVER_AT_HEADER, value)


def encode_release_of(offset: int) -> bytes:
    """The value of a release marker's ``RELEASE_OF_HEADER``: the offset of the record it releases."""
    return _encode(RELEASE_OF_HEADER, offset)


def decode_release_of(value: bytes) -> int:
    """A ``RELEASE_OF_HEADER`` value's offset; ``CorruptRecord`` unless it is what
    ``encode_release_of`` writes."""
    return _decode(RELEASE_OF_HEADER, value)


def encode_cancel_of(message_id: "MessageId") -> bytes:
    """The value of a cancel marker's ``CANCEL_OF_HEADER``: the cancelled message's id."""
    return str(message_id).encode("ascii")


def decode_cancel_of(value: bytes) -> "MessageId":
    """A ``CANCEL_OF_HEADER`` value's message id; ``CorruptRecord`` unless it is what
    ``encode_cancel_of`` writes."""
    try:
        return MessageId.parse(bytes(value).decode("ascii"))
    except (InvalidMessageId, UnicodeDecodeError, TypeError) as error:
        raise CorruptRecord(f"header {CANCEL_OF_HEADER!r} holds {value!r:.80}: not a message id P:OFFSET; the record "
                            f"was not written by mafka4") from error


def _encode(header: str, number: int) -> bytes:
    assert not isinstance(number, bool) and isinstance(number, int), (header, number)
    assert 0 <= number <= TIMESTAMP_MS_MAX, (header, number)
    return str(number).encode("ascii")


def _decode(header: str, value: bytes) -> int:
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise CorruptRecord(f"header {header!r} holds {value!r}, not bytes")
    raw = bytes(value)
    digits = len(str(TIMESTAMP_MS_MAX))
    if (not raw or len(raw) > digits or not raw.isdigit() or (raw[:1] == b"0" and raw != b"0")
            or int(raw) > TIMESTAMP_MS_MAX):
        raise CorruptRecord(
            f"header {header!r} holds {raw[:digits + 1]!r}: it must be a non-negative int64 in ASCII decimal "
            f"without sign, spaces or leading zeros; the record was not written by mafka4")
    return int(raw)


@dataclass(frozen=True, slots=True, order=True)
class MessageId:
    """A delayed message's id: the delay topic partition and offset of its acknowledgement (``str``: ``"P:OFFSET"``)."""

    partition: int
    offset: int

    def __post_init__(self) -> None:
        for name in ("partition", "offset"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InvalidMessageId(f"a message id's {name} must be a non-negative integer, not {value!r}")

    def __str__(self) -> str:
        return f"{self.partition}:{self.offset}"

    @classmethod
    def parse(cls, text: str) -> "MessageId":
        """``"P:OFFSET"`` (as ``str`` writes it) as a ``MessageId``; ``InvalidMessageId`` otherwise."""
        if not isinstance(text, str):
            raise InvalidMessageId(f"message id {text!r} is not a string: write it PARTITION:OFFSET, e.g. 3:1042")
        partition, separator, offset = text.partition(":")
        if not (separator and _plain_number(partition) and _plain_number(offset)):
            raise InvalidMessageId(
                f"message id {text[:64]!r} is not PARTITION:OFFSET (two non-negative integers, e.g. 3:1042): "
                f"use the partition and offset of the message's acknowledgement (its RecordMetadata)")
        return cls(int(partition), int(offset))


def _plain_number(text: str) -> bool:
    """ASCII digits only and at most an int64 (``int`` would also take signs, spaces, ``_`` and other digits)."""
    return (text.isascii() and text.isdigit() and len(text) <= len(str(TIMESTAMP_MS_MAX))
            and int(text) <= TIMESTAMP_MS_MAX)
