"""Who reads which virtual partition in a mafka4-mode consumer group, as pure decisions.

A member reads its group and the topic's read-path metadata in one etcd transaction (a
``GroupView``) and ``plan_ownership`` tells it what to do. Every member runs the same rules on
the same data, so they agree without a coordinator and without generations; every change
is conditional in etcd (``vp_groups``), so members acting on slightly
different views may delay each other but never both own a VP.

The target (``target_assignment``) maps every *consumable* VP -- readable under
parent-before-child, not retired and not yet consumed to its sealed end
(``TopicLayout.consumable_vps``) -- that has an eligible member to one of them.

Lanes. A record may carry a lane (a swimlane, an environment, a SET); each lane has VPs of its
own (``virtual.layout``), and a VP never changes lane. A member reads a set of lanes
(``GroupView.member_lanes``): the trunk (``""``) unless it names lanes -- ``lane="x"`` reads
{"x"}, ``lanes=["a", "b"]`` reads both. The VPs of lane ``L`` are **eligible** for the live
members that read ``L``. While none does, ``L``'s fallback (``GroupView.lane_fallback``) says
where they go: ``"trunk"`` (the default, swimlane semantics: a lane nobody deploys is read as
the trunk is) makes them eligible for the members reading the trunk; ``"none"``
(environment/SET semantics) leaves them without an owner, so their records wait for the lane's
own consumers. The trunk never falls back. A lane member that joins needs nothing new: the
target gives it the lane's VPs, and the trunk member that read them releases them as any
over-quota owner does (commit, then delete the owner key), and it claims them.

The target is computed **per lane**, the trunk first and then the lanes in opening order,
each lane's consumable VPs among that lane's eligible members only, with these rules:

* sticky: a VP stays with its live owner while that owner is within its quota;
* quotas: ``n`` VPs over ``m`` members give each ``n // m``, and one more to the ``n % m``
  members that own the most now (ties: fewest VPs given in the lanes assigned before, then
  smaller id), so the fewest VPs move;
* an owner above its quota gives up first its active VPs, newest first, and keeps the
  closed parents it is draining (their children wait for them);
* free VPs (without an eligible live owner, or given up) go in id order to the member furthest
  below its quota (ties: fewest VPs given in the lanes before, then smaller id).

Quotas are per lane, not over all of a member's VPs, because lanes are read by different sets of
members: one pool over every lane would give a lane's VPs to a member that does not read it,
or let a busy trunk push a lane's only reader off its own lane. Per lane, each lane's VPs are
spread over its readers as evenly as a trunk-only group's; the ties to the lighter member keep
the many one-VP lanes that fall back to the trunk from all landing on its smallest member.
With no lanes (every member reads the trunk), this is the trunk-only rule unchanged.

The steps of member ``me`` (``OwnershipPlan``):

* **release** what it owns that the target gives to another or to nobody (a lane with fallback
  ``"none"`` that nobody reads), or that is no longer consumable (a closed VP read to its
  sealed end, or retired): commit, then delete the owner key (one transaction);
* **claim** what the target gives it that has no owner: create the owner key, only if
  absent, under its lease (so a dead member's VPs free themselves when the lease lapses);
* **split** when a lane has more of its own readers than active VPs (and the layout allows one
  more VP in all): the member with the smallest id of the group splits the busiest readable
  active VP of such lanes -- largest lag, then widest range, then the trunk's, then smallest
  id -- so a joiner gets capacity without any other consumer stopping. Only a lane's own
  readers count: members that read it by fallback never split it (they have the trunk to
  read; a lane's split is for its own consumers). One split at a time: the count of active
  VPs grows as soon as the split epoch is stored, while the children wait for their parent to
  be drained.

A closed VP its owner has read to its sealed end is **drained** (``with_read_positions``): the
member plans as if its read position there were committed, so the sync that hands in the
position releases the VP, and the release transaction writes the commit -- no commit call of
its own first. The plan may then also claim a child of it, or split, and those rely on a
commit that is not stored yet: they go ahead only once the release stored every drained
VP's commit (``OwnershipPlan.after_release``), else the next sync plans on what etcd holds.
The overlay is one member's own: the others see the parent consumed, and its children
readable, only once the release transaction is applied.

So when a member joins, it takes an unowned VP, else one VP is handed over from a member
owning more than its share, else a VP is split; the members reading other VPs never stop.
When one leaves (or its lease lapses), its VPs go to the others after its last commit.

Invariants (asserted): the target covers exactly the consumable VPs that have an eligible
member, each with one of its lane's eligible live members, and within each lane the quotas of
its eligible members differ by at most one.

Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import AbstractSet, Literal, Mapping

from mafka4.log.epochs import NO_EPOCH
from mafka4.virtual.layout import FALLBACK_NONE, FALLBACK_TRUNK, TRUNK, TopicLayout

# FALLBACK_TRUNK (swimlane): while nobody reads the lane, the trunk's readers read it;
# FALLBACK_NONE (environment/SET): the lane's records wait for its own readers.
Fallback = Literal["trunk", "none"]
TRUNK_ONLY = frozenset({TRUNK})


def lane_fallbacks(layout: TopicLayout) -> dict[str, str]:
    """Each open lane's fallback, as its opening epoch set it (``layout.LanePolicy``): ``GroupView.lane_fallback``."""
    return {lane: layout.current.lane_policy(lane).fallback for lane in layout.current.lane_names}


