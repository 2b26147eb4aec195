"""The feeder's pure decisions: a round's split, the restart rule, where to read.

The last tests drive the feeder protocol (rounds of ``plan_round``, VP leaders deduplicating
with ``FeedProgress``, feeders crashing between VP calls and resuming by ``resume_point``,
splits and merges cut where a held feeder stands, VP failovers losing a log's tail) through
seeded random histories and check exactly-once delivery, placement and the prefix property.
"""

from __future__ import annotations

import collections
import random

import pytest

from mafka4 import batch_frame, batch_payload
from mafka4.errors import CorruptRecord
from mafka4.physical.partition_state import PartitionState
from mafka4.virtual.feed_plan import choose_source, plan_round, resume_point, served_vps, withhold
from mafka4.virtual.feed_plan import ResumePoint
from mafka4.virtual.layout import TopicLayout
from mafka4.virtual.vp_records import NOTHING_APPLIED, FeedProgress, source_of

LAYOUT = TopicLayout.initial(partitions=2, virtual_partitions=3)


def batches(counts, first_offset=0, partition=0) -> bytes:
    """Stamped physical batches of keyed records, back to back, as a fetch returns them."""
    data, offset = bytearray(), first_offset
    for count in counts:
        items = [(b"k%d" % ((offset + i) % 17), b"v%d" % (offset + i), 1_000 + offset + i, None) for i in range(count)]
        batch = bytearray(batch_payload.encode_batch(items, producer_id=5, base_sequence=offset))
        batch_frame.stamp(batch, offset, 0)
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
    layout = TopicLayout.initial(partitions=1, virtual_partitions=3)
    assert resume_point(layout, 0, {0: 41, 1: 17, 2: 99}) == ResumePoint(18, 100)
    assert resume_point(layout, 0, {0: 41, 1: NOTHING_APPLIED, 2: 3}).next_offset == 0, \
        "a VP that holds nothing of the partition: from the start"


def split(layout: TopicLayout, vp: int, cut) -> TopicLayout:
    return layout.append(layout.plan_split(vp, cut, cut))


