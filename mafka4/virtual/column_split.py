"""The column split: a physical batch with the key-hash column, cut into its VPs' batches without decoding a record.

A producer's batch may carry each record's message hash and the end of its bytes
(``batch_payload``'s key-hash column, attribute bit 4). ``read_columns`` reads both columns of a
batch with ``np.frombuffer``; ``RoundColumns`` joins the columns of a feed round's consecutive
batches into one set; ``split_round`` places every record of them with one ``searchsorted`` over
the split epoch's range starts (as ``RangeMap.vp_for_hash`` does one record at a time) and
groups them per VP with one stable sort. Per round and per VP there is Python, per batch a
little, per record none, and no record is unpacked: at 256 VPs a physical batch holds about one
record per VP, so work per batch and VP had cost as much as work per record (the first version
split batch by batch, ``reports/2026-12-02-split-without-decoding``). A VP's share of a round is
a ``ColumnRun``; a feed call's share of a VP is a ``SplitChunk`` (``vp_records.EncodedChunk``),
whose VP batches are made at append time by copying the records' bytes (one C-level join of
their byte ranges per VP batch), packing their sources and timestamp runs with numpy, and
compressing once.

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
  ``route_records`` would hash them.

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

from itertools import groupby
from operator import itemgetter
from typing import Container, Iterator, NamedTuple, Sequence

import msgpack
import numpy as np

from mafka4.batch_frame import (ATTRIBUTE_SOURCES, ATTRIBUTE_TIMESTAMP_RUNS, HEADER_BYTES, PAYLOAD_BYTES_MAX,
                                BatchHeader, frame_payload)
from mafka4.batch_payload import (MESSAGE_HASH_BYTES, RECORD_END_BYTES, SOURCE, TIMESTAMP_RUN, array_header,
                                  bin_header, decode_headers)
from mafka4.compression import Codec, compress, decompress
from mafka4.errors import CorruptRecord
from mafka4.virtual.layout import SplitEpoch, TopicLayout
from mafka4.virtual.ranges import RangeMap, message_hash
from mafka4.virtual.vp_records import EncodedChunk, SourcedRecord

_HASHES = np.dtype(">u8")
_ENDS = np.dtype(">u4")
_SOURCES = np.dtype([("partition", ">i4"), ("offset", ">i8")])
_TIMESTAMP_RUNS = np.dtype([("start", ">u4"), ("base", ">i8")])
assert _HASHES.itemsize == MESSAGE_HASH_BYTES and _ENDS.itemsize == RECORD_END_BYTES
assert _SOURCES.itemsize == SOURCE.size and _TIMESTAMP_RUNS.itemsize == TIMESTAMP_RUN.size
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


class RoundColumns:
    """The columns of consecutive physical batches of one partition (a feed round's batches with the
    key-hash column, in offset order), joined: every array has one entry per record of them all.
    The payloads are joined too (a copy of the round's bytes, one C call), so that a VP batch's
    records are cut from one buffer."""

    __slots__ = ("partition", "headers", "buffer", "starts", "ends", "hashes", "offsets", "batch_of", "bases",
                 "max_timestamps", "codec_ids")

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
        self.offsets = np.concatenate([np.arange(h.base_offset, h.next_offset, dtype=np.int64) for h in self.headers])
        self.batch_of = np.repeat(np.arange(len(batches)), [h.count for h in self.headers])
        # Per batch: its records' base timestamp, its max timestamp, its codec.
        self.bases = np.array([h.first_timestamp_ms for h in self.headers], np.int64)
        self.max_timestamps = np.array([h.max_timestamp_ms for h in self.headers], np.int64)
        self.codec_ids = np.array([h.codec.value for h in self.headers], np.int64)


class ColumnRun(NamedTuple):
    """Records of a round that go to one VP: ``indices`` (ascending) into the round's records."""

    round: RoundColumns
    indices: np.ndarray  # int64

    @property
    def offsets(self) -> np.ndarray:
        return self.round.offsets[self.indices]

    @property
    def first_offset(self) -> int:
        return int(self.round.offsets[self.indices[0]])

    @property
    def last_offset(self) -> int:
        return int(self.round.offsets[self.indices[-1]])

    def cut(self, start: int, stop: int) -> "ColumnRun":
        return ColumnRun(self.round, self.indices[start:stop])

    def codec_pieces(self) -> Iterator[tuple[Codec, "ColumnRun"]]:
        """The run cut where its records' codec changes (a round's batches may differ in codec)."""
        codec_ids = self.round.codec_ids[self.round.batch_of[self.indices]]
        bounds = [0, *(np.flatnonzero(codec_ids[1:] != codec_ids[:-1]) + 1).tolist(), len(self.indices)]
        for start, stop in zip(bounds, bounds[1:]):
            yield Codec(int(codec_ids[start])), self.cut(start, stop)


class SplitChunk(EncodedChunk):
    """Records of one partition for one VP, as runs of physical batches, kept encoded (see the module doc)."""

    __slots__ = ("runs", "_count")

    def __init__(self, runs: Sequence[ColumnRun]):
        runs = tuple(run for run in runs if len(run.indices))
        assert runs, "a chunk holds at least one record"
        assert len({run.round.partition for run in runs}) == 1, "a chunk holds records of one partition"
        assert all(a.last_offset < b.first_offset for a, b in zip(runs, runs[1:])), "runs in physical offset order"
        self.runs = runs
        self._count = sum(len(run.indices) for run in runs)

    @property
    def partition(self) -> int:
        return self.runs[0].round.partition

    @property
    def last_offset(self) -> int:
        return self.runs[-1].last_offset

    def __len__(self) -> int:
        return self._count

    def after(self, last_applied: int) -> "SplitChunk | None":
        kept = [run.cut(int(np.searchsorted(run.offsets, last_applied, "right")), len(run.indices))
                for run in self.runs]
        return _chunk_or_none(kept)

    def below(self, offset: int) -> "SplitChunk | None":
        return _chunk_or_none([run.cut(0, int(np.searchsorted(run.offsets, offset, "left"))) for run in self.runs])

    def vp_batches(self) -> Iterator[tuple["SplitChunk", bytes]]:
        pieces = [piece for run in self.runs for piece in run.codec_pieces()]
        for codec, same_codec in groupby(pieces, key=itemgetter(0)):
            runs = tuple(run for _, run in same_codec)
            yield SplitChunk(runs), encode_runs(runs, codec)

    def __iter__(self) -> Iterator[SourcedRecord]:
        """The records decoded (for checks and tests; the feed never decodes them)."""
        for run in self.runs:
            yield from decoded_run(run)


def _chunk_or_none(runs: list[ColumnRun]) -> SplitChunk | None:
    runs = [run for run in runs if len(run.indices)]
    return SplitChunk(runs) if runs else None


def encode_runs(runs: Sequence[ColumnRun], codec: Codec) -> bytes:
    """One unstamped VP batch of ``runs`` (records of ``codec``): the records' bytes as the producer
    wrote them, their sources, and a timestamp run per base timestamp (``vp_records.timestamp_runs``)."""
    count = sum(len(run.indices) for run in runs)
    parts = [b"", array_header(count)]  # parts[0]: the payload's own array header, known at the end
    for run in runs:
        round_, indices = run.round, run.indices
        with memoryview(round_.buffer) as view:
            # One C-level pass over the records' byte ranges: each is a slice of the round's buffer.
            parts.append(b"".join(map(view.__getitem__, map(slice, round_.starts[indices].tolist(),
                                                            round_.ends[indices].tolist()))))
    sources = np.empty(count, _SOURCES)
    sources["partition"] = runs[0].round.partition
    sources["offset"] = np.concatenate([run.offsets for run in runs])
    batches = [run.round.batch_of[run.indices] for run in runs]
    bases = np.concatenate([run.round.bases[of] for run, of in zip(runs, batches)])
    max_timestamp_ms = max(int(run.round.max_timestamps[of].max()) for run, of in zip(runs, batches))
    parts += (bin_header(sources.nbytes), sources.tobytes())
    attributes = codec.value | ATTRIBUTE_SOURCES
    run_starts = np.flatnonzero(np.diff(bases, prepend=bases[0] - 1))
    if len(run_starts) > 1:
        timestamp_runs = np.empty(len(run_starts), _TIMESTAMP_RUNS)
        timestamp_runs["start"], timestamp_runs["base"] = run_starts, bases[run_starts]
        parts += (bin_header(timestamp_runs.nbytes), timestamp_runs.tobytes())
        attributes |= ATTRIBUTE_TIMESTAMP_RUNS
    parts[0] = b"\x92" if len(run_starts) == 1 else b"\x93"  # [records, sources] or [records, sources, runs]
    payload = b"".join(parts)
    assert len(payload) <= PAYLOAD_BYTES_MAX, len(payload)
    return frame_payload(compress(codec, payload), attributes, count, int(bases[0]), max_timestamp_ms, -1, -1)


def decoded_run(run: ColumnRun) -> Iterator[SourcedRecord]:
    """The records of ``run`` as the decoding split makes them (one unpack each)."""
    round_ = run.round
    for index in run.indices.tolist():
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
    count = header.count
    records_start = 1 + len(array_header(count))
    hashes_size, ends_size = MESSAGE_HASH_BYTES * count, RECORD_END_BYTES * count
    ends_at = len(payload) - ends_size
    hashes_at = ends_at - len(bin_header(ends_size)) - hashes_size
    records_end = hashes_at - len(bin_header(hashes_size))
    problem = _shape_problem(payload, count, records_start, records_end, hashes_at, ends_at)
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
    columns = BatchColumns(partition, header, payload, starts, ends, hashes)
    problem = _sample_problem(columns)
    return columns if problem is None else _bad_column(header, partition, problem)


def _shape_problem(payload: bytes, count: int, records_start: int, records_end: int, hashes_at: int,
                   ends_at: int) -> str | None:
    expected_prefix = b"\x93" + array_header(count)
    if records_end - records_start < count or payload[:records_start] != expected_prefix:
        return f"has a payload that is not [records, message hashes, record ends] of {count} records"
    hashes_header = bin_header(MESSAGE_HASH_BYTES * count)
    ends_header = bin_header(RECORD_END_BYTES * count)
    if (payload[records_end:hashes_at] != hashes_header
            or payload[hashes_at + MESSAGE_HASH_BYTES * count:ends_at] != ends_header):
        return f"has key-hash columns that are not {count} message hashes and {count} record ends"
    return None


def sampled_indices(header: BatchHeader) -> list[int]:
    """The records whose key-hash entry is checked: the first, the last, and one the CRC picks."""
    indices = sorted({0, header.count - 1, header.crc % header.count})
    assert len(indices) <= SAMPLED_RECORDS
    return indices


def _sample_problem(columns: BatchColumns) -> str | None:
    header = columns.header
    for index in sampled_indices(header):
        try:
            record = msgpack.unpackb(columns.payload[columns.starts[index]:columns.ends[index]], raw=False,
                                     use_list=False)
        except (ValueError, TypeError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError):
            return f"has record ends that do not cut record {index} out whole"
        if not (isinstance(record, tuple) and len(record) == 4):
            return f"has record ends that do not cut record {index} out as a record"
        key = record[1]
        if key is not None and not isinstance(key, bytes):
            return f"has record {index} with a key that is neither bytes nor nil"
        offset = header.base_offset + index
        expected = message_hash(key, columns.partition, header.producer_id, header.base_sequence + index, offset)
        if int(columns.hashes[index]) != expected:
            return (f"says record {index} hashes to {int(columns.hashes[index]):#018x}, but its "
                    f"{'key' if key is not None else 'producer id and sequence'} hash to {expected:#018x}")
    return None


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
                wanted: Container[int] | None = None) -> dict[int, ColumnRun]:
    """Per VP id, the records of the round from ``next_offset`` on that belong to it, as one run
    each (the VP of each record as ``route_records`` finds it; ``wanted``: only these VPs)."""
    first = int(np.searchsorted(round_.offsets, next_offset, "left"))
    count = len(round_.offsets) - first
    if count == 0:
        return {}
    offsets = round_.offsets[first:]
    vps = np.empty(count, np.int64)
    for epoch, start_offset, stop_offset in _epoch_spans(layout, round_.partition, int(offsets[0]),
                                                         int(offsets[-1]) + 1):
        start, stop = np.searchsorted(offsets, [start_offset, stop_offset], "left")
        range_starts, vp_ids = _starts_and_vps(epoch.ranges)
        vps[start:stop] = vp_ids[np.searchsorted(range_starts, round_.hashes[first + start:first + stop], "right") - 1]
    order = np.argsort(vps, kind="stable")
    sorted_vps = vps[order]
    bounds = np.flatnonzero(sorted_vps[1:] != sorted_vps[:-1]) + 1
    runs = {}
    for group in np.split(order, bounds):
        vp = int(vps[group[0]])
        if wanted is None or vp in wanted:
            runs[vp] = ColumnRun(round_, group + first)
    return runs


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