@dataclass(frozen=True, slots=True)
class GroupView:
    """One group's members and VP ownership, and the topic's layout, at one etcd revision."""

    members: tuple[str, ...]  # live member ids, sorted
    layout: TopicLayout
    sealed_end_offsets: Mapping[int, int]  # closed VP -> its final end offset
    owners: Mapping[int, str]  # VP -> member id of its owner key
    committed: Mapping[int, int]  # VP -> the group's committed offset
    lag: Mapping[int, int]  # VP -> records behind its high watermark at its last commit
    retired: AbstractSet[int] = frozenset()  # closed VPs whose logs retention deleted: consumed by every group
    # Owned closed VPs counted as committed at the planning member's read position (``with_read_positions``).
    drained: AbstractSet[int] = frozenset()
    # Member id -> the lanes it reads ("" the trunk); a member not in it reads the trunk only.
    member_lanes: Mapping[str, frozenset[str]] = dataclasses.field(default_factory=dict)
    # Lane -> where its VPs go while no live member reads it: FALLBACK_TRUNK (when absent) or FALLBACK_NONE.
    lane_fallback: Mapping[str, Fallback] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        assert list(self.members) == sorted(set(self.members)), "members are unique and sorted"
        assert all(self.committed[vp] >= self.sealed_end_offsets[vp] for vp in self.drained), "drained: read to the end"
        assert all(lanes for lanes in self.member_lanes.values()), f"a member reads some lane: {self.member_lanes}"
        assert set(self.lane_fallback.values()) <= {FALLBACK_TRUNK, FALLBACK_NONE}, self.lane_fallback

    def readable(self) -> frozenset[int]:
        return self.layout.readable_vps(self.committed, self.sealed_end_offsets, self.retired)

    def consumable(self) -> tuple[int, ...]:
        return self.layout.consumable_vps(self.committed, self.sealed_end_offsets, self.retired)

    def lanes_of(self, member: str) -> frozenset[str]:
        """The lanes ``member`` reads."""
        return self.member_lanes.get(member, TRUNK_ONLY)

    def readers(self, lane: str) -> tuple[str, ...]:
        """The live members reading ``lane`` themselves, sorted."""
        return tuple(member for member in self.members if lane in self.lanes_of(member))

    def eligible(self, lane: str) -> tuple[str, ...]:
        """The live members ``lane``'s VPs go to: its readers, else the trunk's if it falls back to the trunk."""
        readers = self.readers(lane)
        if readers or lane == TRUNK or self.lane_fallback.get(lane, FALLBACK_TRUNK) == FALLBACK_NONE:
            return readers
        return self.readers(TRUNK)

    def lane_order(self) -> tuple[str, ...]:
        """The trunk, then the open lanes in opening order: the order lanes are assigned in."""
        return (TRUNK,) + self.layout.current.lane_names


