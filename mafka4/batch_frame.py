"""The record batch's frame: the header around a payload of records, what a producer sends, a
leader checks and stamps, a log stores and a fetch returns. Nothing here reads a record (the
payload's records: ``mafka4.batch_payload``), so the log layer and the physical side import
this module only (``tests/unit/test_floors.py``).

A batch is a fixed 55-byte header followed by a msgpack payload, compressed or not. All
integers are big-endian. The broker never decodes the payload: it checks the CRC (and that
the codec id is one it knows) and stamps the base offset and leader epoch into the header,
which the CRC deliberately does not cover (as in Kafka), so stamping needs no recomputation.

    offset  size  field               notes
    0       8     base_offset         int64, offset of the first record; set by the leader
    8       4     length              int32, bytes after this field (whole batch - 12)
    12      4     leader_epoch        int32, epoch of the leader that appended it; -1 unset
    16      1     magic               int8, format version, always 1
    17      4     crc                 uint32, CRC32 (zlib) of bytes [21, end of batch)
    21      2     attributes          int16, bits 0-2: codec id (0 none, 1 lz4, 2 zstd); bit 3: sources;
                                      bit 4: key-hash column; bit 5: timestamp runs; bit 6: lane-id
                                      column; bits 7-15 reserved, 0
    23      4     count               int32, number of records, >= 1
    27      8     first_timestamp_ms  int64
    35      8     max_timestamp_ms    int64
    43      8     producer_id         int64, -1 when the producer is not idempotent
    51      4     base_sequence       int32, sequence of the first record; -1 when not idempotent
    55      ...   payload             msgpack array of records, compressed with the codec

Sources (attribute bit 3) are set only in VP logs, never in a producer's batch
(``check_producer_batch``): the payload then carries each record's source beside the records
(``batch_payload``).

Timestamp runs (attribute bit 5) are set only with sources, in a VP batch whose records came
from several physical batches: each record's timestamp delta counts from its run's base, not
from ``first_timestamp_ms`` (``batch_payload``), so that records are copied into VP batches with
the delta their producer wrote (``virtual.column_split``).

The key-hash column (attribute bit 4) is set only in a producer's batch, never with sources:
the payload then carries each record's message hash and the end of its bytes beside the
records (``batch_payload``), so a read node splits the batch into virtual partitions without
decoding a record (``virtual.column_split``). What a leader checks of it is what the header
says, no more (``check_producer_batch``): the column holds keyless records' hashes, which are
made of the producer id, so a batch with the column must have one. Whether the column agrees
with the keys is the feeder's to check, by sample, when it splits (``virtual.column_split``):
checking it here would decompress and decode every batch on the write path.

The lane-id column (attribute bit 6) is set only with the key-hash column, in a producer's batch
of which some record carries a lane (``batch_payload.LANE_HEADER``): the payload then carries
each record's lane id in the topic's layout beside the key-hash column (``batch_payload``), so a
read node places a laned record in its lane's VPs without decoding it. A batch of trunk records
only never sets it (its bytes are those of a topic without lanes). The leader checks only that
the bit comes with bit 4 (``check_producer_batch``); whether the ids agree with the records' lane
headers is the feeder's to check by sample, as for the hashes.

Compression (``mafka4.compression``). The payload is compressed as a whole, and the CRC and
``length`` cover the compressed bytes: what is stored is what is checked, so a leader, a
follower and log recovery check a batch without decompressing it.

Concatenated batches ("batch bytes") are what logs store and fetches return.
"""

from __future__ import annotations

import struct
from typing import Iterator, NamedTuple

from mafka4.checksum import crc32
from mafka4.compression import CODEC_MASK, CODECS_BY_ID, Codec
from mafka4.errors import CorruptRecord

MAGIC = 1
HEADER = struct.Struct(">qiibIhiqqqi")
HEADER_BYTES = HEADER.size
# The header in two parts: the frame (base offset, length, epoch, magic, CRC) and the fields the
# CRC covers (attributes, count, timestamps, producer id, base sequence).
_FRAME_FIELDS = struct.Struct(">qiibI")
_BODY_FIELDS = struct.Struct(">hiqqqi")
assert _FRAME_FIELDS.size + _BODY_FIELDS.size == HEADER_BYTES
assert HEADER_BYTES == 55
LENGTH_PREFIX_BYTES = 12  # base_offset + length: what precedes the counted bytes
CRC_START = 21  # the CRC covers everything from the attributes on
# The largest payload ``length`` (an int32) can frame; a compressed payload may not expand past it.
PAYLOAD_BYTES_MAX = 2**31 - 1 - (HEADER_BYTES - LENGTH_PREFIX_BYTES)
_STAMP = struct.Struct(">q")
_EPOCH = struct.Struct(">i")
NO_PRODUCER_ID = -1
NO_SEQUENCE = -1
NO_EPOCH = -1
TIMESTAMP_MS_MAX = 2**63 - 1  # the header's timestamps are int64
ATTRIBUTE_SOURCES = 0x08  # the payload is [records, sources] (``batch_payload``)
ATTRIBUTE_KEY_HASHES = 0x10  # the payload is [records, message hashes, record ends] (``batch_payload``)
ATTRIBUTE_TIMESTAMP_RUNS = 0x20  # with sources: the payload is [records, sources, timestamp runs] (``batch_payload``)
# With the key-hash column: the payload is [records, message hashes, record ends, lane ids] (``batch_payload``).
ATTRIBUTE_LANE_IDS = 0x40
# What a producer's batch may set: its codec, the key-hash column and the lane-id column.
PRODUCER_ATTRIBUTES = CODEC_MASK | ATTRIBUTE_KEY_HASHES | ATTRIBUTE_LANE_IDS


