"""The records in a batch's payload: encoding them into a batch and decoding them out of one, for
producers, consumers, the feeder (which decodes to split) and checkers. No broker imports this
module: the frame around the payload (byte layout, CRC, stamping) is ``mafka4.batch_frame``.

The payload is a msgpack array of records. Each record is a msgpack array
``[timestamp_delta_ms, key (bin or nil), value (bin), headers (array of [str, bin]) or nil]``;
record ``i`` has offset ``base_offset + i`` and timestamp ``first_timestamp_ms + delta``.

Sources (attribute bit 3; only in VP logs, never in a producer's batch:
``batch_frame.check_producer_batch``). The payload is then the array ``[records, sources]``:
``records`` as above, ``sources`` one bin of 12 bytes per record, in order (int32 physical
partition, int64 physical offset: where the feeder took the record from,
``virtual.vp_records``). A reader that wants the sources (the feed's progress after a restart,
the checkers) gets each record's as its last header, ``(SOURCE_HEADER, 12 bytes)``: the form VP
batches before this bit carried it in, which readers still read. A consumer leaves it out
(``with_sources=False``) and never builds it: as a header per record it had cost a consumer of a
VP about half again its decoding (4.2 against 2.5-3.1 µs per message).

Timestamp runs (attribute bit 5; only with sources, in a VP batch). The payload is then
``[records, sources, runs]``: ``runs`` one bin of 12 bytes per run (``TIMESTAMP_RUN``: uint32
index of its first record, int64 base timestamp, big endian), the first run starting at record
0 and each later one further on. Record ``i``'s timestamp is the base of the run holding it plus
its delta (``first_timestamp_ms`` is the first run's base). A VP batch made of records of
several physical batches keeps each one's deltas, as its producer wrote them, and one run per
physical batch's base timestamp (``virtual.vp_records``); a batch of one run has no runs.

Key-hash column (attribute bit 4; only in a producer's batch, never with sources:
``batch_frame.check_producer_batch``). The payload is then the array
``[records, message_hashes, record_ends]``: ``records`` as above; ``message_hashes`` one bin of
8 bytes per record, in order, each the big-endian uint64 that places the record in a virtual
partition (``virtual.ranges.message_hash``): ``key_hash(key)`` for a keyed record, and for a
keyless one its round-robin hash ``keyless_hash(producer_id, partition, base_sequence + i)``
(so a batch with the column has a producer id); ``record_ends`` one bin of 4 bytes per record,
big-endian uint32, where record ``i``'s msgpack bytes end, counted from the first byte of the
uncompressed payload. Record 0 starts right after the records array's header (at byte
``1 + len(array_header(count))``), record ``i`` where record ``i - 1`` ends, and the last one
ends where the records array does. The producer hashed each key anyway to pick a partition, so
a read node splits the batch by these two columns (``virtual.column_split``): it copies each
record's bytes to its VP's batch and never decodes one. A reader of the records (a consumer, a
checker, a feeder splitting a batch without the column) checks the columns' sizes and ignores
them: two bins of 12 bytes a record cost a copy, against microseconds a record to decode.

Lanes. A record in a lane (``virtual.layout``'s lanes; the trunk is no lane) carries the header
``(LANE_HEADER, lane name as UTF-8)`` as its first header; a trunk record carries none
(``lane_of_headers``). The Producer adds it: ``mafka4.`` headers are the system's own. A batch
with the key-hash column of which some record is in a lane also carries the lane-id column
(attribute bit 6, only with bit 4): the payload is then ``[records, message_hashes, record_ends,
lane_ids]``, ``lane_ids`` one bin of 2 bytes per record, big-endian uint16, the record's lane id
in the topic's layout (0: the trunk), so a read node places each record in its lane's VPs
without decoding it (``virtual.column_split``). A batch of trunk records only has no lane-id
column: its bytes are those of a topic without lanes. A reader of the records checks the
column's size and ignores it, as it ignores the key-hash column.

Compression (``mafka4.compression``). The payload is compressed as a whole with the codec of
the batch's attributes; the CRC covers the compressed bytes (``batch_frame``). Only readers
that need the records decompress (consumers, and the feeder, which writes each VP sub-batch
with the codec of the physical batch its records came from). A compressed payload
decompresses to at most ``PAYLOAD_BYTES_MAX``, what ``length`` allows an uncompressed one.
"""

