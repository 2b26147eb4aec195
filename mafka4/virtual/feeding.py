"""The feeder's decisions, kept pure: where to resume, where to read, what to hand each VP.

A feeder (``virtual/feeder.py``) owns one physical partition ``p`` and runs rounds: fetch
committed batches of ``p`` from ``next_offset``, split them (``plan_round``), hand every VP
its records, and advance ``next_offset``. A round's records go to each VP in physical offset
order, and a round is repeated until every VP took its part, so each VP's log holds, for
``p``, exactly the records of its ranges below some offset: a prefix of the feed.

Restart rule (``resume_offset``). Every VP durably records the last source offset of ``p``
it applied (``split.FeedProgress``, rebuilt from its log). By the prefix property, a VP
whose last applied offset is ``a`` holds every one of its records of ``p`` up to ``a``; so
every record below ``min over VPs of (a + 1)`` is in its VP, and a feeder resuming there
skips nothing. It re-sends what some VPs already hold; their ``FeedProgress`` drops it, so
nothing is applied twice. The same rule applies after any failed round and after a VP
leader failover (the new leader may lack the old leader's last records).

Where to read (``choose_source``): a follower in the ISR when there is one (Kafka's KIP-392),
so splitting adds no load to the leader's write path; the leader only when no in-sync
follower is left or every one failed since the last metadata refresh.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

from mafka4.coordinator.topics import PartitionState
from mafka4.errors import CorruptRecord
from mafka4.hashing import key_hash
from mafka4.records import iter_batches
from mafka4.virtual.reshard import TopicLayout
from mafka4.virtual.split import NOTHING_APPLIED, SourcedRecord, split_batch

Chunk = tuple[SourcedRecord, ...]


@dataclass(frozen=True, slots=True)
class FeedRound:
    """What one round hands over: per VP id, its records in calls of bounded size, in order."""

    chunks: dict[int, tuple[Chunk, ...]]
    # The next physical offset after the round: every record below it is handed to its VP.
    next_offset: int
    records: int


def resume_offset(last_applied: Mapping[int, int]) -> int:
    """Where a feeder of one partition resumes, from each active VP's last applied offset of it."""
    assert last_applied, "a mafka4-mode topic has at least one virtual partition"
    assert all(offset >= NOTHING_APPLIED for offset in last_applied.values()), last_applied
    return min(offset + 1 for offset in last_applied.values())


def plan_round(
    data: bytes, partition: int, layout: TopicLayout, next_offset: int, records_max: int
) -> FeedRound:
    """Split fetched committed batches of ``partition`` from ``next_offset`` into per-VP chunks.

    ``data`` holds whole batches from the one containing ``next_offset``; records below
    ``next_offset`` (the start of the first batch) are not handed over again.
    """
    assert records_max >= 1 and next_offset >= 0, (records_max, next_offset)
    by_vp: dict[int, list[SourcedRecord]] = {}
    end, consumed = next_offset, 0
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
            for vp, records in split_batch(view[position:consumed], partition, layout).items():
                by_vp.setdefault(vp, []).extend(r for r in records if r.offset >= next_offset)
            end = header.next_offset
    if consumed != len(data):
        raise CorruptRecord(f"partition {partition}: fetched data holds a bad batch at byte {consumed}; refetching")
    chunks = {
        vp: tuple(tuple(records[i:i + records_max]) for i in range(0, len(records), records_max))
        for vp, records in by_vp.items() if records
    }
    return FeedRound(chunks, end, sum(len(records) for records in by_vp.values()))


def choose_source(state: PartitionState, avoid: Iterable[str] = ()) -> str:
    """The replica of ``state``'s partition a feeder reads from; see the module docstring.

    Feeders of different partitions spread over the in-sync followers by a stable hash.
    """
    avoided = set(avoid)
    followers = sorted(r for r in state.isr if r != state.leader and r not in avoided)
    if not followers:
        return state.leader
    return followers[key_hash(f"{state.partition}".encode()) % len(followers)]
