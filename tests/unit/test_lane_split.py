"""Lanes on the message and on the read side: the lane header and the lane-id column of a
producer's batch (``batch_frame``, ``batch_payload``), the producer's batches keeping lane ids
(``client.accumulator``, ``client.sender_core``), the column split against the decoding split
with lanes (``virtual.column_split``, ``virtual.vp_records``), and a round that meets a record of
a lane its layout does not have (``virtual.feed_plan.plan_round``)."""

from __future__ import annotations

import itertools
import struct

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mafka4.batch_frame import (ATTRIBUTE_KEY_HASHES, ATTRIBUTE_LANE_IDS, HEADER_BYTES, check_producer_batch,
                                frame_payload, read_header, stamp)
from mafka4.batch_payload import (LANE_HEADER, LANE_ID_BYTES, RESERVED_HEADER_PREFIX, decode_batch,
                                  encode_record_arrays, lane_of_headers, laned_headers)
from mafka4.client.accumulator import RecordAccumulator
from mafka4.client.partitioner import message_hash_column
from mafka4.client.send_many import ManyFuture
from mafka4.client.sender_core import PipelineCore
from mafka4.compression import Codec
from mafka4.errors import CorruptRecord, UnknownLane
from mafka4.limits import ProducerConfig
from mafka4.virtual.column_split import RoundColumns, SplitChunk, read_columns, split_round
from mafka4.virtual.feed_plan import plan_round
from mafka4.virtual.layout import TopicLayout
from mafka4.virtual.ranges import message_hash
from mafka4.virtual.vp_records import codec_runs, encode_vp_batch, route_known_lanes, route_records, vp_batches

PARTITIONS = 2
PARTITION = 1
LANES = ("blue", "red", "green")


def lane_ids_of(lanes: list[int]) -> bytes:
    return b"".join(lane.to_bytes(LANE_ID_BYTES, "big") for lane in lanes)


def laned_records(count: int, lanes: list[int], key_of=lambda i: b"key-%d" % i, names=LANES):
    """Records in payload form, record ``i`` in lane ``lanes[i]`` (0 the trunk) with the lane header first."""
    return [(i, key_of(i), b"value-%d" % i, laned_headers(names[lanes[i] - 1] if lanes[i] else "", None))
            for i in range(count)]


def producer_batch(records, lanes: list[int] | None, base_offset: int, codec: Codec = Codec.NONE,
                   with_column: bool = True, base_sequence: int | None = None,
                   first_timestamp_ms: int = 1_000_000) -> bytearray:
    """A stamped producer's batch (``sender_core``): with the key-hash column and, if ``lanes`` has a
    lane, the lane-id column; or neither (``with_column=False``)."""
    sequence = base_offset if base_sequence is None else base_sequence
    hashes = message_hash_column(records, 7, PARTITION, sequence) if with_column else None
    lane_ids = lane_ids_of(lanes) if with_column and lanes is not None else None
    max_timestamp_ms = first_timestamp_ms + max(delta for delta, *_ in records)
    batch = bytearray(encode_record_arrays(records, first_timestamp_ms, max_timestamp_ms, 7, sequence, codec,
                                           message_hashes=hashes, lane_ids=lane_ids))
    stamp(batch, base_offset, 0)
    return batch


# --- the format ---------------------------------------------------------------------------


def test_the_lane_header_is_the_records_first_and_reserved():
    assert LANE_HEADER.startswith(RESERVED_HEADER_PREFIX)
    assert laned_headers("blue", [("h", b"x")]) == [(LANE_HEADER, b"blue"), ("h", b"x")]
    assert laned_headers("", [("h", b"x")]) == [("h", b"x")] and laned_headers("", None) is None
    assert lane_of_headers(((LANE_HEADER, b"blue"), ("h", b"x"))) == "blue"
    assert lane_of_headers((("h", b"x"), (LANE_HEADER, b"blue"))) == "", "only the first header names the lane"
    assert lane_of_headers(()) == lane_of_headers(None) == ""


@pytest.mark.parametrize("codec", list(Codec))
def test_a_batch_of_trunk_records_has_the_bytes_it_had_before_lanes(codec):
    records = laned_records(20, [0] * 20)
    assert producer_batch(records, [0] * 20, 5, codec) == producer_batch(records, None, 5, codec)
    assert not read_header(producer_batch(records, [0] * 20, 5, codec)).laned


