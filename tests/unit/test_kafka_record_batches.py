"""Kafka record batches (``mafka4.kafka.record_batches``), checked against an independent
implementation: batches built by kafka-python's ``DefaultRecordBatchBuilder`` are read here, and
batches written here (or converted from mafka4's) are read by kafka-python's ``MemoryRecords``."""

from __future__ import annotations

import gzip
import struct
import tracemalloc

import lz4.frame
import pytest
import zstandard
from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.legacy_records import LegacyRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from mafka4.batch_frame import stamp
from mafka4.batch_payload import SOURCE_HEADER, decode_batches, encode_batch, encode_record_arrays
from mafka4.compression import Codec
from mafka4.errors import CorruptRecord, InvalidRecord, MessageTooLarge, UnknownCodec
from mafka4.kafka.record_batches import (BATCH_HEADER, CRC_START, KafkaBatch, KafkaRecord, kafka_records_as_mafka4,
                                         mafka4_to_kafka, read_kafka_batches, write_kafka_batch)
from mafka4.virtual.vp_records import SourcedRecord, encode_source, encode_vp_batch

T0 = 1_700_000_000_000
# kafka-python's codec ids; snappy is not installed here, so it builds none.
KAFKA_PYTHON_CODECS = {"none": 0, "gzip": 1, "lz4": 3, "zstd": 4}


def records_in(count: int = 5) -> list[tuple]:
    """``(key, value, timestamp_ms, headers)`` of varied shapes: null keys, empty values, headers with
    and without values, timestamps out of order."""
    return [(None if i % 3 == 0 else b"key-%d" % i, b"v" * (i * 7), T0 + (i * 37) % 11,
             [("trace", b"t%d" % i), ("empty", None)] if i % 2 else []) for i in range(count)]


def kafka_python_batch(codec: int = 0, records: list[tuple] | None = None, base_offset: int = 0,
                       producer: tuple[int, int, int] = (-1, -1, -1), transactional: bool = False) -> bytes:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=transactional,
                                        producer_id=producer[0], producer_epoch=producer[1],
                                        base_sequence=producer[2], batch_size=1 << 24)
    for i, (key, value, timestamp, headers) in enumerate(records or records_in()):
        builder.append(i, timestamp=timestamp, key=key, value=value, headers=headers)
    batch = bytearray(builder.build())
    struct.pack_into(">q", batch, 0, base_offset)
    return bytes(batch)


def with_crc(batch: bytearray) -> bytes:
    """``batch`` with its CRC computed again, after a change."""
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[CRC_START:])))
    return bytes(batch)


def recompressed(batch: bytes, codec_id: int, compress) -> bytes:
    """An uncompressed batch with its records compressed by ``compress`` (as a client other than
    kafka-python might: without the decompressed size in the frame)."""
    header, records = bytearray(batch[:BATCH_HEADER.size]), compress(batch[BATCH_HEADER.size:])
    struct.pack_into(">i", header, 8, BATCH_HEADER.size - 12 + len(records))
    struct.pack_into(">h", header, 21, struct.unpack_from(">h", header, 21)[0] | codec_id)
    return with_crc(header + records)


def as_tuples(batch: KafkaBatch) -> list[tuple]:
    return [(r.key, r.value, r.timestamp_ms, [tuple(h) for h in r.headers]) for r in batch.records]


def expected(records: list[tuple]) -> list[tuple]:
    return [(key, value, timestamp, [tuple(h) for h in headers]) for key, value, timestamp, headers in records]


@pytest.mark.parametrize("codec", sorted(KAFKA_PYTHON_CODECS))
def test_kafka_python_batches_of_every_codec_read_back_with_their_fields(codec):
    records = records_in(40)
    data = kafka_python_batch(KAFKA_PYTHON_CODECS[codec], records, 100, (7, 2, 30))
    data += kafka_python_batch(KAFKA_PYTHON_CODECS[codec], records[:3], 140, (7, 2, 70))
    first, second = read_kafka_batches(data, records_max=43)
    assert (first.base_offset, first.producer_id, first.producer_epoch, first.base_sequence) == (100, 7, 2, 30)
    assert first.attributes & 0x07 == KAFKA_PYTHON_CODECS[codec]
    assert as_tuples(first) == expected(records) and as_tuples(second) == expected(records[:3])
    assert [r.offset_delta for r in first.records] == list(range(40)) and first.last_offset_delta == 39
    assert first.max_timestamp == max(t for _, _, t, _ in records)


