"""The consumer-group protocol of Mafka3 mode, as pure decisions (no etcd, no clock, no Ray).

A member reads its whole group at one etcd revision (a ``GroupSnapshot``) and ``decide``
tells it the one next step; ``mafka4.coordinator.groups.partition_groups`` performs that step as one etcd
transaction and reads again. Every member runs the same rules on the same data, so they agree
without a coordinator. The steps, in priority order:

1. ``Rejoin``: my member key is gone (my lease expired, or I left after a rebalance timeout).
2. ``Revoke``: the live members differ from the generation's members, or I own a partition
   under an older generation: commit and release *everything* I own (the eager rebalance).
3. ``Propose``: the live members differ from the generation's and I own nothing: write the
   next generation (compare-and-swap on the generation key; concurrent proposers write the
   same content, one wins). ``next_generation`` computes it from the membership at the
   snapshot's revision and the previous assignment (for the sticky assignor).
4. ``Wait``: an owner key of an older generation still exists: the sync barrier. No member
   starts the new assignment before every member has released the old one, as in Kafka's
   eager JoinGroup/SyncGroup.
5. ``Claim``: partitions assigned to me in the current generation have no owner: create their
   owner keys (each only if absent, only if the generation key did not change, bound to my lease).
6. ``Stable``: I own exactly my assignment.

Invariants: a partition has at most one owner key, hence at most one consuming member (the
creation is conditional on absence). A member only claims partitions of the current generation
assigned to it, and only after every older owner key is gone. A committed offset only moves
forward (``offsets_to_commit``), except through ``reset-offsets`` of a group without members.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable, Mapping

from mafka4.coordinator.groups.assignors import assignor_named
from mafka4.errors import InvalidGroupName
from mafka4.limits import TOPIC_NAME_CHARS_MAX
from mafka4.metadata import keys

_GROUP_NAME = re.compile(r"[A-Za-z0-9._-]+")
# The "assignor" members of mafka4-mode groups register with (``partition_groups.vp_groups``):
# Mafka3-mode members and they never share a group.
VIRTUAL_ASSIGNOR = "virtual"


def validate_group_name(name: object) -> str:
    """Return ``name`` if it is a valid group name (the rules of topic names), else raise."""
    if not isinstance(name, str) or not name or name in (".", "..") or len(name) > TOPIC_NAME_CHARS_MAX:
        raise InvalidGroupName(f"group name {name!r} must be 1 to {TOPIC_NAME_CHARS_MAX} characters and not '.' or '..'")
    if not _GROUP_NAME.fullmatch(name):
        raise InvalidGroupName(f"group name {name!r} may contain only letters, digits, '.', '_' and '-'")
    return name


@dataclass(frozen=True, slots=True, order=True)
class TopicPartition:
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class MemberInfo:
    """A live member: the value of its lease-bound member key."""

    member_id: str
    topic: str
    assignor: str
    # The lanes a mafka4-mode member reads (``coordinator.groups.vp_ownership``): () is the trunk's
    # reader, as every member was before lanes; the key then holds no "lanes", as it did then.
    lanes: tuple[str, ...] = ()

    def to_json(self) -> dict:
        value = {"member_id": self.member_id, "topic": self.topic, "assignor": self.assignor}
        if self.lanes:
            value["lanes"] = list(self.lanes)
        return value

    @classmethod
    def from_json(cls, value: dict) -> "MemberInfo":
        return cls(value["member_id"], value["topic"], value["assignor"], tuple(value.get("lanes", ())))

    @property
    def reads(self) -> frozenset[str]:
        """The lanes this member reads, the trunk ("") for a member that names none."""
        return frozenset(self.lanes) if self.lanes else frozenset(("",))


@dataclass(frozen=True, slots=True)
class Generation:
    """One generation of the group: its members and their partitions, fixed at a revision."""

    generation: int
    members: tuple[str, ...]  # sorted
    assignor: str
    membership_revision: int  # the etcd revision at which ``members`` was read
    assignment: tuple[tuple[str, tuple[TopicPartition, ...]], ...]  # sorted by member

    def partitions_of(self, member_id: str) -> tuple[TopicPartition, ...]:
        return dict(self.assignment).get(member_id, ())

    def to_json(self) -> dict:
        return {"generation": self.generation, "members": list(self.members), "assignor": self.assignor,
                "membership_revision": self.membership_revision,
                "assignment": {m: [[tp.topic, tp.partition] for tp in tps] for m, tps in self.assignment}}

    @classmethod
    def from_json(cls, value: dict) -> "Generation":
        assignment = tuple(sorted(
            (member, tuple(TopicPartition(t, p) for t, p in tps)) for member, tps in value["assignment"].items()))
        return cls(value["generation"], tuple(value["members"]), value["assignor"], value["membership_revision"], assignment)


@dataclass(frozen=True, slots=True)
class Owner:
    member_id: str
    generation: int


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    offset: int
    mod_revision: int  # of the offset key, for the compare-and-swap of the next commit


@dataclass(frozen=True, slots=True)
class GroupSnapshot:
    """Everything of one group at one etcd revision."""

    revision: int
    members: tuple[MemberInfo, ...]  # sorted by member id
    generation: Generation | None
    generation_mod_revision: int  # 0: no generation key yet
    owners: Mapping[TopicPartition, Owner] = field(default_factory=dict)
    offsets: Mapping[TopicPartition, CommittedOffset] = field(default_factory=dict)

    def __post_init__(self) -> None:
        assert list(self.member_ids) == sorted(set(self.member_ids)), "members are unique and sorted by id"

    @property
    def member_ids(self) -> tuple[str, ...]:
        return tuple(m.member_id for m in self.members)

    def owned_by(self, member_id: str) -> dict[TopicPartition, Owner]:
        return {tp: owner for tp, owner in self.owners.items() if owner.member_id == member_id}

    def is_current(self) -> bool:
        """Whether the generation key describes the live membership."""
        return self.generation is not None and self.generation.members == self.member_ids

    @classmethod
    def parse(cls, cluster: str, group: str, revision: int, items: Iterable[tuple[str, dict, int]]) -> "GroupSnapshot":
        """Build a snapshot from (key, JSON value, mod_revision) of every key below the group prefix."""
        members_prefix = keys.group_members_prefix(cluster, group)
        owners_prefix = keys.group_owners_prefix(cluster, group)
        offsets_prefix = keys.group_offsets_prefix(cluster, group)
        generation_key = keys.group_generation(cluster, group)
        members, owners, offsets = [], {}, {}
        generation, generation_mod_revision = None, 0
        for key, value, mod_revision in items:
            if key.startswith(members_prefix):
                members.append(MemberInfo.from_json(value))
            elif key == generation_key:
                generation, generation_mod_revision = Generation.from_json(value), mod_revision
            elif (parsed := keys.parse_group_partition(owners_prefix, key)) is not None:
                owners[TopicPartition(*parsed)] = Owner(value["member_id"], value["generation"])
            elif (parsed := keys.parse_group_partition(offsets_prefix, key)) is not None:
                offsets[TopicPartition(*parsed)] = CommittedOffset(value["offset"], mod_revision)
        members.sort(key=lambda m: m.member_id)
        return cls(revision, tuple(members), generation, generation_mod_revision, owners, offsets)


# --- decisions ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Rejoin:
    pass


@dataclass(frozen=True, slots=True)
class Revoke:
    partitions: tuple[TopicPartition, ...]


@dataclass(frozen=True, slots=True)
class Propose:
    pass


@dataclass(frozen=True, slots=True)
class Wait:
    reason: str


@dataclass(frozen=True, slots=True)
class Claim:
    generation: int
    partitions: tuple[TopicPartition, ...]


@dataclass(frozen=True, slots=True)
class Stable:
    generation: int
    partitions: tuple[TopicPartition, ...]


Decision = Rejoin | Revoke | Propose | Wait | Claim | Stable


def decide(snapshot: GroupSnapshot, me: str) -> Decision:
    """The next step of member ``me`` (see the module docstring for the rules)."""
    if me not in snapshot.member_ids:
        return Rejoin()
    mine = snapshot.owned_by(me)
    generation = snapshot.generation
    if not snapshot.is_current():
        return Revoke(tuple(sorted(mine))) if mine else Propose()
    assert generation is not None
    if any(owner.generation != generation.generation for owner in mine.values()):
        return Revoke(tuple(sorted(mine)))
    older = sorted(tp for tp, owner in snapshot.owners.items() if owner.generation < generation.generation)
    if older:
        holders = sorted({snapshot.owners[tp].member_id for tp in older})
        return Wait(f"{len(older)} partition(s) still owned under an older generation by {', '.join(holders)}")
    target = generation.partitions_of(me)
    assert set(mine) <= set(target), f"{me} owns {sorted(set(mine) - set(target))} outside its assignment"
    claimable = tuple(tp for tp in target if may_claim(snapshot, me, tp))
    if claimable:
        return Claim(generation.generation, claimable)
    if len(mine) < len(target):
        return Wait(f"partitions of generation {generation.generation} are owned by other members")
    return Stable(generation.generation, target)


def may_claim(snapshot: GroupSnapshot, me: str, tp: TopicPartition) -> bool:
    """Whether ``me`` may create the owner key of ``tp`` now: the generation is current, ``tp``
    is assigned to ``me`` in it, ``tp`` has no owner, and no owner of an older generation is left."""
    generation = snapshot.generation
    if not snapshot.is_current() or me not in snapshot.member_ids or tp in snapshot.owners:
        return False
    assert generation is not None
    if any(owner.generation < generation.generation for owner in snapshot.owners.values()):
        return False
    return tp in generation.partitions_of(me)


def choose_assignor(members: Iterable[MemberInfo]) -> str:
    """The group's assignor: the one all members name; if they disagree (two joined at once with
    different settings), the one named by the smallest member id."""
    ordered = sorted(members, key=lambda m: m.member_id)
    assert ordered, "a generation is only proposed by a live member"
    return ordered[0].assignor


def next_generation(snapshot: GroupSnapshot, partition_counts: Mapping[str, int]) -> Generation:
    """The generation after ``snapshot.generation`` for the membership at ``snapshot.revision``.

    Each topic's partitions are assigned among the members that consume that topic;
    ``partition_counts`` gives the partition count of every such topic.
    """
    assignor_name = choose_assignor(snapshot.members)
    assignor = assignor_named(assignor_name)
    previous = snapshot.generation
    assignment: dict[str, list[TopicPartition]] = {m.member_id: [] for m in snapshot.members}
    for topic in sorted({m.topic for m in snapshot.members}):
        subscribers = [m.member_id for m in snapshot.members if m.topic == topic]
        before = {} if previous is None else {
            member: [tp.partition for tp in tps if tp.topic == topic] for member, tps in previous.assignment}
        for member, partitions in assignor.assign(subscribers, range(partition_counts[topic]), before).items():
            assignment[member].extend(TopicPartition(topic, p) for p in partitions)
    number = 1 if previous is None else previous.generation + 1
    return Generation(number, snapshot.member_ids, assignor_name, snapshot.revision,
                      tuple(sorted((m, tuple(sorted(tps))) for m, tps in assignment.items())))


def offsets_to_commit(positions: Mapping[TopicPartition, int],
                      committed: Mapping[TopicPartition, CommittedOffset]) -> dict[TopicPartition, int]:
    """The positions that move a committed offset forward (or set a first one): a commit never
    moves an offset backwards, so a position behind the committed offset (after a seek back) is
    not committed."""
    return {tp: offset for tp, offset in positions.items()
            if tp not in committed or offset > committed[tp].offset}
