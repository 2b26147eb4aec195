"""The column split (``virtual.column_split``) against the decoding split (``vp_records.route_records``):
the same VP batches, byte for byte, for batches with the key-hash column, of every codec, keyed
and keyless, with headers, across a split epoch's cut; and what a bad column does."""

from __future__ import annotations

import struct

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mafka4.batch_frame import (ATTRIBUTE_KEY_HASHES, HEADER_BYTES, check_producer_batch, frame_payload, read_header,
                                stamp)
from mafka4.batch_payload import decode_batch, encode_record_arrays
from mafka4.client.partitioner import message_hash_column
from mafka4.compression import Codec
from mafka4.errors import CorruptRecord
from mafka4.virtual.column_split import RoundColumns, SplitChunk, read_columns, split_round
from mafka4.virtual.feed_plan import plan_round, withhold
from mafka4.virtual.layout import TopicLayout
from mafka4.virtual.ranges import message_hash
from mafka4.virtual.vp_records import FeedProgress, codec_runs, encode_vp_batch, route_records, vp_batches

PARTITIONS = 4

records_strategy = st.lists(
    st.tuples(st.integers(-1_000, 70_000),  # timestamp deltas of every msgpack int size, negative ones too
              st.one_of(st.none(), st.binary(max_size=24)),
              st.binary(max_size=300),
              st.one_of(st.none(), st.lists(st.tuples(st.text(max_size=8), st.binary(max_size=16)), min_size=1,
                                            max_size=3))),
    min_size=1, max_size=60)


def producer_batch(records, base_offset: int, partition: int, codec: Codec, producer_id: int = 7,
                   base_sequence: int = 0, with_column: bool = True, first_timestamp_ms: int = 1_000_000) -> bytearray:
    """A stamped batch as the producer writes it (``sender_core``), with the key-hash column or without."""
    hashes = message_hash_column(records, producer_id, partition, base_sequence) if with_column else None
    max_timestamp_ms = first_timestamp_ms + max(delta for delta, *_ in records)
    batch = bytearray(encode_record_arrays(records, first_timestamp_ms, max_timestamp_ms, producer_id, base_sequence,
                                           codec, message_hashes=hashes))
    stamp(batch, base_offset, 0)
    return batch


def layout_of(vps: int, cut: int | None) -> TopicLayout:
    """``vps`` even VPs, and if ``cut`` is given VP 0 split there on every partition."""
    layout = TopicLayout.initial(PARTITIONS, vps)
    if cut is None:
        return layout
    return layout.append(layout.plan_split(0, [cut] * PARTITIONS, [0] * PARTITIONS))


def decoding_split(batch, partition, layout, first_index=0) -> dict[int, list[bytes]]:
    """Per VP, the VP batches the decoding split makes of the batch's records from ``first_index`` on."""
    header = read_header(batch)
    routed = route_records(header, decode_batch(batch), partition, layout)
    kept = {vp: [r for r in records if r.offset >= header.base_offset + first_index] for vp, records in routed.items()}
    return {vp: [encode_vp_batch(run, codec) for codec, run in codec_runs(records)]
            for vp, records in kept.items() if records}


@settings(max_examples=150, deadline=None)
@given(records=records_strategy, codec=st.sampled_from(list(Codec)), vps=st.integers(1, 40),
       partition=st.integers(0, PARTITIONS - 1), producer_id=st.integers(0, 2**63 - 1),
       base_sequence=st.integers(0, 2**31 - 61), base_offset=st.integers(0, 1_000), data=st.data())
def test_the_column_split_makes_the_decoding_splits_vp_batches_byte_for_byte(records, codec, vps, partition, producer_id,
                                                                              base_sequence, base_offset, data):
    cut = data.draw(st.one_of(st.none(), st.integers(base_offset, base_offset + len(records))), "cut")
    first_index = data.draw(st.integers(0, len(records) - 1), "first_index")
    layout = layout_of(vps, cut)
    batch = producer_batch(records, base_offset, partition, codec, producer_id, base_sequence)
    header = read_header(batch)
    columns = read_columns(batch, 0, header, partition)
    assert not isinstance(columns, CorruptRecord), columns
    runs, unknown_at = split_round(RoundColumns([columns]), layout, base_offset + first_index)
    assert unknown_at is None
    expected = decoding_split(batch, partition, layout, first_index)
    assert set(runs) == set(expected)
    for vp, run in runs.items():
        chunk = SplitChunk([run])
        assert [encoded for _, encoded in chunk.vp_batches()] == expected[vp], f"VP {vp}"
        routed = route_records(header, decode_batch(batch), partition, layout)[vp]
        assert list(chunk) == [r for r in routed if r.offset >= base_offset + first_index]


