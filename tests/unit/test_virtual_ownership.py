"""Mafka4-mode group ownership: sticky target, join and leave, split of the busiest VP, parent before child.

The last test plays seeded random histories of joins, leaves, commits and splits through
every member's ``plan_ownership`` (performing releases and claims as the etcd shell does,
conditionally, with parents read to their sealed end counted as committed and a release's
commit that may fail) and checks: no VP ever has two owners, the group converges to a
balanced target covering every consumable VP, and a child is never owned before its parent's
commit at its sealed end was stored.
"""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mafka4.coordinator.groups.partition_protocol import VIRTUAL_ASSIGNOR, MemberInfo
from mafka4.coordinator.groups.vp_groups import VirtualGroupSnapshot
from mafka4.coordinator.groups.vp_ownership import (GroupView, commit_moves_forward, plan_ownership, split_candidate,
                                                  target_assignment, with_read_positions)
from mafka4.limits import VirtualConfig
from mafka4.virtual.layout import TopicLayout
from mafka4.virtual.ranges import HASH_SPACE, HashRange
from mafka4.virtual.vp_state import VirtualPartitionState


def view(members, owners=None, committed=None, lag=None, layout=None, sealed=None, retired=frozenset()) -> GroupView:
    return GroupView(tuple(sorted(members)), layout or TopicLayout.initial(2, 4), sealed or {}, owners or {},
                     committed or {}, lag or {}, frozenset(retired))


def test_a_joiner_takes_an_unowned_vp_and_nobody_else_moves():
    before = view(["a", "b", "c"], owners={0: "a", 1: "b", 2: "c"})
    target = target_assignment(before)
    assert target == {0: "a", 1: "b", 2: "c", 3: "a"}
    joined = view(["a", "b", "c", "d"], owners={0: "a", 1: "b", 2: "c", 3: "a"})
    assert target_assignment(joined) == {0: "a", 1: "b", 2: "c", 3: "d"}, "d gets a's second VP"
    plan = plan_ownership(joined, "a")
    assert (plan.keep, plan.release, plan.claim) == ((0,), (3,), ())
    assert plan_ownership(joined, "d").waiting == (3,), "d claims only after a released it"
    assert plan_ownership(joined, "b").keep == (1,) and not plan_ownership(joined, "b").release


def test_a_vp_is_handed_over_from_the_member_owning_the_most():
    two = view(["a", "b"], owners={0: "a", 1: "a", 2: "b", 3: "b"})
    assert target_assignment(two) == {0: "a", 1: "a", 2: "b", 3: "b"}
    three = view(["a", "b", "c"], owners={0: "a", 1: "a", 2: "b", 3: "b"})
    target = target_assignment(three)
    assert sorted(target.values()).count("c") == 1 and sum(1 for vp in (0, 1, 2, 3) if target[vp] != three.owners[vp]) == 1


def test_a_leavers_vps_go_to_the_others_once_its_owner_keys_are_gone():
    stale = view(["a", "b"], owners={0: "a", 1: "b", 2: "gone", 3: "gone"})
    target = target_assignment(stale)
    assert target[0] == "a" and target[1] == "b" and {target[2], target[3]} == {"a", "b"}
    assert plan_ownership(stale, "a").waiting, "the dead member's keys still exist: wait for its lease"
    freed = view(["a", "b"], owners={0: "a", 1: "b"})
    assert sorted(plan_ownership(freed, "a").claim + plan_ownership(freed, "b").claim) == [2, 3]


def test_more_members_than_vps_makes_the_smallest_member_split_the_busiest_vp():
    members = ["a", "b", "c", "d", "e"]
    owners = {0: "a", 1: "b", 2: "c", 3: "d"}
    busy = view(members, owners=owners, lag={0: 10, 1: 500, 2: 30, 3: 500})
    assert split_candidate(busy) == 1, "largest lag, then widest range, then smallest id"
    assert plan_ownership(busy, "a").split == 1
    assert all(plan_ownership(busy, m).split is None for m in members[1:]), "only one member splits"
    assert split_candidate(view(members[:4], owners=owners)) is None, "enough VPs"
    capped = view(members, owners=owners, layout=TopicLayout.initial(2, 4, VirtualConfig(virtual_partitions_max=4)))
    assert split_candidate(capped) is None, "virtual_partitions_max reached"


def split_layout(layout: TopicLayout, vp: int, cut=(100, 100)) -> TopicLayout:
    return layout.append(layout.plan_split(vp, cut, cut))