from __future__ import annotations

import struct
import threading
from itertools import accumulate, repeat
from operator import add
from typing import Any, Callable, Iterable, NamedTuple, Sequence

import msgpack

from mafka4.batch_frame import (ATTRIBUTE_KEY_HASHES, ATTRIBUTE_LANE_IDS, ATTRIBUTE_SOURCES, ATTRIBUTE_TIMESTAMP_RUNS,
                                HEADER_BYTES, NO_PRODUCER_ID, NO_SEQUENCE, PAYLOAD_BYTES_MAX, BatchHeader, check_batch,
                                frame_payload, iter_batches)
from mafka4.collector import collection_paused
from mafka4.compression import Codec, compress, decompress
from mafka4.errors import CorruptRecord
from mafka4.limits import PAYLOAD_PACKER_KEPT_BYTES_MAX

# Header names under this prefix are the system's own (a VP record's source, a loss marker):
# producers may not send them, or a consumer would take a producer's header for one of these.
RESERVED_HEADER_PREFIX = "mafka4."
SOURCE_HEADER = "mafka4.src"  # how a record's source reads as a header
LANE_HEADER = "mafka4.lane"  # a laned record's first header: its lane's name, UTF-8 (see the module doc)
SOURCE = struct.Struct(">iq")  # one record's source: physical partition, physical offset
TIMESTAMP_RUN = struct.Struct(">Iq")  # one timestamp run: index of its first record, its base timestamp
MESSAGE_HASH_BYTES = 8  # one record's entry in the key-hash column: big-endian uint64
RECORD_END_BYTES = 4  # one record's end in the payload: big-endian uint32
LANE_ID_BYTES = 2  # one record's entry in the lane-id column: big-endian uint16
_U8, _U16, _U32 = struct.Struct(">B"), struct.Struct(">H"), struct.Struct(">I")


class Record(NamedTuple):
    """One decoded record (a named tuple: readers and feeds build one per record, and a tuple
    is built several times faster than a frozen dataclass)."""

    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes], ...] = ()


Headers = tuple[tuple[str, bytes], ...]
# What a reader builds of each record, from (offset, timestamp_ms, key, value, headers): a
# ``Record`` by default; a consumer builds its message right away (``Message`` with the topic
# and partition bound), so that no record is built only to be copied into one.
RecordBuilder = Callable[[int, int, bytes | None, bytes, Headers], Any]


class TupleBuilder:
    """A ``RecordBuilder`` making instances of the named tuple ``cls``, whose leading fields are
    ``prefix`` and whose last five are (offset, timestamp_ms, key, value, headers).

    ``columns`` makes a whole batch's worth from its columns in C, through ``tuple.__new__``: a
    named tuple's own ``__new__`` is a Python function, and calling it once per record took
    about a quarter of a draining consumer's main thread here."""

    __slots__ = ("cls", "prefix")

    def __init__(self, cls: type, *prefix: Any):
        self.cls, self.prefix = cls, prefix

    def __call__(self, offset: int, timestamp_ms: int, key: bytes | None, value: bytes, headers: Headers) -> Any:
        return tuple.__new__(self.cls, (*self.prefix, offset, timestamp_ms, key, value, headers))

    def columns(self, offsets: Iterable[int], timestamps_ms: Iterable[int], keys: Sequence, values: Sequence,
                headers: Iterable[Headers]) -> list:
        count = len(values)
        leading = [repeat(field, count) for field in self.prefix]
        rows = zip(*leading, offsets, timestamps_ms, keys, values, headers)
        return list(map(tuple.__new__, repeat(self.cls, count), rows))



RECORDS = TupleBuilder(Record)  # the default builder: a ``Record`` per record

# How a reader turns a record's raw msgpack headers into the pairs it keeps (``decode_headers``
# by default); ``CorruptRecord`` through ``bad_record`` if they are wrong.
HeadersDecoder = Callable[[object, int, BatchHeader], Headers]


