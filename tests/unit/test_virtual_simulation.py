"""Seeded random histories of the read path's pure cores: split, idempotent feeding, reshard.

A tiny model drives ``route_batch``, ``FeedProgress`` and ``TopicLayout`` like the feeder
and VP actors will: producers append keyed and keyless batches to several physical
partitions, the HW advances, feeders split committed batches into VP logs (with duplicate
deliveries, feeder restarts from earlier offsets and VP restarts that rebuild their progress
from the log), random splits and merges open new epochs at random cuts, and a consumer
group reads the VPs under the parent-before-child rule. Separate checkers then require:
every committed physical record is in exactly one VP exactly once, in the VP the layout
names; each VP keeps physical offset order per partition; per-key order holds for the group;
refeeding everything again changes nothing. Only the test uses ``random`` (seeded).
"""

from __future__ import annotations

import collections
import random
from dataclasses import dataclass, field

import pytest

from mafka4 import batch_frame, batch_payload
from mafka4.batch_frame import NO_PRODUCER_ID, NO_SEQUENCE, BatchHeader
from mafka4.batch_payload import Record
from mafka4.hashing import key_hash
from mafka4.virtual.layout import TopicLayout
from mafka4.virtual.ranges import message_hash
from mafka4.virtual.vp_records import FeedProgress, encode_vp_batch, route_batch, source_of

KEYS = [b"key-%d" % i for i in range(12)]
PRODUCERS = (NO_PRODUCER_ID, 101, 202)


@dataclass
class PhysicalPartition:
    batches: list[tuple[int, bytes]] = field(default_factory=list)  # (base offset, stamped batch)
    log_end_offset: int = 0
    high_watermark: int = 0
    sequences: dict[int, int] = field(default_factory=dict)  # producer id -> next sequence

    def committed_batches(self) -> list[tuple[int, bytes]]:
        return [(base, batch) for base, batch in self.batches if base < self.high_watermark]


