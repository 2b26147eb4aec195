"""The batch format: round trips, stamping outside the CRC, and corruption detection."""

import threading
import zlib

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mafka4 import batch_frame, batch_payload
from mafka4.client.message import Message
from mafka4.errors import CorruptRecord

record_strategy = st.tuples(
    st.one_of(st.none(), st.binary(max_size=32)),
    st.binary(max_size=256),
    st.integers(min_value=0, max_value=2**40),
    st.one_of(st.none(), st.lists(st.tuples(st.text(max_size=8), st.binary(max_size=8)), max_size=3)),
)


@given(st.lists(record_strategy, min_size=1, max_size=20), st.integers(0, 2**40), st.integers(0, 2**20))
@settings(max_examples=150, deadline=None)
def test_encode_stamp_decode_round_trip(items, base_offset, epoch):
    batch = bytearray(batch_payload.encode_batch(items, producer_id=7, base_sequence=3))
    batch_frame.stamp(batch, base_offset, epoch)
    header = batch_frame.check_single_batch(batch)
    assert (header.base_offset, header.leader_epoch, header.count) == (base_offset, epoch, len(items))
    assert header.max_timestamp_ms == max(ts for _, _, ts, _ in items)
    decoded = batch_payload.decode_batch(batch)
    assert [r.offset for r in decoded] == list(range(base_offset, base_offset + len(items)))
    assert [(r.key, r.value, r.timestamp_ms) for r in decoded] == [(k, v, ts) for k, v, ts, _ in items]
    assert [r.headers for r in decoded] == [tuple(h) if h else () for _, _, _, h in items]


@given(st.data())
@settings(max_examples=200, deadline=None)
def test_any_flipped_bit_after_the_stamp_fields_is_detected(data):
    batch = bytearray(batch_payload.encode_batch([(b"k", b"value" * 10, 5, None)] * 3))
    position = data.draw(st.integers(min_value=batch_frame.CRC_START - 4, max_value=len(batch) - 1))
    batch[position] ^= 1 << data.draw(st.integers(0, 7))
    with pytest.raises(CorruptRecord):
        batch_frame.check_batch(batch)


def test_a_reader_builds_its_own_object_of_each_record_with_the_same_checks():
    """A consumer builds its message straight from the fields a Record would hold."""
    data = bytearray(batch_payload.encode_batch([(b"k", b"a", 5, [("h", b"1")]), (None, b"b", 7, None)]))
    batch_frame.stamp(data, 30, 0)
    assert batch_payload.decode_batches(data, build=lambda *fields: ("built", *fields)) == \
        [("built", *record) for record in batch_payload.decode_batches(data)]
    # the header's name "h" (a 2-byte msgpack str) made the number 5 (2 bytes too), under a valid CRC
    bad = bytearray(batch_payload.encode_batch([(None, b"a", 5, [("h", b"1")])]).replace(b"\xa1h", b"\xcc\x05"))
    bad[batch_frame.CRC_START - 4:batch_frame.CRC_START] = zlib.crc32(bad[batch_frame.CRC_START:]).to_bytes(4, "big")
    for build in (batch_payload.Record, lambda *fields: fields):
        with pytest.raises(CorruptRecord, match="record 0 of batch at offset 0 has a header that is not a"):
            batch_payload.decode_batches(bad, build)


def test_iter_batches_stops_at_a_partial_or_corrupt_batch():
    one = batch_payload.encode_batch([(None, b"a", 1, None)])
    two = batch_payload.encode_batch([(None, b"b", 2, None)])
    assert [p for p, _ in batch_frame.iter_batches(one + two)] == [0, len(one)]
    assert [p for p, _ in batch_frame.iter_batches(one + two[:-1])] == [0]
    damaged = bytearray(one + two)
    damaged[len(one) + 30] ^= 0xFF
    assert [p for p, _ in batch_frame.iter_batches(damaged)] == [0]


def test_check_single_batch_refuses_trailing_bytes():
    with pytest.raises(CorruptRecord, match="one batch per request"):
        batch_frame.check_single_batch(batch_payload.encode_batch([(None, b"a", 1, None)]) + b"x")


def test_a_single_batch_checked_without_its_crc_is_still_checked_for_size_and_codec():
    batch = bytearray(batch_payload.encode_batch([(None, b"a", 1, None)]))
    batch[-1] ^= 0xFF
    assert batch_frame.check_single_batch(batch, check_crc=False).count == 1  # the caller checked the CRC
    with pytest.raises(CorruptRecord, match="fails its CRC"):
        batch_frame.check_single_batch(batch)
    with pytest.raises(CorruptRecord, match="only"):
        batch_frame.check_single_batch(batch[:-1], check_crc=False)
    with pytest.raises(CorruptRecord, match="one batch per request"):
        batch_frame.check_single_batch(batch + b"x", check_crc=False)


def test_garbage_is_a_clear_corrupt_record():
    with pytest.raises(CorruptRecord, match="truncated batch header"):
        batch_frame.check_batch(b"short")
    with pytest.raises(CorruptRecord, match="magic"):
        batch_frame.check_batch(bytes(batch_frame.HEADER_BYTES + 10))