class HeadersReading(NamedTuple):
    """How a reader reads the records' headers, in two ways that must agree.

    ``common``: the headers of every record of a batch, given the column of their raw headers,
    when all have the shape almost every batch has (no headers at all for a producer's batch);
    None otherwise. It checks the whole column in a few passes that run in C.
    ``each``: one record's headers, checked field by field, naming what is wrong
    (``CorruptRecord``). A batch ``common`` declines is read record by record with it.
    """

    each: HeadersDecoder
    common: Callable[[tuple], Iterable[Headers] | None]


def lane_of_headers(headers: Sequence[tuple[str, bytes]] | None) -> str:
    """The lane a record's headers name (its first header, ``LANE_HEADER``), "" for the trunk.

    A name that is not UTF-8 (no Producer writes one: lane names are ASCII) reads with
    replacement characters, a name no lane has."""
    if headers and headers[0][0] == LANE_HEADER:
        return headers[0][1].decode("utf-8", "replace")
    return ""


def laned_headers(lane: str, headers: Sequence[tuple[str, bytes]] | None) -> list[tuple[str, bytes]] | None:
    """``headers`` of a record sent to ``lane`` ("" the trunk: unchanged): its lane header first."""
    if not lane:
        return headers if headers is None else list(headers)
    return [(LANE_HEADER, lane.encode()), *(headers or ())]


def encode_batch(
    records: Sequence[tuple[bytes | None, bytes, int, Sequence[tuple[str, bytes]] | None]],
    producer_id: int = NO_PRODUCER_ID,
    base_sequence: int = NO_SEQUENCE,
    codec: Codec = Codec.NONE,
    sources: bytes | None = None,
) -> bytes:
    """Encode ``(key, value, timestamp_ms, headers)`` tuples into one unstamped batch, its
    payload compressed with ``codec``; ``sources`` as ``encode_record_arrays`` takes it."""
    assert records, "a batch holds at least one record"
    timestamps = [timestamp_ms for _, _, timestamp_ms, _ in records]
    first_timestamp_ms = timestamps[0]
    record_arrays = [(timestamp_ms - first_timestamp_ms, key, value, headers or None)
                     for key, value, timestamp_ms, headers in records]
    return encode_record_arrays(record_arrays, first_timestamp_ms, max(timestamps), producer_id, base_sequence, codec,
                                sources)


def encode_record_arrays(
    record_arrays: Sequence[tuple[int, bytes | None, bytes, Sequence[tuple[str, bytes]] | None]],
    first_timestamp_ms: int,
    max_timestamp_ms: int,
    producer_id: int = NO_PRODUCER_ID,
    base_sequence: int = NO_SEQUENCE,
    codec: Codec = Codec.NONE,
    sources: bytes | None = None,
    message_hashes: bytes | None = None,
    timestamp_runs: bytes | None = None,
    lane_ids: bytes | None = None,
) -> bytes:
    """Encode records already in payload form, ``(timestamp_delta_ms, key, value, headers or None)``
    each (tuples pack as msgpack arrays), into one unstamped batch. The producer keeps its records
    this way from the start, so encoding a batch is one msgpack call.

    ``sources``: the records' sources, ``SOURCE``-packed one after another (a VP batch; see the
    module doc); ``timestamp_runs``: with sources, the runs' ``TIMESTAMP_RUN``s, the records'
    deltas counting from their runs' bases. ``message_hashes``: the key-hash column,
    ``MESSAGE_HASH_BYTES`` a record (a producer's batch with a producer id; see the module doc);
    the records' ends are added here. ``lane_ids``: with the key-hash column, the lane-id column,
    ``LANE_ID_BYTES`` a record; all zeros (trunk records only) it is left out, as the format says.
    """
    assert record_arrays, "a batch holds at least one record"
    assert sources is None or message_hashes is None, "a batch has sources or the key-hash column, not both"
    attributes = codec.value
    if sources is not None:
        assert len(sources) == SOURCE.size * len(record_arrays), (len(sources), len(record_arrays))
        attributes |= ATTRIBUTE_SOURCES
    if timestamp_runs is not None:
        assert sources is not None and len(timestamp_runs) >= 2 * TIMESTAMP_RUN.size, (
            "timestamp runs only with sources, two or more")
        attributes |= ATTRIBUTE_TIMESTAMP_RUNS
    if message_hashes is not None:
        assert len(message_hashes) == MESSAGE_HASH_BYTES * len(record_arrays), (len(message_hashes), len(record_arrays))
        assert producer_id != NO_PRODUCER_ID, "keyless records' hashes are made of the producer id"
        attributes |= ATTRIBUTE_KEY_HASHES
        if lane_ids is not None:
            assert len(lane_ids) == LANE_ID_BYTES * len(record_arrays), (len(lane_ids), len(record_arrays))
            if lane_ids.count(0) == len(lane_ids):  # trunk records only: no column
                lane_ids = None
            else:
                attributes |= ATTRIBUTE_LANE_IDS
        return _framed(_hashed_payload(record_arrays, message_hashes, lane_ids), codec, attributes,
                       len(record_arrays), first_timestamp_ms, max_timestamp_ms, producer_id, base_sequence)
    assert lane_ids is None, "the lane-id column goes only with the key-hash column"
    packer = _payload_packer()
    try:
        if sources is None:
            packer.pack(record_arrays)
        else:
            packer.pack((record_arrays, sources) if timestamp_runs is None else (record_arrays, sources, timestamp_runs))
        with packer.getbuffer() as payload:
            return _framed(payload, codec, attributes, len(record_arrays), first_timestamp_ms, max_timestamp_ms,
                           producer_id, base_sequence)
    finally:
        _release_payload_packer(packer)