@pytest.mark.parametrize("codec", list(Codec))
def test_a_laned_batch_carries_the_lane_id_column_which_readers_of_records_ignore(codec):
    lanes = [0, 1, 0, 2, 2]
    records = laned_records(5, lanes)
    batch = producer_batch(records, lanes, 0, codec)
    header = check_producer_batch(batch)
    assert header.laned and header.hashed and header.attributes & ATTRIBUTE_LANE_IDS
    decoded = decode_batch(batch)
    assert decoded == decode_batch(producer_batch(records, None, 0, codec, with_column=False))
    assert [lane_of_headers(r.headers) for r in decoded] == ["", "blue", "", "red", "red"]


def _reframed(payload: bytes, attributes: int, count: int, producer_id: int = 7) -> bytearray:
    batch = bytearray(frame_payload(payload, attributes, count, 0, 0, producer_id, 0))
    stamp(batch, 0, 0)
    return batch


def test_the_lane_id_column_without_the_key_hash_column_is_refused():
    records = laned_records(2, [1, 1])
    plain = encode_record_arrays(records, 0, 0, 7, 0)
    batch = _reframed(bytes(plain[HEADER_BYTES:]), ATTRIBUTE_LANE_IDS, 2)
    with pytest.raises(CorruptRecord, match="lane-id column's bit 6 without the key-hash column's bit 4"):
        check_producer_batch(batch)
    with pytest.raises(CorruptRecord, match="bit 6 without"):
        decode_batch(batch)


def test_a_lane_id_column_of_the_wrong_size_is_refused_by_readers_of_records():
    records = laned_records(3, [1, 0, 1])
    hashes = message_hash_column(records, 7, PARTITION, 0)
    payload = msgpack.packb([records, hashes, struct.pack(">3I", 0, 0, 0), b"\0\1" * 2], use_bin_type=True)
    batch = _reframed(payload, ATTRIBUTE_KEY_HASHES | ATTRIBUTE_LANE_IDS, 3)
    with pytest.raises(CorruptRecord, match="3 lane ids"):
        decode_batch(batch)
    # Three elements but bit 6: the column is missing.
    payload = msgpack.packb([records, hashes, struct.pack(">3I", 0, 0, 0)], use_bin_type=True)
    with pytest.raises(CorruptRecord, match="lane ids"):
        decode_batch(_reframed(payload, ATTRIBUTE_KEY_HASHES | ATTRIBUTE_LANE_IDS, 3))


# --- the producer -------------------------------------------------------------------------


def test_a_batch_keeps_lane_ids_only_from_its_first_laned_record_on():
    accumulator = RecordAccumulator("t", ProducerConfig(linger_ms=0), partitions=1)
    for _ in range(3):
        accumulator.append(b"k", b"v", 0, 0, None, 100, now_ms=0)
    assert accumulator.pop_ready(0, now_ms=0).lane_ids is None, "no lane: no lane ids"
    accumulator.append(b"k", b"v", 0, 0, None, 100, now_ms=0)
    accumulator.append(b"k", b"v", 0, 0, laned_headers("red", None), 100, now_ms=0, lane_id=2)
    accumulator.append(b"k", b"v", 0, 0, None, 100, now_ms=0)
    accumulator.append_many(b"k", [b"a", b"b"], [100, 200], 0, 0, laned_headers("blue", None), 0, ManyFuture(),
                            lane_id=1)
    accumulator.append_many(b"k", [b"c"], [100], 0, 0, None, 0, ManyFuture())
    batch = accumulator.pop_ready(0, now_ms=0)
    assert bytes(batch.lane_ids) == lane_ids_of([0, 2, 0, 1, 1, 0])
    assert len(batch.lane_ids) == LANE_ID_BYTES * len(batch.records)


@pytest.mark.parametrize("codec", list(Codec))
def test_the_sender_sends_the_lane_id_column_only_for_a_batch_with_a_laned_record(codec):
    accumulator = RecordAccumulator("t", ProducerConfig(linger_ms=0), partitions=1)
    ids = itertools.count(11)
    core = PipelineCore("t", 0, ProducerConfig(compression=codec), lambda: next(ids))
    accumulator.append(b"k", b"v", 0, 0, None, 100, now_ms=0)
    (trunk,) = core.woken(lambda: accumulator.pop_ready(0, now_ms=0))
    assert not read_header(trunk.batch.encoded).laned
    accumulator.append(b"k", b"v", 0, 0, None, 100, now_ms=0)
    accumulator.append(None, b"w", 0, 0, laned_headers("blue", None), 100, now_ms=0, lane_id=1)
    core.acknowledged(trunk, 0)
    core.step(0)
    (laned,) = core.send_new(lambda: accumulator.pop_ready(0, now_ms=0))
    encoded = bytearray(laned.batch.encoded)
    stamp(encoded, 1, 0)
    header = check_producer_batch(encoded)
    assert header.laned and header.producer_id == 11 and header.base_sequence == 1
    columns = read_columns(encoded, 0, header, 0)
    assert not isinstance(columns, CorruptRecord), columns
    assert columns.lane_ids.tolist() == [0, 1]