@pytest.mark.parametrize("codec_id, compress", [
    (1, lambda data: gzip.compress(data[:100]) + gzip.compress(data[100:])),  # two gzip members
    (3, lambda data: lz4.frame.compress(data, store_size=False)),
    (4, lambda data: zstandard.ZstdCompressor(write_content_size=False).compress(data)),
    (4, lambda data: b"".join(zstandard.ZstdCompressor(write_content_size=False).compress(data[i:i + 300])
                              for i in range(0, len(data), 300))),  # several zstd frames
], ids=["gzip-members", "lz4-no-size", "zstd-no-size", "zstd-frames"])
def test_payloads_that_do_not_say_their_size_decompress(codec_id, compress):
    records = records_in(30)
    (batch,) = read_kafka_batches(recompressed(kafka_python_batch(0, records), codec_id, compress), 100)
    assert as_tuples(batch) == expected(records)


@pytest.mark.parametrize("codec_id, compress", [
    (1, lambda data: gzip.compress(data)),
    (3, lambda data: lz4.frame.compress(data, store_size=False)),
    (4, lambda data: zstandard.ZstdCompressor(write_content_size=False).compress(data)),
], ids=["gzip", "lz4", "zstd"])
def test_a_decompression_bomb_is_refused_before_it_takes_much_memory(codec_id, compress):
    one_record = kafka_python_batch(0, [(None, b"x", T0, [])])
    # The record's bytes, then 64 MiB of zeros that decompress from a few KiB.
    bomb = recompressed(one_record, codec_id, lambda data: compress(data + bytes(64 << 20)))
    assert len(bomb) < 400_000
    tracemalloc.start()
    try:
        with pytest.raises(CorruptRecord, match="payload of more than 1048576 bytes"):
            read_kafka_batches(bomb, 10, decompressed_bytes_max=1 << 20)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < (1 << 20) + (10 << 20), peak  # the bound, one zstd step's 8 MiB, and change


def test_the_decompressed_bound_counts_every_batch_of_the_request():
    batch = recompressed(kafka_python_batch(0, [(None, b"x" * 600_000, T0, [])]), 4,
                         zstandard.ZstdCompressor().compress)
    assert len(read_kafka_batches(batch * 2, 10, decompressed_bytes_max=1_300_000)) == 2
    with pytest.raises(CorruptRecord, match="payload of more than"):
        read_kafka_batches(batch * 2, 10, decompressed_bytes_max=1_100_000)


def test_the_message_formats_before_v2_are_refused_naming_the_fix():
    for magic in (0, 1):
        builder = LegacyRecordBatchBuilder(magic=magic, compression_type=0, batch_size=1 << 20)
        builder.append(0, timestamp=T0 if magic else None, key=b"k", value=b"v")
        with pytest.raises(CorruptRecord, match=f"message format v{magic}, which is not supported; use a client "
                                                r"with message format v2 \(Kafka 0.11\+\)"):
            read_kafka_batches(bytes(builder.build()), 10)


def test_transactional_and_control_batches_are_refused():
    with pytest.raises(CorruptRecord, match="is transactional: transactions are not served"):
        read_kafka_batches(kafka_python_batch(0, producer=(5, 0, 0), transactional=True), 10)
    control = bytearray(kafka_python_batch(0))
    struct.pack_into(">h", control, 21, 0x20)
    with pytest.raises(CorruptRecord, match="is a control batch"):
        read_kafka_batches(with_crc(control), 10)


@pytest.mark.parametrize("codec_id, problem", [(2, "compressed with snappy"), (5, "codec id 5")])
def test_snappy_and_undefined_codecs_are_refused_as_unknown(codec_id, problem):
    batch = bytearray(kafka_python_batch(0))
    struct.pack_into(">h", batch, 21, codec_id)
    with pytest.raises(UnknownCodec, match=problem):
        read_kafka_batches(with_crc(batch), 10)


def test_a_damaged_or_truncated_batch_is_corrupt():
    batch = kafka_python_batch(0)
    damaged = bytearray(batch)
    damaged[-1] ^= 1
    with pytest.raises(CorruptRecord, match="fails its CRC"):
        read_kafka_batches(bytes(damaged), 10)
    for cut in (1, 20, BATCH_HEADER.size, len(batch) - 1):
        with pytest.raises(CorruptRecord, match="truncated"):
            read_kafka_batches(batch + batch[:cut], 10)


def test_more_records_than_a_request_may_carry_are_too_large():
    data = kafka_python_batch(0, records_in(5)) * 2
    assert len(read_kafka_batches(data, 10)) == 2
    with pytest.raises(MessageTooLarge, match="more than the 3 records"):
        read_kafka_batches(data, 8)


def test_records_with_gaps_in_their_offsets_are_not_a_producers_batch():
    gapped = write_kafka_batch(0, 0, [KafkaRecord(0, T0, None, b"a"), KafkaRecord(2, T0, None, b"b")])
    with pytest.raises(CorruptRecord, match="holds 2 records but a last offset delta of 2"):
        read_kafka_batches(gapped, 10)