def _framed(payload: bytes | memoryview, codec: Codec, attributes: int, count: int, first_timestamp_ms: int,
            max_timestamp_ms: int, producer_id: int, base_sequence: int) -> bytes:
    assert len(payload) <= PAYLOAD_BYTES_MAX, f"a batch payload of {len(payload)} bytes"
    return frame_payload(compress(codec, payload), attributes, count, first_timestamp_ms, max_timestamp_ms,
                         producer_id, base_sequence)


def _hashed_payload(record_arrays: Sequence, message_hashes: bytes, lane_ids: bytes | None = None) -> bytes:
    """``[records, message_hashes, record_ends]``, or with ``lane_ids`` ``[..., lane_ids]`` (see the
    module doc). Each record is packed on its own, in C (``map``), so that its end is known: about
    as fast as packing the array at once for small records, and a copy more for large ones (0.28
    and 0.42 µs a record at 100 B and 1 KiB)."""
    count = len(record_arrays)
    packed = list(map(_record_packer().pack, record_arrays))
    records_start = 1 + len(array_header(count))
    ends = struct.pack(f">{count + 1}I", *accumulate(map(len, packed), initial=records_start))[RECORD_END_BYTES:]
    if lane_ids is None:
        return b"".join((b"\x93", array_header(count), *packed, bin_header(len(message_hashes)), message_hashes,
                         bin_header(len(ends)), ends))
    return b"".join((b"\x94", array_header(count), *packed, bin_header(len(message_hashes)), message_hashes,
                     bin_header(len(ends)), ends, bin_header(len(lane_ids)), lane_ids))


def array_header(count: int) -> bytes:
    """The msgpack header of an array of ``count`` items, as msgpack writes it (the shortest form)."""
    if count < 16:
        return bytes((0x90 | count,))
    return b"\xdc" + _U16.pack(count) if count < 2**16 else b"\xdd" + _U32.pack(count)


def bin_header(size: int) -> bytes:
    """The msgpack header of a bin of ``size`` bytes, as msgpack writes it (the shortest form)."""
    if size < 2**8:
        return b"\xc4" + _U8.pack(size)
    return b"\xc5" + _U16.pack(size) if size < 2**16 else b"\xc6" + _U32.pack(size)


# Each thread packs payloads with one Packer it keeps. A fresh packer (``msgpack.packb``) grows
# its buffer to a MiB by reallocation on every batch, and the new pages fault in: measured here,
# 1.9 ms to pack a MiB batch of 1 KiB records that a kept packer packs in 0.4 ms.
_packers = threading.local()


def _record_packer() -> msgpack.Packer:
    """The thread's packer of single records (it returns each one's bytes)."""
    packer = getattr(_packers, "record_packer", None)
    if packer is None:
        packer = _packers.record_packer = msgpack.Packer(use_bin_type=True)
    return packer


