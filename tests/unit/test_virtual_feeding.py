"""The feeder's pure decisions: a round's split, the restart rule, where to read.

The last test drives the feeder protocol (rounds of ``plan_round``, VP leaders deduplicating
with ``FeedProgress``, feeders crashing between VP calls and resuming by ``resume_offset``)
through seeded random histories and checks exactly-once delivery and the prefix property.
"""

from __future__ import annotations

import collections
import random

import pytest

from mafka4 import records
from mafka4.coordinator.topics import PartitionState
from mafka4.errors import CorruptRecord
from mafka4.virtual.feeding import choose_source, plan_round, resume_offset
from mafka4.virtual.reshard import TopicLayout
from mafka4.virtual.split import NOTHING_APPLIED, FeedProgress, source_of

LAYOUT = TopicLayout.initial(partitions=2, virtual_partitions=3)


def batches(counts, first_offset=0, partition=0) -> bytes:
    """Stamped physical batches of keyed records, back to back, as a fetch returns them."""
    data, offset = bytearray(), first_offset
    for count in counts:
        items = [(b"k%d" % ((offset + i) % 17), b"v%d" % (offset + i), 1_000 + offset + i, None) for i in range(count)]
        batch = bytearray(records.encode_batch(items, producer_id=5, base_sequence=offset))
        records.stamp(batch, offset, 0)
        data += batch
        offset += count
    return bytes(data)


def test_a_round_hands_every_record_from_the_offset_on_to_one_vp_in_bounded_chunks():
    planned = plan_round(batches([10, 10, 10]), 0, LAYOUT, next_offset=5, records_max=4)
    assert planned.next_offset == 30 and planned.records == 25
    handed = [r for chunks in planned.chunks.values() for chunk in chunks for r in chunk]
    assert sorted(r.offset for r in handed) == list(range(5, 30))
    for vp, chunks in planned.chunks.items():
        assert all(1 <= len(chunk) <= 4 for chunk in chunks)
        offsets = [r.offset for chunk in chunks for r in chunk]
        assert offsets == sorted(offsets)
        assert all(LAYOUT.vp_for(0, r.offset, r.message_hash) == vp for chunk in chunks for r in chunk)


def test_batches_wholly_below_the_offset_are_skipped_and_an_empty_fetch_changes_nothing():
    planned = plan_round(batches([10, 10]), 0, LAYOUT, next_offset=10, records_max=100)
    assert planned.next_offset == 20 and sorted(r.offset for c in planned.chunks.values() for r in c[0]) == list(range(10, 20))
    empty = plan_round(b"", 0, LAYOUT, next_offset=42, records_max=100)
    assert (empty.next_offset, empty.records, empty.chunks) == (42, 0, {})


def test_a_gap_or_a_torn_batch_in_fetched_data_is_refused():
    with pytest.raises(CorruptRecord, match="expected at most 5"):
        plan_round(batches([3], first_offset=8), 0, LAYOUT, next_offset=5, records_max=10)
    data = batches([4, 4])
    with pytest.raises(CorruptRecord, match="bad batch"):
        plan_round(data[:-3], 0, LAYOUT, next_offset=0, records_max=10)


def test_the_feeder_resumes_below_every_vps_last_applied_offset():
    assert resume_offset({0: 41, 1: 17, 2: 99}) == 18
    assert resume_offset({0: 41, 1: NOTHING_APPLIED}) == 0, "a VP that holds nothing of the partition: from the start"


def test_feeders_read_an_in_sync_follower_and_the_leader_only_as_a_fallback():
    state = PartitionState(3, "w0", 4, ("w0", "w1", "w2"), ("w0", "w1", "w2"))
    source = choose_source(state)
    assert source in ("w1", "w2")
    assert choose_source(state, avoid=[source]) == ({"w1", "w2"} - {source}).pop()
    assert choose_source(state, avoid=["w1", "w2"]) == "w0"
    lagging = PartitionState(3, "w0", 4, ("w0", "w1", "w2"), ("w0", "w2"))
    assert choose_source(lagging) == "w2", "a follower outside the ISR may be far behind"
    assert choose_source(PartitionState(0, "w0", 0, ("w0",), ("w0",))) == "w0"


