"""Routing: committed physical records -> per-VP records that carry their source.

The feeder (never the physical leader) decodes each committed physical batch and calls
``route_records`` (``route_batch`` decodes and routes a batch in one call): every record gets its message hash (``ranges.message_hash``) and goes to
exactly one VP, the one owning that hash in the split epoch of its offset
(``TopicLayout.locate(partition, offset, hash)``); within a VP the records keep physical offset
order. The VP leader appends them as ordinary batches (``encode_vp_batch``), assigning its own
VP offsets.

Compression. Decoding a physical batch decompresses it (``batch_payload.decode_batch``); every
record remembers the codec of the batch it came from, and the VP leader writes each run of
records that share a codec as one VP batch compressed with it (``codec_runs``), so a VP log
is compressed as its producers chose, mixed codecs included.

Source encoding. A VP batch is a batch of the producer's records (timestamp, key, value,
headers) with *sources* (``batch_frame``'s attribute bit 3): one 12-byte column beside the records,
int32 physical partition and int64 physical offset per record, big endian, so each record's
source survives any crash with it. Read by ``batch_payload.decode_batch``, a VP record carries its
source as one more header, appended last::

    ("mafka4.src", 12 bytes)   int32 physical partition, int64 physical offset, big endian

which is how VP batches written before the column carried it in their payload (such batches
are still read, by the same functions). ``source_of`` reads it; ``strip_source`` gives the
consumer the producer's record. ``decode_checked_vp_batch`` decodes a VP batch straight to the
producer's records, no source built (or, in a batch from before the column, the source header
checked and left out on the way): what consumers read, each record built once, as the object
the consumer returns (a ``Message``, made by a constructor the client passes).

Loss markers. When physical retention deleted records before a read node fed them (past the
bound ``unfed_hold_ms_max``), the feed stream appends a *loss marker* to each VP that lacked
records there: a record with no key and no value whose first header is::

    ("mafka4.lost", 20 bytes)  int32 physical partition, int64 first lost offset, int64 end (exclusive)

and whose source is the last lost offset, so ``FeedProgress`` moves past the gap. Consumers
raise ``RecordsLost`` when they reach it (``lost_range_of``, or ``lost_range_in`` of the
producer's headers), in order with the records around it.

Idempotent feeding. ``FeedProgress`` is one VP's "last source offset applied per physical
partition". The feeder gives each VP the records of one partition in ascending offset order,
so a record at or below the last applied offset of its partition is already in the VP log:
``unapplied`` drops it. Re-feeding any batch (a retried append, a restarted feeder starting
from an earlier offset) therefore appends nothing twice. ``FeedProgress.rebuild`` recomputes
the progress from the VP log's records after a restart.

Invariants (asserted): records of one partition are applied in strictly ascending offset
order; a record's source header is its last header. Consumers read VP logs written by other
processes, so ``decode_checked_vp_batch`` raises ``CorruptRecord`` for a batch without sources
whose records lack a source header, or one whose sources do not match its records.

Pure: no I/O (decoding a batch held in memory is not I/O).
"""

from __future__ import annotations

import struct
from itertools import groupby, repeat
from operator import attrgetter
from typing import Container, Iterable, Iterator, Mapping, NamedTuple, Sequence

from mafka4.batch_frame import BatchHeader, read_header
from mafka4.batch_payload import (PRODUCER_HEADERS, RECORDS, SOURCE, SOURCE_HEADER, Headers, HeadersReading, Record,
                                  RecordBuilder, bad_record, decode_batch, decode_checked_batch, decode_headers,
                                  encode_batch)
from mafka4.compression import Codec
from mafka4.virtual.layout import TopicLayout
from mafka4.virtual.ranges import message_hash

# Header names under this prefix are the system's own (a VP record's source, a loss marker):
# producers may not send them, or a consumer would take a producer's header for one of these.
RESERVED_HEADER_PREFIX = "mafka4."
_SOURCE = SOURCE
LOST_HEADER = "mafka4.lost"
_LOST = struct.Struct(">iqq")
NOTHING_APPLIED = -1


class SourcedRecord(NamedTuple):
    """One record on its way to a VP: the producer's record and where it came from (a named
    tuple: the feed makes one per record, and a tuple is built several times faster)."""

    partition: int
    offset: int  # physical offset in ``partition``
    message_hash: int
    timestamp_ms: int
    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes], ...] = ()
    codec: Codec = Codec.NONE  # of the physical batch it came from: its VP batch is compressed alike

    @property
    def source(self) -> tuple[int, int]:
        return self.partition, self.offset


def encode_source(partition: int, offset: int) -> bytes:
    assert 0 <= partition < 2**31 and 0 <= offset < 2**63, (partition, offset)
    return _SOURCE.pack(partition, offset)


