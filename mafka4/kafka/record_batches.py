"""Kafka's record batches (message format v2, Kafka 0.11+) read from produce requests and written
for fetch answers, and mafka4's batches converted to them.

A Kafka record batch, all integers big-endian (Kafka's "Message format" documentation, KIP-98):

    offset  size  field                   notes
    0       8     base_offset             int64
    8       4     batch_length            int32, bytes after this field
    12      4     partition_leader_epoch  int32
    16      1     magic                   int8, 2 (0 and 1 are the formats before Kafka 0.11)
    17      4     crc                     uint32, CRC-32C of bytes [21, end of batch)
    21      2     attributes              int16, bits 0-2 codec (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd);
                                          bit 3 timestamp type; bit 4 transactional; bit 5 control;
                                          bit 6 delete horizon (log compaction)
    23      4     last_offset_delta       int32
    27      8     base_timestamp          int64, ms
    35      8     max_timestamp           int64, ms
    43      8     producer_id             int64, -1 for none
    51      2     producer_epoch          int16
    53      4     base_sequence           int32
    57      4     record count            int32
    61      ...   records                 compressed as a whole with the codec

and each record (varints are zigzag-encoded, as protobuf's sint):

    length varint, attributes int8 (0), timestamp_delta varlong, offset_delta varint,
    key_length varint (-1: null), key, value_length varint (-1: null), value,
    header count varint, then each header: key_length varint, key (UTF-8), value_length varint
    (-1: null), value

Compressed payloads: gzip as RFC 1952 members, lz4 as one LZ4 frame (the frame format, Kafka
0.10+), zstd as zstd frames. Kafka clients need not write the decompressed size in a frame, so
each is decompressed in steps, counted against a bound (``KAFKA_FRAME_BYTES_MAX`` for one
produce request): a decompression bomb is refused before it takes more than that. Snappy is
refused: no snappy library is installed here.

Reading is for produce requests: ``read_kafka_batches`` checks each batch whole (its CRC, its
records' framing, offset deltas 0, 1, 2, ...) and refuses what mafka4 does not serve
(transactional and control batches, the formats before v2). Writing is for fetch answers:
``mafka4_to_kafka`` re-encodes mafka4's stored batches (``batch_frame``, ``batch_payload``), one
uncompressed Kafka batch per mafka4 batch with the same offsets. A mafka4 batch's records have
offsets ``base_offset + i`` in physical and VP logs alike (a VP leader assigns its VP's offsets
itself, contiguously), so offset deltas are 0, 1, 2, ... there too.

Pure: bytes in, bytes out.
"""

from __future__ import annotations

import enum
import struct
import zlib
from dataclasses import dataclass
from typing import Iterable, Sequence

import lz4.frame
import zstandard
from crc32c import crc32c
from kio.serial.errors import SerialError
from kio.serial.readers import read_signed_varint, read_signed_varlong

from mafka4.batch_frame import HEADER_BYTES, check_batch, read_header
from mafka4.batch_payload import RESERVED_HEADER_PREFIX, SOURCE_HEADER, decode_checked_batch
from mafka4.errors import CorruptRecord, InvalidRecord, MessageTooLarge, UnknownCodec
from mafka4.limits import KAFKA_FRAME_BYTES_MAX, KAFKA_ZSTD_STEP_BYTES, KAFKA_ZSTD_WINDOW_BYTES_MAX

MAGIC = 2
BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")  # the fields above, up to the record count
_BATCH_BODY = struct.Struct(">hiqqqhii")  # the fields the CRC covers, from attributes on
LENGTH_PREFIX = 12  # base_offset and batch_length: what batch_length does not count
CRC_START = 21
MAGIC_AT = 16
assert BATCH_HEADER.size == 61 and CRC_START + _BATCH_BODY.size == BATCH_HEADER.size
ATTRIBUTE_CODEC = 0x07
ATTRIBUTE_TRANSACTIONAL = 0x10
ATTRIBUTE_CONTROL = 0x20
ATTRIBUTE_DELETE_HORIZON = 0x40
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1


class KafkaCodec(enum.IntEnum):
    """Kafka's codec ids, in the low three bits of a batch's attributes."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


Header = tuple[str, bytes | None]


@dataclass(frozen=True, slots=True)
class KafkaRecord:
    """One record of a Kafka batch: its offset is the batch's base offset plus ``offset_delta``."""

    offset_delta: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()


