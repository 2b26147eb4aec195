"""The column split: a physical batch with the key-hash column, cut into its VPs' batches without decoding a record.

A producer's batch may carry each record's message hash and the end of its bytes
(``batch_payload``'s key-hash column, attribute bit 4). ``split_batch`` reads both columns with
``np.frombuffer``, places every record with one ``searchsorted`` over the split epoch's range
starts (as ``RangeMap.vp_for_hash`` does one record at a time), and groups the records per VP
with one stable sort: per batch and per VP there is Python, per record none, and no record is
unpacked. A VP's share of one batch is a ``ColumnRun``; a feed call's share of a VP is a
``SplitChunk`` (``vp_records.EncodedChunk``), whose VP batches are made at append time by
copying the records' bytes (one C-level join of their byte ranges per VP batch), packing their
sources with numpy, and compressing once.

Byte for byte. A VP batch made here is the one ``vp_records.encode_vp_batch`` makes of the same
records decoded (the decoding split, ``route_records``): one per codec run of a feed call's
records, whatever number of physical batches they came from, each record with the delta its
producer wrote and a timestamp run per base (``vp_records``' module doc says why), so every
record's bytes are the producer's, in the producer's (msgpack's shortest) encoding.
``tests/unit/test_column_split.py`` checks it on random batches.

Bad columns. The CRC proves only that a batch arrived as its producer sent it. A batch is split
by its column only if the column passes ``column_problem``'s checks, which cost a few
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
from operator import attrgetter
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
assert _HASHES.itemsize == MESSAGE_HASH_BYTES and _ENDS.itemsize == RECORD_END_BYTES
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


class ColumnRun(NamedTuple):
    """Records of one physical batch that go to one VP: ``indices`` (ascending) into its records."""

    batch: BatchColumns
    indices: np.ndarray  # int64

    @property
    def offsets(self) -> np.ndarray:
        return self.indices + self.batch.header.base_offset

    def cut(self, start: int, stop: int) -> "ColumnRun":
        return ColumnRun(self.batch, self.indices[start:stop])

    @property
    def codec(self) -> Codec:
        """What a VP batch of records shares (``vp_records.vp_batch_key``): the codec."""
        return self.batch.header.codec


class SplitChunk(EncodedChunk):
    """Records of one partition for one VP, as runs of physical batches, kept encoded (see the module doc)."""

    __slots__ = ("runs", "_count")

    def __init__(self, runs: Sequence[ColumnRun]):
        runs = tuple(run for run in runs if len(run.indices))
        assert runs, "a chunk holds at least one record"
        assert len({run.batch.partition for run in runs}) == 1, "a chunk holds records of one partition"
        assert all(a.batch.header.next_offset <= b.batch.header.base_offset or a.batch is b.batch
                   for a, b in zip(runs, runs[1:])), "runs in physical offset order"
        self.runs = runs
        self._count = sum(len(run.indices) for run in runs)

    @property
    def partition(self) -> int:
        return self.runs[0].batch.partition

    @property
    def last_offset(self) -> int:
        return int(self.runs[-1].offsets[-1])

    def __len__(self) -> int:
        return self._count

    def after(self, last_applied: int) -> "SplitChunk | None":
        kept = [run.cut(int(np.searchsorted(run.offsets, last_applied, "right")), len(run.indices))
                for run in self.runs]
        return _chunk_or_none(kept)

    def below(self, offset: int) -> "SplitChunk | None":
        return _chunk_or_none([run.cut(0, int(np.searchsorted(run.offsets, offset, "left"))) for run in self.runs])

    def vp_batches(self) -> Iterator[tuple["SplitChunk", bytes]]:
        for _, runs in groupby(self.runs, key=attrgetter("codec")):
            runs = tuple(runs)
            yield SplitChunk(runs), encode_runs(runs)

    def __iter__(self) -> Iterator[SourcedRecord]:
        """The records decoded (for checks and tests; the feed never decodes them)."""
        for run in self.runs:
            yield from decoded_run(run)


def _chunk_or_none(runs: list[ColumnRun]) -> SplitChunk | None:
    runs = [run for run in runs if len(run.indices)]
    return SplitChunk(runs) if runs else None


def encode_runs(runs: Sequence[ColumnRun]) -> bytes:
    """One unstamped VP batch of ``runs`` (sharing their codec): the records' bytes as the producer
    wrote them, their sources, and a timestamp run per base timestamp (``vp_records.timestamp_runs``)."""
    codec = runs[0].codec
    count = sum(len(run.indices) for run in runs)
    sources = np.empty(count, _SOURCES)
    records = [array_header(count)]
    bases: list[tuple[int, int]] = []  # (first record, base timestamp) where the base changes
    filled = 0
    for run in runs:
        batch, indices = run.batch, run.indices
        with memoryview(batch.payload) as view:
            # One C-level pass over the records' byte ranges: each is a slice of the payload.
            records.append(b"".join(map(view.__getitem__, map(slice, batch.starts[indices].tolist(),
                                                              batch.ends[indices].tolist()))))
        sources["offset"][filled:filled + len(indices)] = indices + batch.header.base_offset
        if not bases or bases[-1][1] != batch.header.first_timestamp_ms:
            bases.append((filled, batch.header.first_timestamp_ms))
        filled += len(indices)
    sources["partition"] = runs[0].batch.partition
    parts = [b"\x92" if len(bases) == 1 else b"\x93", *records, bin_header(sources.nbytes), sources.tobytes()]
    attributes = codec.value | ATTRIBUTE_SOURCES
    if len(bases) > 1:
        timestamp_runs = b"".join(TIMESTAMP_RUN.pack(start, base) for start, base in bases)
        parts += (bin_header(len(timestamp_runs)), timestamp_runs)
        attributes |= ATTRIBUTE_TIMESTAMP_RUNS
    payload = b"".join(parts)
    assert len(payload) <= PAYLOAD_BYTES_MAX, len(payload)
    max_timestamp_ms = max(run.batch.header.max_timestamp_ms for run in runs)
    return frame_payload(compress(codec, payload), attributes, count, bases[0][1], max_timestamp_ms, -1, -1)


def decoded_run(run: ColumnRun) -> Iterator[SourcedRecord]:
    """The records of ``run`` as the decoding split makes them (one unpack each)."""
    batch = run.batch
    header = batch.header
    for index in run.indices.tolist():
        delta_ms, key, value, headers = msgpack.unpackb(batch.payload[batch.starts[index]:batch.ends[index]],
                                                        raw=False, use_list=False)
        yield SourcedRecord(batch.partition, header.base_offset + index, int(batch.hashes[index]),
                            header.first_timestamp_ms + delta_ms, key, value, decode_headers(headers, index, header),
                            header.codec, (header.first_timestamp_ms, header.max_timestamp_ms))


# --- reading and checking the columns ----------------------------------------------------


def read_columns(buffer: bytes | bytearray | memoryview, position: int, header: BatchHeader,
                 partition: int) -> BatchColumns | CorruptRecord:
    """The columns of the CRC-checked batch at ``position`` (which has the key-hash column), or the
    problem that makes them unusable (``column_problem``); ``CorruptRecord`` raised for a payload
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