def _payload_packer() -> msgpack.Packer:
    packer = getattr(_packers, "packer", None)
    if packer is None:
        packer = _packers.packer = msgpack.Packer(use_bin_type=True, autoreset=False)
    return packer


def _release_payload_packer(packer: msgpack.Packer) -> None:
    """Empty the thread's packer for its next batch, or drop it if this batch made it huge."""
    with packer.getbuffer() as packed:
        grown = len(packed) > PAYLOAD_PACKER_KEPT_BYTES_MAX
    if grown:
        _packers.packer = None
    else:
        packer.reset()


def bad_record(index: int, header: BatchHeader, problem: str) -> CorruptRecord:
    """The error for record ``index`` of the batch with ``header``, ``problem`` saying what is wrong."""
    return CorruptRecord(f"record {index} of batch at offset {header.base_offset} {problem}")


def decode_headers(headers: object, index: int, header: BatchHeader) -> Headers:
    """A record's raw headers (a msgpack array of [str, bin] pairs, or nil for none) as pairs.

    Payloads are unpacked into tuples (``decode_checked_batch``), so checked headers are
    returned as they are: no pair is copied.
    """
    if headers is None:
        return ()
    if not isinstance(headers, tuple):
        raise bad_record(index, header, f"has headers of type {type(headers).__name__}, not an array or nil")
    for pair in headers:
        if not (isinstance(pair, tuple) and len(pair) == 2 and isinstance(pair[0], str)
                and isinstance(pair[1], bytes)):
            raise bad_record(index, header, f"has a header that is not a [str, bin] pair: {pair!r:.60}")
    return headers


def headers_absent(raw_headers: tuple) -> Iterable[Headers] | None:
    """``HeadersReading.common`` of a producer's batch: no record has headers (all nil)."""
    return repeat((), len(raw_headers)) if set(map(type, raw_headers)) == {type(None)} else None


PRODUCER_HEADERS = HeadersReading(decode_headers, headers_absent)


def decode_batch(buffer: bytes | bytearray | memoryview, position: int = 0) -> list[Record]:
    """Decode the records of one CRC-checked batch, decompressing its payload.

    ``UnknownCodec`` for a codec id this version does not know; ``CorruptRecord`` naming the
    batch and its codec for a payload that does not decompress.
    """
    return decode_checked_batch(buffer, position, check_batch(buffer, position))


def decode_checked_batch(
    buffer: bytes | bytearray | memoryview, position: int, header: BatchHeader,
    build: RecordBuilder = RECORDS, headers: HeadersReading = PRODUCER_HEADERS, with_sources: bool = True,
) -> list:
    """``decode_batch`` of the batch at ``position`` whose CRC was checked already, ``header`` being
    what the check returned (``iter_batches`` checks each batch it yields): a MiB batch's CRC
    costs about half a millisecond, on every reader's and feeder's path.

    Each record is made by ``build``, its headers read as ``headers`` says: VP readers pass a
    reading that checks the source header and leaves it out (``vp_records.VP_RECORD_HEADERS``).

    A batch with sources (see the module doc): each record gets its source as its last header,
    unless ``with_sources`` is False; its sources are checked for their size either way.
    """
    # The collector paused: a record's msgpack tuple dies before any collection walks it, and the
    # records built are walked once, after (``mafka4.collector``).
    with collection_paused():
        return _decode_payload(buffer, position, header, build, headers, with_sources)