# --- the column split and the decoding split --------------------------------------------


def layout_with_lanes(vps: int, lanes: int, cuts: list[int]) -> TopicLayout:
    """``vps`` trunk VPs and ``lanes`` lanes opened at offset 0, then a split at each of ``cuts``
    (ascending), of the widest VP of the trunk or of a lane in turn."""
    layout = TopicLayout.initial(PARTITIONS, vps)
    for name in LANES[:lanes]:
        layout = layout.append(layout.plan_open_lane(name))
    for number, cut in enumerate(sorted(cuts)):
        current = layout.current
        lane_id = number % (lanes + 1)
        widest = max(current.lane_ranges(lane_id).items(), key=lambda item: item[0].width)[1]
        offsets = [cut] * PARTITIONS
        layout = layout.append(layout.plan_split(widest, offsets, current.cut))
    return layout


def decoding_split(batch: bytes, layout: TopicLayout, first_offset: int) -> dict[int, list[bytes]]:
    header = read_header(batch)
    routed = route_records(header, decode_batch(batch), PARTITION, layout)
    kept = {vp: [r for r in records if r.offset >= first_offset] for vp, records in routed.items()}
    return {vp: [encode_vp_batch(run, codec) for codec, run in codec_runs(records)]
            for vp, records in kept.items() if records}


lane_draws = st.lists(st.integers(0, len(LANES)), min_size=1, max_size=50)


@settings(max_examples=100, deadline=None)
@given(lanes=lane_draws, codec=st.sampled_from(list(Codec)), vps=st.integers(1, 9), open_lanes=st.integers(0, 3),
       keyless=st.booleans(), base_offset=st.integers(0, 100), data=st.data())
def test_the_column_split_places_laned_records_as_the_decoding_split_does_byte_for_byte(
        lanes, codec, vps, open_lanes, keyless, base_offset, data):
    lanes = [min(lane, open_lanes) for lane in lanes]
    count = len(lanes)
    cuts = data.draw(st.lists(st.integers(base_offset, base_offset + count), max_size=5), "cuts")
    layout = layout_with_lanes(vps, open_lanes, cuts)
    records = laned_records(count, lanes, (lambda i: None) if keyless else (lambda i: b"key-%d" % (i % 7)))
    batch = producer_batch(records, lanes, base_offset, codec)
    header = read_header(batch)
    assert header.laned == any(lanes)
    columns = read_columns(batch, 0, header, PARTITION)
    assert not isinstance(columns, CorruptRecord), columns
    first_offset = base_offset + data.draw(st.integers(0, count - 1), "first index")
    runs, unknown_at = split_round(RoundColumns([columns]), layout, first_offset)
    assert unknown_at is None
    expected = decoding_split(batch, layout, first_offset)
    assert set(runs) == set(expected)
    for vp, run in runs.items():
        chunk = SplitChunk([run])
        assert [encoded for _, encoded in chunk.vp_batches()] == expected[vp], f"VP {vp}"
        # Every record in a VP of its lane, the VP its epoch's layout of that lane gives its hash.
        for record in chunk:
            lane = lane_of_headers(record.headers)
            assert layout.lane_of(vp) == lane
            epoch = layout.epoch_for(PARTITION, record.offset)
            assert epoch.lane_ranges(epoch.lane_id(lane)).vp_for_hash(record.message_hash) == vp


@settings(max_examples=50, deadline=None)
@given(batches=st.lists(st.tuples(lane_draws, st.sampled_from(list(Codec)), st.booleans(), st.integers(0, 2)),
                        min_size=1, max_size=5),
       vps=st.integers(1, 6), records_max=st.integers(1, 60), data=st.data())