def test_children_are_owned_only_after_the_group_consumed_the_parent_to_its_sealed_end():
    layout = split_layout(TopicLayout.initial(2, 4), 1)  # VP 1 -> 4, 5
    members = ["a", "b", "c", "d", "e"]
    owners = {0: "a", 1: "b", 2: "c", 3: "d"}
    draining = view(members, owners=owners, layout=layout, committed={1: 40})
    assert set(target_assignment(draining)) == {0, 1, 2, 3}, "the parent is not sealed yet: children wait"
    assert plan_ownership(draining, "b").keep == (1,)
    assert split_candidate(draining) is None, "the split already happened: 5 active VPs for 5 members"
    sealed = view(members, owners=owners, layout=layout, committed={1: 40}, sealed={1: 60})
    assert set(target_assignment(sealed)) == {0, 1, 2, 3}, "sealed but not consumed to its end"
    consumed = view(members, owners=owners, layout=layout, committed={1: 60}, sealed={1: 60})
    target = target_assignment(consumed)
    assert set(target) == {0, 2, 3, 4, 5} and plan_ownership(consumed, "b").release == (1,)
    assert {target[4], target[5]} == {"b", "e"}, "the parent's owner and the idle member take the children"


def test_a_retired_parent_is_released_unread_and_its_children_are_owned_at_once():
    layout = split_layout(TopicLayout.initial(2, 4), 1)  # VP 1 -> 4, 5
    owners = {0: "a", 1: "b", 2: "c", 3: "d"}
    retired = view(["a", "b", "c", "d", "e"], owners=owners, layout=layout, committed={1: 10}, sealed={1: 60},
                   retired={1})
    target = target_assignment(retired)
    assert set(target) == {0, 2, 3, 4, 5}, "retention deleted the parent: nothing of it is left to read"
    assert plan_ownership(retired, "b").release == (1,)
    assert {target[4], target[5]} == {"b", "e"}


def test_a_drained_parent_stays_with_its_owner_before_its_active_vps_move():
    layout = split_layout(TopicLayout.initial(2, 2), 0)  # VP 0 -> 2, 3; active: 1, 2, 3
    busy = view(["a", "b"], owners={0: "a", 1: "a"}, layout=layout)
    target = target_assignment(busy)
    assert target[0] == "a" and target[1] == "b", "a keeps draining parent 0 and hands over active VP 1"


def test_a_groups_snapshot_carries_the_retired_vps_so_its_members_read_the_children():
    layout = split_layout(split_layout(TopicLayout.initial(2, 2), 0), 1)  # 0 -> 2, 3 and 1 -> 4, 5
    sealed = {0: 7, 1: 9}
    states = {vp: VirtualPartitionState(vp, HashRange(0, HASH_SPACE), "r0", 0, ("r0",), ("r0",),
                                        sealed_end_offset=sealed.get(vp), retired=vp == 0) for vp in range(6)}
    members = (MemberInfo("m1", "t", VIRTUAL_ASSIGNOR),)
    group_view = VirtualGroupSnapshot(members, {}, {}, layout, states).view()
    assert group_view.retired == {0}
    assert group_view.consumable() == (1, 2, 3), "retired VP 0 lets its children in; VP 1 is still to read"


@pytest.mark.parametrize("order", list(itertools.permutations(range(3))))
def test_every_member_computes_the_same_target_whatever_the_order_it_read_things_in(order):
    members = ["m1", "m2", "m3"]
    owners = {0: "m1", 1: "m1", 2: "m1", 3: "m3"}
    shuffled = dict(sorted(owners.items(), key=lambda item: order[item[0] % 3]))
    assert target_assignment(view(members, owners=shuffled)) == target_assignment(view(members, owners=owners))