def source_of(record: Record) -> tuple[int, int]:
    """``(physical partition, physical offset)`` of a record read from a VP log."""
    assert record.headers and record.headers[-1][0] == SOURCE_HEADER, f"VP record without source: {record}"
    partition, offset = _SOURCE.unpack(record.headers[-1][1])
    return partition, offset


def strip_source(record: Record) -> Record:
    """The producer's record as a consumer sees it (VP offset, no source header)."""
    source_of(record)
    return Record(record.offset, record.timestamp_ms, record.key, record.value, record.headers[:-1])


def lost_marker(partition: int, first_offset: int, end_offset: int, timestamp_ms: int) -> SourcedRecord:
    """The loss marker for physical offsets ``[first_offset, end_offset)`` of ``partition`` (see the module doc)."""
    assert 0 <= first_offset < end_offset, (first_offset, end_offset)
    return SourcedRecord(partition, end_offset - 1, 0, timestamp_ms, None, b"",
                         ((LOST_HEADER, _LOST.pack(partition, first_offset, end_offset)),))


def lost_range_of(record: Record) -> tuple[int, int, int] | None:
    """``(partition, first lost offset, end)`` if ``record`` (read from a VP log) is a loss marker."""
    return lost_range_in(record.headers)


def lost_range_in(headers: Headers) -> tuple[int, int, int] | None:
    """``lost_range_of`` a record with these headers, its source header kept or left out: a loss
    marker's first header is the loss header either way."""
    if headers and headers[0][0] == LOST_HEADER:
        partition, first_offset, end_offset = _LOST.unpack(headers[0][1])
        return partition, first_offset, end_offset
    return None


def producer_headers(headers: object, index: int, header: BatchHeader) -> Headers:
    """The raw headers of record ``index`` of a VP batch as its producer sent them: checked as
    any record's (``batch_payload.decode_headers``), the source header, which must be last, left
    out.

    A ``batch_payload.HeadersDecoder``; ``CorruptRecord`` for a record without a well-formed
    source header last (no VP leader writes one: the bytes did not come from a VP log, or a buggy
    writer made them).
    """
    if isinstance(headers, tuple) and headers and _is_source_header(headers[-1]):
        return decode_headers(headers[:-1], index, header)
    decode_headers(headers, index, header)  # a malformed header is named as on any record
    raise bad_record(index, header, f"does not end with a {SOURCE_HEADER} header of {_SOURCE.size} bytes: "
                                    f"not a record of a VP log")


def only_source_headers(raw_headers: tuple) -> Iterable[Headers] | None:
    """``HeadersReading.common`` of a VP batch: every record's headers are its source header alone
    (its producer sent none, and it is no loss marker); the records then have no headers."""
    if set(map(type, raw_headers)) != {tuple} or set(map(len, raw_headers)) != {1}:
        return None
    pairs = [pair for (pair,) in raw_headers]
    if set(map(type, pairs)) != {tuple} or set(map(len, pairs)) != {2}:
        return None
    names, sources = zip(*pairs)
    if set(names) != {SOURCE_HEADER} or set(map(type, sources)) != {bytes} or set(map(len, sources)) != {_SOURCE.size}:
        return None
    return repeat((), len(raw_headers))


# How a batch from before sources were a column is read: each record's source is its last header.
VP_RECORD_HEADERS = HeadersReading(producer_headers, only_source_headers)


def _is_source_header(pair: object) -> bool:
    return (isinstance(pair, tuple) and len(pair) == 2 and pair[0] == SOURCE_HEADER
            and isinstance(pair[1], bytes) and len(pair[1]) == _SOURCE.size)


def decode_checked_vp_batch(
    buffer: bytes | bytearray | memoryview, position: int, header: BatchHeader, build: RecordBuilder = RECORDS
) -> list:
    """The producer's records of the CRC-checked VP batch at ``position`` (``strip_source`` of each
    record, VP offsets), each made by ``build`` in one step; loss markers included, in order.

    The same checks and errors as ``batch_payload.decode_checked_batch``; ``CorruptRecord`` for a
    batch with sources that do not match its records, and for a record of a batch without sources
    that lacks its source header (``producer_headers``).
    """
    if header.sourced:
        return decode_checked_batch(buffer, position, header, build, PRODUCER_HEADERS, with_sources=False)
    return decode_checked_batch(buffer, position, header, build, VP_RECORD_HEADERS)