def split_batch(columns: BatchColumns, layout: TopicLayout, first_index: int = 0,
                wanted: Container[int] | None = None) -> dict[int, ColumnRun]:
    """Per VP id, the records of the batch from ``first_index`` on that belong to it, as one run
    each (the VP of each record as ``route_records`` finds it; ``wanted``: only these VPs)."""
    header, partition = columns.header, columns.partition
    count = header.count
    vps = np.empty(count - first_index, np.int64)
    for epoch, start, stop in _epoch_spans(layout, partition, header.base_offset + first_index, header.next_offset):
        range_starts, vp_ids = _starts_and_vps(epoch.ranges)
        hashes = columns.hashes[first_index + start:first_index + stop]
        vps[start:stop] = vp_ids[np.searchsorted(range_starts, hashes, "right") - 1]
    order = np.argsort(vps, kind="stable")
    sorted_vps = vps[order]
    bounds = np.flatnonzero(sorted_vps[1:] != sorted_vps[:-1]) + 1
    runs = {}
    for group in np.split(order, bounds):
        vp = int(vps[group[0]])
        if wanted is None or vp in wanted:
            runs[vp] = ColumnRun(columns, group + first_index)
    return runs


def _epoch_spans(layout: TopicLayout, partition: int, first_offset: int, end_offset: int
                 ) -> Iterator[tuple[SplitEpoch, int, int]]:
    """The split epochs of offsets ``[first_offset, end_offset)``, as ``(epoch, start, stop)`` spans
    of positions counted from ``first_offset`` (cuts only grow, so a batch has one span or a few)."""
    offset = first_offset
    while offset < end_offset:
        epoch = layout.epoch_for(partition, offset)
        later = [e.cut[partition] for e in layout.epochs[epoch.epoch + 1:] if e.cut[partition] > offset]
        stop = min([end_offset] + later)
        yield epoch, offset - first_offset, stop - first_offset
        offset = stop