def test_a_child_counts_from_its_cut_and_a_complete_parent_does_not_count():
    layout = split(TopicLayout.initial(partitions=2, virtual_partitions=2), 0, (50, 70))  # VP 0 -> 2, 3
    assert served_vps(layout, sealed=()) == (0, 1, 2, 3)
    assert served_vps(layout, sealed=(0,)) == (1, 2, 3)
    # The children hold nothing yet: they do not pull the feeder back to offset 0.
    assert resume_point(layout, 0, {1: 60, 2: NOTHING_APPLIED, 3: NOTHING_APPLIED}) == ResumePoint(50, 61)
    assert resume_point(layout, 1, {1: 80, 2: 75, 3: NOTHING_APPLIED}) == ResumePoint(70, 81)
    # A closed parent whose last record is the one just below the cut is complete.
    assert resume_point(layout, 0, {0: 49, 1: 60, 2: 55, 3: 52}).next_offset == 53
    # One that may lack records below its cut (a failover lost its tail) is refed from its last record.
    assert resume_point(layout, 0, {0: 30, 1: 60, 2: 55, 3: 52}) == ResumePoint(31, 61)


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
    """One physical partition's committed batches, VP leader logs with progress, and a crashing feeder.

    Between rounds, at a point where the feeder could be held (``next_offset >= fed_high``), a
    split or merge may be asked: the feeder offers ``next_offset`` as the cut and holds back the
    parents' records from it (``withhold``) while it feeds the others on for some rounds; then
    the epoch is stored at that cut or a little above it (the feeder goes back to the offered
    cut) or abandoned (the feeder resumes), as in ``Feeder``. A crash while held abandons it
    (a restarted feeder fences the reshard out). A VP not yet sealed may lose the tail of its
    log (a VP leader failover to a follower that lacked it, which also forgets the feeder's
    reports). A closed VP is sealed once it heard ``fed_through`` at or past its closing cut, as
    the shell records it; sealed VPs are no longer served.
    """

    def __init__(self, rng: random.Random, reshards: bool):
        self.rng = rng
        self.reshards = reshards
        self.layout = TopicLayout.initial(partitions=1, virtual_partitions=rng.randint(1, 4))
        self.physical = batches([rng.randint(1, 6) for _ in range(rng.randint(5, 40))])
        self.end = sum(h.count for _, h in batch_frame.iter_batches(self.physical))
        self.vp_logs = {vp: [] for vp in self.layout.current.ranges.vp_ids}
        self.progress = {vp: FeedProgress() for vp in self.vp_logs}
        self.fed_through = {vp: 0 for vp in self.vp_logs}  # what each VP leader heard (lost on failover)
        self.sealed: set[int] = set()
        self.held: tuple[tuple[int, ...], int] | None = None  # (parents, offered cut) of a pending reshard

    def fetch(self, offset: int, bytes_max: int) -> bytes:
        """Whole batches from the one holding ``offset``, at least one, about ``bytes_max`` bytes."""
        out, size = bytearray(), 0
        for position, header in batch_frame.iter_batches(self.physical):
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

    def between_rounds(self, next_offset: int, fed_high: int, at_end: bool) -> int | None:
        """Maybe a failover or a reshard step; where the feeder goes on (-1: resume), None: where it stands."""
        self.seal()
        if not self.reshards:
            return None
        unsealed = [vp for vp in self.vp_logs if vp not in self.sealed and self.vp_logs[vp]]
        if unsealed and self.rng.random() < 0.05:
            vp = self.rng.choice(unsealed)
            del self.vp_logs[vp][-self.rng.randint(1, len(self.vp_logs[vp])):]
            self.progress[vp] = _progress_of(self.vp_logs[vp])
            self.fed_through[vp] = 0
            return -1  # the feeder sees the new VP leader epoch
        if self.held is not None and (at_end or self.rng.random() < 0.3):
            return self.settle(stored=self.rng.random() < 0.8)
        if self.held is None and next_offset >= fed_high and self.rng.random() < 0.1:
            active = self.layout.current.ranges.vp_ids
            if len(active) > 1 and self.rng.random() < 0.4:
                index = self.rng.randrange(len(active) - 1)
                parents = (active[index], active[index + 1])
            else:
                parents = (self.rng.choice(active),)
            self.held = (parents, next_offset)
        return None

    def settle(self, stored: bool) -> int:
        """End the pending reshard: store its epoch (go back to the offered cut) or abandon it (resume)."""
        parents, offered = self.held
        self.held = None
        if not stored:
            return -1
        cut = (max(offered, self.layout.current.cut[0]) + self.rng.choice((0, 0, 2)),)
        if len(parents) == 2:
            epoch = self.layout.plan_merge(*parents, cut, (offered,))
        else:
            epoch = self.layout.plan_split(parents[0], cut, (offered,))
        self.layout = self.layout.append(epoch)
        for vp in epoch.children:
            self.vp_logs[vp], self.progress[vp], self.fed_through[vp] = [], FeedProgress(), 0
        return offered

    def seal(self) -> None:
        for vp in self.vp_logs:
            if vp not in self.sealed and self.layout.is_sealed(vp, (self.fed_through[vp],)):
                self.sealed.add(vp)

    def run_feeder(self, crash_probability: float) -> bool:
        """Resume and feed to the end, unless a crash interrupts it; True when it reached the end."""
        served = served_vps(self.layout, self.sealed)
        resume = resume_point(self.layout, 0, {vp: self.progress[vp].last_applied(0) for vp in served})
        next_offset, fed_high = resume.next_offset, resume.fed_high
        while next_offset < self.end or self.held is not None:
            planned = plan_round(self.fetch(next_offset, self.rng.randint(50, 400)), 0, self.layout, next_offset,
                                 self.rng.randint(1, 5))
            chunks, held = planned.chunks, ()
            if self.held is not None:
                held, offered = self.held
                chunks = withhold(chunks, held, offered)
            for vp in set(chunks) - set(served):  # only a sealed VP is skipped: it holds them all
                assert all(self.progress[vp].last_applied(0) >= r.offset for chunk in chunks[vp] for r in chunk)
            calls = [(vp, chunk) for vp, vp_chunks in chunks.items() if vp in served for chunk in vp_chunks]
            for vp, chunk in calls:  # in order per VP; a crash may hit between any two calls
                if self.rng.random() < crash_probability:
                    self.held = None  # the restarted feeder fences the reshard out
                    return False
                self.feed(vp, chunk)
            next_offset = planned.next_offset
            for vp in served:
                told = min(next_offset, offered) if vp in held else next_offset
                self.fed_through[vp] = max(self.fed_through[vp], told)
            goes_on = self.between_rounds(next_offset, fed_high, at_end=next_offset >= self.end)
            if goes_on == -1:
                return False
            if goes_on is not None:  # an epoch stored: back to the offered cut (if past it), for the children
                next_offset, fed_high = min(next_offset, goes_on), max(fed_high, next_offset)
            served = served_vps(self.layout, self.sealed)
        return True