class FeedModel:
    """One physical partition's committed batches, VP leader logs with progress, and a crashing feeder."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.layout = TopicLayout.initial(partitions=1, virtual_partitions=rng.randint(1, 4))
        self.physical = batches([rng.randint(1, 6) for _ in range(rng.randint(5, 40))])
        self.end = sum(h.count for _, h in records.iter_batches(self.physical))
        self.vp_logs = {vp: [] for vp in self.layout.current.ranges.vp_ids}
        self.progress = {vp: FeedProgress() for vp in self.vp_logs}

    def fetch(self, offset: int, bytes_max: int) -> bytes:
        """Whole batches from the one holding ``offset``, at least one, about ``bytes_max`` bytes."""
        out, size = bytearray(), 0
        for position, header in records.iter_batches(self.physical):
            if header.next_offset <= offset:
                continue
            if out and size + header.size_bytes > bytes_max:
                break
            out += self.physical[position:position + header.size_bytes]
            size += header.size_bytes
        return bytes(out)

    def feed(self, vp: int, chunk) -> None:
        fresh = self.progress[vp].unapplied(chunk)
        self.vp_logs[vp].extend(fresh)
        self.progress[vp].applied(fresh)

    def run_feeder(self, crash_probability: float) -> bool:
        """Resume and feed to the end, unless a crash interrupts it; True when it reached the end."""
        next_offset = resume_offset({vp: p.last_applied(0) for vp, p in self.progress.items()})
        while next_offset < self.end:
            planned = plan_round(self.fetch(next_offset, self.rng.randint(50, 400)), 0, self.layout, next_offset,
                                 self.rng.randint(1, 5))
            calls = [(vp, chunk) for vp, chunks in planned.chunks.items() for chunk in chunks]
            for vp, chunk in calls:  # in order per VP; a crash may hit between any two calls
                if self.rng.random() < crash_probability:
                    return False
                self.feed(vp, chunk)
            next_offset = planned.next_offset
        return True


@pytest.mark.parametrize("seed", range(40))
def test_a_crashing_feeder_that_resumes_by_the_rule_feeds_every_record_exactly_once(seed):
    rng = random.Random(seed)
    model = FeedModel(rng)
    for _ in range(200):
        if model.run_feeder(crash_probability=0.15):
            break
    else:
        pytest.fail(f"seed {seed}: the feeder never finished")
    fed = collections.Counter(r.source for log in model.vp_logs.values() for r in log)
    assert set(fed) == {(0, offset) for offset in range(model.end)}, f"seed {seed}: a record was skipped"
    assert max(fed.values()) == 1, f"seed {seed}: a record was fed twice"
    for vp, log in model.vp_logs.items():
        assert [r.offset for r in log] == sorted(r.offset for r in log), f"seed {seed}: VP {vp} out of order"
        rebuilt = FeedProgress.rebuild(
            records.decode_batch(_stamped(log)) if log else [])
        assert rebuilt == model.progress[vp], f"seed {seed}: progress not rebuildable from the VP log"


def _stamped(log) -> bytes:
    from mafka4.virtual.split import encode_vp_batch

    batch = bytearray(encode_vp_batch(log))
    records.stamp(batch, 0, 0)
    return bytes(batch)


def test_source_of_a_fed_record_survives_the_vp_batch_format():
    planned = plan_round(batches([5]), 0, LAYOUT, 0, 10)
    chunk = next(iter(planned.chunks.values()))[0]
    assert [source_of(r) for r in records.decode_batch(_stamped(chunk))] == [r.source for r in chunk]
