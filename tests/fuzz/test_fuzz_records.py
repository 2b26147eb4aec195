"""Fuzzing the batch format (``mafka4.batch_frame``, ``mafka4.batch_payload``): bytes from
anywhere raise only ``CorruptRecord``.

``MAFKA4_FUZZ_EXAMPLES`` (default 40) scales every fuzz test of ``tests/fuzz``.

Every decoding entry point gets arbitrary bytes, and then the harder inputs: batches whose
header and CRC are right but whose payload is arbitrary msgpack (a buggy or hostile producer
can compute a CRC), and encoded batches with one bit flipped. Compressed batches get the same
(``mafka4.compression``): any codec id, arbitrary msgpack inside a valid frame, and valid frames
damaged under a recomputed CRC. Consumers of VP logs decode with their own header rule (the
source header last, ``vp_records.producer_headers``): they get the same inputs. So do batches
with sources (attribute bit 3), with any payload beside any sources.
"""

from __future__ import annotations

import os
import struct
import zlib

import msgpack
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from mafka4.batch_frame import (ATTRIBUTE_SOURCES, CRC_START, HEADER_BYTES, MAGIC, check_batch, check_single_batch,
                                iter_batches, read_header, stamp)
from mafka4.batch_payload import SOURCE, decode_batch, decode_batches, encode_batch
from mafka4.client.vp_messages import take_vp_messages
from mafka4.compression import Codec, compress
from mafka4.errors import CorruptRecord
from mafka4.virtual.vp_records import SOURCE_HEADER

EXAMPLES = int(os.environ.get("MAFKA4_FUZZ_EXAMPLES", "40"))
FUZZ = settings(max_examples=EXAMPLES * 2, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def with_valid_crc(payload: bytes, count: int, producer_id: int = -1, base_sequence: int = -1,
                   attributes: int = 0) -> bytes:
    """A stamped-looking batch around ``payload`` whose framing and CRC are valid."""
    body = struct.pack(">hiqqqi", attributes, count, 1000, 1000, producer_id, base_sequence) + payload
    return struct.pack(">qiibI", 0, 4 + 1 + 4 + len(body), 0, MAGIC, zlib.crc32(body)) + body


msgpack_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats(allow_nan=True)
    | st.text(max_size=8) | st.binary(max_size=8),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=4) | st.integers(0, 9), children, max_size=3),
    max_leaves=20,
)
records = st.lists(st.tuples(st.none() | st.binary(max_size=16), st.binary(max_size=32), st.integers(0, 2**40),
                             st.none() | st.lists(st.tuples(st.text(max_size=5), st.binary(max_size=5)), max_size=2)),
                   min_size=1, max_size=5)


@FUZZ
@given(st.binary(max_size=400))
def test_arbitrary_bytes_raise_only_corrupt_record(data):
    for decode in (read_header, check_batch, check_single_batch, decode_batch):
        try:
            decode(data)
        except CorruptRecord:
            pass
    list(iter_batches(data))  # never raises: it stops at the first bad batch
    decode_batches(data)


codecs = st.sampled_from(list(Codec))


def assert_usable(decoded) -> None:
    """What decodes must be records a consumer can use."""
    for record in decoded:
        assert isinstance(record.timestamp_ms, int)
        assert record.key is None or isinstance(record.key, bytes)
        assert isinstance(record.value, bytes)
        assert all(isinstance(k, str) and isinstance(v, bytes) for k, v in record.headers)


@FUZZ
@given(st.lists(msgpack_values, max_size=4), st.integers(1, 4))
@example([[0, b"k", b"v", 5]], 1)  # headers that are not a list
@example([[0, b"k", b"v", [[b"h"]]]], 1)  # a header that is not a pair
@example([["soon", b"k", b"v", None]], 1)  # a timestamp delta that is not a number
@example([[0, 7, b"v", None]], 1)  # a key that is not bytes
@example([[0, b"k", None, None]], 1)  # a value that is not bytes
def test_a_valid_crc_around_any_msgpack_payload_raises_only_corrupt_record(items, count):
    batch = with_valid_crc(msgpack.packb(items, use_bin_type=True), count)
    try:
        decoded = decode_batch(batch)
    except CorruptRecord:
        return
    assert_usable(decoded)


# Headers of VP records: the source header, well-formed or not, among anything else.
vp_headers = st.lists(
    st.sampled_from([[SOURCE_HEADER, bytes(12)], [SOURCE_HEADER, b"short"], [SOURCE_HEADER, "not bin"], SOURCE_HEADER,
                     ["trace", b"t"]]) | msgpack_values,
    max_size=3,
) | msgpack_values
vp_items = st.lists(st.lists(st.integers(0, 9) | msgpack_values, min_size=3, max_size=3).flatmap(
    lambda fields: vp_headers.map(lambda headers: [*fields, headers])) | msgpack_values, max_size=4)


@FUZZ
@given(vp_items, st.integers(1, 4))
@example([[0, None, b"v", [[SOURCE_HEADER, b"short"]]]], 1)  # a source header of the wrong size
@example([[0, None, b"v", [[SOURCE_HEADER, bytes(12)], ["trace", b"t"]]]], 1)  # a source header not last
def test_a_valid_crc_around_any_vp_payload_gives_a_consumer_messages_or_corrupt_record(items, count):
    messages = []
    try:
        take_vp_messages(with_valid_crc(msgpack.packb(items, use_bin_type=True), count), "t", 0, 0, messages, 10)
    except CorruptRecord:
        return
    assert_usable(messages)
    assert all(name != SOURCE_HEADER for message in messages for name, _ in message.headers)