def _progress_of(log) -> FeedProgress:
    progress = FeedProgress()
    progress.applied(log)
    return progress


@pytest.mark.parametrize("reshards", [False, True])
@pytest.mark.parametrize("seed", range(40))
def test_a_crashing_feeder_that_resumes_by_the_rule_feeds_every_record_exactly_once(seed, reshards):
    rng = random.Random(seed)
    model = FeedModel(rng, reshards)
    # A VP holding no record of the partition pulls every resume back to its opening cut, so
    # with reshards (narrow, often empty ranges) a feeder must crash less often to finish.
    for _ in range(1000):
        if model.run_feeder(crash_probability=0.03 if reshards else 0.15):
            break
    else:
        pytest.fail(f"seed {seed}: the feeder never finished")
    fed = collections.Counter(r.source for log in model.vp_logs.values() for r in log)
    assert set(fed) == {(0, offset) for offset in range(model.end)}, f"seed {seed}: a record was skipped"
    assert max(fed.values()) == 1, f"seed {seed}: a record was fed twice"
    for vp, log in model.vp_logs.items():
        assert [r.offset for r in log] == sorted(r.offset for r in log), f"seed {seed}: VP {vp} out of order"
        assert all(model.layout.vp_for(0, r.offset, r.message_hash) == vp for r in log), f"seed {seed}: misplaced"
        rebuilt = FeedProgress.rebuild(
            batch_payload.decode_batch(_stamped(log)) if log else [])
        assert rebuilt == model.progress[vp], f"seed {seed}: progress not rebuildable from the VP log"


def _stamped(log) -> bytes:
    from mafka4.virtual.vp_records import encode_vp_batch

    batch = bytearray(encode_vp_batch(log))
    batch_frame.stamp(batch, 0, 0)
    return bytes(batch)


def test_source_of_a_fed_record_survives_the_vp_batch_format():
    planned = plan_round(batches([5]), 0, LAYOUT, 0, 10)
    chunk = next(iter(planned.chunks.values()))[0]
    assert [source_of(r) for r in batch_payload.decode_batch(_stamped(chunk))] == [r.source for r in chunk]


def test_a_held_vp_gets_nothing_at_or_past_the_offered_cut_and_the_others_get_everything():
    planned = plan_round(batches([10, 10, 10]), 0, LAYOUT, next_offset=0, records_max=4)
    held_vp = max(planned.chunks, key=lambda vp: sum(map(len, planned.chunks[vp])))
    kept = withhold(planned.chunks, [held_vp], from_offset=12)
    offsets = {vp: [r.offset for chunk in chunks for r in chunk] for vp, chunks in kept.items()}
    assert offsets[held_vp] == [r.offset for chunk in planned.chunks[held_vp] for r in chunk if r.offset < 12]
    assert all(len(chunk) <= 4 and chunk for chunk in kept[held_vp])
    assert {vp: chunks for vp, chunks in kept.items() if vp != held_vp} == \
        {vp: chunks for vp, chunks in planned.chunks.items() if vp != held_vp}
    assert held_vp not in withhold(planned.chunks, [held_vp], from_offset=0), "a VP left with nothing gets no call"
