"""The split of committed physical batches into VP records, their sources, idempotent feeding."""

from __future__ import annotations

import struct
import zlib

import msgpack
import pytest

from mafka4 import batch_frame, batch_payload
from mafka4.compression import Codec
from mafka4.errors import CorruptRecord
from mafka4.hashing import key_hash
from mafka4.virtual.layout import TopicLayout
from mafka4.virtual.ranges import HASH_SPACE
from mafka4.virtual.vp_records import (NOTHING_APPLIED, SOURCE_HEADER, FeedProgress, SourcedRecord,
                                       decode_checked_vp_batch, encode_source, encode_vp_batch, lost_marker,
                                       lost_range_in, lost_range_of, route_batch, source_of, strip_source)


def physical_batch(items, base_offset, producer_id=7, base_sequence=0) -> bytes:
    """A committed physical batch as the feeder reads it: stamped by the leader."""
    batch = bytearray(batch_payload.encode_batch(items, producer_id, base_sequence))
    batch_frame.stamp(batch, base_offset, 3)
    return bytes(batch)


def keyed(count, prefix=b"key"):
    return [(prefix + b"%d" % i, b"value-%d" % i, 1_000 + i, [("trace", b"t%d" % i)]) for i in range(count)]


def stored(vp_batch: bytes, base_offset: int) -> list[batch_payload.Record]:
    """What a VP log returns after its leader stamped the batch at ``base_offset``."""
    batch = bytearray(vp_batch)
    batch_frame.stamp(batch, base_offset, 0)
    return batch_payload.decode_batch(batch)


def test_every_record_goes_to_exactly_one_vp_by_hash_in_offset_order():
    layout = TopicLayout.initial(partitions=2, virtual_partitions=4)
    out = route_batch(physical_batch(keyed(50), 100), 1, layout)
    offsets = sorted(r.offset for vp_records in out.values() for r in vp_records)
    assert offsets == list(range(100, 150))
    for vp, vp_records in out.items():
        assert [r.offset for r in vp_records] == sorted(r.offset for r in vp_records)
        for r in vp_records:
            assert r.partition == 1 and r.message_hash == key_hash(r.key)
            assert layout.current.ranges.vp_for_hash(r.message_hash) == vp


def test_keyless_records_of_one_batch_spread_over_the_vps():
    layout = TopicLayout.initial(partitions=1, virtual_partitions=4)
    items = [(None, b"v", 5, None)] * 40
    out = route_batch(physical_batch(items, 0, producer_id=11, base_sequence=200), 0, layout)
    assert len(out) == 4 and all(9 <= len(v) <= 11 for v in out.values())
    again = route_batch(physical_batch(items, 0, producer_id=11, base_sequence=200), 0, layout)
    assert again == out, "the split of a batch must be deterministic"


def test_a_batch_straddling_a_cut_feeds_parent_and_children():
    layout = TopicLayout.initial(partitions=1, virtual_partitions=1)
    layout = layout.append(layout.plan_split(0, (105,), (100,)))
    out = route_batch(physical_batch(keyed(10), 100), 0, layout)
    assert [r.offset for r in out[0]] == list(range(100, 105))
    assert sorted(r.offset for vp in (1, 2) for r in out.get(vp, [])) == list(range(105, 110))


def test_vp_records_carry_their_source_in_a_last_header_and_round_trip():
    layout = TopicLayout.initial(partitions=3, virtual_partitions=1)
    (vp_records,) = route_batch(physical_batch(keyed(3), 40), 2, layout).values()
    back = stored(encode_vp_batch(vp_records), base_offset=7)
    assert [source_of(r) for r in back] == [(2, 40), (2, 41), (2, 42)]
    assert [r.offset for r in back] == [7, 8, 9]  # VP offsets are the VP leader's
    assert back[0].headers == (("trace", b"t0"), (SOURCE_HEADER, encode_source(2, 40)))
    assert strip_source(back[0]) == batch_payload.Record(7, 1_000, b"key0", b"value-0", (("trace", b"t0"),))


def test_a_vp_record_without_source_is_a_bug():
    with pytest.raises(AssertionError, match="without source"):
        source_of(batch_payload.Record(0, 0, None, b"v"))


def test_a_vp_batch_decodes_straight_to_the_producers_records_loss_markers_in_place():
    layout = TopicLayout.initial(partitions=3, virtual_partitions=1)
    (routed,) = route_batch(physical_batch(keyed(3), 40), 2, layout).values()
    batch = bytearray(encode_vp_batch([routed[0], lost_marker(2, 10, 20, 1_000), *routed[1:]]))
    batch_frame.stamp(batch, 7, 0)
    decoded = decode_checked_vp_batch(batch, 0, batch_frame.check_batch(batch))
    assert decoded == [strip_source(record) for record in batch_payload.decode_batch(batch)]
    assert [lost_range_in(record.headers) for record in decoded] == [None, (2, 10, 20), None, None]
    assert lost_range_of(batch_payload.decode_batch(batch)[1]) == (2, 10, 20), "found with the source header kept too"
    assert decode_checked_vp_batch(batch, 0, batch_frame.check_batch(batch), build=lambda *fields: fields) == \
        [tuple(record) for record in decoded]


def test_a_record_in_a_vp_batch_without_its_source_header_is_corrupt():
    batch = bytearray(batch_payload.encode_batch([(None, b"v", 0, [(SOURCE_HEADER, encode_source(0, 1))]),
                                            (None, b"v", 0, [(SOURCE_HEADER, encode_source(0, 2)), ("t", b"")])]))
    batch_frame.stamp(batch, 70, 0)
    with pytest.raises(CorruptRecord, match="record 1 of batch at offset 70 does not end with a mafka4.src"):
        decode_checked_vp_batch(batch, 0, batch_frame.check_batch(batch))