def test_a_batch_encoded_after_one_that_failed_to_pack_holds_only_its_own_records():
    with pytest.raises(TypeError):
        batch_payload.encode_batch([(None, b"fine", 1, None), (None, object(), 2, None)])
    decoded = batch_payload.decode_batch(batch_payload.encode_batch([(None, b"next", 3, None)]))
    assert [(r.value, r.timestamp_ms) for r in decoded] == [(b"next", 3)]


def test_a_batch_larger_than_the_kept_packer_bound_encodes_and_so_do_the_batches_after_it(monkeypatch):
    monkeypatch.setattr(batch_payload, "PAYLOAD_PACKER_KEPT_BYTES_MAX", 64)
    large = batch_payload.encode_batch([(None, b"x" * 1000, 1, None)])
    small = batch_payload.encode_batch([(None, b"y", 2, None)])
    assert [r.value for r in batch_payload.decode_batch(large)] == [b"x" * 1000]
    assert [r.value for r in batch_payload.decode_batch(small)] == [b"y"]


def test_threads_encoding_at_once_each_get_their_own_records():
    def encode_many(tag: bytes, out: list) -> None:
        for number in range(200):
            out.append(batch_payload.encode_batch([(None, tag + b"%d" % number, number, None)] * 20))

    outputs = {tag: [] for tag in (b"a", b"b", b"c")}
    threads = [threading.Thread(target=encode_many, args=(tag, out)) for tag, out in outputs.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for tag, batches in outputs.items():
        assert [{r.value for r in batch_payload.decode_batch(batch)} for batch in batches] == [
            {tag + b"%d" % number} for number in range(200)]


@given(st.lists(record_strategy, min_size=1, max_size=20))
@settings(max_examples=100, deadline=None)
def test_records_in_payload_form_encode_to_the_same_bytes_as_send_tuples(items):
    first = items[0][2]
    arrays = [(timestamp_ms - first, key, value, headers or None) for key, value, timestamp_ms, headers in items]
    assert batch_payload.encode_record_arrays(arrays, first, max(ts for _, _, ts, _ in items), 7, 3) == \
        batch_payload.encode_batch(items, producer_id=7, base_sequence=3)


PER_RECORD = batch_payload.HeadersReading(batch_payload.decode_headers, lambda raw_headers: None)


@given(st.lists(record_strategy, min_size=1, max_size=20), st.booleans())
@settings(max_examples=150, deadline=None)
def test_whole_columns_decode_to_what_record_by_record_decoding_gives(items, without_headers):
    """The column path (taken when no record has headers) and the per-record path agree."""
    if without_headers:
        items = [(key, value, timestamp, None) for key, value, timestamp, _ in items]
    batch = bytearray(batch_payload.encode_batch(items))
    batch_frame.stamp(batch, 77, 0)
    header = batch_frame.check_single_batch(batch)
    message_builder = batch_payload.TupleBuilder(Message, "orders", 3)
    for build in (batch_payload.Record, lambda *fields: fields, batch_payload.RECORDS, message_builder):
        assert batch_payload.decode_checked_batch(batch, 0, header, build) == \
            batch_payload.decode_checked_batch(batch, 0, header, build, PER_RECORD)
    by_columns = batch_payload.decode_checked_batch(batch, 0, header, message_builder)
    assert {type(message) for message in by_columns} == {Message}, "a tuple builder makes its named tuple's instances"
    assert by_columns == [Message("orders", 3, *record)
                          for record in batch_payload.decode_checked_batch(batch, 0, header)]
    assert {type(record) for record in batch_payload.decode_checked_batch(batch, 0, header)} == {batch_payload.Record}


def stamped_payload(payload: list) -> bytearray:
    """A batch around ``payload`` (a list of raw records) under a valid CRC, as a buggy producer could send."""
    batch = bytearray(batch_payload.encode_batch([(None, b"v", 5, None)] * len(payload)))
    body = msgpack.packb(payload)
    batch = batch[:batch_frame.HEADER_BYTES] + body
    batch[8:12] = (len(batch) - batch_frame.LENGTH_PREFIX_BYTES).to_bytes(4, "big")
    crc_start = batch_frame.CRC_START
    batch[crc_start - 4:crc_start] = zlib.crc32(batch[crc_start:]).to_bytes(4, "big")
    return batch


@pytest.mark.parametrize("bad, problem", [
    ([True, None, b"v", None], "record 2 of batch at offset 0 has a timestamp delta of type bool"),
    ([0, "k", b"v", None], "record 2 of batch at offset 0 has a key of type str"),
    ([0, None, "v", None], "record 2 of batch at offset 0 has a value of type str"),
    ([0, None, b"v"], "record 2 of batch at offset 0 is malformed"),
    ([0, None, b"v", [["h"]]], "record 2 of batch at offset 0 has a header that is not a"),
])
def test_one_bad_record_among_well_formed_ones_is_named_as_record_by_record_decoding_names_it(bad, problem):
    batch = stamped_payload([[0, None, b"v", None]] * 2 + [bad] + [[0, None, b"v", None]])
    with pytest.raises(CorruptRecord, match=problem):
        batch_payload.decode_batch(batch)
