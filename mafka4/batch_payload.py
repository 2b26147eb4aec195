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

Compression (``mafka4.compression``). The payload is compressed as a whole with the codec of
the batch's attributes; the CRC covers the compressed bytes (``batch_frame``). Only readers
that need the records decompress (consumers, and the feeder, which writes each VP sub-batch
with the codec of the physical batch its records came from). A compressed payload
decompresses to at most ``PAYLOAD_BYTES_MAX``, what ``length`` allows an uncompressed one.
"""

from __future__ import annotations

import struct
import threading
from itertools import repeat
from operator import add
from typing import Any, Callable, Iterable, NamedTuple, Sequence

import msgpack

from mafka4.batch_frame import (ATTRIBUTE_SOURCES, HEADER_BYTES, NO_PRODUCER_ID, NO_SEQUENCE, PAYLOAD_BYTES_MAX,
                                BatchHeader, check_batch, frame_payload, iter_batches)
from mafka4.collector import collection_paused
from mafka4.compression import Codec, compress, decompress
from mafka4.errors import CorruptRecord
from mafka4.limits import PAYLOAD_PACKER_KEPT_BYTES_MAX

SOURCE_HEADER = "mafka4.src"  # how a record's source reads as a header
SOURCE = struct.Struct(">iq")  # one record's source: physical partition, physical offset


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
) -> bytes:
    """Encode records already in payload form, ``(timestamp_delta_ms, key, value, headers or None)``
    each (tuples pack as msgpack arrays), into one unstamped batch. The producer keeps its records
    this way from the start, so encoding a batch is one msgpack call.

    ``sources``: the records' sources, ``SOURCE``-packed one after another (a VP batch; see the
    module doc).
    """
    assert record_arrays, "a batch holds at least one record"
    attributes = codec.value
    if sources is not None:
        assert len(sources) == SOURCE.size * len(record_arrays), (len(sources), len(record_arrays))
        attributes |= ATTRIBUTE_SOURCES
    packer = _payload_packer()
    try:
        packer.pack(record_arrays if sources is None else (record_arrays, sources))
        with packer.getbuffer() as payload:
            assert len(payload) <= PAYLOAD_BYTES_MAX, f"a batch payload of {len(payload)} bytes"
            return frame_payload(compress(codec, payload), attributes, len(record_arrays), first_timestamp_ms,
                                 max_timestamp_ms, producer_id, base_sequence)
    finally:
        _release_payload_packer(packer)


# Each thread packs payloads with one Packer it keeps. A fresh packer (``msgpack.packb``) grows
# its buffer to a MiB by reallocation on every batch, and the new pages fault in: measured here,
# 1.9 ms to pack a MiB batch of 1 KiB records that a kept packer packs in 0.4 ms.
_packers = threading.local()


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
    source_headers = None
    if header.sourced:
        items, sources = _split_sources(items, header)
        if with_sources:
            source_headers = [((SOURCE_HEADER, sources[start:start + SOURCE.size]),)
                              for start in range(0, len(sources), SOURCE.size)]
    if not isinstance(items, tuple) or len(items) != header.count:
        raise CorruptRecord(f"batch at offset {header.base_offset} holds a payload that is not {header.count} records")
    records = _decode_columns(items, header, build, headers, source_headers)
    if records is None:  # some record is not of the common shape: each is checked, naming what is wrong
        records = [_decode_record(item, index, header, build, headers.each,
                                  () if source_headers is None else source_headers[index])
                   for index, item in enumerate(items)]
    return records


def _split_sources(payload: object, header: BatchHeader) -> tuple[object, bytes]:
    """``(records, sources)`` of a payload with sources; ``CorruptRecord`` if it is not of that shape."""
    if not (isinstance(payload, tuple) and len(payload) == 2 and isinstance(payload[1], bytes)):
        raise CorruptRecord(f"batch at offset {header.base_offset} has sources (attribute bit 3) but a payload "
                            f"that is not [records, sources]")
    items, sources = payload
    if len(sources) != SOURCE.size * header.count:
        raise CorruptRecord(f"batch at offset {header.base_offset} has {len(sources)} bytes of sources for "
                            f"{header.count} records, not {SOURCE.size} per record")
    return items, sources


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
                    source_headers: list[Headers] | None = None) -> list | None:
    """The records of ``items`` if every one is well formed and its headers of ``headers``' common
    shape, else None: the checks of ``_decode_record`` made on whole columns, in passes that run
    in C (a third of the per-record calls' cost). ``source_headers``: each record's source, as a
    header to append to its own (a batch with sources, read with them).

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
    timestamps_ms = map(add, repeat(header.first_timestamp_ms, count), deltas)
    if isinstance(build, TupleBuilder):
        return build.columns(offsets, timestamps_ms, keys, values, common_headers)
    return list(map(build, offsets, timestamps_ms, keys, values, common_headers))


def _decode_record(item: object, index: int, header: BatchHeader, build: RecordBuilder,
                   headers_decoder: HeadersDecoder, source_header: Headers = ()) -> Any:
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
    return build(header.base_offset + index, header.first_timestamp_ms + delta_ms, key, value,
                 headers_decoder(headers, index, header) + source_header)


def decode_batches(buffer: bytes | bytearray | memoryview, build: RecordBuilder = RECORDS) -> list:
    """Decode every whole batch in concatenated batch bytes, each record made by ``build``."""
    records: list = []
    for position, header in iter_batches(buffer):  # CRC-checked there: once per batch, not twice
        records.extend(decode_checked_batch(buffer, position, header, build))
    return records