@dataclass(frozen=True, slots=True)
class KafkaBatch:
    """One Kafka record batch as read, its records decompressed (``attributes`` still names the codec)."""

    base_offset: int
    partition_leader_epoch: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records: tuple[KafkaRecord, ...]


def read_kafka_batches(data: bytes | bytearray | memoryview, records_max: int,
                       decompressed_bytes_max: int = KAFKA_FRAME_BYTES_MAX) -> list[KafkaBatch]:
    """Every batch of a produce request's record set, in order (none for no bytes).

    ``CorruptRecord`` naming the batch (by its byte position) and the problem for a bad CRC,
    truncated or inconsistent bytes, a magic other than 2, and transactional or control
    batches; ``UnknownCodec`` (a ``CorruptRecord``) for snappy and codec ids Kafka does not
    define, and ``CorruptRecord`` for a payload that does not decompress or decompresses to
    more than ``decompressed_bytes_max`` in all. ``MessageTooLarge`` when the batches hold more
    than ``records_max`` records (Kafka's answer: RECORD_LIST_TOO_LARGE).
    """
    with memoryview(data) as view:
        batches: list[KafkaBatch] = []
        position, records_left, bytes_left = 0, records_max, decompressed_bytes_max
        while position < len(view):
            batch, end, decompressed = _read_batch(view, position, records_left, bytes_left)
            batches.append(batch)
            records_left -= len(batch.records)
            bytes_left -= decompressed
            position = end
        return batches


def _read_batch(view: memoryview, position: int, records_left: int, bytes_left: int
                ) -> tuple[KafkaBatch, int, int]:
    """The batch at ``position``, where it ends, and how many bytes its payload decompressed to."""
    where = f"the record batch at byte {position}"
    left = len(view) - position
    if left > MAGIC_AT:
        magic = struct.unpack_from(">b", view, position + MAGIC_AT)[0]
        if magic in (0, 1):
            raise CorruptRecord(f"{where} is in message format v{magic}, which is not supported; use a client "
                                f"with message format v2 (Kafka 0.11+)")
        if magic != MAGIC:
            raise CorruptRecord(f"{where} has magic {magic}: not a Kafka record batch (v2 has magic 2)")
    if left < BATCH_HEADER.size:
        raise CorruptRecord(f"{where} is truncated: {left} bytes left, a batch header takes {BATCH_HEADER.size}")
    (base_offset, batch_length, leader_epoch, _, crc, attributes, last_offset_delta, base_timestamp, max_timestamp,
     producer_id, producer_epoch, base_sequence, count) = BATCH_HEADER.unpack_from(view, position)
    end = position + LENGTH_PREFIX + batch_length
    if batch_length < BATCH_HEADER.size - LENGTH_PREFIX or end > len(view):
        raise CorruptRecord(f"{where} claims {LENGTH_PREFIX + batch_length} bytes; {left} are present and a batch "
                            f"takes {BATCH_HEADER.size} at least: truncated or not a batch")
    actual = crc32c(view[position + CRC_START:end])
    if actual != crc:
        raise CorruptRecord(f"{where} fails its CRC ({actual:#x} != {crc:#x}): damaged on the way; send it again")
    _check_attributes(attributes, where)
    if count < 1 or count != last_offset_delta + 1:
        raise CorruptRecord(f"{where} holds {count} records but a last offset delta of {last_offset_delta}: "
                            f"a producer's batch holds records at offset deltas 0, 1, 2, ...")
    if count > records_left:
        raise MessageTooLarge(f"the record set holds more than the {records_left} records a produce request may "
                              f"carry here; send fewer records per request (e.g. lower batch.size or linger.ms)")
    stored = view[position + BATCH_HEADER.size:end]
    codec = KafkaCodec(attributes & ATTRIBUTE_CODEC)
    payload = stored if codec is KafkaCodec.NONE else _decompressed(codec, stored, bytes_left, where)
    records = _read_records(payload, count, base_timestamp, where)
    batch = KafkaBatch(base_offset, leader_epoch, attributes, last_offset_delta, base_timestamp, max_timestamp,
                       producer_id, producer_epoch, base_sequence, records)
    return batch, end, 0 if codec is KafkaCodec.NONE else len(payload)