class GroupModel:
    """Members acting on fresh views one at a time, owner keys created only if absent, and splits."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.layout = TopicLayout.initial(2, rng.randint(1, 4), VirtualConfig(virtual_partitions_max=12))
        self.members: list[str] = []
        self.owners: dict[int, str] = {}
        self.committed: dict[int, int] = {}
        self.ends: dict[int, int] = {vp: 0 for vp in self.layout.current.ranges.vp_ids}  # VP log end offsets
        self.sealed: dict[int, int] = {}
        self.next_member = 0
        self.cut = 0

    def view(self) -> GroupView:
        return GroupView(tuple(sorted(self.members)), self.layout, dict(self.sealed), dict(self.owners),
                         dict(self.committed), {vp: end - self.committed.get(vp, 0) for vp, end in self.ends.items()})

    def step(self) -> None:
        action = self.rng.choices([self.join, self.leave, self.produce, self.act, self.consume],
                                  weights=[2, 1, 4, 10, 6])[0]
        action()

    def join(self) -> None:
        if len(self.members) < 10:
            self.members.append(f"m{self.next_member:02d}")
            self.next_member += 1

    def leave(self) -> None:
        if self.members:
            member = self.rng.choice(self.members)
            self.members.remove(member)
            self.owners = {vp: m for vp, m in self.owners.items() if m != member}  # lease expiry or release

    def produce(self) -> None:
        for vp in self.layout.current.ranges.vp_ids:
            self.ends[vp] += self.rng.randint(0, 3)

    def consume(self) -> None:
        owned = sorted(self.owners)
        if owned:
            vp = self.rng.choice(owned)
            self.committed[vp] = self.ends[vp]

    def act(self, me: str | None = None) -> None:
        """``me`` syncs: with the positions of the VPs it read to their end, some of them closed
        parents (``with_read_positions``); the release writes their commits, each of which may
        fail (the owner key lost, the offset key moved)."""
        if not self.members:
            return
        me = me or self.rng.choice(self.members)
        positions = {vp: self.ends[vp] for vp, owner in sorted(self.owners.items())
                     if owner == me and self.rng.random() < 0.5}
        plan = plan_ownership(with_read_positions(self.view(), me, positions), me)
        written = set()
        for vp in plan.release:
            assert self.owners.get(vp) == me
            if vp in positions and self.rng.random() < 0.8 and positions[vp] > self.committed.get(vp, -1):
                self.committed[vp] = positions[vp]
                written.add(vp)
            del self.owners[vp]
        plan = plan.after_release(written)
        current = self.view()
        for vp in plan.claim:
            if vp not in self.owners:  # create only if absent
                assert vp in current.consumable(), "a claim is always of a consumable VP"
                for epoch in self.layout.epochs:
                    if vp in epoch.children:
                        assert all(self.committed.get(p, 0) >= self.sealed[p] for p in epoch.parents), \
                            "a child was claimed before its parent was consumed to its sealed end"
                self.owners[vp] = me
        if plan.split is not None:
            self.cut += 10
            epoch = self.layout.plan_split(plan.split, (self.cut, self.cut), (self.cut, self.cut))
            self.layout = self.layout.append(epoch)
            self.sealed[plan.split] = self.ends[plan.split]  # the feeders pass the cut at once here
            for vp in epoch.children:
                self.ends[vp] = 0

    def settle(self) -> GroupView:
        for _ in range(500):
            before = (dict(self.owners), self.layout.current.epoch, dict(self.committed))
            for member in list(self.members):
                for vp in [vp for vp, m in self.owners.items() if m == member]:
                    self.committed[vp] = self.ends[vp]
            order = list(self.members)
            self.rng.shuffle(order)
            for member in order:
                self.act(member)
            if before == (dict(self.owners), self.layout.current.epoch, dict(self.committed)):
                return self.view()
        raise AssertionError("the group never settled")


@pytest.mark.parametrize("seed", range(30))
def test_random_joins_and_leaves_converge_to_one_balanced_owner_per_consumable_vp(seed):
    model = GroupModel(random.Random(seed))
    for _ in range(300):
        model.step()
    for _ in range(3):
        model.join()
    settled = model.settle()
    target = target_assignment(settled)
    assert dict(settled.owners) == target, f"seed {seed}: owners are the target once settled"
    counts = [sum(1 for m in target.values() if m == member) for member in settled.members]
    assert max(counts) - min(counts) <= 1, f"seed {seed}: unbalanced {counts}"
    active = len(model.layout.current.ranges.vp_ids)
    assert active >= min(len(settled.members), 12), f"seed {seed}: {active} VPs for {len(settled.members)} members"


def test_a_parent_read_to_its_sealed_end_is_released_by_its_owners_sync_and_its_children_follow():
    layout = split_layout(TopicLayout.initial(2, 4), 1)  # VP 1 -> 4, 5
    members = ["a", "b", "c", "d", "e"]
    stored = view(members, owners={0: "a", 1: "b", 2: "c", 3: "d"}, layout=layout, committed={1: 40}, sealed={1: 60})
    assert plan_ownership(stored, "b").keep == (1,), "committed short of its sealed end: the parent is kept"
    read = with_read_positions(stored, "b", {0: 99, 1: 60, 2: 99})
    assert read.committed == {1: 60} and read.drained == {1}, "only b's own closed VP read to its end counts"
    plan = plan_ownership(read, "b")
    assert (plan.release, plan.claim, plan.drained) == ((1,), (4,), (1,)), "released and a child claimed in one sync"
    assert plan.after_release({1}) == plan
    assert (plan.after_release(set()).claim, plan.after_release(set()).release) == ((), (1,)), \
        "the commit not stored: the child is not claimed on it"
    assert with_read_positions(stored, "b", {1: 59}) == stored, "not read to its sealed end"
    assert with_read_positions(stored, "e", {1: 60}) == stored, "another member's VP: its owner commits it"


def test_a_merge_child_waits_for_both_parents_to_be_stored_consumed():
    layout = TopicLayout.initial(2, 2)
    layout = layout.append(layout.plan_merge(0, 1, (100, 100), (100, 100)))  # VPs 0 + 1 -> 2
    stored = view(["a", "b"], owners={0: "a", 1: "b"}, layout=layout, committed={0: 10, 1: 20}, sealed={0: 50, 1: 70})
    one = plan_ownership(with_read_positions(stored, "a", {0: 50}), "a")
    assert (one.release, one.claim, one.drained) == ((0,), (), (0,)), "b has not committed VP 1: no child yet"
    both = view(["a"], owners={0: "a", 1: "a"}, layout=layout, committed={0: 10, 1: 20}, sealed={0: 50, 1: 70})
    plan = plan_ownership(with_read_positions(both, "a", {0: 50, 1: 70}), "a")
    assert (plan.release, plan.claim, plan.drained) == ((0, 1), (2,), (0, 1))
    assert plan.after_release({0}).claim == (), "one parent's commit not stored: the child waits"


@st.composite
def group_views(draw):
    """A layout of up to three splits, sealed ends of closed VPs, owners (members, a departed one or
    none), committed offsets, and one member's read positions, near the sealed ends."""
    layout = TopicLayout.initial(2, draw(st.integers(1, 3)))
    for _ in range(draw(st.integers(0, 3))):
        active = [vp for vp in layout.current.ranges.vp_ids if layout.current.ranges.range_of(vp).can_split()]
        layout = split_layout(layout, draw(st.sampled_from(active)))
    vps = sorted({vp for epoch in layout.epochs for vp in epoch.children})
    sealed = {vp: draw(st.integers(0, 20)) for vp in vps if not layout.is_active(vp) and draw(st.integers(0, 3))}
    retired = frozenset(vp for vp in sealed if not draw(st.integers(0, 5)))
    members = sorted(draw(st.sets(st.sampled_from("abc"), min_size=1)))
    me = draw(st.sampled_from(members))
    owners, committed, positions = {}, {}, {}
    for vp in vps:
        owner = draw(st.sampled_from([me, me, *members, "gone", None]))
        if owner is not None:
            owners[vp] = owner
        end = sealed.get(vp, 10)
        if draw(st.booleans()):
            committed[vp] = max(end + draw(st.integers(-5, 1)), 0)
        if draw(st.integers(0, 3)):
            positions[vp] = max(end + draw(st.integers(-2, 2)), 0)
    return view(members, owners, committed, {}, layout, sealed, retired), me, positions


