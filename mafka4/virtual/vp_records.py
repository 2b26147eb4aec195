"""Routing: committed physical records -> per-VP records that carry their source.

The feeder (never the physical leader) decodes each committed physical batch and calls
``route_records`` (``route_batch`` decodes and routes a batch in one call): every record gets its
message hash (``ranges.message_hash``) and goes to exactly one VP, the one owning that hash in the
split epoch of its offset among the VPs of the record's lane (its first header,
``batch_payload.LANE_HEADER``; none: the trunk) (``TopicLayout.locate(partition, offset, hash,
lane_id)``); within a VP the records keep physical offset order. A record of a lane the layout
read does not have yet stops the routing there (``route_known_lanes``: the feeder reads the
layout again and goes on from it). The VP leader appends them as ordinary batches
(``encode_vp_batch``), assigning its own VP offsets.

Two splits, one result. A physical batch with the key-hash column (``batch_payload``) is split
without decoding a record (``virtual.column_split``): its records reach the VP leader as an
``EncodedChunk``, their bytes as the producer wrote them. A batch without it (written before
the column, or whose column fails the feeder's checks) is decoded and split here, its records
reaching the VP leader as ``SourcedRecord``s that ``encode_vp_batch`` encodes again. Both make
the same VP batches, byte for byte (``tests/unit/test_column_split.py``).

VP batches. Every record remembers the codec and the timestamps (first and max) of the physical
batch it came from, and the VP leader writes a feed call's records of one VP as one VP batch
per run of a codec (``codec_runs``), so a VP log is compressed as its producers chose, mixed
codecs included, and a VP batch holds the records of as many physical batches as the feed call
brought (at 256 VPs a physical batch gives each VP a few records: a VP batch per physical batch
made batches too small to feed or read fast). Each record keeps its producer's timestamp delta:
a VP batch of records from several physical batches carries *timestamp runs*
(``batch_payload``), one per base timestamp, so the column split copies records without
rewriting a delta (a variable-length int). Its header's max timestamp is the largest max of
those physical batches, an upper bound of its records' (the time index answers a VP
``offset_for_timestamp`` at most one physical batch's time span early, batch-granular as it
already is). Records not from a physical batch (loss markers, tests) carry no batch timestamps:
each is its own base.

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
from typing import Container, Iterable, Iterator, Mapping, NamedTuple, Sequence, Union

from mafka4.batch_frame import BatchHeader, read_header
from mafka4.batch_payload import (LANE_HEADER, PRODUCER_HEADERS, RECORDS, SOURCE, SOURCE_HEADER, TIMESTAMP_RUN,
                                  Headers, HeadersReading, Record, RecordBuilder, bad_record, decode_batch,
                                  decode_checked_batch, decode_headers, encode_record_arrays, lane_of_headers)
from mafka4.compression import Codec
from mafka4.errors import UnknownLane
from mafka4.virtual.layout import TopicLayout
from mafka4.virtual.ranges import message_hash

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
    # (first_timestamp_ms, max_timestamp_ms) of the physical batch it came from, which its VP batch
    # keeps (see the module doc); None for a record not from a batch (a loss marker).
    batch_timestamps: tuple[int, int] | None = None

    @property
    def source(self) -> tuple[int, int]:
        return self.partition, self.offset


class EncodedChunk:
    """Records of one partition for one VP, in ascending offsets, kept as the producer encoded them
    (``virtual.column_split.SplitChunk``): the VP leader takes them as a feed call's records
    (``FeedProgress``, ``HostedVp.feed``) without decoding or encoding any of them again.

    An interface: a subclass defines every method. A plain class, not an ``abc.ABC``: a feed call
    asks three times whether its records are encoded, and ``isinstance`` of an ABC cost 0.5 µs
    more each time, paid per VP and round."""

    __slots__ = ()

    @property
    def partition(self) -> int:
        raise NotImplementedError

    @property
    def last_offset(self) -> int:
        raise NotImplementedError

    def __len__(self) -> int:
        raise NotImplementedError

    def after(self, last_applied: int) -> "EncodedChunk | None":
        """The records past ``last_applied`` (None: none)."""
        raise NotImplementedError

    def below(self, offset: int) -> "EncodedChunk | None":
        """The records below ``offset`` (None: none)."""
        raise NotImplementedError

    def vp_batches(self) -> Iterator[tuple["EncodedChunk", bytes]]:
        """Its VP batches, unstamped, in order, each with the records it holds (``codec_runs``' rule)."""
        raise NotImplementedError

    def __iter__(self) -> Iterator[SourcedRecord]:
        """The records decoded: for checks and tests, never on the feed's path."""
        raise NotImplementedError


# What a feed call hands a VP: records decoded, or records kept encoded.
FedRecords = Union[Sequence[SourcedRecord], EncodedChunk]


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
    ``UnknownLane`` if a record is in a lane ``layout`` does not have (``route_known_lanes`` routes
    the records before it).
    """
    by_vp, unknown_at = route_known_lanes(header, records, partition, layout, wanted)
    if unknown_at is not None:
        raise UnknownLane(f"record {partition}:{unknown_at} is in lane "
                          f"{lane_of_headers(records[unknown_at - header.base_offset].headers)!r}, which the layout "
                          f"read does not have: the layout is older than the record")
    return by_vp


def route_known_lanes(
    header: BatchHeader, records: Sequence[Record], partition: int, layout: TopicLayout,
    wanted: Container[int] | None = None,
) -> tuple[dict[int, list[SourcedRecord]], int | None]:
    """``route_records`` of the batch's records up to the first one in a lane ``layout`` does not
    have, and that record's offset (None if there is none): the layout read is older than that
    record, and what follows it waits until the layout is read again.

    A record's lane is its first header's (``batch_payload.lane_of_headers``), placed by that
    lane's ranges in the record's split epoch.
    """
    assert len(records) == header.count, (len(records), header.count)
    # Cuts only grow with the offset: a batch whose first and last records share a split epoch
    # lies wholly in it, so its records are placed by that epoch's ranges alone.
    first_epoch = layout.epoch_for(partition, header.base_offset)
    codec = header.codec
    batch_timestamps = (header.first_timestamp_ms, header.max_timestamp_ms)
    whole_batch = first_epoch is layout.epoch_for(partition, header.next_offset - 1)
    by_vp: dict[int, list[SourcedRecord]] = {}
    for index, record in enumerate(records):
        assert record.offset == header.base_offset + index, (record.offset, header.base_offset, index)
        hash_value = message_hash(
            record.key, partition, header.producer_id, header.base_sequence + index, record.offset
        )
        epoch = first_epoch if whole_batch else layout.epoch_for(partition, record.offset)
        headers = record.headers
        if headers and headers[0][0] == LANE_HEADER:
            lane_id = epoch.lane_id(lane_of_headers(headers))
            ranges = None if lane_id is None else epoch.lane_ranges(lane_id)
            if ranges is None:
                return by_vp, record.offset
        else:
            ranges = epoch.ranges
        vp = ranges.vp_for_hash(hash_value)
        if wanted is not None and vp not in wanted:
            continue
        by_vp.setdefault(vp, []).append(SourcedRecord(
            partition, record.offset, hash_value, record.timestamp_ms, record.key, record.value, record.headers, codec,
            batch_timestamps,
        ))
    return by_vp, None


def route_batch(
    batch: bytes | bytearray | memoryview, partition: int, layout: TopicLayout, wanted: Container[int] | None = None
) -> dict[int, list[SourcedRecord]]:
    """``route_records`` of the one stamped, CRC-checked physical batch at the start of ``batch``."""
    return route_records(read_header(batch), decode_batch(batch), partition, layout, wanted)


def encode_vp_batch(records: Sequence[SourcedRecord], codec: Codec = Codec.NONE) -> bytes:
    """An unstamped batch for a VP log: the records and their sources, compressed with ``codec``.

    Each record keeps its delta from its physical batch's first timestamp, in one timestamp run
    per base (see the module doc): the bytes ``column_split`` makes of the same records.
    """
    sources = b"".join(map(_SOURCE.pack, map(attrgetter("partition"), records), map(attrgetter("offset"), records)))
    bases = [r.timestamp_ms if r.batch_timestamps is None else r.batch_timestamps[0] for r in records]
    max_timestamp_ms = max(r.timestamp_ms if r.batch_timestamps is None else r.batch_timestamps[1] for r in records)
    return encode_record_arrays([(r.timestamp_ms - base, r.key, r.value, r.headers or None)
                                 for r, base in zip(records, bases)], bases[0], max_timestamp_ms, codec=codec,
                                sources=sources, timestamp_runs=timestamp_runs(bases))


def timestamp_runs(bases: Sequence[int]) -> bytes | None:
    """The timestamp runs of records with these base timestamps (a run starts where the base
    changes), packed; None for one run, which needs none (``batch_payload``)."""
    starts = [0] + [i for i in range(1, len(bases)) if bases[i] != bases[i - 1]]
    if len(starts) == 1:
        return None
    return b"".join(TIMESTAMP_RUN.pack(start, bases[start]) for start in starts)


def vp_batch_key(record: SourcedRecord) -> Codec:
    """What the records of one VP batch share: their physical batch's codec."""
    return record.codec


def codec_runs(records: Sequence[SourcedRecord]) -> Iterator[tuple[Codec, Sequence[SourcedRecord]]]:
    """``records`` cut into maximal runs of one ``vp_batch_key``, in order: each run becomes one VP batch."""
    for codec, run in groupby(records, key=vp_batch_key):
        yield codec, list(run)


def vp_batches(records: FedRecords) -> Iterator[tuple[FedRecords, bytes]]:
    """The unstamped VP batches of a feed call's records, in order, each with the records it holds."""
    if isinstance(records, EncodedChunk):
        yield from records.vp_batches()
        return
    for codec, run in codec_runs(records):
        yield run, encode_vp_batch(run, codec)


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

    def unapplied(self, records: FedRecords) -> FedRecords:
        """The records not yet in the VP log (those past the last applied offset of their partition)."""
        if isinstance(records, EncodedChunk):
            return records.after(self.last_applied(records.partition)) or []
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

    def applied(self, records: Iterable[SourcedRecord] | EncodedChunk) -> None:
        """``records`` (from ``unapplied``) are now in the VP log, in this order."""
        if isinstance(records, EncodedChunk):
            self._advance(records.partition, records.last_offset)
            return
        last_applied = self._last_applied
        for record in records:
            partition, offset = record.partition, record.offset
            assert offset > last_applied.get(partition, NOTHING_APPLIED), (
                f"source offset {offset} of partition {partition} applied after "
                f"{last_applied.get(partition, NOTHING_APPLIED)}: the VP would hold it twice or out of order"
            )
            last_applied[partition] = offset

    def _advance(self, partition: int, offset: int) -> None:
        last_applied = self._last_applied.get(partition, NOTHING_APPLIED)
        assert offset > last_applied, (
            f"source offset {offset} of partition {partition} applied after {last_applied}: "
            f"the VP would hold it twice or out of order"
        )
        self._last_applied[partition] = offset

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FeedProgress) and self._last_applied == other._last_applied

    def __repr__(self) -> str:
        return f"FeedProgress({self._last_applied})"