@dataclass(frozen=True, slots=True)
class OwnershipPlan:
    """What one member does next; see the module docstring."""

    target: Mapping[int, str]
    keep: tuple[int, ...]  # owned and staying: read on without a pause
    release: tuple[int, ...]  # owned, to commit and release
    claim: tuple[int, ...]  # unowned, to claim
    waiting: tuple[int, ...]  # given to this member but still owned by another
    split: int | None  # the VP this member splits now, if any
    drained: tuple[int, ...] = ()  # released, counted as committed before the release stores it

    def after_release(self, written: AbstractSet[int]) -> OwnershipPlan:
        """The rest of this plan once its release transaction wrote the commits of ``written``.

        The claims and the split may rely on the drained VPs' commits (a child becomes readable
        when its parents are consumed): they stay only if the release stored every one of them.
        If one was not (the owner key was lost, the offset key moved meanwhile), they are
        dropped; the release itself stands, and the next sync plans on what etcd holds.
        """
        if set(self.drained) <= written:
            return self
        return dataclasses.replace(self, claim=(), split=None)


def target_assignment(view: GroupView) -> dict[int, str]:
    """The consumable VPs -> the member that should own each; see the module docstring."""
    by_lane: dict[str, list[int]] = {}
    for vp in view.consumable():
        by_lane.setdefault(view.layout.lane_of(vp), []).append(vp)
    target: dict[int, str] = {}
    load = {member: 0 for member in view.members}  # VPs given in the lanes already assigned
    for lane in view.lane_order():
        vps = by_lane.get(lane, [])
        eligible = view.eligible(lane)
        if not vps or not eligible:
            continue
        assigned = _assign_lane(view, vps, eligible, load)
        target.update(assigned)
        for member in assigned.values():
            load[member] += 1
    assert set(target) == {vp for lane, vps in by_lane.items() if view.eligible(lane) for vp in vps}, (target, by_lane)
    return target


def _assign_lane(view: GroupView, consumable: list[int], members: tuple[str, ...],
                 load: Mapping[str, int]) -> dict[int, str]:
    """One lane's consumable VPs -> its eligible ``members``: sticky, quotas, ties to the least ``load`` of the
    lanes assigned before it, then the smaller id."""
    kept: dict[str, list[int]] = {member: [] for member in members}
    for vp in consumable:
        owner = view.owners.get(vp)
        if owner in kept:
            kept[owner].append(vp)
    base, extra = divmod(len(consumable), len(members))
    by_holdings = sorted(members, key=lambda member: (-len(kept[member]), load[member], member))
    quota = {member: base + (1 if index < extra else 0) for index, member in enumerate(by_holdings)}
    target: dict[int, str] = {}
    for member, vps in kept.items():
        # Closed parents first (kept), then active VPs oldest first; the tail beyond the quota is given up.
        ordered = sorted(vps, key=lambda vp: (view.layout.is_active(vp), vp))
        for vp in ordered[:quota[member]]:
            target[vp] = member
    counts = {member: sum(1 for owner in target.values() if owner == member) for member in members}
    for vp in consumable:
        if vp in target:
            continue
        member = min(members, key=lambda m: (counts[m] - quota[m], load[m], m))
        target[vp] = member
        counts[member] += 1
    assert set(target) == set(consumable) and set(target.values()) <= set(members), (target, consumable)
    assert all(counts[m] == quota[m] for m in members), (counts, quota)
    return target