@settings(max_examples=300, deadline=None)
@given(group_views())
def test_read_positions_count_only_as_owned_closed_vps_drained_and_every_one_is_released(case):
    stored, me, positions = case
    read = with_read_positions(stored, me, positions)
    for vp in read.committed.keys() | stored.committed.keys():
        drained = (stored.owners.get(vp) == me and vp in positions and vp in stored.sealed_end_offsets
                   and vp not in stored.retired
                   and stored.committed.get(vp, 0) < stored.sealed_end_offsets[vp] <= positions[vp])
        assert (vp in read.drained) == drained, vp
        if drained:
            assert read.committed[vp] == positions[vp]
            assert commit_moves_forward(positions[vp], 0, stored.committed.get(vp, -1), 0), "the release writes it"
        else:
            assert read.committed.get(vp) == stored.committed.get(vp), "anything else is left as stored"
    assert read.readable() >= stored.readable(), "counting a parent consumed hides nothing"
    plan = plan_ownership(read, me)
    assert plan.drained == tuple(sorted(read.drained)) and set(plan.drained) <= set(plan.release)
    if not read.drained:
        assert plan == plan_ownership(stored, me), "nothing drained: the plan is the stored view's"
    assert plan.after_release(set(read.drained)) == plan
    if read.drained:
        short = plan.after_release(set(read.drained) - {min(read.drained)})
        assert (short.claim, short.split, short.release) == ((), None, plan.release)


def test_a_commit_moves_an_offset_forward_or_records_a_newer_high_watermark_and_never_goes_back():
    assert commit_moves_forward(11, 11, 10, 20)
    assert commit_moves_forward(10, 25, 10, 20), "same offset, newer high watermark: the lag stays current"
    assert not commit_moves_forward(10, 20, 10, 20), "nothing new"
    assert not commit_moves_forward(10, 15, 10, 20)
    assert not commit_moves_forward(9, 30, 10, 20), "a seek back is not committed"
    assert commit_moves_forward(10, 20, 10, 20, leader_epoch=3, committed_leader_epoch=2), \
        "same offset, newer epoch: a reader read it again after a lost tail was fed anew"
    assert commit_moves_forward(8, 8, 11, 20, leader_epoch=1, committed_leader_epoch=1), \
        "past the HW the committer sees: the commit was in a lost tail, and the reader moved back"