def legacy_vp_batch(routed) -> bytearray:
    """A VP batch as written before sources were a column: each record's source a last header."""
    return bytearray(batch_payload.encode_batch([
        (r.key, r.value, r.timestamp_ms, r.headers + ((SOURCE_HEADER, encode_source(r.partition, r.offset)),))
        for r in routed]))


def test_a_vp_batch_carries_its_sources_as_a_column_and_reads_as_a_batch_with_source_headers_did():
    layout = TopicLayout.initial(partitions=3, virtual_partitions=1)
    (routed,) = route_batch(physical_batch(keyed(3), 40), 2, layout).values()
    routed = [lost_marker(2, 10, 20, 1_000), *routed]
    column, legacy = bytearray(encode_vp_batch(routed)), legacy_vp_batch(routed)
    for batch in (column, legacy):
        batch_frame.stamp(batch, 7, 0)
    assert batch_frame.check_batch(column).sourced and not batch_frame.check_batch(legacy).sourced
    # A reader of sources sees no difference.
    assert batch_payload.decode_batch(column) == batch_payload.decode_batch(legacy)
    assert decode_checked_vp_batch(column, 0, batch_frame.check_batch(column)) == \
        decode_checked_vp_batch(legacy, 0, batch_frame.check_batch(legacy))  # nor does a consumer
    assert batch_payload.decode_checked_batch(column, 0, batch_frame.check_batch(column), with_sources=False) == \
        decode_checked_vp_batch(column, 0, batch_frame.check_batch(column))
    assert FeedProgress.rebuild(batch_payload.decode_batch(column)).snapshot() == {2: 42}
    assert len(column) < len(legacy)  # 12 bytes a record, not a header of 27


def sourced_batch(payload: object, count: int) -> bytearray:
    """A batch at offset 5 claiming sources around ``payload``, its frame and CRC right."""
    body = struct.pack(">hiqqqi", batch_frame.ATTRIBUTE_SOURCES, count, 0, 0, -1, -1) + msgpack.packb(payload)
    return bytearray(struct.pack(">qiibI", 5, 4 + 1 + 4 + len(body), 0, batch_frame.MAGIC, zlib.crc32(body)) + body)


@pytest.mark.parametrize("payload, problem", [
    ([[[0, None, b"v", None]], b"short"], "has 5 bytes of sources for 1 records, not 12 per record"),
    ([[[0, None, b"v", None]], bytes(24)], "has 24 bytes of sources for 1 records"),
    ([[0, None, b"v", None]], "has sources \\(attribute bit 3\\) but a payload that is not \\[records, sources\\]"),
    ([[[0, None, b"v", None]], "not bin"], "has sources \\(attribute bit 3\\) but a payload that is not"),
])
def test_a_batch_whose_sources_do_not_match_its_records_is_corrupt_for_every_reader(payload, problem):
    batch = sourced_batch(payload, 1)
    header = batch_frame.check_batch(batch)
    with pytest.raises(CorruptRecord, match="batch at offset 5 " + problem):
        batch_payload.decode_batch(batch)
    with pytest.raises(CorruptRecord, match="batch at offset 5 " + problem):
        decode_checked_vp_batch(batch, 0, header)


def test_a_producer_may_set_no_attribute_but_its_codec():
    layout = TopicLayout.initial(partitions=1, virtual_partitions=1)
    (routed,) = route_batch(physical_batch(keyed(2), 0), 0, layout).values()
    with pytest.raises(CorruptRecord, match="sets attribute bits 0x0008: a producer's batch holds only a codec"):
        batch_frame.check_producer_batch(encode_vp_batch(routed))
    for codec in Codec:
        assert batch_frame.check_producer_batch(batch_payload.encode_batch(keyed(2), codec=codec)).codec is codec


def record(partition, offset) -> SourcedRecord:
    return SourcedRecord(partition, offset, 0, 0, None, b"v")


def test_refeeding_the_same_records_appends_nothing_twice():
    progress = FeedProgress()
    first = [record(0, 3), record(1, 8), record(0, 5)]
    assert progress.unapplied(first) == first
    progress.applied(first)
    assert (progress.last_applied(0), progress.last_applied(1), progress.last_applied(2)) == (5, 8, NOTHING_APPLIED)
    assert progress.unapplied(first) == []
    assert progress.unapplied([record(0, 4), record(0, 5), record(0, 6), record(1, 9)]) == [record(0, 6), record(1, 9)]


def test_feed_progress_is_rebuilt_from_the_vp_log():
    progress = FeedProgress()
    batch = [record(0, 3), record(2, 1), record(0, 9)]
    progress.applied(batch)
    rebuilt = FeedProgress.rebuild(stored(encode_vp_batch(batch), 0))
    assert rebuilt == progress and rebuilt.snapshot() == {0: 9, 2: 1}


def test_applying_a_source_offset_twice_or_backwards_is_a_bug():
    progress = FeedProgress({0: 5})
    with pytest.raises(AssertionError, match="applied after 5"):
        progress.applied([record(0, 5)])
    with pytest.raises(AssertionError, match="out of offset order"):
        progress.unapplied([record(1, 3), record(1, 2)])


def test_routing_a_corrupt_batch_raises_corrupt_record():
    batch = bytearray(physical_batch(keyed(2), 0))
    batch[-1] ^= 1
    with pytest.raises(CorruptRecord):
        route_batch(batch, 0, TopicLayout.initial(1, 1))


def test_the_top_hash_belongs_to_the_last_vp():
    layout = TopicLayout.initial(1, 3)
    assert layout.vp_for(0, 0, HASH_SPACE - 1) == 2