class ReadPathModel:
    """Physical logs, per-partition feeders, VP logs and one consumer group."""

    def __init__(self, seed: int, respect_parents: bool = True):
        self.rng = random.Random(seed)
        self.seed = seed
        self.respect_parents = respect_parents
        partitions = self.rng.randint(1, 4)
        self.layout = TopicLayout.initial(partitions, self.rng.randint(1, 3))
        self.physical = [PhysicalPartition() for _ in range(partitions)]
        self.keys_by_partition = [[k for k in KEYS if key_hash(k) % partitions == p] for p in range(partitions)]
        self.feeder_next = [0] * partitions  # next physical offset each feeder reads (rewinds on restart)
        self.fed_through = [0] * partitions  # everything below was fed at least once (never rewinds)
        self.vp_logs: dict[int, list[Record]] = {vp: [] for vp in self.layout.current.ranges.vp_ids}
        self.progress: dict[int, FeedProgress] = {vp: FeedProgress() for vp in self.vp_logs}
        self.sealed_end_offsets: dict[int, int] = {}
        self.committed: dict[int, int] = {}
        self.consumed: list[tuple[int, Record]] = []  # (vp, record) in the order the group read them
        self.values_made = 0

    # --- steps ------------------------------------------------------------------------------

    def step(self) -> None:
        action = self.rng.choices(
            [self.produce, self.commit, self.feed, self.refeed, self.restart_feeder, self.restart_vp,
             self.reshard, self.consume],
            weights=[6, 3, 8, 2, 1, 1, 1, 5],
        )[0]
        action()
        self.seal()

    def produce(self) -> None:
        p = self.rng.randrange(len(self.physical))
        partition = self.physical[p]
        producer_id = self.rng.choice(PRODUCERS)
        items = []
        for _ in range(self.rng.randint(1, 6)):
            keys = self.keys_by_partition[p]
            key = self.rng.choice(keys) if keys and self.rng.random() < 0.7 else None
            self.values_made += 1
            items.append((key, b"value-%d" % self.values_made, self.values_made, None))
        sequence = NO_SEQUENCE
        if producer_id != NO_PRODUCER_ID:
            sequence = partition.sequences.get(producer_id, 0)
            partition.sequences[producer_id] = sequence + len(items)
        batch = bytearray(batch_payload.encode_batch(items, producer_id, sequence))
        batch_frame.stamp(batch, partition.log_end_offset, 0)
        partition.batches.append((partition.log_end_offset, bytes(batch)))
        partition.log_end_offset += len(items)

    def commit(self) -> None:
        partition = self.rng.choice(self.physical)
        uncommitted = [base for base, _ in partition.batches if base >= partition.high_watermark]
        if uncommitted:
            chosen = self.rng.choice(uncommitted)
            partition.high_watermark = next(
                (base for base, _ in partition.batches if base > chosen), partition.log_end_offset
            )

    def feed(self, p: int | None = None) -> bool:
        """The feeder of ``p`` splits its next committed batch into the VPs."""
        p = self.rng.randrange(len(self.physical)) if p is None else p
        for base, batch in self.physical[p].committed_batches():
            if base + batch_frame.read_header(batch).count > self.feeder_next[p]:
                self.deliver(p, batch)
                self.feeder_next[p] = base + batch_frame.read_header(batch).count
                self.fed_through[p] = max(self.fed_through[p], self.feeder_next[p])
                return True
        return False

    def refeed(self) -> None:
        """A retried delivery: a batch the feeder already fed arrives again."""
        p = self.rng.randrange(len(self.physical))
        fed = [batch for base, batch in self.physical[p].batches if base < self.fed_through[p]]
        if fed:
            self.deliver(p, self.rng.choice(fed))

    def restart_feeder(self) -> None:
        p = self.rng.randrange(len(self.physical))
        starts = [base for base, _ in self.physical[p].batches if base <= self.feeder_next[p]]
        self.feeder_next[p] = self.rng.choice(starts) if starts else 0

    def restart_vp(self) -> None:
        vp = self.rng.choice(sorted(self.vp_logs))
        self.progress[vp] = FeedProgress.rebuild(self.vp_logs[vp])

    def deliver(self, p: int, batch: bytes) -> None:
        """What the feeder and the VP leaders do with one committed batch."""
        for vp, vp_records in route_batch(batch, p, self.layout).items():
            fresh = self.progress[vp].unapplied(vp_records)
            if not fresh:
                continue
            vp_batch = bytearray(encode_vp_batch(fresh))
            batch_frame.stamp(vp_batch, len(self.vp_logs[vp]), 0)
            self.vp_logs[vp].extend(batch_payload.decode_batch(vp_batch))
            self.progress[vp].applied(fresh)

    def reshard(self) -> None:
        current = self.layout.current
        active = list(current.ranges.vp_ids)
        cut = [max(fed, old) + self.rng.choice((0, 0, 1, 2, 7)) for fed, old in zip(self.fed_through, current.cut)]
        if len(active) > 1 and self.rng.random() < 0.4:
            index = self.rng.randrange(len(active) - 1)  # neighbours in hash order
            epoch = self.layout.plan_merge(active[index], active[index + 1], cut, self.fed_through)
        elif len(active) < 12:
            epoch = self.layout.plan_split(self.rng.choice(active), cut, self.fed_through)
        else:
            return
        self.layout = self.layout.append(epoch)
        for vp in epoch.children:
            self.vp_logs[vp], self.progress[vp] = [], FeedProgress()

    def seal(self) -> None:
        """A closed VP fed up to every cut has its final end offset (the shell stores it in etcd)."""
        for vp in self.vp_logs:
            if vp not in self.sealed_end_offsets and self.layout.is_sealed(vp, self.fed_through):
                self.sealed_end_offsets[vp] = len(self.vp_logs[vp])

    def consume(self) -> None:
        if self.respect_parents:
            candidates = self.layout.consumable_vps(self.committed, self.sealed_end_offsets)
        else:
            candidates = tuple(self.vp_logs)
        unread = [vp for vp in candidates if self.committed.get(vp, 0) < len(self.vp_logs[vp])]
        if not unread:
            return
        vp = self.rng.choice(unread)
        position = self.committed.get(vp, 0)
        end = min(len(self.vp_logs[vp]), position + self.rng.randint(1, 5))
        self.consumed.extend((vp, record) for record in self.vp_logs[vp][position:end])
        self.committed[vp] = end

    # --- ending -------------------------------------------------------------------------------

    def drain(self) -> None:
        """Commit and feed everything (past every cut), then let the group read everything."""
        cuts_max = [max(epoch.cut[p] for epoch in self.layout.epochs) for p in range(len(self.physical))]
        for p, partition in enumerate(self.physical):
            while partition.log_end_offset < cuts_max[p]:
                self.physical_filler(p)
            partition.high_watermark = partition.log_end_offset
            while self.feed(p):
                pass
        self.seal()
        for _ in range(100_000):
            before = dict(self.committed)
            self.consume()
            if before == self.committed and not self.unread_consumable():
                return
        raise AssertionError("the group never finished reading")

    def physical_filler(self, p: int) -> None:
        partition = self.physical[p]
        batch = bytearray(batch_payload.encode_batch([(None, b"filler", 0, None)]))
        batch_frame.stamp(batch, partition.log_end_offset, 0)
        partition.batches.append((partition.log_end_offset, bytes(batch)))
        partition.log_end_offset += 1

    def unread_consumable(self) -> bool:
        candidates = self.layout.consumable_vps(self.committed, self.sealed_end_offsets)
        return any(self.committed.get(vp, 0) < len(self.vp_logs[vp]) for vp in candidates)


