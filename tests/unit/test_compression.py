"""Compressed batches (``mafka4.compression``, ``mafka4.batch_frame``, ``mafka4.batch_payload``):
what a producer chooses is what every reader decodes, the CRC guards the compressed bytes, and bad
codecs or bad compressed data are named errors, never wrong records.

The feeder's side (VP sub-batches recompressed with their source's codec) is tested on real VP
logs here and on the real feed stream in ``test_partition_feed.py``.
"""

from __future__ import annotations

import struct
import zlib

import lz4.frame
import pytest
import zstandard

from mafka4 import batch_frame, batch_payload
from mafka4.compression import CODEC_MASK, Codec, compress, decompress
from mafka4.errors import CorruptRecord, InvalidConfig, UnknownCodec
from mafka4.limits import COMPRESSION_ENV, ProducerConfig, default_compression
from mafka4.limits.servers import LogConfig
from mafka4.risr.state import RisrConfig
from mafka4.virtual.hosted_vp import HostedVp, VpId
from mafka4.virtual.layout import TopicLayout
from mafka4.virtual.vp_records import SourcedRecord, codec_runs, route_batch, source_of, strip_source

# JSON-like values: what compression is for, and what makes a compressed payload much smaller.
ITEMS = [(b"user-%d" % (i % 7), b'{"event": "click", "page": "/orders/%d", "ok": true}' % i, 1_000 + i,
          [("trace", b"t%d" % i)] if i % 3 == 0 else None) for i in range(200)]
COMPRESSED = (Codec.LZ4, Codec.ZSTD)


def stamped(batch: bytes, base_offset: int, leader_epoch: int = 0) -> bytes:
    data = bytearray(batch)
    batch_frame.stamp(data, base_offset, leader_epoch)
    return bytes(data)


def with_payload(batch: bytes, payload: bytes, attributes: int | None = None) -> bytes:
    """``batch`` with its stored payload (and attributes) replaced, length and CRC made valid again:
    what a buggy or hostile producer can send."""
    header = batch_frame.read_header(batch)
    body = bytearray(batch[batch_frame.CRC_START:batch_frame.HEADER_BYTES] + payload)
    if attributes is not None:
        struct.pack_into(">h", body, 0, attributes)
    length = len(body) + batch_frame.CRC_START - batch_frame.LENGTH_PREFIX_BYTES
    return struct.pack(">qiibI", header.base_offset, length, header.leader_epoch, batch_frame.MAGIC,
                       zlib.crc32(body)) + bytes(body)


def as_items(decoded: list[batch_payload.Record]) -> list[tuple]:
    return [(r.key, r.value, r.timestamp_ms, list(r.headers) or None) for r in decoded]


# --- the batch format ---------------------------------------------------------------------


@pytest.mark.parametrize("codec", list(Codec))
def test_each_codec_round_trips_and_is_recorded_in_the_low_attribute_bits(codec):
    batch = stamped(batch_payload.encode_batch(ITEMS, producer_id=7, base_sequence=3, codec=codec), 500)
    header = batch_frame.check_single_batch(batch)
    assert header.attributes & CODEC_MASK == codec.value and header.attributes >> 3 == 0
    assert header.codec is codec and header.count == len(ITEMS)
    decoded = batch_payload.decode_batch(batch)
    assert [r.offset for r in decoded] == list(range(500, 500 + len(ITEMS)))
    assert as_items(decoded) == ITEMS


def test_a_compressed_batch_stores_fewer_bytes_than_the_plain_one():
    plain = len(batch_payload.encode_batch(ITEMS))
    for codec in COMPRESSED:
        assert len(batch_payload.encode_batch(ITEMS, codec=codec)) < plain / 3, codec


def test_batches_of_mixed_codecs_decode_from_one_byte_stream():
    codecs = [Codec.ZSTD, Codec.NONE, Codec.LZ4, Codec.ZSTD, Codec.LZ4]
    stream, offset = b"", 0
    for number, codec in enumerate(codecs):
        chunk = ITEMS[number * 10:number * 10 + 10]
        stream += stamped(batch_payload.encode_batch(chunk, codec=codec), offset)
        offset += len(chunk)
    assert [header.codec for _, header in batch_frame.iter_batches(stream)] == codecs
    decoded = batch_payload.decode_batches(stream)
    assert [r.offset for r in decoded] == list(range(50)) and as_items(decoded) == ITEMS[:50]


