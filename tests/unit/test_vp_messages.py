"""A VP fetch's batch bytes decoded straight into messages: what ``VpFetcher`` returns and where it stops.

The reference is the path consumers took before (decode every record, ``lost_range_of``,
``strip_source``, copy into a ``Message``): ``take_vp_messages`` must return the same messages and
stop at the same position on any VP log.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mafka4 import batch_frame, batch_payload
from mafka4.client.message import Message
from mafka4.client.vp_messages import VpTake, take_vp_messages
from mafka4.compression import Codec
from mafka4.errors import CorruptRecord
from mafka4.virtual.vp_records import SourcedRecord, encode_vp_batch, lost_marker, lost_range_of, strip_source
from test_compression import BAD_FRAMES, with_payload

TOPIC = "orders"
VP = 3
NO_LIMIT = 1_000_000
EPOCH = 0  # the leader epoch ``vp_log`` stamps


def sourced(offset: int, headers=(), partition: int = 1) -> SourcedRecord:
    key = None if offset % 4 == 0 else b"key-%d" % (offset % 5)
    return SourcedRecord(partition, offset, 0, 1_000 + offset, key, b"value-%d" % offset, headers)


def vp_log(batches: list[tuple[Codec, list[SourcedRecord]]], base_offset: int = 0, epochs: list[int] | None = None) -> bytes:
    """Batch bytes of a VP log holding ``batches`` in order, stamped from ``base_offset`` as its leader
    does, with ``epochs`` (one per batch; default ``EPOCH``)."""
    log = b""
    for index, (codec, batch_records) in enumerate(batches):
        batch = bytearray(encode_vp_batch(batch_records, codec))
        batch_frame.stamp(batch, base_offset, EPOCH if epochs is None else epochs[index])
        log += batch
        base_offset += len(batch_records)
    return log


def take(data: bytes, offset: int = 0, messages_max: int = NO_LIMIT,
         messages: list[Message] | None = None) -> tuple[list[Message], VpTake]:
    messages = [] if messages is None else messages
    return messages, take_vp_messages(data, TOPIC, VP, offset, messages, messages_max)


def take_as_before(data: bytes, offset: int = 0, messages_max: int = NO_LIMIT,
                   messages: list[Message] | None = None) -> tuple[list[Message], VpTake]:
    """The reference: the fetcher's loop as it was, over Records."""
    messages = [] if messages is None else messages
    position = offset
    for record in batch_payload.decode_batches(data):
        if record.offset < offset:
            continue
        if len(messages) >= messages_max:
            break
        lost = lost_range_of(record)
        if lost is not None:
            return messages, VpTake(record.offset + 1, lost, EPOCH)
        plain = strip_source(record)
        messages.append(Message(TOPIC, VP, plain.offset, plain.timestamp_ms, plain.key, plain.value, plain.headers))
        position = record.offset + 1
    return messages, VpTake(position, None, EPOCH if position > offset else None)


@pytest.mark.parametrize("codec", list(Codec))
def test_each_codec_round_trips_to_the_producers_messages_at_vp_offsets(codec):
    batch = [sourced(offset, (("trace", b"t%d" % offset),) if offset % 3 else ()) for offset in range(40, 90)]
    messages, taken = take(vp_log([(codec, batch)], base_offset=500))
    assert messages == [Message(TOPIC, VP, 500 + i, r.timestamp_ms, r.key, r.value, r.headers)
                        for i, r in enumerate(batch)]
    assert taken == VpTake(550, None, EPOCH)


def test_batches_of_mixed_codecs_decode_from_one_fetch():
    codecs = [Codec.ZSTD, Codec.NONE, Codec.LZ4, Codec.ZSTD, Codec.LZ4]
    batches = [(codec, [sourced(number * 10 + i) for i in range(10)]) for number, codec in enumerate(codecs)]
    messages, taken = take(vp_log(batches))
    assert [m.value for m in messages] == [b"value-%d" % offset for offset in range(50)]
    assert [m.offset for m in messages] == list(range(50)) and taken == VpTake(50, None, EPOCH)


def test_messages_before_the_fetch_offset_are_skipped_within_and_across_batches():
    data = vp_log([(Codec.LZ4, [sourced(o) for o in range(10)]), (Codec.NONE, [sourced(o) for o in range(10, 20)])])
    for offset in (0, 3, 10, 15, 19):
        messages, taken = take(data, offset)
        assert [m.offset for m in messages] == list(range(offset, 20)) and taken.next_offset == 20, offset
    assert take(data, 20) == ([], VpTake(20, None, None)), "a fetch offset past the data takes nothing"


def test_a_loss_marker_ends_the_take_past_it_with_its_range():
    marker = lost_marker(1, 100, 130, timestamp_ms=5)
    data = vp_log([(Codec.NONE, [sourced(o) for o in range(5)] + [marker] + [sourced(o) for o in range(130, 135)])])
    messages, taken = take(data)
    assert [m.offset for m in messages] == [0, 1, 2, 3, 4]
    assert taken == VpTake(6, (1, 100, 130), EPOCH), "the position moves past the marker"
    messages, taken = take(data, offset=6)
    assert [m.value for m in messages] == [b"value-%d" % o for o in range(130, 135)] and taken == VpTake(11, None, EPOCH)