def _check_attributes(attributes: int, where: str) -> None:
    if attributes & ATTRIBUTE_CONTROL:
        raise CorruptRecord(f"{where} is a control batch (a transaction's marker): transactions are not served "
                            f"here; produce without a transactional.id")
    if attributes & ATTRIBUTE_TRANSACTIONAL:
        raise CorruptRecord(f"{where} is transactional: transactions are not served here; produce without a "
                            f"transactional.id (idempotent producers are served)")
    if attributes & ATTRIBUTE_DELETE_HORIZON:
        raise CorruptRecord(f"{where} sets the delete-horizon bit, which only log compaction writes: not a "
                            f"producer's batch")
    codec_id = attributes & ATTRIBUTE_CODEC
    if codec_id == KafkaCodec.SNAPPY:
        raise UnknownCodec(f"{where} is compressed with snappy, which this node cannot decompress (no snappy "
                           f"library is installed): configure the producer with compression.type lz4, zstd, "
                           f"gzip or none")
    if codec_id > KafkaCodec.ZSTD:
        raise UnknownCodec(f"{where} names codec id {codec_id}, which Kafka does not define (0 none, 1 gzip, "
                           f"2 snappy, 3 lz4, 4 zstd): a broken producer")


def _decompressed(codec: KafkaCodec, stored: memoryview, bytes_max: int, where: str) -> bytes:
    """``stored`` decompressed with ``codec``: ``CorruptRecord`` if it does not decompress, holds
    anything after its data, or makes more than ``bytes_max`` bytes (found before much more is made)."""
    try:
        if codec is KafkaCodec.GZIP:
            payload = _gunzipped(stored, bytes_max)
        elif codec is KafkaCodec.LZ4:
            payload = _lz4_decompressed(stored, bytes_max)
        else:
            assert codec is KafkaCodec.ZSTD, codec
            payload = _zstd_decompressed(stored, bytes_max)
    # What zlib, lz4 and zstandard raise on bad input.
    except (zlib.error, RuntimeError, ValueError, zstandard.ZstdError) as error:
        raise CorruptRecord(f"{where} has a {codec.name.lower()} payload that does not decompress: "
                            f"{type(error).__name__}: {error}") from None
    if payload is None:
        raise CorruptRecord(f"{where} has a {codec.name.lower()} payload of more than {bytes_max} bytes, beyond "
                            f"what one produce request may decompress to here: send smaller requests")
    return payload


def _gunzipped(stored: memoryview, bytes_max: int) -> bytes | None:
    """One or more gzip members (Python's ``gzip`` reads concatenated members alike); None beyond ``bytes_max``."""
    parts, size, data = [], 0, bytes(stored)
    while True:
        member = zlib.decompressobj(wbits=31)  # 31: the gzip wrapper, only
        part = member.decompress(data, bytes_max - size + 1)
        size += len(part)
        if size > bytes_max:
            return None
        if not member.eof:
            raise ValueError("the gzip data ends inside a member")
        parts.append(part)
        data = member.unused_data
        if not data:
            return b"".join(parts)


def _lz4_decompressed(stored: memoryview, bytes_max: int) -> bytes | None:
    """Exactly one LZ4 frame; None beyond ``bytes_max``."""
    decompressor = lz4.frame.LZ4FrameDecompressor()
    payload = decompressor.decompress(stored, max_length=bytes_max + 1)
    if len(payload) > bytes_max:
        return None
    if not decompressor.eof:
        raise ValueError("the lz4 data ends inside its frame")
    if decompressor.unused_data:
        raise ValueError(f"{len(decompressor.unused_data)} bytes follow the lz4 frame")
    return payload


def _zstd_decompressed(stored: memoryview, bytes_max: int) -> bytes | None:
    """One or more zstd frames, fed ``KAFKA_ZSTD_STEP_BYTES`` at a time (see the module doc); None
    beyond ``bytes_max``."""
    context = zstandard.ZstdDecompressor(max_window_size=KAFKA_ZSTD_WINDOW_BYTES_MAX)
    frame, fed = context.decompressobj(), False
    parts, size, data, position = [], 0, bytes(stored), 0
    if not data:
        raise ValueError("no zstd frame")
    while position < len(data):
        step = data[position:position + KAFKA_ZSTD_STEP_BYTES]
        position += len(step)
        part = frame.decompress(step)
        fed = True
        size += len(part)
        if size > bytes_max:
            return None
        parts.append(part)
        if frame.eof:  # the next frame starts in what this step did not use
            position -= len(frame.unused_data)
            frame, fed = context.decompressobj(), False
    if fed:
        raise ValueError("the zstd data ends inside a frame")
    return b"".join(parts)