@settings(max_examples=40, deadline=None)
@given(batches=st.lists(st.tuples(records_strategy, st.sampled_from(list(Codec)), st.booleans()), min_size=1,
                        max_size=4),
       vps=st.integers(1, 12), records_max=st.integers(1, 40), data=st.data())
def test_a_round_of_batches_with_and_without_the_column_feeds_the_vp_batches_of_a_round_without_it(
        batches, vps, records_max, data):
    partition = 1
    fetched, plain, offset = bytearray(), bytearray(), 0
    for number, (records, codec, with_column) in enumerate(batches):
        # Batches of distinct base timestamps but for the first two, whose VP batches have one run of both.
        first_timestamp_ms = 1_000_000 * max(number, 1)
        fetched += producer_batch(records, offset, partition, codec, base_sequence=offset, with_column=with_column,
                                  first_timestamp_ms=first_timestamp_ms)
        plain += producer_batch(records, offset, partition, codec, base_sequence=offset, with_column=False,
                                first_timestamp_ms=first_timestamp_ms)
        offset += len(records)
    next_offset = data.draw(st.integers(0, offset - 1), "next_offset")
    layout = layout_of(vps, data.draw(st.one_of(st.none(), st.integers(0, offset)), "cut"))
    mixed = plan_round(bytes(fetched), partition, layout, next_offset, records_max)
    slow = plan_round(bytes(plain), partition, layout, next_offset, records_max=10**6)
    assert mixed.bad_columns == () and (mixed.next_offset, mixed.records) == (slow.next_offset, slow.records)
    assert set(mixed.chunks) == set(slow.chunks)
    for vp, chunks in mixed.chunks.items():
        assert all(1 <= len(chunk) <= records_max for chunk in chunks)
        made = [encoded for chunk in chunks for _, encoded in vp_batches(chunk)]
        # A chunk ends at records_max: a VP batch of the slow round may be cut in two here.
        expected = [encoded for chunk in slow.chunks[vp] for _, encoded in vp_batches(chunk)]
        assert _records_of(made) == _records_of(expected)
        if records_max >= offset and len({with_column for _, _, with_column in batches}) == 1:
            assert made == expected  # one kind of chunk: a VP batch per codec run of the round, as the slow one's
    held_vp = data.draw(st.sampled_from(sorted(mixed.chunks)), "held")
    cut = data.draw(st.integers(next_offset, offset), "withheld from")
    kept = withhold(mixed.chunks, [held_vp], cut)
    assert [r.offset for c in kept.get(held_vp, ()) for r in c] == [
        r.offset for c in mixed.chunks[held_vp] for r in c if r.offset < cut]


def _records_of(vp_batches_made: list[bytes]) -> list:
    """The records of VP batches as a consumer reads them, but for their VP offsets."""
    return [record[1:] for encoded in vp_batches_made for record in decode_batch(_stamped(encoded))]


def _stamped(encoded: bytes) -> bytearray:
    batch = bytearray(encoded)
    stamp(batch, 0, 0)
    return batch


def test_the_vp_leader_drops_what_it_holds_of_a_split_chunk_and_records_the_rest():
    records = [(index, b"key-%d" % (index % 5), b"value-%d" % index, None) for index in range(50)]
    batch = producer_batch(records, 100, 0, Codec.ZSTD)
    planned = plan_round(bytes(batch), 0, layout_of(2, None), 100, records_max=7)
    progress = FeedProgress()
    for vp_chunks in planned.chunks.values():
        chunk = vp_chunks[1]
        assert isinstance(chunk, SplitChunk)
        progress = FeedProgress()
        fresh = progress.unapplied(chunk)
        assert len(fresh) == len(chunk)
        progress.applied(fresh)
        assert progress.last_applied(0) == chunk.last_offset
        assert progress.unapplied(chunk) == [], "re-fed records are dropped"
        assert [r.offset for r in progress.unapplied(vp_chunks[2])] == [r.offset for r in vp_chunks[2]]


def test_readers_of_records_ignore_the_column():
    records = [(3, b"k", b"v", [("h", b"x")]), (5, None, b"w", None)]
    for codec in Codec:
        with_column = producer_batch(records, 10, 2, codec)
        without = producer_batch(records, 10, 2, codec, with_column=False)
        assert read_header(with_column).attributes & ATTRIBUTE_KEY_HASHES
        assert decode_batch(with_column) == decode_batch(without)