def test_a_round_of_laned_batches_with_and_without_the_columns_feeds_what_the_decoding_split_feeds(
        batches, vps, records_max, data):
    fetched, plain, offset = bytearray(), bytearray(), 0
    for lanes, codec, with_column, base in batches:
        records = laned_records(len(lanes), lanes, lambda i: b"key-%d" % (i % 5))
        for out, column in ((fetched, with_column), (plain, False)):
            out += producer_batch(records, lanes, offset, codec, with_column=column,
                                  first_timestamp_ms=1_000 * (base + 1))
        offset += len(lanes)
    cuts = data.draw(st.lists(st.integers(0, offset), max_size=4), "cuts")
    layout = layout_with_lanes(vps, len(LANES), cuts)
    next_offset = data.draw(st.integers(0, offset - 1), "next_offset")
    every_vp = sorted({vp for epoch in layout.epochs for vp in epoch.vp_ids})
    wanted = data.draw(st.one_of(st.none(), st.sets(st.sampled_from(every_vp))), "wanted")
    mixed = plan_round(bytes(fetched), PARTITION, layout, next_offset, records_max, wanted)
    slow = plan_round(bytes(plain), PARTITION, layout, next_offset, 10**6, wanted)
    assert mixed.bad_columns == () and not mixed.unknown_lane and not slow.unknown_lane
    assert (mixed.next_offset, mixed.records) == (slow.next_offset, slow.records) == (offset, mixed.records)
    assert set(mixed.chunks) == set(slow.chunks)
    for vp, chunks in mixed.chunks.items():
        assert [r for c in chunks for r in c] == [r for c in slow.chunks[vp] for r in c]
        assert {lane_of_headers(r.headers) for c in chunks for r in c} == {layout.lane_of(vp)}


# --- the sample check ---------------------------------------------------------------------


@pytest.mark.parametrize("column_lanes, header_lanes", [
    ([1, 0, 0, 0], [0, 0, 0, 0]),  # record 0 said to be in lane 1, without the lane header
    ([0, 0, 0, 0], [1, 0, 0, 0]),  # record 0 with the lane header, said to be in the trunk (a 3-element payload)
    ([0, 0, 0, 1], [0, 0, 0, 0]),  # the last record
])
def test_a_lane_id_column_that_disagrees_with_a_sampled_records_lane_header_is_reported(column_lanes, header_lanes):
    layout = layout_with_lanes(4, 1, [])
    records = laned_records(4, header_lanes)
    batch = producer_batch(records, column_lanes, 0)
    planned = plan_round(bytes(batch), PARTITION, layout, 0, records_max=100)
    (problem,) = planned.bad_columns
    assert "lane" in str(problem) and "fix or upgrade that producer" in str(problem)
    # Split by the decoded records instead: each in the lane its header names.
    slow = plan_round(bytes(producer_batch(records, None, 0, with_column=False)), PARTITION, layout, 0, 100)
    assert {vp: [r for c in chunks for r in c] for vp, chunks in planned.chunks.items()} == {
        vp: [r for c in chunks for r in c] for vp, chunks in slow.chunks.items()}


def test_a_lane_id_that_names_another_lane_than_the_header_is_a_bad_column_split_by_the_headers():
    layout = layout_with_lanes(4, 2, [])  # lanes blue (id 1) and red (id 2)
    records = laned_records(4, [1, 1, 1, 1])  # every record's header says blue
    batch = producer_batch(records, [2, 2, 2, 2], 0)  # the column says red
    planned = plan_round(bytes(batch), PARTITION, layout, 0, records_max=100)
    (problem,) = planned.bad_columns
    assert "names lane 'blue'" in str(problem) and "lane id 2" in str(problem)
    (blue_vp,) = layout.current.lane_ranges(1).vp_ids
    assert set(planned.chunks) == {blue_vp}, "each record in the lane its header names"


# --- a lane the layout does not have ---------------------------------------------------------


def unknown_lane_round(with_column: bool) -> tuple[list[bytes], list[list[int]]]:
    """Three batches at offsets 0, 10, 20: the trunk's, then one whose record 4 (offset 14) is the
    first of lane 1, then records of both."""
    lanes = [[0] * 10, [0, 0, 0, 0, 1, 0, 1, 0, 0, 0], [1, 0] * 5]
    batches = [bytes(producer_batch(laned_records(10, batch_lanes, lambda i: b"key-%d" % i), batch_lanes, 10 * n,
                                    with_column=with_column, first_timestamp_ms=1_000 * (n + 1)))
               for n, batch_lanes in enumerate(lanes)]
    return batches, lanes