def test_written_batches_read_the_same_in_kafka_python_and_here():
    records = tuple(KafkaRecord(i, T0 + 5 - i, None if i == 2 else b"k%d" % i, None if i == 3 else b"v" * i,
                                (("h", None), ("é", b"x")) if i == 1 else ()) for i in range(6))
    data = write_kafka_batch(1_000, 9, records, producer_id=11, producer_epoch=1, base_sequence=4)
    batch = MemoryRecords(data).next_batch()
    assert (batch.base_offset, batch.leader_epoch, batch.producer_id, batch.base_sequence) == (1_000, 9, 11, 4)
    assert batch.validate_crc() and batch.max_timestamp == T0 + 5
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in batch] == [
        (1_000 + r.offset_delta, r.timestamp_ms, r.key, r.value, [tuple(h) for h in r.headers]) for r in records]
    (again,) = read_kafka_batches(data, 10)
    assert again.records == records and again.partition_leader_epoch == 9


def kafka_python_read(data: bytes) -> list[tuple]:
    """Every record of ``data`` as kafka-python's consumer reads a fetch's records."""
    memory, rows = MemoryRecords(data), []
    while memory.has_next():
        batch = memory.next_batch()
        if batch is None:  # a partial batch at the end
            break
        assert batch.validate_crc()
        rows += [(batch.leader_epoch, r.offset, r.timestamp, r.key, r.value, r.headers) for r in batch]
    return rows


def stored(records: list[tuple], base_offset: int, epoch: int, codec: Codec = Codec.NONE) -> bytes:
    batch = bytearray(encode_batch(records, codec=codec))
    stamp(batch, base_offset, epoch)
    return bytes(batch)


def test_mafka4_batches_convert_with_their_offsets_epochs_timestamps_and_records():
    first = [(b"k%d" % i, b"v" * i, T0 + i % 4, [("h", b"%d" % i)] if i % 2 else None) for i in range(10)]
    second = [(None, b"", T0 - 3, None), (b"k", b"value", T0 + 100, [("a", b""), ("b", b"bb")])]
    data = stored(first, 0, 1, Codec.LZ4) + stored(second, 10, 2, Codec.ZSTD) + stored(first[:3], 12, 2)
    rows = kafka_python_read(mafka4_to_kafka(data))
    epochs = [1] * 10 + [2] * 5
    assert rows == [(epoch, r.offset, r.timestamp_ms, r.key, r.value, list(r.headers))
                    for epoch, r in zip(epochs, decode_batches(data))]
    assert [offset for _, offset, *_ in rows] == list(range(15))


def test_a_partial_batch_at_the_end_is_left_out_and_nothing_is_none():
    whole = stored(records_in_mafka4(4), 0, 0) + stored(records_in_mafka4(2), 4, 0)
    cut = stored(records_in_mafka4(3), 6, 0)
    for end in (1, 54, 55, 56, len(cut) - 1):
        assert mafka4_to_kafka(whole + cut[:end]) == mafka4_to_kafka(whole)
    assert mafka4_to_kafka(b"") == b""
    assert len(kafka_python_read(mafka4_to_kafka(whole + cut))) == 9


def records_in_mafka4(count: int) -> list[tuple]:
    return [(b"k%d" % i, b"value-%d" % i, T0 + i, None) for i in range(count)]


def test_a_damaged_whole_mafka4_batch_is_corrupt():
    damaged = bytearray(stored(records_in_mafka4(3), 0, 0))
    damaged[-2] ^= 0x40
    with pytest.raises(CorruptRecord, match="fails its CRC"):
        mafka4_to_kafka(bytes(damaged))


def test_a_vp_batch_converts_without_its_sources_and_with_each_runs_timestamps():
    """A VP batch of records from two physical batches (sources beside the records, two timestamp
    runs), as a read node's VP leader writes it; and one from before sources were a column, whose
    records carry their source as their last header."""
    records = [SourcedRecord(0, 40 + i, 0, T0 + i, b"k%d" % i, b"a%d" % i, (("app", b"1"),) if i else (),
                             Codec.ZSTD, (T0, T0 + 2)) for i in range(3)]
    records += [SourcedRecord(1, 7 + i, 0, T0 - 50 + i, None, b"b%d" % i, (), Codec.ZSTD, (T0 - 50, T0 - 49))
                for i in range(2)]
    vp_batch = bytearray(encode_vp_batch(records, Codec.ZSTD))
    stamp(vp_batch, 300, 4)
    old_vp_batch = stored([(b"k", b"old", T0, [("app", b"2"), (SOURCE_HEADER, encode_source(2, 99))])], 305, 4)
    rows = kafka_python_read(mafka4_to_kafka(bytes(vp_batch) + old_vp_batch))
    assert rows == [(4, 300 + i, r.timestamp_ms, r.key, r.value, [tuple(h) for h in r.headers])
                    for i, r in enumerate(records)] + [(4, 305, T0, b"k", b"old", [("app", b"2")])]
    assert all(name != SOURCE_HEADER for *_, headers in rows for name, _ in headers)