class BatchHeader(NamedTuple):
    """A batch's header fields, as ``read_header`` parses them (a named tuple, as
    ``batch_payload.Record`` is: every reader makes one per batch, and one took 1.0 µs to build as
    a frozen dataclass here)."""

    base_offset: int
    length: int
    leader_epoch: int
    crc: int
    attributes: int
    count: int
    first_timestamp_ms: int
    max_timestamp_ms: int
    producer_id: int
    base_sequence: int

    @property
    def size_bytes(self) -> int:
        return LENGTH_PREFIX_BYTES + self.length

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.count - 1

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.count

    @property
    def last_sequence(self) -> int:
        return self.base_sequence + self.count - 1

    @property
    def sourced(self) -> bool:
        """Whether the payload carries the records' sources (attribute bit 3)."""
        return bool(self.attributes & ATTRIBUTE_SOURCES)

    @property
    def timestamp_runs(self) -> bool:
        """Whether the payload carries timestamp runs (attribute bit 5, only with sources)."""
        return bool(self.attributes & ATTRIBUTE_TIMESTAMP_RUNS)

    @property
    def hashed(self) -> bool:
        """Whether the payload carries the key-hash column (attribute bit 4)."""
        return bool(self.attributes & ATTRIBUTE_KEY_HASHES)

    @property
    def laned(self) -> bool:
        """Whether the payload carries the lane-id column (attribute bit 6, only with bit 4)."""
        return bool(self.attributes & ATTRIBUTE_LANE_IDS)

    @property
    def codec(self) -> Codec:
        """The codec of the payload; ``UnknownCodec`` if this version does not know its id."""
        codec = CODECS_BY_ID.get(self.attributes & CODEC_MASK)
        return codec if codec is not None else Codec.from_attributes(self.attributes,
                                                                    f"batch at offset {self.base_offset}")


def read_header(buffer: bytes | bytearray | memoryview, position: int = 0) -> BatchHeader:
    """Parse the header at ``position`` without checking the CRC."""
    if len(buffer) - position < HEADER_BYTES:
        raise CorruptRecord(
            f"truncated batch header at byte {position}: {len(buffer) - position} bytes "
            f"left, a header needs {HEADER_BYTES}"
        )
    (base_offset, length, leader_epoch, magic, crc, attributes, count,
     first_timestamp_ms, max_timestamp_ms, producer_id, base_sequence) = HEADER.unpack_from(buffer, position)
    if magic != MAGIC:
        raise CorruptRecord(f"batch at byte {position} has magic {magic}, expected {MAGIC}")
    if length < HEADER_BYTES - LENGTH_PREFIX_BYTES or count < 1:
        raise CorruptRecord(f"batch at byte {position} has length {length} and count {count}")
    return BatchHeader(base_offset, length, leader_epoch, crc, attributes, count,
                       first_timestamp_ms, max_timestamp_ms, producer_id, base_sequence)


def check_batch(buffer: bytes | bytearray | memoryview, position: int = 0) -> BatchHeader:
    """Parse and CRC-check the batch at ``position``; raise ``CorruptRecord`` if it is bad."""
    header = _whole_batch_header(buffer, position)
    end = position + header.size_bytes
    actual = crc32(memoryview(buffer)[position + CRC_START:end])
    if actual != header.crc:
        raise CorruptRecord(f"batch at byte {position} fails its CRC ({actual:#x} != {header.crc:#x})")
    return header


def _whole_batch_header(buffer: bytes | bytearray | memoryview, position: int = 0) -> BatchHeader:
    """The header at ``position``, whose batch ``buffer`` holds whole; its CRC is not checked."""
    header = read_header(buffer, position)
    if position + header.size_bytes > len(buffer):
        raise CorruptRecord(
            f"batch at byte {position} claims {header.size_bytes} bytes, only "
            f"{len(buffer) - position} present"
        )
    return header