def _decode_payload(buffer: bytes | bytearray | memoryview, position: int, header: BatchHeader,
                    build: RecordBuilder, headers: HeadersReading, with_sources: bool) -> list:
    codec = header.codec
    with memoryview(buffer) as view, view[position + HEADER_BYTES:position + header.size_bytes] as stored:
        # An uncompressed payload is unpacked where it lies (msgpack copies each value out
        # anyway): a copy of it first cost a twentieth of a draining consumer's main thread.
        items = _unpacked(stored if codec is Codec.NONE else _decompressed(stored, header), header)
    source_headers, bases = None, None
    if header.laned and not header.hashed:
        raise CorruptRecord(f"batch at offset {header.base_offset} has the lane-id column's bit 6 without the "
                            f"key-hash column's bit 4")
    if header.hashed:
        items = _records_beside_key_hashes(items, header)
    if header.sourced:
        items, sources, runs = _split_sources(items, header)
        if runs is not None:
            bases = _run_bases(runs, header)
        if with_sources:
            source_headers = [((SOURCE_HEADER, sources[start:start + SOURCE.size]),)
                              for start in range(0, len(sources), SOURCE.size)]
    if not isinstance(items, tuple) or len(items) != header.count:
        raise CorruptRecord(f"batch at offset {header.base_offset} holds a payload that is not {header.count} records")
    records = _decode_columns(items, header, build, headers, source_headers, bases)
    if records is None:  # some record is not of the common shape: each is checked, naming what is wrong
        records = [_decode_record(item, index, header, build, headers.each,
                                  () if source_headers is None else source_headers[index],
                                  header.first_timestamp_ms if bases is None else bases[index])
                   for index, item in enumerate(items)]
    return records


def _split_sources(payload: object, header: BatchHeader) -> tuple[object, bytes, bytes | None]:
    """``(records, sources, timestamp runs or None)`` of a payload with sources; ``CorruptRecord`` if
    it is not of the shape its attributes say."""
    shape = 3 if header.timestamp_runs else 2
    if not (isinstance(payload, tuple) and len(payload) == shape and all(isinstance(p, bytes) for p in payload[1:])):
        raise CorruptRecord(f"batch at offset {header.base_offset} has sources (attribute bit 3) but a payload "
                            f"that is not [records, sources{', timestamp runs' if shape == 3 else ''}]")
    items, sources = payload[0], payload[1]
    if len(sources) != SOURCE.size * header.count:
        raise CorruptRecord(f"batch at offset {header.base_offset} has {len(sources)} bytes of sources for "
                            f"{header.count} records, not {SOURCE.size} per record")
    return items, sources, payload[2] if shape == 3 else None


def _run_bases(runs: bytes, header: BatchHeader) -> list[int]:
    """Each record's base timestamp, from a batch's timestamp runs (see the module doc);
    ``CorruptRecord`` for runs that do not cut its records into runs."""
    count = header.count
    if len(runs) % TIMESTAMP_RUN.size or len(runs) < 2 * TIMESTAMP_RUN.size:
        raise CorruptRecord(f"batch at offset {header.base_offset} has {len(runs)} bytes of timestamp runs: not "
                            f"two or more runs of {TIMESTAMP_RUN.size} bytes")
    starts, run_bases = zip(*TIMESTAMP_RUN.iter_unpack(runs))
    if starts[0] != 0 or any(a >= b for a, b in zip(starts, starts[1:])) or starts[-1] >= count:
        raise CorruptRecord(f"batch at offset {header.base_offset} has timestamp runs starting at records "
                            f"{list(starts)[:8]}: not 0 first, then ascending, below its {count} records")
    bases: list[int] = []
    for start, end, base in zip(starts, (*starts[1:], count), run_bases):
        bases += repeat(base, end - start)
    return bases


def _records_beside_key_hashes(payload: object, header: BatchHeader) -> object:
    """The records of a payload with the key-hash column (and the lane-id column if its bit says so),
    which a reader of records ignores once it checked the columns' sizes; ``CorruptRecord`` if the
    payload is not of that shape."""
    laned = header.laned
    count = header.count
    if not (isinstance(payload, tuple) and len(payload) == (4 if laned else 3) and isinstance(payload[1], bytes)
            and isinstance(payload[2], bytes) and len(payload[1]) == MESSAGE_HASH_BYTES * count
            and len(payload[2]) == RECORD_END_BYTES * count
            and (not laned or (isinstance(payload[3], bytes) and len(payload[3]) == LANE_ID_BYTES * count))):
        lanes = f", {count} lane ids" if laned else ""
        raise CorruptRecord(f"batch at offset {header.base_offset} has a key-hash column (attribute bit 4) but a "
                            f"payload that is not [records, {count} message hashes, {count} record ends{lanes}]")
    return payload[0]


def _decompressed(stored: memoryview, header: BatchHeader) -> bytes:
    try:
        return decompress(header.codec, stored, PAYLOAD_BYTES_MAX)
    except CorruptRecord as error:
        raise CorruptRecord(
            f"batch at offset {header.base_offset} has a {header.codec} payload that does not decompress: {error}"
        ) from error