def _read_records(payload: bytes | memoryview, count: int, base_timestamp: int, where: str
                  ) -> tuple[KafkaRecord, ...]:
    records = []
    with memoryview(payload) as view:
        position = 0
        for index in range(count):
            try:
                record, position = _read_record(view, position, index, base_timestamp)
            except (SerialError, ValueError) as error:  # kio's varint readers on short or bad bytes
                raise CorruptRecord(f"record {index} of {where} does not parse: {type(error).__name__}: "
                                    f"{error}") from None
            records.append(record)
        if position != len(view):
            raise CorruptRecord(f"{where} holds {len(view) - position} bytes after its {count} records")
    return tuple(records)


def _read_record(view: memoryview, position: int, index: int, base_timestamp: int) -> tuple[KafkaRecord, int]:
    length, size = read_signed_varint(view, position)
    start = position + size
    end = start + length
    if length < 0 or end > len(view):
        raise ValueError(f"a record of {length} bytes, {len(view) - start} left")
    record = view[start:end]
    position = 1  # the record's attributes: none are defined
    timestamp_delta, size = read_signed_varlong(record, position)
    position += size
    offset_delta, size = read_signed_varint(record, position)
    position += size
    if offset_delta != index:
        raise ValueError(f"offset delta {offset_delta}: a producer's batch holds records at offset deltas 0, 1, 2, ...")
    key, position = _nullable_bytes(record, position)
    value, position = _nullable_bytes(record, position)
    header_count, size = read_signed_varint(record, position)
    position += size
    if header_count < 0:
        raise ValueError(f"a header count of {header_count}")
    headers = []
    for _ in range(header_count):  # each header takes two bytes at least: bounded by the record's length
        name, position = _nullable_bytes(record, position)
        if name is None:
            raise ValueError("a header without a name")
        header_value, position = _nullable_bytes(record, position)
        headers.append((str(name, "utf-8"), header_value))
    if position != len(record):
        raise ValueError(f"the record's fields take {position} of its {len(record)} bytes")
    return KafkaRecord(offset_delta, base_timestamp + timestamp_delta, key, value, tuple(headers)), end


def _nullable_bytes(view: memoryview, position: int) -> tuple[bytes | None, int]:
    length, size = read_signed_varint(view, position)
    position += size
    if length == -1:
        return None, position
    if length < -1 or position + length > len(view):
        raise ValueError(f"a field of {length} bytes, {len(view) - position} left")
    return bytes(view[position:position + length]), position + length


def write_kafka_batch(base_offset: int, leader_epoch: int, records: Sequence[KafkaRecord],
                      producer_id: int = NO_PRODUCER_ID, producer_epoch: int = NO_PRODUCER_EPOCH,
                      base_sequence: int = NO_SEQUENCE) -> bytes:
    """One uncompressed Kafka batch of ``records`` (at least one, offset deltas ascending), its
    timestamps create times, its base timestamp the first record's."""
    assert records, "a batch holds at least one record"
    assert all(a.offset_delta < b.offset_delta for a, b in zip(records, records[1:])), "offset deltas ascend"
    assert records[0].offset_delta >= 0, records[0].offset_delta
    rows = [(r.offset_delta, r.timestamp_ms, r.key, r.value, r.headers) for r in records]
    return _batch(base_offset, leader_epoch, rows, producer_id, producer_epoch, base_sequence)


def _batch(base_offset: int, leader_epoch: int, rows: Sequence[tuple[int, int, bytes | None, bytes | None,
                                                                     Iterable[Header]]],
           producer_id: int, producer_epoch: int, base_sequence: int) -> bytes:
    """A batch of ``(offset_delta, timestamp_ms, key, value, headers)`` rows (see the module doc)."""
    base_timestamp = rows[0][1]
    encoded = bytearray()
    for offset_delta, timestamp_ms, key, value, headers in rows:
        _append_record(encoded, timestamp_ms - base_timestamp, offset_delta, key, value, headers)
    body = _BATCH_BODY.pack(0, rows[-1][0], base_timestamp, max(row[1] for row in rows), producer_id,
                            producer_epoch, base_sequence, len(rows))
    crc = crc32c(encoded, crc32c(body))
    batch_length = BATCH_HEADER.size - LENGTH_PREFIX + len(encoded)
    return b"".join((struct.pack(">qiibI", base_offset, batch_length, leader_epoch, MAGIC, crc), body, encoded))