def crc_matches(buffer: bytes | bytearray | memoryview, position: int, header: BatchHeader) -> bool:
    """Whether the whole batch at ``position``, whose ``header`` was parsed, passes its CRC.

    ``checksum.crc32`` folds a MiB in about 20 µs, so a log checks every batch it serves.
    """
    with memoryview(buffer) as view:
        return crc32(view[position + CRC_START:position + header.size_bytes]) == header.crc


def check_single_batch(buffer: bytes | bytearray, check_crc: bool = True) -> BatchHeader:
    """Check that ``buffer`` is exactly one valid batch (what a producer must send).

    Its codec must be one this version knows (``UnknownCodec``): a leader that appended a
    batch no reader can decode would stall every feed of the partition at it. ``check_crc=False``
    skips only the CRC, for a caller that checked it already (the CRC does not cover the base
    offset and epoch a leader stamps, so a check made before stamping still holds).
    """
    header = check_batch(buffer) if check_crc else _whole_batch_header(buffer)
    if header.size_bytes != len(buffer):
        raise CorruptRecord(
            f"request holds {len(buffer)} bytes but its batch is {header.size_bytes}: send one batch per request"
        )
    Codec.from_attributes(header.attributes, f"the batch of {header.count} records sent")
    return header


def check_producer_batch(buffer: bytes | bytearray) -> BatchHeader:
    """``check_single_batch`` of a batch a producer sent, which may set no attribute but its codec,
    the key-hash column and, with it, the lane-id column: sources are the feeder's to write (a
    producer's claim to them would reach consumers of VPs as records of another shape), and
    reserved bits mean a format this version does not know. A batch with the key-hash column must
    carry a producer id: its keyless records' hashes are made of it (``batch_payload``), and
    without one they would be made of offsets, which the producer cannot know."""
    header = check_single_batch(buffer)
    if header.attributes & ~PRODUCER_ATTRIBUTES:
        raise CorruptRecord(
            f"the batch of {header.count} records sent sets attribute bits "
            f"{header.attributes & ~PRODUCER_ATTRIBUTES:#06x}: a producer's batch holds only a codec id in bits 0-2 "
            f"and the key-hash column's bit 4 and lane-id column's bit 6, zeros elsewhere")
    if header.laned and not header.hashed:
        raise CorruptRecord(
            f"the batch of {header.count} records sent sets the lane-id column's bit 6 without the key-hash "
            f"column's bit 4: the lane ids travel only beside the message hashes (batch_payload's format); send "
            f"the batch with both columns")
    if header.hashed and header.producer_id == NO_PRODUCER_ID:
        raise CorruptRecord(
            f"the batch of {header.count} records sent has a key-hash column but no producer id: the column's "
            f"keyless hashes are made of the producer id; send the batch with its producer id and sequence, or "
            f"without the column")
    return header


def stamp(batch: bytearray, base_offset: int, leader_epoch: int) -> None:
    """Write the leader-assigned base offset and epoch into a batch in place."""
    _STAMP.pack_into(batch, 0, base_offset)
    _EPOCH.pack_into(batch, 12, leader_epoch)


def iter_batches(buffer: bytes | bytearray | memoryview, check_crc: bool = True) -> Iterator[tuple[int, BatchHeader]]:
    """Yield ``(position, header)`` for each whole batch; stop at the first bad or partial one.

    Callers that must know where valid data ends (log recovery) compare the position after
    the last yielded batch with ``len(buffer)``.
    """
    position = 0
    size = len(buffer)
    while size - position >= HEADER_BYTES:
        try:
            header = check_batch(buffer, position) if check_crc else read_header(buffer, position)
        except CorruptRecord:
            return
        if position + header.size_bytes > size:
            return
        yield position, header
        position += header.size_bytes


def frame_payload(stored: bytes | memoryview, attributes: int, count: int, first_timestamp_ms: int,
                  max_timestamp_ms: int, producer_id: int, base_sequence: int) -> bytes:
    """One unstamped batch: the header of these fields, its CRC computed, before ``stored``, the
    payload as it is stored (compressed with the codec of ``attributes``, or not)."""
    fields = _BODY_FIELDS.pack(attributes, count, first_timestamp_ms, max_timestamp_ms, producer_id, base_sequence)
    # The CRC runs over the two parts in turn, and the batch is joined once: a batch is up
    # to a MiB, and each concatenation would copy it again.
    crc = crc32(stored, crc32(fields))
    length = HEADER_BYTES - LENGTH_PREFIX_BYTES + len(stored)
    return b"".join((_FRAME_FIELDS.pack(0, length, NO_EPOCH, MAGIC, crc), fields, stored))