# --- checkers ---------------------------------------------------------------------------------


def committed_records(model: ReadPathModel) -> dict[tuple[int, int], tuple[BatchHeader, Record]]:
    out = {}
    for p, partition in enumerate(model.physical):
        for _, batch in partition.committed_batches():
            header = batch_frame.read_header(batch)
            for record in batch_payload.decode_batch(batch):
                out[(p, record.offset)] = (header, record)
    return out


def check_exactly_once_in_the_right_vp(model: ReadPathModel) -> None:
    """Every committed physical record is in exactly one VP, once, the VP its epoch names."""
    physical = committed_records(model)
    seen: dict[tuple[int, int], int] = {}
    for vp, log in model.vp_logs.items():
        for record in log:
            source = source_of(record)
            assert source not in seen, f"record {source} is in VP {seen[source]} and again in VP {vp}"
            seen[source] = vp
            header, original = physical[source]
            assert (record.key, record.value) == (original.key, original.value)
            assert record.timestamp_ms == original.timestamp_ms
            sequence = header.base_sequence + (original.offset - header.base_offset)
            hash_value = message_hash(original.key, source[0], header.producer_id, sequence, original.offset)
            assert model.layout.vp_for(*source, hash_value) == vp, f"record {source} in VP {vp}, not its own"
    missing = sorted(set(physical) - set(seen))
    assert not missing, f"committed records never fed: {missing[:10]}"


def check_vp_order(model: ReadPathModel) -> None:
    """Within a VP, the records of one physical partition keep their physical order."""
    for vp, log in model.vp_logs.items():
        last: dict[int, int] = {}
        for record in log:
            partition, offset = source_of(record)
            assert offset > last.get(partition, -1), f"VP {vp} holds partition {partition} out of order at {offset}"
            last[partition] = offset


def check_per_key_order(model: ReadPathModel) -> None:
    """The group read each key's records in physical offset order, each exactly once."""
    by_key: dict[bytes, list[tuple[int, int]]] = collections.defaultdict(list)
    for _, record in model.consumed:
        if record.key is not None:
            by_key[record.key].append(source_of(record))
    for key, sources in by_key.items():
        assert sources == sorted(set(sources)), f"key {key!r} read out of order or twice: {sources}"


def check_refeed_changes_nothing(model: ReadPathModel) -> None:
    """A feeder restarted at offset 0 of every partition, against rebuilt VPs, appends nothing."""
    before = {vp: list(log) for vp, log in model.vp_logs.items()}
    for vp in model.vp_logs:
        model.progress[vp] = FeedProgress.rebuild(model.vp_logs[vp])
    for p, partition in enumerate(model.physical):
        for _, batch in partition.committed_batches():
            model.deliver(p, batch)
    assert model.vp_logs == before


def run(seed: int, respect_parents: bool = True, steps: int = 300) -> ReadPathModel:
    model = ReadPathModel(seed, respect_parents)
    for _ in range(steps):
        model.step()
        check_vp_order(model)
    model.drain()
    return model


@pytest.mark.parametrize("seed", range(60))
def test_random_histories_feed_every_record_once_and_keep_per_key_order(seed):
    model = run(seed)
    check_exactly_once_in_the_right_vp(model)
    check_vp_order(model)
    check_per_key_order(model)
    check_refeed_changes_nothing(model)
    assert model.consumed and len(model.layout.epochs) > 1, f"seed {seed} exercised too little"
    keyed = sum(1 for _, r in model.consumed if r.key is not None)
    assert 0 < keyed < len(model.consumed), f"seed {seed} lacks keyed or keyless records"


def test_reading_children_before_their_parents_breaks_per_key_order():
    """The per-key checker can fail: without the parent-before-child rule, some history breaks it."""
    failures = 0
    for seed in range(40):
        model = run(seed, respect_parents=False)
        check_exactly_once_in_the_right_vp(model)
        try:
            check_per_key_order(model)
        except AssertionError:
            failures += 1
    assert failures > 0


def test_a_history_is_reproduced_exactly_by_its_seed():
    first, second = run(7), run(7)
    assert first.vp_logs == second.vp_logs and first.layout == second.layout