def test_the_producers_column_holds_each_records_message_hash():
    records = [(0, b"a", b"v", None), (0, None, b"v", None), (0, b"bb", b"v", None), (0, None, b"v", None)]
    column = message_hash_column(records, 77, 3, 10)
    assert struct.unpack(">4Q", column) == tuple(
        message_hash(key, 3, 77, 10 + index, 0) for index, (_, key, _, _) in enumerate(records))


def test_the_leader_takes_the_column_only_from_a_producer_with_an_id():
    records = [(0, b"k", b"v", None)]
    assert check_producer_batch(producer_batch(records, 0, 0, Codec.NONE)).hashed
    without_id = bytearray(encode_record_arrays(records, 0, 0, codec=Codec.NONE))
    reframed = frame_payload(bytes(without_id[HEADER_BYTES:]), ATTRIBUTE_KEY_HASHES, 1, 0, 0, -1, -1)
    with pytest.raises(CorruptRecord, match="key-hash column but no producer id"):
        check_producer_batch(reframed)


@pytest.mark.parametrize("codec", list(Codec))
def test_a_column_that_disagrees_with_a_key_is_reported_and_the_batch_split_by_its_keys(codec):
    records = [(index, b"key-%d" % index, b"value", None) for index in range(20)]
    good = message_hash_column(records, 7, 0, 0)
    # Record 0's entry is record 1's: a producer hashing the wrong key.
    bad = good[8:16] + good[8:]
    batch = bytearray(encode_record_arrays(records, 1_000, 1_020, 7, 0, codec, message_hashes=bad))
    stamp(batch, 0, 0)
    layout = layout_of(16, None)
    planned = plan_round(bytes(batch), 0, layout, 0, records_max=100)
    (problem,) = planned.bad_columns
    assert "says record 0 hashes to" in str(problem) and "fix or upgrade that producer" in str(problem)
    assert "split it by its decoded keys" in str(problem)
    expected = decoding_split(batch, 0, layout)
    assert {vp: [e for c in chunks for _, e in vp_batches(c)] for vp, chunks in planned.chunks.items()} == expected


def test_record_ends_that_do_not_cut_records_are_reported():
    records = [(index, b"key-%d" % index, b"value", None) for index in range(5)]
    batch = producer_batch(records, 0, 0, Codec.NONE)
    payload_end = len(batch)
    # The last 4 bytes are record 4's end; record 3's end moved one byte back cuts record 4 wrongly.
    end_3 = payload_end - 8
    (value,) = struct.unpack_from(">I", batch, end_3)
    struct.pack_into(">I", batch, end_3, value - 1)
    header = read_header(batch)
    reframed = bytearray(frame_payload(bytes(batch[HEADER_BYTES:]), header.attributes, header.count,
                                      header.first_timestamp_ms, header.max_timestamp_ms, header.producer_id,
                                      header.base_sequence))
    planned = plan_round(bytes(reframed), 0, layout_of(4, None), 0, records_max=100)
    (problem,) = planned.bad_columns
    assert "record end" in str(problem)
    assert planned.records == 5, "split by its keys all the same"


