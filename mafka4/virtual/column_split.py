"""The column split: a physical batch with the key-hash column, cut into its VPs' batches without decoding a record.

A producer's batch may carry each record's message hash and the end of its bytes
(``batch_payload``'s key-hash column, attribute bit 4). ``read_columns`` reads both columns of a
batch with ``np.frombuffer``; ``RoundColumns`` joins the columns of a feed round's consecutive
batches into one set; ``split_round`` places every record of them with one ``searchsorted`` over
the split epoch's range starts (as ``RangeMap.vp_for_hash`` does one record at a time),
groups them per VP with one stable sort, and lays out in that order, once for the round, what
VP batches copy (``RoundByVp``): where each record's bytes are, their sources (one numpy pack)
and where their physical batches change. A VP's share of
a round is a ``ColumnRun``, a stretch of that order; a feed call's share of a VP is a
``SplitChunk`` (``vp_records.EncodedChunk``), whose VP batches are made at append time from
slices of it, with a step per physical batch for the timestamp runs, and compressed once.

Lanes. A batch some of whose records are in a lane carries their lane ids too (the lane-id
column, attribute bit 6): ``split_round`` places each record with its lane's ranges in its split
epoch (``SplitEpoch.lane_ranges``), with one ``searchsorted`` per lane present in the round (a
round of trunk records only has no lane ids and splits exactly as without lanes). A record of a
lane the layout does not have (the layout read is older than the record: its lane's epoch is
stored before its first record is produced) ends what the round hands over: ``split_round``
returns its offset, and nothing at or past it is placed (``feed_plan.plan_round``).

Per round there is numpy, per VP and per batch a little Python, per record none, and no record
is unpacked. At 256 VPs a round gives each VP a handful of records: work per batch and VP had
cost as much as work per record in the first version, which split batch by batch
(``reports/2026-12-02-split-without-decoding``), and numpy's fixed cost per call, once paid per
VP and round (a VP batch's sources and timestamp runs were packed with numpy), had been most
of a VP batch's cost (``benchmarks/feed_split_micro.py``).

Byte for byte. A VP batch made here is the one ``vp_records.encode_vp_batch`` makes of the same
records decoded (the decoding split, ``route_records``): one per codec run of a feed call's
records, whatever number of physical batches they came from, each record with the delta its
producer wrote and a timestamp run per base (``vp_records``' module doc says why), so every
record's bytes are the producer's, in the producer's (msgpack's shortest) encoding.
``tests/unit/test_column_split.py`` checks it on random batches.

Bad columns. The CRC proves only that a batch arrived as its producer sent it. A batch is split
by its column only if the column passes ``read_columns``' checks, which cost a few
microseconds a batch, never a decode of every record:

* its shape, vectorised: the columns' sizes, the records array's header, every record's end
  past its start, the last at the array's end, and every record's first byte a 4-item array;
* its agreement with the keys, by sample (``SAMPLED_RECORDS``: the first, the last and one the
  batch's CRC picks): each sampled record's bytes are unpacked alone and hashed as
  ``route_records`` would hash them, and its lane id is non-zero exactly if its first header is
  the lane header (``batch_payload.LANE_HEADER``).

The feeder checks, not the leader and not the consumer. The leader would have to decompress and
decode every batch on the write path (what DESIGN principle 2 keeps off it); a consumer cannot
recompute a keyless record's hash (it is made of the producer id and sequence, which a VP batch
does not keep), and checking every key would cost every consumer a hash per message. The feeder
already holds the uncompressed payload, and what it decides is deterministic (a function of the
batch's bytes), so every read node and every refeed splits a batch alike. A batch that fails is
split the slow way, by its decoded keys (``route_records``), and the problem is reported
(``CorruptRecord`` naming the batch, the record and the fix, for the feed stream to log): a
buggy producer's records still land where their keys say. A column wrong only in records the
sample misses sends those records to the VP the column names: they are still delivered, once,
but a key whose producer lies about its hash loses its order across VPs, as it does when that
producer picks partitions by hand.

Pure: no I/O (numpy on bytes held in memory).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from itertools import groupby
from operator import itemgetter
from typing import Container, Iterator, NamedTuple, Sequence

import msgpack
import numpy as np

from mafka4.batch_frame import (ATTRIBUTE_SOURCES, ATTRIBUTE_TIMESTAMP_RUNS, HEADER_BYTES, PAYLOAD_BYTES_MAX,
                                BatchHeader, frame_payload)
from mafka4.batch_payload import (LANE_HEADER, LANE_ID_BYTES, MESSAGE_HASH_BYTES, RECORD_END_BYTES, SOURCE,
                                  TIMESTAMP_RUN, array_header, bin_header, decode_headers)
from mafka4.compression import Codec, compress, decompress
from mafka4.errors import CorruptRecord
from mafka4.virtual.layout import SplitEpoch, TopicLayout
from mafka4.virtual.ranges import RangeMap, message_hash
from mafka4.virtual.vp_records import EncodedChunk, SourcedRecord

_HASHES = np.dtype(">u8")
_ENDS = np.dtype(">u4")
_LANE_IDS = np.dtype(">u2")
_SOURCES = np.dtype([("partition", ">i4"), ("offset", ">i8")])
assert _HASHES.itemsize == MESSAGE_HASH_BYTES and _ENDS.itemsize == RECORD_END_BYTES
assert _LANE_IDS.itemsize == LANE_ID_BYTES
assert _SOURCES.itemsize == SOURCE.size
RECORD_FIRST_BYTE = 0x94  # msgpack's fixarray of 4 items: [timestamp_delta_ms, key, value, headers]
SAMPLED_RECORDS = 3  # records of each batch whose key-hash entry is checked against their key


class BatchColumns(NamedTuple):
    """One physical batch with the key-hash column, its payload uncompressed, and its columns read."""

    partition: int
    header: BatchHeader
    payload: bytes  # uncompressed
    starts: np.ndarray  # int64, where each record's bytes start in ``payload``
    ends: np.ndarray  # int64, where they end
    hashes: np.ndarray  # uint64, each record's message hash
    lane_ids: np.ndarray | None = None  # uint16, each record's lane id; None: all in the trunk (no lane-id column)
    # (index, lane name) of the sampled records in a lane: ``lane_name_problem`` checks their ids against the layout.
    sampled_lanes: tuple[tuple[int, str], ...] = ()


class RoundColumns:
    """The columns of consecutive physical batches of one partition (a feed round's batches with the
    key-hash column, in offset order), joined: every array has one entry per record of them all.
    The payloads are joined too (a copy of the round's bytes, one C call), so that a VP batch's
    records are cut from one buffer."""

    __slots__ = ("partition", "headers", "buffer", "starts", "ends", "hashes", "lane_ids", "offsets", "batch_of",
                 "batch_facts", "codec")

    def __init__(self, batches: Sequence[BatchColumns]):
        assert batches and len({batch.partition for batch in batches}) == 1, "batches of one partition"
        assert all(a.header.next_offset <= b.header.base_offset for a, b in zip(batches, batches[1:])), "in offset order"
        self.partition = batches[0].partition
        self.headers = [batch.header for batch in batches]
        shifts = np.cumsum([0] + [len(batch.payload) for batch in batches[:-1]])
        self.buffer = b"".join(batch.payload for batch in batches)
        self.starts = np.concatenate([batch.starts + shift for batch, shift in zip(batches, shifts)])
        self.ends = np.concatenate([batch.ends + shift for batch, shift in zip(batches, shifts)])
        self.hashes = np.concatenate([batch.hashes for batch in batches])
        # Each record's lane id; None when every record is in the trunk (no batch has the column).
        self.lane_ids: np.ndarray | None = None
        if any(batch.lane_ids is not None for batch in batches):
            self.lane_ids = np.concatenate([np.zeros(len(batch.hashes), np.uint16) if batch.lane_ids is None
                                            else batch.lane_ids for batch in batches])
        self.offsets = np.concatenate([np.arange(h.base_offset, h.next_offset, dtype=np.int64) for h in self.headers])
        self.batch_of = np.repeat(np.arange(len(batches)), [h.count for h in self.headers])
        # Per batch: its records' base timestamp, its max timestamp, its codec (what a VP batch of
        # its records takes from it), read from its header once for every VP.
        self.batch_facts: list[tuple[int, int, Codec]] = [
            (h.first_timestamp_ms, h.max_timestamp_ms, h.codec) for h in self.headers]
        # The codec of every batch of the round, if they share one (as a producer's batches do):
        # then a VP's records of it make one VP batch, with no look for a change of codec per VP.
        codecs = {codec for _, _, codec in self.batch_facts}
        self.codec: Codec | None = codecs.pop() if len(codecs) == 1 else None


class RoundByVp:
    """The records of a round that a split hands over, ordered by VP, then offset: each VP's records
    are one stretch of positions, and what a VP batch copies of them (where their bytes are, their
    sources, where their physical batches change) is laid out once for the round in that order, so
    that a VP's share is a slice of it (see the module doc)."""

    __slots__ = ("round", "indices", "buffer", "starts", "ends", "offsets", "sources", "batch_of", "batch_starts")

    buffer: memoryview  # of the round's joined payloads: a VP batch joins slices of it, copying each record once
    sources: memoryview

    def __init__(self, round_: RoundColumns, indices: np.ndarray, vp_starts: np.ndarray):
        """``indices``: the round's records in VP order; ``vp_starts``: the positions where a VP's records start."""
        assert len(indices) and len(vp_starts) and vp_starts[0] == 0, (len(indices), vp_starts)
        self.round = round_
        self.indices = indices
        self.buffer = memoryview(round_.buffer)
        # Record i's bytes: buffer[starts[i]:ends[i]].
        self.starts: list[int] = round_.starts[indices].tolist()
        self.ends: list[int] = round_.ends[indices].tolist()
        offsets = round_.offsets[indices]
        self.offsets: list[int] = offsets.tolist()
        sources = np.empty(len(indices), _SOURCES)
        sources["partition"], sources["offset"] = round_.partition, offsets
        self.sources = memoryview(sources.tobytes())  # record i's: sources[SOURCE.size * i:SOURCE.size * (i + 1)]
        batch_of = round_.batch_of[indices]
        self.batch_of: list[int] = batch_of.tolist()
        # Where a stretch of records of one physical batch and one VP starts: its base timestamp,
        # max timestamp and codec are its batch's.
        new_batch = np.empty(len(indices), bool)
        new_batch[0] = True
        np.not_equal(batch_of[1:], batch_of[:-1], out=new_batch[1:])
        new_batch[vp_starts] = True
        self.batch_starts: list[int] = np.flatnonzero(new_batch).tolist()


class ColumnRun:
    """Records of a round that go to one VP: positions ``[start, stop)`` of the round's ``RoundByVp``
    (a stretch of one VP's records, in offset order)."""

    __slots__ = ("split", "start", "stop")

    def __init__(self, split: RoundByVp, start: int, stop: int):
        assert 0 <= start <= stop <= len(split.offsets), (start, stop, len(split.offsets))
        self.split, self.start, self.stop = split, start, stop

    def __len__(self) -> int:
        return self.stop - self.start

    @property
    def partition(self) -> int:
        return self.split.round.partition

    @property
    def offsets(self) -> list[int]:
        return self.split.offsets[self.start:self.stop]

    @property
    def first_offset(self) -> int:
        return self.split.offsets[self.start]

    @property
    def last_offset(self) -> int:
        return self.split.offsets[self.stop - 1]

    def cut(self, start: int, stop: int) -> "ColumnRun":
        """Its records ``[start, stop)`` (positions within the run)."""
        return ColumnRun(self.split, self.start + start, self.start + stop)

    def after(self, last_applied: int) -> "ColumnRun":
        return ColumnRun(self.split, bisect_right(self.split.offsets, last_applied, self.start, self.stop), self.stop)

    def below(self, offset: int) -> "ColumnRun":
        return ColumnRun(self.split, self.start, bisect_left(self.split.offsets, offset, self.start, self.stop))

    def batch_pieces(self) -> list[int]:
        """Where the run's records of each physical batch start (positions in ``RoundByVp``)."""
        batch_starts = self.split.batch_starts
        return [self.start, *batch_starts[bisect_right(batch_starts, self.start):bisect_left(batch_starts, self.stop)]]

    def codec_pieces(self) -> Iterator[tuple[Codec, "ColumnRun"]]:
        """The run cut where its records' codec changes (a round's batches may differ in codec)."""
        split = self.split
        batch_of, facts = split.batch_of, split.round.batch_facts
        start, codec = self.start, None
        for position in self.batch_pieces():
            batch_codec = facts[batch_of[position]][2]
            if codec is not None and batch_codec is not codec:
                yield codec, ColumnRun(split, start, position)
                start = position
            codec = batch_codec
        yield codec, (self if start == self.start else ColumnRun(split, start, self.stop))


class SplitChunk(EncodedChunk):
    """Records of one partition for one VP, as runs of physical batches, kept encoded (see the module doc)."""

    __slots__ = ("runs", "_count")

    def __init__(self, runs: Sequence[ColumnRun]):
        runs = tuple(run for run in runs if len(run))
        assert runs, "a chunk holds at least one record"
        if len(runs) > 1:  # (a VP's chunk is one run but where batches without the column came between)
            assert len({run.partition for run in runs}) == 1, "a chunk holds records of one partition"
            assert all(a.last_offset < b.first_offset for a, b in zip(runs, runs[1:])), "runs in physical offset order"
        self.runs = runs
        self._count = sum(map(len, runs))

    @property
    def partition(self) -> int:
        return self.runs[0].partition

    @property
    def last_offset(self) -> int:
        return self.runs[-1].last_offset

    def __len__(self) -> int:
        return self._count

    def after(self, last_applied: int) -> "SplitChunk | None":
        if self.runs[0].first_offset > last_applied:
            return self  # the usual case: the VP holds none of it
        return _chunk_or_none([run.after(last_applied) for run in self.runs])

    def below(self, offset: int) -> "SplitChunk | None":
        if self.last_offset < offset:
            return self
        return _chunk_or_none([run.below(offset) for run in self.runs])

    def vp_batches(self) -> Iterator[tuple["SplitChunk", bytes]]:
        runs = self.runs
        codec = runs[0].split.round.codec
        if codec is not None and all(run.split.round.codec is codec for run in runs[1:]):
            yield self, encode_runs(runs, codec)  # the usual case: rounds of one codec, one VP batch
            return
        pieces = [piece for run in self.runs for piece in run.codec_pieces()]
        if len(pieces) == len(self.runs) and len({codec for codec, _ in pieces}) == 1:
            yield self, encode_runs(self.runs, pieces[0][0])  # the usual case: one codec, one VP batch
            return
        for codec, same_codec in groupby(pieces, key=itemgetter(0)):
            runs = tuple(run for _, run in same_codec)
            yield SplitChunk(runs), encode_runs(runs, codec)

    def __iter__(self) -> Iterator[SourcedRecord]:
        """The records decoded (for checks and tests; the feed never decodes them)."""
        for run in self.runs:
            yield from decoded_run(run)


def _chunk_or_none(runs: list[ColumnRun]) -> SplitChunk | None:
    runs = [run for run in runs if len(run)]
    return SplitChunk(runs) if runs else None


def encode_runs(runs: Sequence[ColumnRun], codec: Codec) -> bytes:
    """One unstamped VP batch of ``runs`` (records of ``codec``): the records' bytes as the producer
    wrote them, their sources, and a timestamp run per base timestamp (``vp_records.timestamp_runs``).

    Slices of what ``RoundByVp`` laid out for the round, and a step per physical batch of the
    runs: no numpy call, whose fixed cost made a VP batch of a few records cost far more than its bytes."""
    records: list[memoryview] = []
    sources: list[memoryview] = []
    # A timestamp run starts where the base timestamp changes: at a physical batch of another base.
    run_starts: list[int] = []
    bases: list[int] = []
    count, max_timestamp_ms = 0, None
    for run in runs:
        split, start, stop = run.split, run.start, run.stop
        records += map(split.buffer.__getitem__, map(slice, split.starts[start:stop], split.ends[start:stop]))
        sources.append(split.sources[SOURCE.size * start:SOURCE.size * stop])
        batch_of, facts = split.batch_of, split.round.batch_facts
        for position in run.batch_pieces():
            base, batch_max_timestamp_ms, _ = facts[batch_of[position]]
            if not bases or base != bases[-1]:
                run_starts.append(count + position - start)
                bases.append(base)
            if max_timestamp_ms is None or batch_max_timestamp_ms > max_timestamp_ms:
                max_timestamp_ms = batch_max_timestamp_ms
        count += stop - start
    sources_bytes = b"".join(sources)
    attributes = codec.value | ATTRIBUTE_SOURCES
    if len(run_starts) == 1:  # [records, sources]
        payload = b"".join([b"\x92", array_header(count), *records, bin_header(len(sources_bytes)), sources_bytes])
    else:  # [records, sources, runs]
        timestamp_runs = b"".join(map(TIMESTAMP_RUN.pack, run_starts, bases))
        payload = b"".join([b"\x93", array_header(count), *records, bin_header(len(sources_bytes)), sources_bytes,
                            bin_header(len(timestamp_runs)), timestamp_runs])
        attributes |= ATTRIBUTE_TIMESTAMP_RUNS
    assert len(payload) <= PAYLOAD_BYTES_MAX, len(payload)
    return frame_payload(compress(codec, payload), attributes, count, bases[0], max_timestamp_ms, -1, -1)


def decoded_run(run: ColumnRun) -> Iterator[SourcedRecord]:
    """The records of ``run`` as the decoding split makes them (one unpack each)."""
    split = run.split
    round_ = split.round
    for index in split.indices[run.start:run.stop].tolist():
        header = round_.headers[round_.batch_of[index]]
        offset = int(round_.offsets[index])
        delta_ms, key, value, headers = msgpack.unpackb(round_.buffer[round_.starts[index]:round_.ends[index]],
                                                        raw=False, use_list=False)
        yield SourcedRecord(round_.partition, offset, int(round_.hashes[index]), header.first_timestamp_ms + delta_ms,
                            key, value, decode_headers(headers, offset - header.base_offset, header), header.codec,
                            (header.first_timestamp_ms, header.max_timestamp_ms))


# --- reading and checking the columns ----------------------------------------------------


def read_columns(buffer: bytes | bytearray | memoryview, position: int, header: BatchHeader,
                 partition: int) -> BatchColumns | CorruptRecord:
    """The columns of the CRC-checked batch at ``position`` (which has the key-hash column), or the
    problem that makes them unusable (see the module doc); ``CorruptRecord`` raised for a payload
    that does not decompress, as any reader of the batch raises it."""
    assert header.hashed and not header.sourced, header
    codec = header.codec
    with memoryview(buffer) as view, view[position + HEADER_BYTES:position + header.size_bytes] as stored:
        try:
            payload = bytes(stored) if codec is Codec.NONE else decompress(codec, stored, PAYLOAD_BYTES_MAX)
        except CorruptRecord as error:
            raise CorruptRecord(f"batch at offset {header.base_offset} has a {codec} payload that does not "
                                f"decompress: {error}") from error
    count, laned = header.count, header.laned
    records_start = 1 + len(array_header(count))
    hashes_size, ends_size = MESSAGE_HASH_BYTES * count, RECORD_END_BYTES * count
    lanes_size = LANE_ID_BYTES * count if laned else 0
    lanes_at = len(payload) - lanes_size
    ends_at = (lanes_at - len(bin_header(lanes_size)) if laned else lanes_at) - ends_size
    hashes_at = ends_at - len(bin_header(ends_size)) - hashes_size
    records_end = hashes_at - len(bin_header(hashes_size))
    problem = _shape_problem(payload, count, laned, records_start, records_end, hashes_at, ends_at)
    if problem is not None:
        return _bad_column(header, partition, problem)
    ends = np.frombuffer(payload, _ENDS, count, ends_at).astype(np.int64)
    starts = np.empty_like(ends)
    starts[0] = records_start
    starts[1:] = ends[:-1]
    if not (np.all(ends > starts) and ends[-1] == records_end):
        return _bad_column(header, partition, "has record ends that do not cut its records array into records")
    with memoryview(payload) as view:
        first_bytes = np.frombuffer(view, np.uint8)[starts]
    if not np.all(first_bytes == RECORD_FIRST_BYTE):
        index = int(np.flatnonzero(first_bytes != RECORD_FIRST_BYTE)[0])
        return _bad_column(header, partition, f"has a record end that cuts record {index} where no record starts")
    hashes = np.frombuffer(payload, _HASHES, count, hashes_at).astype(np.uint64)  # native order, for searchsorted
    lane_ids = np.frombuffer(payload, _LANE_IDS, count, lanes_at).astype(np.uint16) if laned else None
    columns = BatchColumns(partition, header, payload, starts, ends, hashes, lane_ids)
    problem, sampled_lanes = _sample_problem(columns)
    if problem is not None:
        return _bad_column(header, partition, problem)
    return columns._replace(sampled_lanes=sampled_lanes) if sampled_lanes else columns


def lane_name_problem(columns: BatchColumns, layout: TopicLayout) -> CorruptRecord | None:
    """Whether a sampled record's lane id names another lane than its lane header does, in the layout
    of its epoch (``read_columns`` has no layout; the feeder asks this once it has one). A name the
    epoch does not have, with an id it does not have either, is a layout older than the record:
    ``split_round`` stops there. A mismatch is a bad column, like a wrong key hash: the batch is
    split by its decoded headers instead."""
    header = columns.header
    for index, name in columns.sampled_lanes:
        epoch = layout.epoch_for(columns.partition, header.base_offset + index)
        lane_id = int(columns.lane_ids[index])
        named = epoch.lane_id(name)
        if named != lane_id and (named is not None or epoch.lane_ranges(lane_id) is not None):
            return _bad_column(header, columns.partition, f"says record {index} is in lane id {lane_id}, but its "
                               f"{LANE_HEADER} header names lane {name!r} (lane id {named} in split epoch {epoch.epoch})")
    return None


def _shape_problem(payload: bytes, count: int, laned: bool, records_start: int, records_end: int, hashes_at: int,
                   ends_at: int) -> str | None:
    expected_prefix = (b"\x94" if laned else b"\x93") + array_header(count)
    if records_end - records_start < count or payload[:records_start] != expected_prefix:
        lanes = ", lane ids" if laned else ""
        return f"has a payload that is not [records, message hashes, record ends{lanes}] of {count} records"
    hashes_header = bin_header(MESSAGE_HASH_BYTES * count)
    ends_header = bin_header(RECORD_END_BYTES * count)
    ends_stop = ends_at + RECORD_END_BYTES * count
    if (payload[records_end:hashes_at] != hashes_header
            or payload[hashes_at + MESSAGE_HASH_BYTES * count:ends_at] != ends_header
            or (laned and payload[ends_stop:ends_stop + len(bin_header(LANE_ID_BYTES * count))]
                != bin_header(LANE_ID_BYTES * count))):
        lanes = f" and {count} lane ids" if laned else ""
        return f"has key-hash columns that are not {count} message hashes, {count} record ends{lanes}"
    return None


def sampled_indices(header: BatchHeader) -> list[int]:
    """The records whose key-hash entry is checked: the first, the last, and one the CRC picks."""
    indices = sorted({0, header.count - 1, header.crc % header.count})
    assert len(indices) <= SAMPLED_RECORDS
    return indices


def _sample_problem(columns: BatchColumns) -> tuple[str | None, tuple[tuple[int, str], ...]]:
    """What is wrong with the sampled records' columns, if anything, and the lanes they name."""
    header = columns.header
    sampled_lanes = []
    for index in sampled_indices(header):
        try:
            record = msgpack.unpackb(columns.payload[columns.starts[index]:columns.ends[index]], raw=False,
                                     use_list=False)
        except (ValueError, TypeError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError):
            return f"has record ends that do not cut record {index} out whole", ()
        if not (isinstance(record, tuple) and len(record) == 4):
            return f"has record ends that do not cut record {index} out as a record", ()
        key = record[1]
        if key is not None and not isinstance(key, bytes):
            return f"has record {index} with a key that is neither bytes nor nil", ()
        lane_id = 0 if columns.lane_ids is None else int(columns.lane_ids[index])
        if bool(lane_id) != _has_lane_header(record[3]):
            return (f"says record {index} is in lane id {lane_id}, but it has "
                    f"{'no' if lane_id else 'a'} {LANE_HEADER} header first"), ()
        if lane_id:
            sampled_lanes.append((index, record[3][0][1].decode("utf-8", "replace")))
        offset = header.base_offset + index
        expected = message_hash(key, columns.partition, header.producer_id, header.base_sequence + index, offset)
        if int(columns.hashes[index]) != expected:
            return (f"says record {index} hashes to {int(columns.hashes[index]):#018x}, but its "
                    f"{'key' if key is not None else 'producer id and sequence'} hash to {expected:#018x}"), ()
    return None, tuple(sampled_lanes)


def _has_lane_header(headers: object) -> bool:
    """Whether a record's raw headers start with a well-formed lane header."""
    if not (isinstance(headers, tuple) and headers):
        return False
    first = headers[0]
    return (isinstance(first, tuple) and len(first) == 2 and first[0] == LANE_HEADER
            and isinstance(first[1], bytes) and len(first[1]) > 0)


def _bad_column(header: BatchHeader, partition: int, problem: str) -> CorruptRecord:
    return CorruptRecord(
        f"the batch of partition {partition} at offset {header.base_offset} (producer id {header.producer_id}) "
        f"{problem}: its producer writes a wrong key-hash column (batch_payload's format). The feeder split it "
        f"by its decoded keys instead; fix or upgrade that producer")


# --- the split -----------------------------------------------------------------------------

# Each epoch's range starts as a numpy array, kept with the RangeMap they were made of (so its id
# is not reused while kept); a topic has at most split_epochs_max of them.
_STARTS_KEPT_MAX = 1024
_range_starts: dict[int, tuple[RangeMap, np.ndarray, np.ndarray]] = {}


def _starts_and_vps(ranges: RangeMap) -> tuple[np.ndarray, np.ndarray]:
    kept = _range_starts.get(id(ranges))
    if kept is None or kept[0] is not ranges:
        if len(_range_starts) >= _STARTS_KEPT_MAX:
            _range_starts.clear()
        kept = (ranges, np.array([r.start for r in ranges.ranges], np.uint64), np.array(ranges.vp_ids, np.int64))
        _range_starts[id(ranges)] = kept
    return kept[1], kept[2]


def split_round(round_: RoundColumns, layout: TopicLayout, next_offset: int,
                wanted: Container[int] | None = None) -> tuple[dict[int, ColumnRun], int | None]:
    """Per VP id, the records of the round from ``next_offset`` on that belong to it, as one run
    each (the VP of each record as ``route_records`` finds it; ``wanted``: only these VPs); and the
    offset of the first record of a lane ``layout`` does not have, None if there is none. Records at
    or past that offset are placed nowhere: the layout read is older than they are (module doc)."""
    first = int(np.searchsorted(round_.offsets, next_offset, "left"))
    count = len(round_.offsets) - first
    if count == 0:
        return {}, None
    offsets = round_.offsets[first:]
    lane_ids = None if round_.lane_ids is None else round_.lane_ids[first:]
    vps = np.empty(count, np.int64)
    unknown_at = None  # the position (from ``first``) of the first record of a lane the layout lacks
    for epoch, start_offset, stop_offset in _epoch_spans(layout, round_.partition, int(offsets[0]),
                                                         int(offsets[-1]) + 1):
        start, stop = np.searchsorted(offsets, [start_offset, stop_offset], "left")
        hashes = round_.hashes[first + start:first + stop]
        span_lanes = None if lane_ids is None else lane_ids[start:stop]
        if span_lanes is None or not span_lanes.any():  # the trunk only: as in a topic without lanes
            range_starts, vp_ids = _starts_and_vps(epoch.ranges)
            vps[start:stop] = vp_ids[np.searchsorted(range_starts, hashes, "right") - 1]
            continue
        for lane_id in np.unique(span_lanes).tolist():
            at = np.flatnonzero(span_lanes == lane_id)
            ranges = epoch.lane_ranges(lane_id)
            if ranges is None:
                unknown_at = start + int(at[0]) if unknown_at is None else min(unknown_at, start + int(at[0]))
                continue
            range_starts, vp_ids = _starts_and_vps(ranges)
            vps[start + at] = vp_ids[np.searchsorted(range_starts, hashes[at], "right") - 1]
        if unknown_at is not None:
            break
    unknown_offset = None
    if unknown_at is not None:
        unknown_offset, count = int(offsets[unknown_at]), unknown_at
        vps = vps[:count]
        if count == 0:
            return {}, unknown_offset
    if wanted is None:
        order = np.argsort(vps, kind="stable")
    else:  # the records of VPs led elsewhere are not even copied
        kept = [vp for vp in np.unique(vps).tolist() if vp in wanted]
        if not kept:
            return {}, unknown_offset
        selected = np.flatnonzero(np.isin(vps, kept))
        order = selected[np.argsort(vps[selected], kind="stable")]
    sorted_vps = vps[order]
    vp_starts = np.flatnonzero(np.diff(sorted_vps, prepend=sorted_vps[0] - 1))
    split = RoundByVp(round_, order + first, vp_starts)
    bounds = [*vp_starts.tolist(), len(order)]
    return {vp: ColumnRun(split, start, stop)
            for vp, start, stop in zip(sorted_vps[vp_starts].tolist(), bounds, bounds[1:])}, unknown_offset


def _epoch_spans(layout: TopicLayout, partition: int, first_offset: int, end_offset: int
                 ) -> Iterator[tuple[SplitEpoch, int, int]]:
    """The split epochs of offsets ``[first_offset, end_offset)``, as ``(epoch, start, stop)`` offset
    spans (cuts only grow, so a round has one span or a few)."""
    offset = first_offset
    while offset < end_offset:
        epoch = layout.epoch_for(partition, offset)
        later = [e.cut[partition] for e in layout.epochs[epoch.epoch + 1:] if e.cut[partition] > offset]
        stop = min([end_offset] + later)
        yield epoch, offset, stop
        offset = stop