@pytest.mark.parametrize("with_column", [True, False], ids=["column split", "decoding split"])
def test_a_round_stops_at_the_first_record_of_a_lane_its_layout_does_not_have(with_column):
    batches, lanes = unknown_lane_round(with_column)
    data, from_second = b"".join(batches), b"".join(batches[1:])
    older = TopicLayout.initial(PARTITIONS, 3)
    planned = plan_round(data, PARTITION, older, 0, records_max=100)
    assert planned.unknown_lane and planned.next_offset == 14 and planned.bad_columns == ()
    fed = sorted(r.offset for chunks in planned.chunks.values() for c in chunks for r in c)
    assert fed == list(range(14)) and planned.records == 14
    # From the record on, nothing is handed over until the layout is read again.
    again = plan_round(from_second, PARTITION, older, 14, records_max=100)
    assert (again.chunks, again.next_offset, again.records, again.unknown_lane) == ({}, 14, 0, True)
    # A reader's VP filter does not change where the round stops.
    assert plan_round(data, PARTITION, older, 0, 100, wanted={0}).next_offset == 14

    newer = older.append(older.plan_open_lane("blue"))
    (blue_vp,) = newer.current.lane_ranges(1).vp_ids
    planned = plan_round(data, PARTITION, newer, 0, records_max=100)
    assert not planned.unknown_lane and planned.next_offset == 30 and planned.records == 30
    in_blue = [r.offset for c in planned.chunks[blue_vp] for r in c]
    assert in_blue == [10 * n + i for n, batch_lanes in enumerate(lanes) for i, lane in enumerate(batch_lanes) if lane]
    assert all(newer.lane_of(vp) == "" for vp in planned.chunks if vp != blue_vp)
    again = plan_round(from_second, PARTITION, newer, 14, records_max=100)
    assert again.next_offset == 30 and again.records == 16


def test_a_lane_the_layout_has_not_opened_by_the_records_epoch_is_unknown_too():
    """A layout with lane 1 opened, and a record of lane 2: the reader lacks the epoch opening lane 2."""
    layout = layout_with_lanes(2, 1, [])
    lanes = [1, 0, 2, 1]
    batch = producer_batch(laned_records(4, lanes), lanes, 0)
    planned = plan_round(bytes(batch), PARTITION, layout, 0, records_max=100)
    assert planned.unknown_lane and planned.next_offset == 2 and planned.records == 2
    header = read_header(batch)
    routed, unknown_at = route_known_lanes(header, decode_batch(batch), PARTITION, layout)
    assert unknown_at == 2 and sorted(r.offset for records in routed.values() for r in records) == [0, 1]
    with pytest.raises(UnknownLane, match="'red'"):
        route_records(header, decode_batch(batch), PARTITION, layout)


def test_the_message_hash_does_not_depend_on_the_lane():
    """A lane has its own layout of the one hash space: a key's hash is the same in every lane."""
    layout = layout_with_lanes(4, 1, [])
    lanes = [0, 1]
    records = [(0, b"same", b"v", laned_headers(LANES[lane - 1] if lane else "", None)) for lane in lanes]
    planned = plan_round(bytes(producer_batch(records, lanes, 0)), PARTITION, layout, 0, records_max=100)
    hashes = {r.message_hash for chunks in planned.chunks.values() for c in chunks for r in c}
    assert hashes == {message_hash(b"same", PARTITION, 7, 0, 0)}
    assert len(planned.chunks) == 2 and {layout.lane_of(vp) for vp in planned.chunks} == {"", "blue"}
    for vp, chunks in planned.chunks.items():
        assert [encoded for chunk in chunks for _, encoded in vp_batches(chunk)]


def test_the_checkers_oracle_places_laned_records_where_the_feed_does():
    from simulations.checkers import committed_records

    layout = layout_with_lanes(3, 2, [4])
    lanes = [0, 1, 2, 1, 0, 2, 2, 1]
    batch = producer_batch(laned_records(8, lanes), lanes, 0)
    _, expected_vp = committed_records(bytes(batch), PARTITION, layout)
    planned = plan_round(bytes(batch), PARTITION, layout, 0, records_max=100)
    assert expected_vp == {(PARTITION, r.offset): vp
                           for vp, chunks in planned.chunks.items() for c in chunks for r in c}
    with pytest.raises(UnknownLane):
        committed_records(bytes(batch), PARTITION, layout_with_lanes(3, 1, []))