def test_the_poll_limit_counts_the_messages_other_vps_took_before():
    data = vp_log([(Codec.ZSTD, [sourced(o) for o in range(10)]), (Codec.NONE, [sourced(o) for o in range(10, 20)])])
    messages, taken = take(data, offset=2, messages_max=12, messages=[None] * 5)
    assert [m.offset for m in messages[5:]] == list(range(2, 9)) and taken == VpTake(9, None, EPOCH)
    full = [None] * 12
    assert take(data, offset=2, messages_max=12, messages=full) == (full, VpTake(2, None, None))


def test_the_poll_limit_is_checked_before_a_loss_marker():
    data = vp_log([(Codec.NONE, [sourced(0), sourced(1), lost_marker(1, 2, 9, 0)])])
    messages, taken = take(data, messages_max=2)
    assert len(messages) == 2 and taken == VpTake(2, None, EPOCH), "the marker is met by the next poll"


def _without_source(offsets, headers=None) -> bytes:
    batch = bytearray(batch_payload.encode_batch([(None, b"v%d" % o, o, headers) for o in offsets]))
    batch_frame.stamp(batch, 40, 0)
    return bytes(batch)


@pytest.mark.parametrize("headers", [None, [("trace", b"t")], [("mafka4.src", b"short")]])
def test_a_record_without_its_source_header_is_corrupt_naming_the_batch_and_record(headers):
    with pytest.raises(CorruptRecord, match="record 0 of batch at offset 40 does not end with a mafka4.src header"):
        take(_without_source([0, 1], headers))


def test_a_malformed_header_keeps_the_error_any_record_has():
    with pytest.raises(CorruptRecord, match="record 0 of batch at offset 40 has headers of type str"):
        take(with_payload(_without_source([0]), b"\x91\x94\x00\xc0\xc4\x01v\xa1x"))


@pytest.mark.parametrize("problem", BAD_FRAMES)
@pytest.mark.parametrize("codec", [Codec.LZ4, Codec.ZSTD])
def test_corrupt_compressed_data_under_a_valid_crc_is_a_corrupt_record(codec, problem):
    batch = vp_log([(codec, [sourced(o) for o in range(50)])], base_offset=4_242)
    bad = with_payload(batch, BAD_FRAMES[problem](batch[batch_frame.HEADER_BYTES:]))
    with pytest.raises(CorruptRecord, match=f"batch at offset 4242 has a {codec} payload that does not decompress"):
        take(bad)


@st.composite
def vp_logs(draw):
    """A VP log of a few batches of mixed codecs, with loss markers anywhere."""
    batches, source_offset = [], 0
    for _ in range(draw(st.integers(1, 4))):
        batch = []
        for _ in range(draw(st.integers(1, 8))):
            source_offset += draw(st.integers(1, 3))
            if draw(st.integers(0, 9)) == 0:
                batch.append(lost_marker(2, source_offset, source_offset + 5, source_offset))
                source_offset += 5
            else:
                headers = tuple(draw(st.lists(st.tuples(st.text(max_size=6), st.binary(max_size=6)), max_size=2)))
                batch.append(sourced(source_offset, headers, partition=2))
        batches.append((draw(st.sampled_from(list(Codec))), batch))
    return vp_log(batches, base_offset=draw(st.integers(0, 2**40)))


@given(vp_logs(), st.integers(0, 40), st.integers(1, 30), st.integers(0, 5))
@settings(max_examples=200, deadline=None)
def test_messages_and_position_equal_the_path_through_records(data, skip, messages_max, taken_before):
    offset = batch_frame.read_header(data).base_offset + skip
    assert take(data, offset, messages_max, [None] * taken_before) == \
        take_as_before(data, offset, messages_max, [None] * taken_before)


def test_a_vp_batch_that_fails_its_crc_ends_the_take_unless_the_check_is_off():
    good = vp_log([(Codec.NONE, [sourced(o) for o in range(2)])])
    damaged = bytearray(vp_log([(Codec.ZSTD, [sourced(o) for o in range(2, 5)])], base_offset=2))
    damaged[batch_frame.CRC_START - 1] ^= 0xFF
    messages, taken = take(good + bytes(damaged))
    assert taken == VpTake(2, None, EPOCH) and [m.offset for m in messages] == [0, 1]
    messages = []
    assert take_vp_messages(good + bytes(damaged), TOPIC, VP, 0, messages, NO_LIMIT, check_crc=False) == VpTake(5, None, EPOCH)
    assert [m.value for m in messages] == [b"value-%d" % o for o in range(5)]


def test_a_take_names_the_leader_epoch_of_the_batch_of_its_last_message():
    """The reader's next fetch sends it, so a log that diverged from what it read is told (KIP-320)."""
    data = vp_log([(Codec.NONE, [sourced(o) for o in range(0, 5)]), (Codec.NONE, [sourced(o) for o in range(5, 9)])],
                  epochs=[3, 7])
    assert take(data, 0, messages_max=3)[1] == VpTake(3, None, 3), "the last message taken is in the epoch-3 batch"
    assert take(data, 0)[1] == VpTake(9, None, 7)
    assert take(data, 9)[1] == VpTake(9, None, None), "nothing taken: the position's epoch stays as it was"