def split_candidate(view: GroupView) -> int | None:
    """The VP to split now, or None: see the module docstring."""
    current = view.layout.current
    if len(current.vp_ids) >= view.layout.config.virtual_partitions_max:
        return None
    short = {lane for lane in view.lane_order()
             if len(view.readers(lane)) > len(current.lane_ranges(current.lane_id(lane)).vp_ids)}
    if not short:
        return None
    splittable = [vp for vp in view.consumable()
                  if current.lane_of(vp) in short and current.range_of(vp).can_split()]
    if not splittable:
        return None  # every active VP of those lanes waits for its parents: the last split is still settling
    return max(splittable, key=lambda vp: (view.lag.get(vp, 0), current.range_of(vp).width,
                                           current.lane_of(vp) == TRUNK, -vp))


def plan_ownership(view: GroupView, me: str) -> OwnershipPlan:
    """The next steps of live member ``me``."""
    assert me in view.members, f"{me} is not a live member: it registers again first"
    target = target_assignment(view)
    mine = sorted(vp for vp, owner in view.owners.items() if owner == me)
    keep = tuple(vp for vp in mine if target.get(vp) == me)
    release = tuple(vp for vp in mine if target.get(vp) != me)
    given = sorted(vp for vp, member in target.items() if member == me and vp not in mine)
    claim = tuple(vp for vp in given if vp not in view.owners)
    waiting = tuple(vp for vp in given if vp in view.owners)
    split = split_candidate(view) if me == view.members[0] else None
    drained = tuple(sorted(view.drained))
    assert set(drained) <= set(release), f"a drained VP is no longer consumable, so released: {drained}, {release}"
    return OwnershipPlan(target, keep, release, claim, waiting, split, drained)


def with_read_positions(view: GroupView, me: str, positions: Mapping[int, int]) -> GroupView:
    """``view`` with the closed VPs ``me`` owns and has read to their sealed end counted as committed
    at its read positions (``positions``: VP -> position), and named ``drained``.

    Only those: elsewhere a position that is not committed changes no plan (only a VP's being
    consumed does), and every drained VP is released, so its position is written by the very
    transaction that releases it. A drained position is past the committed offset (it reached
    the sealed end, the committed offset did not), so that commit moves forward
    (``commit_moves_forward``). VPs of other members are left as stored, whatever ``positions``
    holds for them: the others' read positions are theirs to commit.
    """
    drained = {vp: position for vp, position in positions.items()
               if view.owners.get(vp) == me and vp in view.sealed_end_offsets and vp not in view.retired
               and view.committed.get(vp, 0) < view.sealed_end_offsets[vp] <= position}
    if not drained:
        return view
    return dataclasses.replace(view, committed={**view.committed, **drained},
                               drained=frozenset(view.drained) | frozenset(drained))


def commit_moves_forward(offset: int, high_watermark: int, committed_offset: int, committed_high_watermark: int,
                         leader_epoch: int = NO_EPOCH, committed_leader_epoch: int = NO_EPOCH) -> bool:
    """Whether committing (``offset``, ``high_watermark``, ``leader_epoch``) over the committed one moves it on.

    A commit does not move an offset backwards: a position behind the committed offset (after a
    seek back) is not committed, as in Mafka3-mode groups. At the same offset it only records a
    newer VP high watermark, which keeps the group's lag current while its reader stalls, or a
    newer leader epoch. One exception: a committed offset past the VP's high watermark as the
    committer sees it was in a tail the VP lost (a one-replica VP's power loss) and its reader
    moved back (``client.positions.rewound``): the position behind it is committed, or a quiet
    VP would show a committed offset its log never reaches again.
    """
    if offset > committed_offset:
        return True
    if offset == committed_offset:
        return high_watermark > committed_high_watermark or leader_epoch > committed_leader_epoch
    return high_watermark < committed_offset