def _unpacked(payload: bytes | memoryview, header: BatchHeader) -> object:
    # Arrays as tuples, not lists: a consumer holds a poll's records (thousands) across many
    # allocations. The collector untracks an exact tuple of atoms the first time it sees it;
    # a list stays tracked, is promoted to the oldest generation, and every full collection
    # walks it. (A ``Message``, a named tuple, is never untracked: ``reports/2026-11-27-consumer-decoding``.)
    try:
        return msgpack.unpackb(payload, raw=False, use_list=False)
    except (ValueError, TypeError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as error:
        raise CorruptRecord(f"batch at offset {header.base_offset} has a bad payload: {error}") from error


_NIL = type(None)


def _decode_columns(items: tuple, header: BatchHeader, build: RecordBuilder, headers: HeadersReading,
                    source_headers: list[Headers] | None = None, bases: list[int] | None = None) -> list | None:
    """The records of ``items`` if every one is well formed and its headers of ``headers``' common
    shape, else None: the checks of ``_decode_record`` made on whole columns, in passes that run
    in C (a third of the per-record calls' cost). ``source_headers``: each record's source, as a
    header to append to its own (a batch with sources, read with them); ``bases``: each record's
    base timestamp (a batch with timestamp runs).

    Exact types stand for ``isinstance`` here: msgpack makes no subclasses, and a bool, which
    is an int to ``isinstance``, is no timestamp delta.
    """
    if not items or set(map(type, items)) != {tuple} or set(map(len, items)) != {4}:
        return None
    deltas, keys, values, raw_headers = zip(*items)
    if (set(map(type, deltas)) != {int} or set(map(type, values)) != {bytes}
            or not set(map(type, keys)) <= {_NIL, bytes}):
        return None
    common_headers = headers.common(raw_headers)
    if common_headers is None:
        return None
    if source_headers is not None:
        common_headers = map(add, common_headers, source_headers)
    count = len(items)
    offsets = range(header.base_offset, header.base_offset + count)
    timestamps_ms = map(add, repeat(header.first_timestamp_ms, count) if bases is None else bases, deltas)
    if isinstance(build, TupleBuilder):
        return build.columns(offsets, timestamps_ms, keys, values, common_headers)
    return list(map(build, offsets, timestamps_ms, keys, values, common_headers))


def _decode_record(item: object, index: int, header: BatchHeader, build: RecordBuilder,
                   headers_decoder: HeadersDecoder, source_header: Headers = (), base_timestamp_ms: int | None = None
                   ) -> Any:
    """One payload entry as ``build`` makes it; ``CorruptRecord`` naming the field that is wrong.

    A valid CRC only proves the bytes arrived as sent: a buggy or hostile producer can
    compute one around anything, so every field is type-checked before a reader gets it.
    (Every record of every fetch a feed splits or a consumer reads passes here: the error text
    is built only on error.)
    """
    if not (isinstance(item, tuple) and len(item) == 4):
        raise bad_record(index, header, "is malformed: expected [timestamp_delta_ms, key, value, headers]")
    delta_ms, key, value, headers = item
    if not isinstance(delta_ms, int) or isinstance(delta_ms, bool):
        raise bad_record(index, header, f"has a timestamp delta of type {type(delta_ms).__name__}, not an integer")
    if key is not None and not isinstance(key, bytes):
        raise bad_record(index, header, f"has a key of type {type(key).__name__}, not bytes or nil")
    if not isinstance(value, bytes):
        raise bad_record(index, header, f"has a value of type {type(value).__name__}, not bytes")
    base = header.first_timestamp_ms if base_timestamp_ms is None else base_timestamp_ms
    return build(header.base_offset + index, base + delta_ms, key, value,
                 headers_decoder(headers, index, header) + source_header)


def decode_batches(buffer: bytes | bytearray | memoryview, build: RecordBuilder = RECORDS) -> list:
    """Decode every whole batch in concatenated batch bytes, each record made by ``build``."""
    records: list = []
    for position, header in iter_batches(buffer):  # CRC-checked there: once per batch, not twice
        records.extend(decode_checked_batch(buffer, position, header, build))
    return records