def route_records(
    header: BatchHeader, records: Sequence[Record], partition: int, layout: TopicLayout,
    wanted: Container[int] | None = None,
) -> dict[int, list[SourcedRecord]]:
    """Per VP id, the records of one committed physical batch that belong to it, in offset order.

    ``wanted``: only these VPs' records (a read node builds records only for the VPs it leads).
    """
    assert len(records) == header.count, (len(records), header.count)
    # Cuts only grow with the offset: a batch whose first and last records share a split epoch
    # lies wholly in it, so its records are placed by that epoch's ranges alone.
    first_epoch = layout.epoch_for(partition, header.base_offset)
    codec = header.codec
    whole_batch = first_epoch is layout.epoch_for(partition, header.next_offset - 1)
    by_vp: dict[int, list[SourcedRecord]] = {}
    for index, record in enumerate(records):
        assert record.offset == header.base_offset + index, (record.offset, header.base_offset, index)
        hash_value = message_hash(
            record.key, partition, header.producer_id, header.base_sequence + index, record.offset
        )
        epoch = first_epoch if whole_batch else layout.epoch_for(partition, record.offset)
        vp = epoch.ranges.vp_for_hash(hash_value)
        if wanted is not None and vp not in wanted:
            continue
        by_vp.setdefault(vp, []).append(SourcedRecord(
            partition, record.offset, hash_value, record.timestamp_ms, record.key, record.value, record.headers, codec
        ))
    return by_vp


def route_batch(
    batch: bytes | bytearray | memoryview, partition: int, layout: TopicLayout, wanted: Container[int] | None = None
) -> dict[int, list[SourcedRecord]]:
    """``route_records`` of the one stamped, CRC-checked physical batch at the start of ``batch``."""
    return route_records(read_header(batch), decode_batch(batch), partition, layout, wanted)


def encode_vp_batch(records: Sequence[SourcedRecord], codec: Codec = Codec.NONE) -> bytes:
    """An unstamped batch for a VP log: the records and their sources, compressed with ``codec``."""
    return encode_batch([(r.key, r.value, r.timestamp_ms, r.headers) for r in records], codec=codec,
                        sources=b"".join(map(_SOURCE.pack, map(attrgetter("partition"), records),
                                             map(attrgetter("offset"), records))))


def codec_runs(records: Sequence[SourcedRecord]) -> Iterator[tuple[Codec, Sequence[SourcedRecord]]]:
    """``records`` cut into maximal runs of one codec, in order: each run becomes one VP batch."""
    for codec, run in groupby(records, key=lambda record: record.codec):
        yield codec, list(run)


class FeedProgress:
    """The last source offset applied per physical partition, for one VP; see the module doc.

    Two steps, like an append: ``unapplied`` picks what to append, ``applied`` is called
    once the VP log holds it.
    """

    __slots__ = ("_last_applied",)

    def __init__(self, last_applied: Mapping[int, int] | None = None):
        self._last_applied: dict[int, int] = dict(last_applied or {})
        assert all(p >= 0 and offset >= 0 for p, offset in self._last_applied.items()), self._last_applied

    @classmethod
    def rebuild(cls, vp_records: Iterable[Record]) -> "FeedProgress":
        """The progress recorded by a VP log, from its records in VP offset order."""
        progress = cls()
        for record in vp_records:
            partition, offset = source_of(record)
            progress._advance(partition, offset)
        return progress

    def last_applied(self, partition: int) -> int:
        """The last offset of ``partition`` in this VP (``NOTHING_APPLIED``: none yet)."""
        return self._last_applied.get(partition, NOTHING_APPLIED)

    def snapshot(self) -> dict[int, int]:
        return dict(self._last_applied)

    def unapplied(self, records: Sequence[SourcedRecord]) -> list[SourcedRecord]:
        """The records not yet in the VP log (those past the last applied offset of their partition)."""
        fresh, previous, last_applied = [], {}, self._last_applied
        for record in records:  # the feed's per-record path: kept free of calls
            partition, offset = record.partition, record.offset
            assert offset > previous.get(partition, NOTHING_APPLIED), (
                f"records of partition {partition} out of offset order at {offset}"
            )
            previous[partition] = offset
            if offset > last_applied.get(partition, NOTHING_APPLIED):
                fresh.append(record)
        return fresh

    def applied(self, records: Iterable[SourcedRecord]) -> None:
        """``records`` (from ``unapplied``) are now in the VP log, in this order."""
        last_applied = self._last_applied
        for record in records:
            partition, offset = record.partition, record.offset
            assert offset > last_applied.get(partition, NOTHING_APPLIED), (
                f"source offset {offset} of partition {partition} applied after "
                f"{last_applied.get(partition, NOTHING_APPLIED)}: the VP would hold it twice or out of order"
            )
            last_applied[partition] = offset

    def _advance(self, partition: int, offset: int) -> None:
        assert offset > self.last_applied(partition), (
            f"source offset {offset} of partition {partition} applied after {self.last_applied(partition)}: "
            f"the VP would hold it twice or out of order"
        )
        self._last_applied[partition] = offset

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FeedProgress) and self._last_applied == other._last_applied

    def __repr__(self) -> str:
        return f"FeedProgress({self._last_applied})"