def _append_record(out: bytearray, timestamp_delta: int, offset_delta: int, key: bytes | None,
                   value: bytes | None, headers: Iterable[Header]) -> None:
    record = bytearray(b"\x00")  # attributes
    _append_varint(record, timestamp_delta)
    _append_varint(record, offset_delta)
    _append_nullable(record, key)
    _append_nullable(record, value)
    headers = tuple(headers)
    _append_varint(record, len(headers))
    for name, header_value in headers:
        _append_nullable(record, name.encode())
        _append_nullable(record, header_value)
    _append_varint(out, len(record))
    out += record


def _append_nullable(out: bytearray, data: bytes | None) -> None:
    if data is None:
        out.append(1)  # -1, zigzag-encoded
        return
    _append_varint(out, len(data))
    out += data


def _append_varint(out: bytearray, value: int) -> None:
    """``value`` (an int64) zigzag-encoded as a varint, 7 bits a byte, least significant first."""
    zigzag = (value << 1) ^ (value >> 63)
    while zigzag >= 0x80:
        out.append((zigzag & 0x7F) | 0x80)
        zigzag >>= 7
    out.append(zigzag)


def mafka4_to_kafka(data: bytes | bytearray | memoryview) -> bytes:
    """mafka4's stored batches (concatenated, as a fetch returns them, from a physical or a VP log)
    as Kafka batches: one uncompressed Kafka batch per mafka4 batch, with its offsets, leader
    epoch, timestamps, keys, values and headers, without a VP record's source, producer id -1. A
    partial batch at the end (a fetch may cut one) is left out, as Kafka clients expect.

    ``CorruptRecord`` for a whole batch that fails its CRC or does not decode.
    """
    out = []
    with memoryview(data) as view:
        position = 0
        while len(view) - position >= HEADER_BYTES:
            header = read_header(view, position)
            if position + header.size_bytes > len(view):
                break
            header = check_batch(view, position)
            records = decode_checked_batch(view, position, header, with_sources=False)
            base = header.base_offset
            rows = [(record.offset - base, record.timestamp_ms, record.key, record.value,
                     [pair for pair in record.headers if pair[0] != SOURCE_HEADER]) for record in records]
            out.append(_batch(base, header.leader_epoch, rows, NO_PRODUCER_ID, NO_PRODUCER_EPOCH, NO_SEQUENCE))
            position += header.size_bytes
    return b"".join(out)


def kafka_records_as_mafka4(batch: KafkaBatch) -> tuple[int, list[tuple[int, bytes | None, bytes,
                                                                      tuple[tuple[str, bytes], ...] | None]]]:
    """``(first_timestamp_ms, record_arrays)``: ``batch``'s records in the form
    ``batch_payload.encode_record_arrays`` takes, ``(timestamp_delta_ms, key, value, headers or
    None)``, each delta counted from ``first_timestamp_ms`` (the first record's timestamp).

    Records routed to several partitions keep these deltas: a partition's batch of some of them
    is ``encode_record_arrays(arrays, first_timestamp_ms, first_timestamp_ms + max(deltas))``.
    A header without a value gets an empty one, as mafka4's Producer gives it. ``InvalidRecord``
    (Kafka's INVALID_RECORD) for what mafka4 does not store: a record without a value (a
    tombstone: mafka4 does not compact), a negative timestamp, a header named as mafka4's own.
    """
    first_timestamp_ms = batch.records[0].timestamp_ms
    arrays = []
    for record in batch.records:
        if record.value is None:
            raise InvalidRecord(f"record {record.offset_delta} of the batch has no value (a tombstone): mafka4 "
                                f"does not compact logs, so it stores values only; send a value (b'' is one)")
        if record.timestamp_ms < 0:
            raise InvalidRecord(f"record {record.offset_delta} of the batch has timestamp {record.timestamp_ms}: "
                                f"send milliseconds since the epoch")
        headers = None
        if record.headers:
            headers = tuple((name, b"" if data is None else data) for name, data in record.headers)
            for name, _ in headers:
                if name.startswith(RESERVED_HEADER_PREFIX):
                    raise InvalidRecord(f"header {name!r}: names starting with {RESERVED_HEADER_PREFIX!r} are "
                                        f"mafka4's own (a virtual partition's source, a loss marker); rename it")
        arrays.append((record.timestamp_ms - first_timestamp_ms, record.key, record.value, headers))
    return first_timestamp_ms, arrays