@pytest.mark.parametrize("codec", COMPRESSED)
def test_the_crc_covers_the_compressed_bytes_so_a_flipped_compressed_byte_is_corrupt(codec):
    batch = bytearray(stamped(batch_payload.encode_batch(ITEMS, codec=codec), 0))
    header = batch_frame.read_header(batch)
    stored = bytes(batch[batch_frame.HEADER_BYTES:])
    assert header.crc == zlib.crc32(bytes(batch[batch_frame.CRC_START:]))
    plain_payload = batch_payload.encode_batch(ITEMS)[batch_frame.HEADER_BYTES:]
    assert decompress(codec, stored, batch_frame.PAYLOAD_BYTES_MAX) == plain_payload, "what is stored is the frame"
    batch[batch_frame.HEADER_BYTES + len(stored) // 2] ^= 0x10
    with pytest.raises(CorruptRecord, match="fails its CRC"):
        batch_frame.check_batch(batch)
    with pytest.raises(CorruptRecord, match="fails its CRC"):
        batch_payload.decode_batch(batch)
    assert list(batch_frame.iter_batches(bytes(batch))) == [], "log recovery stops before it"


def _damaged_blocks(stored: bytes) -> bytes:
    damaged = bytearray(stored)
    for position in range(len(damaged) // 3, len(damaged) - 8):  # the blocks, past the frame header
        damaged[position] ^= 0x5A
    return bytes(damaged)


BAD_FRAMES = {
    "damaged blocks": _damaged_blocks,
    "truncated frame": lambda stored: stored[:-5],
    "bytes after the frame": lambda stored: stored + b"tail",
    "two frames": lambda stored: stored + stored,
    "not a frame": lambda stored: b"\x93\x00\xc0\xc4\x01v" * 4,
    "empty": lambda stored: b"",
}


@pytest.mark.parametrize("problem", BAD_FRAMES)
@pytest.mark.parametrize("codec", COMPRESSED)
def test_corrupt_compressed_data_under_a_valid_crc_is_a_corrupt_record_naming_the_batch_and_codec(codec, problem):
    batch = stamped(batch_payload.encode_batch(ITEMS, codec=codec), 4_242)
    bad = with_payload(batch, BAD_FRAMES[problem](batch[batch_frame.HEADER_BYTES:]))
    batch_frame.check_single_batch(bad)  # the CRC is valid: a broker appends it, and only a reader can tell
    with pytest.raises(CorruptRecord, match=f"batch at offset 4242 has a {codec} payload that does not decompress"):
        batch_payload.decode_batch(bad)


def test_a_frame_claiming_more_than_a_batch_may_hold_is_refused_before_anything_is_allocated():
    big = b"x" * 100_000
    for codec in COMPRESSED:
        with pytest.raises(CorruptRecord, match="claims a payload of 100000 bytes; a payload has 1 to 99999"):
            decompress(codec, compress(codec, big), 99_999)
        assert decompress(codec, compress(codec, big), 100_000) == big


def test_a_frame_that_does_not_store_its_size_is_refused():
    payload = b"\x91\x94\x00\xc0\xc4\x01v\xc0"  # one record, [0, nil, b"v", nil]
    without_size = {Codec.LZ4: lz4.frame.compress(payload, store_size=False),
                    Codec.ZSTD: zstandard.ZstdCompressor(write_content_size=False).compress(payload)}
    batch = batch_payload.encode_batch([(None, b"v", 0, None)])
    for codec, frame in without_size.items():
        with pytest.raises(CorruptRecord, match="does not decompress: the frame claims a payload of"):
            batch_payload.decode_batch(with_payload(batch, frame, attributes=codec.value))


@pytest.mark.parametrize("codec_id", range(3, CODEC_MASK + 1))
def test_an_unknown_codec_id_is_a_named_error_a_leader_refuses_and_a_reader_raises(codec_id):
    batch = stamped(with_payload(batch_payload.encode_batch(ITEMS[:3]), b"whatever", attributes=codec_id), 77)
    with pytest.raises(UnknownCodec, match=fr"batch at offset 77 is compressed with codec id {codec_id}, which "
                                           fr"this version does not know \(known: 0 none, 1 lz4, 2 zstd\)"):
        batch_payload.decode_batch(batch)
    with pytest.raises(UnknownCodec, match=f"the batch of 3 records sent is compressed with codec id {codec_id}"):
        batch_frame.check_single_batch(batch)  # what a leader checks before appending
    assert issubclass(UnknownCodec, CorruptRecord), "handled wherever a corrupt batch is"
    # Recovery and replication check only the CRC: a log holding such a batch is not truncated.
    assert batch_frame.check_batch(batch).attributes == codec_id
    assert len(list(batch_frame.iter_batches(batch))) == 1


def test_the_reserved_attribute_bits_do_not_change_the_codec():
    batch = batch_payload.encode_batch(ITEMS[:3], codec=Codec.ZSTD)
    stored = batch[batch_frame.HEADER_BYTES:]
    flagged = with_payload(batch, stored, attributes=Codec.ZSTD.value | 0x0100)
    assert batch_frame.read_header(flagged).codec is Codec.ZSTD
    assert as_items(batch_payload.decode_batch(flagged)) == ITEMS[:3]


# --- the feeder's split ----------------------------------------------------------------------


def test_splitting_a_compressed_batch_gives_each_vp_its_records_with_the_batchs_codec():
    layout = TopicLayout.initial(partitions=1, virtual_partitions=3)
    batch = stamped(batch_payload.encode_batch(ITEMS, producer_id=9, base_sequence=0, codec=Codec.LZ4), 1_000)
    by_vp = route_batch(batch, 0, layout)
    assert len(by_vp) == 3
    assert sorted(r.offset for vp_records in by_vp.values() for r in vp_records) == list(range(1_000, 1_200))
    assert {r.codec for vp_records in by_vp.values() for r in vp_records} == {Codec.LZ4}


def test_codec_runs_keep_order_and_cut_only_where_the_codec_changes():
    def record(offset: int, codec: Codec) -> SourcedRecord:
        return SourcedRecord(0, offset, 0, 0, None, b"v", (), codec)

    chunk = [record(0, Codec.ZSTD), record(1, Codec.ZSTD), record(2, Codec.NONE), record(3, Codec.ZSTD)]
    assert [(codec, [r.offset for r in run]) for codec, run in codec_runs(chunk)] == [
        (Codec.ZSTD, [0, 1]), (Codec.NONE, [2]), (Codec.ZSTD, [3])]
    assert list(codec_runs([])) == []


def test_a_vp_leader_writes_each_codec_run_of_a_feed_as_one_batch_compressed_alike(tmp_path):
    """The records of one physical partition, fed from batches of three codecs: the VP log holds one
    batch per run of one codec, each compressed with it, and decodes to the producers' records."""
    layout = TopicLayout.initial(partitions=1, virtual_partitions=1)
    physical, offset = [], 0
    for codec, size in ((Codec.ZSTD, 40), (Codec.NONE, 10), (Codec.LZ4, 30), (Codec.ZSTD, 20)):
        physical.append(stamped(batch_payload.encode_batch(ITEMS[offset:offset + size], 9, offset, codec), offset))
        offset += size
    fed = [r for batch in physical for r in route_batch(batch, 0, layout)[0]]
    hosted = HostedVp(VpId("orders", 0), "n1", tmp_path / "v0", LogConfig(flush_interval_ms=None), RisrConfig(), 0,
                      lambda hosted, ready: None)
    hosted.become_leader(0, ("n1",), ("n1",), now_ms=0)
    try:
        assert hosted.feed(0, fed[:70], now_ms=0) == 70 and hosted.feed(0, fed[70:], now_ms=0) == 30
        data = hosted.read(0, 1 << 22, now_ms=0).data
        batches = [(header.codec, header.base_offset, header.count) for _, header in batch_frame.iter_batches(data)]
        # The first call's 70 records ran zstd, none, lz4 (cut at 40 and 50); the second call's lz4 and
        # zstd records became two more batches.
        assert batches == [(Codec.ZSTD, 0, 40), (Codec.NONE, 40, 10), (Codec.LZ4, 50, 20), (Codec.LZ4, 70, 10),
                           (Codec.ZSTD, 80, 20)]
        decoded = batch_payload.decode_batches(data)
        assert [source_of(r) for r in decoded] == [(0, o) for o in range(100)]
        assert as_items([strip_source(r) for r in decoded]) == ITEMS[:100]
        assert hosted.core.last_applied(0, 0) == 99, "the feed progress counts every run"
        assert hosted.feed(0, fed, now_ms=0) == 0, "re-fed records are dropped, whatever their codec"
    finally:
        hosted.close()


# --- the producer's setting ----------------------------------------------------------------


def test_the_compression_setting_takes_codec_names_and_refuses_others_naming_the_choices():
    assert ProducerConfig(compression="zstd").compression is Codec.ZSTD
    assert ProducerConfig(compression=" LZ4 ").compression is Codec.LZ4
    assert ProducerConfig(compression=Codec.NONE).compression is Codec.NONE
    for wrong in ("gzip", "snappy", "", 2, True):
        with pytest.raises(InvalidConfig, match=fr"compression={wrong!r} is not valid: use one of 'none', 'lz4', "
                                                fr"'zstd'"):
            ProducerConfig(compression=wrong)


def test_the_environment_sets_the_default_codec_of_every_producer_that_does_not_choose(monkeypatch):
    monkeypatch.delenv(COMPRESSION_ENV, raising=False)
    assert ProducerConfig().resolved().compression is Codec.NONE
    monkeypatch.setenv(COMPRESSION_ENV, "zstd")
    assert default_compression() is Codec.ZSTD
    assert ProducerConfig().compression is None, "read when a Producer starts, not when a config is built"
    assert ProducerConfig(linger_ms=7).resolved() == ProducerConfig(linger_ms=7, compression="zstd")
    assert ProducerConfig(compression="lz4").resolved().compression is Codec.LZ4, "an explicit choice wins"
    assert ProducerConfig(compression="none").resolved().compression is Codec.NONE
    monkeypatch.setenv(COMPRESSION_ENV, "gzip")
    with pytest.raises(InvalidConfig, match="MAFKA4_COMPRESSION='gzip' is not valid: use one of 'none', 'lz4', 'zstd'"):
        ProducerConfig().resolved()
    monkeypatch.setenv(COMPRESSION_ENV, "")
    assert ProducerConfig().resolved().compression is Codec.NONE, "set but empty is unset"