def test_kafka_records_become_mafka4_record_arrays_that_decode_to_the_same_records():
    records = records_in(8)
    (batch,) = read_kafka_batches(kafka_python_batch(4, records), 10)
    first_timestamp_ms, arrays = kafka_records_as_mafka4(batch)
    assert first_timestamp_ms == records[0][2]
    # Routed to two partitions, as the produce handler regroups records by key.
    for group in (arrays[0::2], arrays[1::2]):
        deltas = [delta for delta, *_ in group]
        encoded = bytearray(encode_record_arrays(group, first_timestamp_ms, first_timestamp_ms + max(deltas)))
        stamp(encoded, 0, 0)
        decoded = decode_batches(bytes(encoded))
        assert [(r.key, r.value, r.timestamp_ms, list(r.headers)) for r in decoded] == [
            (key, value, first_timestamp_ms + delta, [(name, data or b"") for name, data in headers or ()])
            for delta, key, value, headers in group]
    assert [delta for delta, *_ in arrays] == [t - records[0][2] for _, _, t, _ in records]


@pytest.mark.parametrize("record, problem", [
    (KafkaRecord(0, T0, b"k", None), "has no value \\(a tombstone\\)"),
    (KafkaRecord(0, -1, b"k", b"v"), "has timestamp -1"),
    (KafkaRecord(0, T0, b"k", b"v", (("mafka4.src", b"x"),)), "header 'mafka4.src'"),
])
def test_what_mafka4_does_not_store_is_an_invalid_record(record, problem):
    (batch,) = read_kafka_batches(write_kafka_batch(0, 0, [record]), 10)
    with pytest.raises(InvalidRecord, match=problem):
        kafka_records_as_mafka4(batch)


VALID_BATCHES = [
    kafka_python_batch(0, records_in(6)),
    kafka_python_batch(1, records_in(6)),
    kafka_python_batch(3, records_in(6)),
    kafka_python_batch(4, records_in(6)),
    write_kafka_batch(0, 0, [KafkaRecord(i, T0, b"k", b"v", (("h", b"x"),)) for i in range(4)]),
]


def reads_or_refuses(data: bytes) -> None:
    try:
        read_kafka_batches(data, records_max=1_000)
    except (CorruptRecord, MessageTooLarge):
        pass


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_random_bytes_are_batches_or_corrupt(data):
    reads_or_refuses(data)
    reads_or_refuses(VALID_BATCHES[0] + data)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(VALID_BATCHES), st.data())
def test_truncated_and_flipped_batches_are_refused(batch, data):
    cut = data.draw(st.integers(0, len(batch) - 1))
    with pytest.raises(CorruptRecord):
        read_kafka_batches(batch[:cut] if cut else batch + batch[:1], records_max=1_000)
    position = data.draw(st.integers(0, len(batch) - 1))
    flipped = bytearray(batch)
    flipped[position] ^= data.draw(st.integers(1, 255))
    if position not in range(0, 8) and position not in range(12, 16):  # the offset and epoch: no CRC covers them
        with pytest.raises(CorruptRecord):
            read_kafka_batches(bytes(flipped), records_max=1_000)


@settings(max_examples=500, deadline=None)
@given(st.sampled_from(VALID_BATCHES), st.data())
def test_changes_behind_a_recomputed_crc_are_batches_or_corrupt(batch, data):
    """A CRC proves only that bytes arrived as sent: every field behind it is checked too."""
    changed = bytearray(batch)
    for _ in range(data.draw(st.integers(1, 4))):
        changed[data.draw(st.integers(CRC_START, len(batch) - 1))] = data.draw(st.integers(0, 255))
    reads_or_refuses(with_crc(changed))


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_converting_cut_or_damaged_mafka4_batches_drops_the_tail_or_refuses(data):
    batches = [stored(records_in_mafka4(3), 0, 0), stored(records_in_mafka4(2), 3, 1, Codec.ZSTD)]
    whole = b"".join(batches)
    cut = data.draw(st.integers(0, len(whole)))
    kept = len(batches[0]) <= cut
    assert len(kafka_python_read(mafka4_to_kafka(whole[:cut]))) == (3 if kept else 0) + (2 if cut == len(whole) else 0)
    damaged = bytearray(whole)
    damaged[data.draw(st.integers(0, len(whole) - 1))] ^= data.draw(st.integers(1, 255))
    try:
        mafka4_to_kafka(bytes(damaged))
    except CorruptRecord:
        pass
