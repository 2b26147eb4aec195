"""The feeder's decisions, kept pure: where to resume, where to read, what to hand each VP.

A feed stream (``virtual/partition_feed.py``, one per read node and physical partition ``p``) runs rounds: fetch
committed batches of ``p`` from ``next_offset``, split them (``plan_round``), hand every VP
its records, and advance ``next_offset``. A round's records go to each VP in physical offset
order, and a round is repeated until every VP took its part, so each VP's log holds, for
``p``, exactly the records of its ranges below some offset: a prefix of the feed.

Which VPs a feeder serves (``served_vps``): the active VPs of the current layout, and the
closed ones not yet sealed (their sealed end not recorded in etcd): those may still lack
records below their closing cut (e.g. after a VP failover), and they must hear the feeder's
``fed_through`` to be sealed. A sealed VP holds all of its records and gets nothing more.

Restart rule (``resume_point``). Every VP durably records the last source offset of ``p``
it applied (``vp_records.FeedProgress``, rebuilt from its log). By the prefix property, a VP
whose last applied offset is ``a`` holds every one of its records of ``p`` up to ``a``; a VP
receives records of ``p`` only from ``[first, end)`` (``TopicLayout.source_bounds``: its
opening cut, its closing cut or open), so it holds all of its records below
``max(a + 1, first)``, and a closed VP with ``max(a + 1, first) >= end`` holds all of them.
The feeder resumes at the minimum of ``max(a + 1, first)`` over the VPs it serves that are not
known to be complete (a read node's stream serves the VPs that node leads; with none left to
feed there is no resume point): every record below it is in its VP, so it skips nothing -- a child of a split
does not pull the feeder back to offset 0, and a closed parent is refed only what it may
lack. It re-sends what some VPs already hold; their ``FeedProgress`` drops it, so nothing
is applied twice. The same rule applies after any failed round and after a VP leader
failover (the new leader may lack the old leader's last records).

The feeder also learns ``fed_high``: one past the highest record of ``p`` any served VP
holds. A feeder stopped for a reshard offers its ``next_offset`` as the cut only once it is
at or past ``fed_high``, so no VP already holds a record at or after the cut.

Where to read (``choose_source``): a follower in the ISR when there is one (Kafka's KIP-392),
so splitting adds no load to the leader's write path; the leader only when no in-sync
follower is left or every one failed since the last metadata refresh.

How a round splits a batch. Consecutive batches with the key-hash column are split together by
it (``virtual.column_split.split_round``), without decoding a record, and their records reach a
VP as a ``SplitChunk``; a batch without one, or whose column fails the feeder's checks, is decoded and
split by ``route_records``, its records reaching a VP as ``SourcedRecord``s. A VP's records of
one round are cut into chunks of at most ``records_max`` records, each of one kind; both kinds
make the same VP batches. A failed column is no error of the round: the batch is split by its
keys and the problem returned (``FeedRound.bad_columns``) for the stream to report.

A record of a lane the layout does not have. A lane's epoch is stored before its first record is
produced, so such a record means the layout the stream read is older than the record. The round
hands over nothing at or past it and ends there (``FeedRound.next_offset`` is its offset,
``FeedRound.unknown_lane`` set): the stream reads the layout again and the next round starts
from that record. Each VP still gets a prefix of the feed.

Pure: no I/O, no clock. ``plan_round`` is where ``mafka4.planted_bugs``'s feeder-skips-batch
drops batches on purpose, for demonstrations only.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Container, Iterable, Mapping

from mafka4 import planted_bugs
from mafka4.batch_frame import iter_batches
from mafka4.batch_payload import decode_checked_batch
from mafka4.errors import CorruptRecord
from mafka4.hashing import key_hash
from mafka4.physical.partition_state import PartitionState
from mafka4.planted_bugs import PlantedBug
from mafka4.virtual.column_split import (BatchColumns, ColumnRun, RoundColumns, SplitChunk, lane_name_problem,
                                        read_columns, split_round)
from mafka4.virtual.layout import TopicLayout
from mafka4.virtual.vp_records import NOTHING_APPLIED, SourcedRecord, route_known_lanes

# One feed call's records for one VP: decoded, or kept encoded (a batch split by its column).
Chunk = tuple[SourcedRecord, ...] | SplitChunk


@dataclass(frozen=True, slots=True)
class FeedRound:
    """What one round hands over: per VP id, its records in calls of bounded size, in order."""

    chunks: dict[int, tuple[Chunk, ...]]
    # The next physical offset after the round: every record below it is handed to its VP.
    next_offset: int
    records: int
    # Batches whose key-hash column failed its checks, split by their keys instead (``column_split``).
    bad_columns: tuple[CorruptRecord, ...] = ()
    # The round stopped at ``next_offset``, a record of a lane the layout lacks: read the layout again.
    unknown_lane: bool = False


@dataclass(frozen=True, slots=True)
class ResumePoint:
    """Where a feeder resumes (``next_offset``) and one past the highest record any VP holds (``fed_high``)."""

    next_offset: int
    fed_high: int


def served_vps(layout: TopicLayout, sealed: Iterable[int]) -> tuple[int, ...]:
    """The VPs a feeder hands records and progress to: active ones and closed ones not in ``sealed``."""
    sealed = set(sealed)
    closed = {vp for epoch in layout.epochs for vp in epoch.parents}
    return tuple(sorted(set(layout.current.vp_ids) | (closed - sealed)))


def resume_point(layout: TopicLayout, partition: int, last_applied: Mapping[int, int]) -> ResumePoint | None:
    """Where a stream of ``partition`` resumes, from each VP it serves and that VP's last applied offset of it.

    The VPs may be any of ``served_vps`` (a read node serves the ones it leads). None when
    every one of them is closed and holds all its records of the partition: nothing to feed.
    """
    assert all(offset >= NOTHING_APPLIED for offset in last_applied.values()), last_applied
    starts = []
    for vp, offset in last_applied.items():
        first, end = layout.source_bounds(vp, partition)
        start = max(offset + 1, first)
        if end is None or start < end:  # a VP not known to hold all its records of the partition
            starts.append(start)
    if not starts:
        return None
    next_offset = min(starts)
    return ResumePoint(next_offset, max([next_offset] + [offset + 1 for offset in last_applied.values()]))


def plan_round(
    data: bytes, partition: int, layout: TopicLayout, next_offset: int, records_max: int,
    wanted: Container[int] | None = None,
) -> FeedRound:
    """Split fetched committed batches of ``partition`` from ``next_offset`` into per-VP chunks.

    ``data`` holds whole batches from the one containing ``next_offset``; records below
    ``next_offset`` (the start of the first batch) are not handed over again. ``wanted``: hand
    over only these VPs' records (``records`` counts those). A record of a lane ``layout`` does not
    have ends the round (see the module doc).
    """
    assert records_max >= 1 and next_offset >= 0, (records_max, next_offset)
    by_vp: dict[int, list[SourcedRecord | ColumnRun]] = {}
    bad_columns: list[CorruptRecord] = []
    end, consumed = next_offset, 0
    # Consecutive batches with a good column, split together once a batch of another kind or the
    # end of the data comes (``column_split.split_round``: its cost is per round and VP).
    pending: list[BatchColumns] = []
    unknown_at: int | None = None  # the offset of the first record of a lane the layout lacks

    def split_pending() -> None:
        nonlocal unknown_at
        if pending:
            runs, unknown_at = split_round(RoundColumns(pending), layout, next_offset, wanted)
            for vp, run in runs.items():
                by_vp.setdefault(vp, []).append(run)
            pending.clear()

    with memoryview(data) as view:
        for position, header in iter_batches(view):
            consumed = position + header.size_bytes
            if header.next_offset <= next_offset:
                continue
            if header.base_offset > end:
                raise CorruptRecord(
                    f"partition {partition}: fetched batch starts at offset {header.base_offset}, expected at "
                    f"most {end}; the feeder refetches"
                )
            if planted_bugs.PLANTED is PlantedBug.FEEDER_SKIPS_BATCH and planted_bugs.feeder_skips(
                    header.base_offset, header.next_offset):  # a demo of a broken promise: mafka4.planted_bugs
                split_pending()
                if unknown_at is not None:
                    break
                end = header.next_offset
                continue
            columns = read_columns(view, position, header, partition) if header.hashed else None
            if isinstance(columns, BatchColumns) and columns.sampled_lanes:
                columns = lane_name_problem(columns, layout) or columns
            if isinstance(columns, CorruptRecord):
                bad_columns.append(columns)
                columns = None
            if columns is not None:
                pending.append(columns)
            else:
                split_pending()
                if unknown_at is not None:
                    break
                checked = decode_checked_batch(view, position, header)  # iter_batches checked its CRC
                routed, unknown_at = route_known_lanes(header, checked, partition, layout, wanted)
                for vp, records in routed.items():
                    by_vp.setdefault(vp, []).extend(r for r in records if r.offset >= next_offset)
                if unknown_at is not None:
                    break
            end = header.next_offset
    split_pending()
    if unknown_at is not None:
        end = max(unknown_at, next_offset)  # (below it only in a batch partly fed already: nothing is handed)
    elif consumed != len(data):
        raise CorruptRecord(f"partition {partition}: fetched data holds a bad batch at byte {consumed}; refetching")
    chunks = {vp: _chunks(pieces, records_max) for vp, pieces in by_vp.items()}
    chunks = {vp: vp_chunks for vp, vp_chunks in chunks.items() if vp_chunks}
    records = sum(len(chunk) for vp_chunks in chunks.values() for chunk in vp_chunks)
    return FeedRound(chunks, end, records, tuple(bad_columns), unknown_lane=unknown_at is not None)


def _chunks(pieces: list[SourcedRecord | ColumnRun], records_max: int) -> tuple[Chunk, ...]:
    """A VP's records of a round (decoded records and runs of split batches, in offset order) as
    chunks of at most ``records_max`` records, each all decoded or all runs."""
    if len(pieces) == 1 and isinstance(pieces[0], ColumnRun) and len(pieces[0]) <= records_max:
        return (SplitChunk(pieces),)  # the usual case: the VP's records of the round, split by their column
    chunks: list[Chunk] = []
    current: list = []
    size, encoded = 0, False

    def close() -> None:
        nonlocal current, size
        if current:
            chunks.append(SplitChunk(current) if encoded else tuple(current))
        current, size = [], 0

    for piece in pieces:
        if isinstance(piece, ColumnRun):
            if not encoded:
                close()
                encoded = True
            start, count = 0, len(piece)
            while start < count:
                taken = min(records_max - size, count - start)
                current.append(piece.cut(start, start + taken))
                size, start = size + taken, start + taken
                if size == records_max:
                    close()
        else:
            if encoded:
                close()
                encoded = False
            current.append(piece)
            size += 1
            if size == records_max:
                close()
    close()
    return tuple(chunks)


def withhold(chunks: Mapping[int, tuple[Chunk, ...]], held_vps: Iterable[int], from_offset: int
             ) -> dict[int, tuple[Chunk, ...]]:
    """``chunks`` without the records of ``held_vps`` at or past ``from_offset``.

    A feed stream held for a reshard (see ``partition_feed.py``) keeps feeding every VP but the ones being
    split or merged; those get nothing at or past the offset offered as the cut until the new
    epoch is stored (then their children get it) or abandoned (then they get it themselves).
    """
    held = set(held_vps)
    kept: dict[int, tuple[Chunk, ...]] = {}
    for vp, vp_chunks in chunks.items():
        if vp in held:
            vp_chunks = tuple(chunk for chunk in map(partial(_below, from_offset), vp_chunks) if chunk)
        if vp_chunks:
            kept[vp] = vp_chunks
    return kept


def _below(offset: int, chunk: Chunk) -> Chunk | None:
    """The records of ``chunk`` below ``offset``."""
    if isinstance(chunk, SplitChunk):
        return chunk.below(offset)
    return tuple(record for record in chunk if record.offset < offset)


def choose_source(state: PartitionState, avoid: Iterable[str] = ()) -> str:
    """The replica of ``state``'s partition a feeder reads from; see the module docstring.

    Feeders of different partitions spread over the in-sync followers by a stable hash.
    """
    avoided = set(avoid)
    followers = sorted(r for r in state.isr if r != state.leader and r not in avoided)
    if not followers:
        return state.leader
    return followers[key_hash(f"{state.partition}".encode()) % len(followers)]
