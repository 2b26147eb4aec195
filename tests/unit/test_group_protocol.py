"""The group protocol's pure decisions, and seeded random histories of members driven by them.

The histories run members against a small in-memory model of the group's etcd keys that
applies the same transaction conditions as ``GroupStore`` (claim only if absent, the
generation unchanged and the member alive; commit only while owning; release with the
final commit). Checkers: a partition is never consumed by two live members at once, a
committed offset never moves backwards, every message is consumed at least once, and once
the membership stops changing every member becomes stable on one generation.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass, field

import pytest

from mafka4.coordinator.groups.partition_protocol import (Claim, CommittedOffset, Generation, GroupSnapshot,
                                                          MemberInfo, Owner, Propose, Rejoin, Revoke, Stable,
                                                          TopicPartition, Wait, decide, may_claim, next_generation,
                                                          offsets_to_commit, validate_group_name)
from mafka4.errors import InvalidConfig, InvalidGroupName
from mafka4.limits import ConsumerConfig, OffsetReset

TOPIC = "t"
TP = [TopicPartition(TOPIC, p) for p in range(6)]


def member(member_id: str, assignor: str = "range") -> MemberInfo:
    return MemberInfo(member_id, TOPIC, assignor)


def snapshot(members, generation=None, owners=None, offsets=None, revision=10) -> GroupSnapshot:
    return GroupSnapshot(revision, tuple(member(m) for m in sorted(members)), generation, 5 if generation else 0,
                         owners or {}, offsets or {})


def generation_of(members, number=1, partitions=6) -> Generation:
    return dataclasses.replace(next_generation(snapshot(members), {TOPIC: partitions}), generation=number)


def test_group_names_follow_topic_rules():
    assert validate_group_name("billing.v2_eu-1") == "billing.v2_eu-1"
    for bad in ("", "..", "a/b", "x" * 201, None):
        with pytest.raises(InvalidGroupName):
            validate_group_name(bad)


def test_a_member_whose_key_is_gone_rejoins():
    assert decide(snapshot(["a"]), "b") == Rejoin()


def test_a_membership_change_first_revokes_everything_then_proposes():
    gen = generation_of(["a", "b"])
    owners = {tp: Owner("a", 1) for tp in gen.partitions_of("a")}
    joined = snapshot(["a", "b", "c"], gen, owners)
    assert decide(joined, "a") == Revoke(gen.partitions_of("a"))
    assert decide(joined, "b") == Propose()
    assert decide(joined, "c") == Propose()


def test_next_generation_records_members_revision_and_range_assignment():
    gen = next_generation(snapshot(["b", "a"], revision=42), {TOPIC: 5})
    assert (gen.generation, gen.members, gen.membership_revision, gen.assignor) == (1, ("a", "b"), 42, "range")
    assert gen.partitions_of("a") == tuple(TP[:3]) and gen.partitions_of("b") == tuple(TP[3:5])
    assert Generation.from_json(gen.to_json()) == gen


def test_the_sync_barrier_waits_for_every_owner_of_the_older_generation():
    new = generation_of(["a", "b"], number=2)
    still_old = snapshot(["a", "b"], new, {TP[5]: Owner("b", 1)})
    assert isinstance(decide(still_old, "a"), Wait)
    assert not may_claim(still_old, "a", new.partitions_of("a")[0])
    assert decide(still_old, "b") == Revoke((TP[5],))
    released = snapshot(["a", "b"], new)
    assert decide(released, "a") == Claim(2, new.partitions_of("a"))
    assert not may_claim(released, "a", new.partitions_of("b")[0]), "only one's own assignment"


def test_stable_once_the_assignment_is_owned():
    gen = generation_of(["a", "b"])
    owners = {tp: Owner(m, 1) for m in "ab" for tp in gen.partitions_of(m)}
    assert decide(snapshot(["a", "b"], gen, owners), "a") == Stable(1, gen.partitions_of("a"))


def test_members_beyond_the_partition_count_are_stable_with_nothing():
    gen = generation_of(["a", "b", "c"], partitions=2)
    owners = {TP[0]: Owner("a", 1), TP[1]: Owner("b", 1)}
    assert decide(snapshot(["a", "b", "c"], gen, owners), "c") == Stable(1, ())


def test_commits_only_move_forward():
    committed = {TP[0]: CommittedOffset(10, 3), TP[1]: CommittedOffset(10, 4)}
    assert offsets_to_commit({TP[0]: 9, TP[1]: 11, TP[2]: 0}, committed) == {TP[1]: 11, TP[2]: 0}


# --- seeded random histories ------------------------------------------------------------

MESSAGES_PER_PARTITION = 40


@dataclass
class Model:
    """The group's keys as etcd would hold them, with the conditions of GroupStore's transactions."""

    revision: int = 1
    members: dict[str, MemberInfo] = field(default_factory=dict)
    generation: Generation | None = None
    generation_mod_revision: int = 0
    owners: dict[TopicPartition, Owner] = field(default_factory=dict)
    offsets: dict[TopicPartition, CommittedOffset] = field(default_factory=dict)
    committed_history: list[tuple[TopicPartition, int]] = field(default_factory=list)

    def snapshot(self) -> GroupSnapshot:
        return GroupSnapshot(self.revision, tuple(sorted(self.members.values(), key=lambda m: m.member_id)),
                             self.generation, self.generation_mod_revision, dict(self.owners), dict(self.offsets))

    def write(self) -> int:
        self.revision += 1
        return self.revision

    def expire(self, member_id: str) -> None:
        """A lease ends: the member key and its owner keys go in one revision."""
        self.members.pop(member_id)
        self.owners = {tp: o for tp, o in self.owners.items() if o.member_id != member_id}
        self.write()

    def propose(self, generation: Generation, expected: int) -> None:
        if self.generation_mod_revision == expected:
            self.generation, self.generation_mod_revision = generation, self.write()

    def claim(self, member_id: str, claim: Claim, expected: int):
        if member_id not in self.members or self.generation_mod_revision != expected:
            return None
        if any(tp in self.owners for tp in claim.partitions):
            return None
        self.write()
        for tp in claim.partitions:
            self.owners[tp] = Owner(member_id, claim.generation)
        return {tp: self.offsets.get(tp) for tp in claim.partitions}

    def commit(self, member_id: str, generation: int, positions, release=()) -> None:
        self.write()
        for tp, offset in offsets_to_commit(positions, self.offsets).items():
            if self.owners.get(tp) == Owner(member_id, generation):
                self.offsets[tp] = CommittedOffset(offset, self.revision)
                self.committed_history.append((tp, offset))
        for tp in release:
            if self.owners.get(tp) == Owner(member_id, generation):
                del self.owners[tp]


@dataclass
class SimMember:
    member_id: str
    rng: random.Random
    positions: dict[TopicPartition, int] = field(default_factory=dict)
    owned: dict[TopicPartition, int] = field(default_factory=dict)

    def step(self, model: Model, consumed: dict[TopicPartition, set[int]]) -> object:
        snap = model.snapshot()
        for tp in set(self.owned) - set(snap.owned_by(self.member_id)):
            self.owned.pop(tp), self.positions.pop(tp)
        decision = decide(snap, self.member_id)
        if isinstance(decision, Rejoin):
            model.members[self.member_id] = member(self.member_id)
            model.write()
        elif isinstance(decision, Revoke):
            for tp in decision.partitions:
                model.commit(self.member_id, self.owned[tp], {tp: self.positions[tp]}, release=[tp])
                self.owned.pop(tp), self.positions.pop(tp)
        elif isinstance(decision, Propose):
            counts = {TOPIC: len(TP)}
            model.propose(next_generation(snap, counts), snap.generation_mod_revision)
        elif isinstance(decision, Claim):
            for tp, committed in (model.claim(self.member_id, decision, snap.generation_mod_revision) or {}).items():
                self.owned[tp] = decision.generation
                self.positions[tp] = 0 if committed is None else committed.offset
        elif isinstance(decision, Stable):
            for tp in decision.partitions:
                for _ in range(self.rng.randint(0, 3)):
                    if self.positions[tp] < MESSAGES_PER_PARTITION:
                        consumed[tp].add(self.positions[tp])
                        self.positions[tp] += 1
            if self.rng.random() < 0.3:
                for tp, generation in self.owned.items():
                    model.commit(self.member_id, generation, {tp: self.positions[tp]})
        return decision

    def leave(self, model: Model) -> None:
        for tp, generation in self.owned.items():
            model.commit(self.member_id, generation, {tp: self.positions[tp]}, release=[tp])
        model.expire(self.member_id)


def check_single_consumer(model: Model, live: dict[str, SimMember]) -> None:
    holders: dict[TopicPartition, str] = {}
    for sim in live.values():
        for tp in sim.owned:
            assert tp not in holders, f"{tp} consumed by {holders[tp]} and {sim.member_id} at once"
            holders[tp] = sim.member_id


@pytest.mark.parametrize("seed", range(40))
def test_random_histories_keep_the_group_guarantees(seed):
    rng = random.Random(seed)
    model, live = Model(), {}
    consumed = {tp: set() for tp in TP}
    names = iter(f"m{n:02d}" for n in range(1000))
    for _ in range(400):
        roll = rng.random()
        if roll < 0.05 or not live:
            sim = SimMember(next(names), rng)
            live[sim.member_id] = sim
            model.members[sim.member_id] = member(sim.member_id)
            model.write()
        elif roll < 0.08 and len(live) > 1:
            live.pop(rng.choice(sorted(live))).leave(model)
        elif roll < 0.10 and len(live) > 1:
            model.expire(live.pop(rng.choice(sorted(live))).member_id)  # crash: positions lost
        else:
            live[rng.choice(sorted(live))].step(model, consumed)
        check_single_consumer(model, live)
    for _ in range(2000):  # membership stops changing: everyone converges and drains
        decisions = {m: sim.step(model, consumed) for m, sim in sorted(live.items())}
        check_single_consumer(model, live)
        drained = all(sim.positions[tp] == MESSAGES_PER_PARTITION for sim in live.values() for tp in sim.owned)
        if drained and all(isinstance(d, Stable) for d in decisions.values()):
            break
    assert all(isinstance(d, Stable) and d.generation == model.generation.generation for d in decisions.values())
    assert set(model.owners) == set(TP) and model.generation.members == tuple(sorted(live))
    for sim in live.values():
        sim.leave(model)
    last: dict[TopicPartition, int] = {}
    for tp, offset in model.committed_history:
        assert offset >= last.get(tp, 0), f"committed offset of {tp} went back from {last[tp]} to {offset}"
        last[tp] = offset
    assert all(consumed[tp] == set(range(MESSAGES_PER_PARTITION)) for tp in TP), "every message consumed"
    assert all(model.offsets[tp].offset == MESSAGES_PER_PARTITION for tp in TP), "zero lag at the end"


def test_group_settings_are_validated_with_the_choices():
    assert ConsumerConfig(auto_offset_reset="earliest").auto_offset_reset is OffsetReset.EARLIEST
    assert ConsumerConfig().auto_offset_reset is OffsetReset.LATEST, "Kafka's default"
    assert ConsumerConfig(auto_commit_interval_ms=None).auto_commit_interval_ms is None
    with pytest.raises(InvalidConfig, match="'earliest' or 'latest'"):
        ConsumerConfig(auto_offset_reset="beginning")
    with pytest.raises(InvalidConfig, match="'range', 'sticky'"):
        ConsumerConfig(assignor="roundrobin")
    with pytest.raises(InvalidConfig, match="member_lease_ttl_s=1 must be at least 2"):
        ConsumerConfig(member_lease_ttl_s=1)
    assert ConsumerConfig().check_crcs, "Kafka's default: every fetched batch is checked"
    with pytest.raises(InvalidConfig, match="check_crcs='no' must be true or false"):
        ConsumerConfig(check_crcs="no")