def test_a_vp_batch_spans_the_physical_batches_of_a_round_with_a_timestamp_run_for_each():
    partition, fetched, offset = 0, bytearray(), 0
    for number in range(6):
        records = [(delta, b"key-%d" % (offset + delta), b"v", None) for delta in range(10)]
        fetched += producer_batch(records, offset, partition, Codec.LZ4, base_sequence=offset,
                                  first_timestamp_ms=5_000 + 100 * number)
        offset += len(records)
    planned = plan_round(bytes(fetched), partition, layout_of(3, None), 0, records_max=1_000)
    for vp, (chunk,) in planned.chunks.items():
        ((_, encoded),) = list(vp_batches(chunk))
        header = read_header(encoded)
        assert header.timestamp_runs and header.count == len(chunk)
        assert (header.first_timestamp_ms, header.max_timestamp_ms) == (5_000, 5_509)
        # Each record's timestamp: its physical batch's base (5,000 + 100 a batch) and its own delta.
        assert [r.timestamp_ms for r in decode_batch(_stamped(encoded))] == [
            5_000 + 100 * (source.offset // 10) + source.offset % 10 for source in chunk]


@pytest.mark.parametrize("runs, problem", [
    (struct.pack(">Iq", 0, 1), "not two or more runs"),
    (struct.pack(">IqIq", 1, 1, 2, 2), "not 0 first"),
    (struct.pack(">IqIq", 0, 1, 0, 2), "not 0 first, then ascending"),
    (struct.pack(">IqIq", 0, 1, 9, 2), "below its 3 records"),
    (b"\0" * 13, "not two or more runs of 12 bytes"),
])
def test_timestamp_runs_that_do_not_cut_the_records_are_refused(runs, problem):
    records = [(0, b"k", b"v", None)] * 3
    sources = struct.pack(">iqiqiq", 0, 1, 0, 2, 0, 3)
    bad = bytearray(encode_record_arrays(records, 0, 0, sources=sources, timestamp_runs=struct.pack(">IqIq", 0, 1, 2, 2)))
    header = read_header(bad)
    payload = msgpack.packb([records, sources, runs], use_bin_type=True)
    reframed = _stamped(frame_payload(payload, header.attributes, 3, 0, 0, -1, -1))
    with pytest.raises(CorruptRecord, match=problem):
        decode_batch(reframed)


def fetched_and_plain(batches, partition: int) -> tuple[bytearray, bytearray, int]:
    """Producer batches of ``batches`` ((records, codec, with the key-hash column, base)) at
    consecutive offsets as a leader serves them, the same without the column (what the decoding
    split reads), and the next offset. Bases 0-2: neighbouring batches often share their base
    timestamp."""
    fetched, plain, offset = bytearray(), bytearray(), 0
    for records, codec, with_column, base in batches:
        fetched += producer_batch(records, offset, partition, codec, base_sequence=offset, with_column=with_column,
                                  first_timestamp_ms=1_000 * (base + 1))
        plain += producer_batch(records, offset, partition, codec, base_sequence=offset, with_column=False,
                                first_timestamp_ms=1_000 * (base + 1))
        offset += len(records)
    return fetched, plain, offset


@settings(max_examples=60, deadline=None)
@given(batches=st.lists(st.tuples(records_strategy, st.sampled_from(list(Codec)), st.integers(0, 2)), min_size=2,
                        max_size=6),
       vps=st.integers(1, 64), data=st.data())
def test_a_round_of_column_batches_is_split_at_once_into_the_decoding_splits_vp_batches(batches, vps, data):
    partition = 2
    fetched, plain, offset = fetched_and_plain([(records, codec, True, base) for records, codec, base in batches],
                                               partition)
    next_offset = data.draw(st.integers(0, offset - 1), "next_offset")
    layout = layout_of(vps, data.draw(st.one_of(st.none(), st.integers(0, offset)), "cut"))
    split = plan_round(bytes(fetched), partition, layout, next_offset, records_max=10**6)
    decoded = plan_round(bytes(plain), partition, layout, next_offset, records_max=10**6)
    assert set(split.chunks) == set(decoded.chunks)
    for vp, (chunk,) in split.chunks.items():
        assert isinstance(chunk, SplitChunk)
        (expected,) = decoded.chunks[vp]
        assert [encoded for _, encoded in vp_batches(chunk)] == [encoded for _, encoded in vp_batches(expected)]
        assert list(chunk) == list(expected)


@settings(max_examples=60, deadline=None)
@given(batches=st.lists(st.tuples(records_strategy, st.sampled_from(list(Codec)), st.booleans(), st.integers(0, 2)),
                        min_size=1, max_size=6),
       vps=st.integers(1, 1023), records_max=st.integers(1, 400), data=st.data())
def test_many_vps_some_led_elsewhere_get_the_decoding_splits_vp_batches_of_what_they_lack(batches, vps, records_max,
                                                                                            data):
    """Rounds of batches with and without the column, of mixed codecs and base timestamps, into up to
    1,023 VPs (most of them empty in a round), of which the read node leads some: every VP batch, of
    a whole chunk or of the part a VP lacks (``FeedProgress``) or is not withheld, is the one the
    decoding split makes of the same records."""
    partition = 3
    fetched, plain, offset = fetched_and_plain(batches, partition)
    next_offset = data.draw(st.integers(0, offset - 1), "next_offset")
    layout = layout_of(vps, data.draw(st.one_of(st.none(), st.integers(0, offset)), "cut"))
    every_vp = sorted({vp for epoch in layout.epochs for vp in epoch.ranges.vp_ids})
    wanted = data.draw(st.one_of(st.none(), st.sets(st.sampled_from(every_vp))), "wanted")
    mixed = plan_round(bytes(fetched), partition, layout, next_offset, records_max, wanted)
    slow = plan_round(bytes(plain), partition, layout, next_offset, 10**6, wanted)
    assert set(mixed.chunks) == set(slow.chunks) <= (set(every_vp) if wanted is None else wanted)
    assert (mixed.records, mixed.next_offset) == (slow.records, slow.next_offset)
    for vp, chunks in mixed.chunks.items():
        assert [r for c in chunks for r in c] == [r for c in slow.chunks[vp] for r in c]
        for chunk in chunks:
            last_applied = data.draw(st.integers(next_offset - 1, offset), "last_applied")
            fresh = FeedProgress({partition: last_applied} if last_applied >= 0 else {}).unapplied(chunk)
            assert [encoded for _, encoded in vp_batches(fresh)] == _decoding_vp_batches(
                [r for r in chunk if r.offset > last_applied])
            kept = withhold({vp: (chunk,)}, [vp], data.draw(st.integers(next_offset, offset), "withheld from"))
            for below in kept.get(vp, ()):
                assert [encoded for _, encoded in vp_batches(below)] == _decoding_vp_batches(list(below))


def _decoding_vp_batches(records) -> list[bytes]:
    """The VP batches the decoding split makes of ``records`` (decoded): one per codec run."""
    return [encode_vp_batch(run, codec) for codec, run in codec_runs(records)]


def test_a_vp_chunk_of_column_batches_around_a_batch_without_the_column_keeps_every_timestamp_run():
    """VP 0 gets nothing from a batch without the column between two pairs of batches with it: its
    chunk holds two runs (of two splits of the round), and its VP batch the timestamp runs of all four."""
    partition, layout = 1, layout_of(2, None)
    keys = {vp: [key for key in (b"key-%d" % index for index in range(200))
                 if layout.current.ranges.vp_for_hash(message_hash(key, partition, 7, 0, 0)) == vp][:4] for vp in (0, 1)}
    fetched, plain, offset = bytearray(), bytearray(), 0
    for number, (with_column, vps) in enumerate([(True, (0, 1)), (True, (0, 1)), (False, (1,)), (True, (0, 1)),
                                                 (True, (0, 1))]):
        records = [(delta, key, b"value", None) for delta, key in enumerate(k for vp in vps for k in keys[vp])]
        for batches, column in ((fetched, with_column), (plain, False)):
            batches += producer_batch(records, offset, partition, Codec.NONE, base_sequence=offset, with_column=column,
                                      first_timestamp_ms=1_000 * (number + 1))
        offset += len(records)
    split = plan_round(bytes(fetched), partition, layout, 0, 1_000)
    decoded = plan_round(bytes(plain), partition, layout, 0, 1_000)
    ((chunk,), (expected,)) = split.chunks[0], decoded.chunks[0]
    assert isinstance(chunk, SplitChunk) and len(chunk.runs) == 2
    ((_, encoded),) = list(vp_batches(chunk))
    assert read_header(encoded).timestamp_runs
    assert [encoded] == [made for _, made in vp_batches(expected)]


def test_a_vp_chunk_makes_one_vp_batch_per_run_of_a_codec_whether_its_round_has_one_codec_or_more():
    partition, layout = 0, layout_of(2, None)
    records = [(delta, b"key-%d" % delta, b"v", None) for delta in range(20)]

    def codecs_of_vp_batches(codecs) -> dict[int, list[Codec]]:
        fetched = b"".join(producer_batch(records, 20 * number, partition, codec, base_sequence=20 * number)
                           for number, codec in enumerate(codecs))
        planned = plan_round(fetched, partition, layout, 0, records_max=1_000)
        return {vp: [read_header(encoded).codec for chunk in chunks for _, encoded in vp_batches(chunk)]
                for vp, chunks in planned.chunks.items()}

    one_codec = codecs_of_vp_batches([Codec.LZ4, Codec.LZ4, Codec.LZ4])
    assert one_codec == {0: [Codec.LZ4], 1: [Codec.LZ4]}, "a VP's records of a round of one codec: one VP batch"
    mixed = codecs_of_vp_batches([Codec.LZ4, Codec.NONE, Codec.NONE, Codec.LZ4])
    assert mixed == {0: [Codec.LZ4, Codec.NONE, Codec.LZ4], 1: [Codec.LZ4, Codec.NONE, Codec.LZ4]}
