"""A physical partition's fetch answer decoded straight into messages: where the take starts and stops.

The reference is the consumer's loop as it was: decode every batch into messages, keep those
at or past the fetch offset while the poll has room. ``take_messages`` must return the same
messages and position, and decode no batch it takes nothing from.
"""

from __future__ import annotations

import zlib
from functools import partial

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mafka4 import batch_frame, batch_payload
from mafka4.client.fetched_messages import take_messages
from mafka4.client.message import Message
from mafka4.compression import Codec
from mafka4.errors import CorruptRecord

TOPIC = "orders"
PARTITION = 2


def log(batch_sizes: list[int], base_offset: int = 0, codec: Codec = Codec.NONE) -> bytes:
    """Batch bytes holding batches of ``batch_sizes`` records, stamped from ``base_offset`` on."""
    data = b""
    for size in batch_sizes:
        items = [(None if n % 3 else b"k%d" % n, b"value-%d" % (base_offset + n), 1_000 + n,
                  None if n % 2 else [("h", b"%d" % n)]) for n in range(size)]
        batch = bytearray(batch_payload.encode_batch(items, codec=codec))
        batch_frame.stamp(batch, base_offset, 0)
        data += batch
        base_offset += size
    return data


def take_as_before(data: bytes, offset: int, messages: list, messages_max: int) -> int | None:
    position = None
    for message in batch_payload.decode_batches(data, partial(Message, TOPIC, PARTITION)):
        if message.offset >= offset and len(messages) < messages_max:
            messages.append(message)
            position = message.offset + 1
    return position


@given(st.lists(st.integers(1, 6), min_size=1, max_size=4), st.integers(0, 2**40), st.integers(0, 25),
       st.integers(1, 30), st.integers(0, 5), st.sampled_from(list(Codec)))
@settings(max_examples=200, deadline=None)
def test_messages_and_position_equal_the_consumers_loop_before(sizes, base_offset, skip, messages_max, taken_before,
                                                               codec):
    data = log(sizes, base_offset, codec)
    taken, expected = [None] * taken_before, [None] * taken_before
    assert take_messages(data, TOPIC, PARTITION, base_offset + skip, taken, messages_max) == \
        take_as_before(data, base_offset + skip, expected, messages_max)
    assert taken == expected


def test_no_batch_past_the_poll_limit_or_before_the_offset_is_decoded():
    """A batch whose payload would not decode is not touched when the take needs nothing of it."""
    good = log([3], base_offset=10)
    unreadable = bytearray(log([3], base_offset=13, codec=Codec.ZSTD))
    unreadable[batch_frame.HEADER_BYTES:] = b"\0" * (len(unreadable) - batch_frame.HEADER_BYTES)
    crc_start = batch_frame.CRC_START
    unreadable[crc_start - 4:crc_start] = zlib.crc32(unreadable[crc_start:]).to_bytes(4, "big")
    with pytest.raises(CorruptRecord, match="does not decompress"):
        batch_payload.decode_batch(unreadable)
    messages: list[Message] = []
    assert take_messages(good + bytes(unreadable), TOPIC, PARTITION, 10, messages, 3) == 13
    assert [m.offset for m in messages] == [10, 11, 12]
    later = log([2], base_offset=16)
    messages = []
    assert take_messages(bytes(unreadable) + later, TOPIC, PARTITION, 16, messages, 10) == 18
    assert [(m.topic, m.partition, m.offset) for m in messages] == [(TOPIC, PARTITION, 16), (TOPIC, PARTITION, 17)]


def test_a_full_poll_takes_nothing_and_leaves_the_position():
    messages = [None] * 5
    assert take_messages(log([4]), TOPIC, PARTITION, 0, messages, 5) is None
    assert messages == [None] * 5


def _with_crc_flipped(batch: bytes) -> bytes:
    damaged = bytearray(batch)
    damaged[batch_frame.CRC_START - 1] ^= 0xFF
    return bytes(damaged)


def test_a_batch_that_fails_its_crc_ends_the_take_unless_the_check_is_off():
    """``check_crcs`` (Kafka's check.crcs): on, the take stops before a batch damaged on its way
    (the next fetch asks for it again); off, only the batch's structure is checked."""
    good, damaged = log([2], base_offset=0), _with_crc_flipped(log([3], base_offset=2))
    messages: list[Message] = []
    assert take_messages(good + damaged, TOPIC, PARTITION, 0, messages, 10) == 2
    assert [m.offset for m in messages] == [0, 1]
    messages = []
    assert take_messages(good + damaged, TOPIC, PARTITION, 0, messages, 10, check_crc=False) == 5
    assert [m.value for m in messages] == [b"value-%d" % n for n in range(5)]