@FUZZ
@given(st.lists(msgpack_values, max_size=4) | msgpack_values,
       st.binary(max_size=60) | st.integers(1, 4).map(lambda count: bytes(SOURCE.size * count)) | msgpack_values,
       st.integers(1, 4), st.booleans())
@example([[0, None, b"v", None]], bytes(SOURCE.size), 1, True)  # well formed
@example([[0, None, b"v", None]], b"short", 1, True)  # sources of the wrong size
@example([[0, None, b"v", None]], bytes(SOURCE.size), 1, False)  # a payload that is not [records, sources]
def test_a_valid_crc_around_any_payload_with_sources_gives_messages_or_corrupt_record(items, sources, count, paired):
    batch = with_valid_crc(msgpack.packb([items, sources] if paired else items, use_bin_type=True), count,
                           attributes=ATTRIBUTE_SOURCES)
    messages = []
    try:
        take_vp_messages(batch, "t", 0, 0, messages, 10)
    except CorruptRecord:
        pass
    assert_usable(messages)
    try:
        decoded = decode_batch(batch)
    except CorruptRecord:
        return
    assert_usable(decoded)
    assert all(record.headers[-1][0] == SOURCE_HEADER for record in decoded)


@FUZZ
@given(st.binary(max_size=200), st.integers(1, 3))
def test_a_valid_crc_around_garbage_raises_only_corrupt_record(payload, count):
    try:
        decode_batch(with_valid_crc(payload, count))
    except CorruptRecord:
        pass


@FUZZ
@given(st.binary(max_size=200), st.integers(1, 3), st.integers(0, 2**15 - 1))
def test_a_valid_crc_around_garbage_under_any_attributes_raises_only_corrupt_record(payload, count, attributes):
    try:
        decode_batch(with_valid_crc(payload, count, attributes=attributes))
    except CorruptRecord:
        pass


@FUZZ
@given(st.lists(msgpack_values, max_size=4), st.integers(1, 4), st.sampled_from([Codec.LZ4, Codec.ZSTD]))
def test_a_valid_frame_around_any_msgpack_payload_raises_only_corrupt_record(items, count, codec):
    frame = compress(codec, msgpack.packb(items, use_bin_type=True))
    try:
        decoded = decode_batch(with_valid_crc(frame, count, attributes=codec.value))
    except CorruptRecord:
        return
    assert_usable(decoded)


@FUZZ
@given(records, st.sampled_from([Codec.LZ4, Codec.ZSTD]), st.data())
def test_a_damaged_frame_under_a_recomputed_crc_raises_only_corrupt_record(items, codec, data):
    """A producer that compresses wrongly but computes its CRC right: only a reader can tell."""
    frame = bytearray(encode_batch(items, codec=codec)[HEADER_BYTES:])
    for _ in range(data.draw(st.integers(1, 4), label="damages")):
        position = data.draw(st.integers(0, len(frame) - 1), label="position")
        damage = data.draw(st.sampled_from(["flip", "cut", "insert"]), label="damage")
        if damage == "flip":
            frame[position] ^= 1 << data.draw(st.integers(0, 7), label="bit")
        elif damage == "cut":
            del frame[position:position + data.draw(st.integers(1, 8), label="cut bytes")]
        else:
            frame[position:position] = data.draw(st.binary(min_size=1, max_size=8), label="inserted")
        if not frame:
            break
    try:
        decoded = decode_batch(with_valid_crc(bytes(frame), len(items), attributes=codec.value))
    except CorruptRecord:
        return
    assert_usable(decoded)


@FUZZ
@given(records, codecs, st.data())
def test_one_flipped_bit_outside_the_stamped_fields_is_always_detected(items, codec, data):
    batch = bytearray(encode_batch(items, codec=codec))
    assert [(r.key, r.value) for r in decode_batch(bytes(batch))] == [(k, v) for k, v, _, _ in items]
    # base offset (bytes 0-7) and leader epoch (12-15) are stamped by the leader and, as in
    # Kafka, not covered by the CRC; every other bit is.
    position = data.draw(st.sampled_from([i for i in range(len(batch)) if not (i < 8 or 12 <= i < 16)]))
    batch[position] ^= 1 << data.draw(st.integers(0, 7))
    try:
        check_batch(bytes(batch))
    except CorruptRecord:
        return
    raise AssertionError(f"a flipped bit at byte {position} (CRC covers from {CRC_START}, header {HEADER_BYTES}) "
                         f"went unnoticed")


@FUZZ
@given(st.lists(st.tuples(records, codecs), min_size=1, max_size=5))
def test_a_log_of_batches_of_mixed_codecs_decodes_to_every_record_in_order(batches):
    log, offset, expected = b"", 0, []
    for items, codec in batches:
        batch = bytearray(encode_batch(items, codec=codec))
        stamp(batch, offset, 0)
        log += batch
        offset += len(items)
        expected += [(k, v, t) for k, v, t, _ in items]
    assert [header.codec for _, header in iter_batches(log)] == [codec for _, codec in batches]
    decoded = decode_batches(log)
    assert [r.offset for r in decoded] == list(range(offset))
    assert [(r.key, r.value, r.timestamp_ms) for r in decoded] == expected
