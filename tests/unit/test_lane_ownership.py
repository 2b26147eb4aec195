"""Lanes in mafka4-mode group ownership: each lane's VPs go to its own readers, else by its fallback.

Unit cases for the rules of ``vp_ownership`` with lanes (fallback to the trunk or to nobody, the
handover to a lane reader that appears, per-lane quotas, splits for a lane's own readers), a
property test of the invariants over random layouts with lanes, and seeded random histories of
members reading random lanes, acting one at a time as the etcd shell does, that must settle on
the target with every lane balanced among its eligible members.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mafka4.coordinator.groups.vp_ownership import (FALLBACK_NONE, FALLBACK_TRUNK, GroupView, plan_ownership,
                                                  split_candidate, target_assignment, with_read_positions)
from mafka4.limits import VirtualConfig
from mafka4.virtual.layout import TRUNK, TopicLayout


def open_lane(layout: TopicLayout, lane: str) -> TopicLayout:
    return layout.append(layout.plan_open_lane(lane))


def split(layout: TopicLayout, vp: int, cut: int = 100) -> TopicLayout:
    return layout.append(layout.plan_split(vp, (cut,) * layout.partitions, (cut,) * layout.partitions))


def lanes_view(members, layout, owners=None, member_lanes=None, fallback=None, committed=None, lag=None,
               sealed=None) -> GroupView:
    return GroupView(tuple(sorted(members)), layout, sealed or {}, owners or {}, committed or {}, lag or {},
                     member_lanes={m: frozenset(lanes) for m, lanes in (member_lanes or {}).items()},
                     lane_fallback=fallback or {})


# Trunk VPs 0-3, lane "x" VP 4, lane "y" VP 5.
XY = open_lane(open_lane(TopicLayout.initial(2, 4), "x"), "y")


def old_target(view: GroupView) -> dict[int, str]:
    """The trunk-only rule as it was before lanes (sticky, quotas, ties to the smaller id): the oracle."""
    consumable, members = view.consumable(), view.members
    if not members:
        return {}
    kept = {m: [vp for vp in consumable if view.owners.get(vp) == m] for m in members}
    base, extra = divmod(len(consumable), len(members))
    order = sorted(members, key=lambda m: (-len(kept[m]), m))
    quota = {m: base + (index < extra) for index, m in enumerate(order)}
    target = {vp: m for m, vps in kept.items()
              for vp in sorted(vps, key=lambda vp: (view.layout.is_active(vp), vp))[:quota[m]]}
    counts = {m: list(target.values()).count(m) for m in members}
    for vp in consumable:
        if vp not in target:
            member = min(members, key=lambda m: (counts[m] - quota[m], m))
            target[vp], counts[member] = member, counts[member] + 1
    return target


def test_a_lane_nobody_reads_goes_to_the_trunks_readers_by_default_and_waits_with_fallback_none():
    members = ["a", "b", "c"]
    default = target_assignment(lanes_view(members, XY))
    assert set(default) == {0, 1, 2, 3, 4, 5}, "fallback trunk: the lanes' VPs are read by the trunk's members"
    counts = sorted(list(default.values()).count(m) for m in members)
    assert counts == [2, 2, 2], "the two one-VP lanes go to the trunk members with fewest trunk VPs"
    assert default == target_assignment(lanes_view(members, XY, fallback={"x": FALLBACK_TRUNK, "y": FALLBACK_TRUNK}))
    none = target_assignment(lanes_view(members, XY, fallback={"x": FALLBACK_NONE}))
    assert set(none) == {0, 1, 2, 3, 5}, "fallback none: lane x's VP waits for its own readers"
    owned = lanes_view(members, XY, owners={4: "a"}, fallback={"x": FALLBACK_NONE})
    plan = plan_ownership(owned, "a")
    assert 4 in plan.release and 4 not in plan.target, "a trunk member holding a lane that no longer falls back lets go"


def test_the_trunk_never_falls_back_to_lane_readers():
    target = target_assignment(lanes_view(["a", "b"], XY, member_lanes={"a": {"x"}, "b": {"y"}}))
    assert target == {4: "a", 5: "b"}, "the trunk's VPs have no reader: they wait"


def test_a_lane_reader_that_appears_takes_the_lanes_vp_from_the_trunk_member_through_release_and_claim():
    before = lanes_view(["a", "b"], XY, owners={0: "a", 1: "a", 2: "b", 3: "b", 4: "a", 5: "b"})
    assert target_assignment(before) == dict(before.owners)
    joined = lanes_view(["a", "b", "x1"], XY, owners=dict(before.owners), member_lanes={"x1": {"x"}})
    target = target_assignment(joined)
    assert target[4] == "x1" and all(target[vp] == before.owners[vp] for vp in (0, 1, 2, 3, 5)), "nothing else moves"
    assert plan_ownership(joined, "a").release == (4,) and plan_ownership(joined, "a").keep == (0, 1)
    assert plan_ownership(joined, "x1").waiting == (4,), "the lane reader claims only once a released it"
    released = lanes_view(["a", "b", "x1"], XY, owners={vp: m for vp, m in before.owners.items() if vp != 4},
                          member_lanes={"x1": {"x"}})
    assert plan_ownership(released, "x1").claim == (4,)
    assert split_candidate(joined) is None, "one reader, one VP: lane x needs no split"
    gone = lanes_view(["a", "b"], XY, owners={vp: m for vp, m in joined.owners.items() if vp != 4})
    assert target_assignment(gone)[4] in {"a", "b"}, "the lane reader left: the trunk's readers take its VP back"


def test_two_readers_of_a_one_vp_lane_make_the_groups_smallest_member_split_that_lanes_vp():
    members = ["a", "b", "x1", "x2"]
    readers = {"x1": {"x"}, "x2": {"x"}}
    grown = lanes_view(members, XY, owners={0: "a", 1: "a", 2: "b", 3: "b", 4: "x1"}, member_lanes=readers,
                       lag={0: 900, 1: 900, 4: 1})
    assert split_candidate(grown) == 4, "only lane x has more readers than VPs, however busy the trunk is"
    assert plan_ownership(grown, "a").split == 4, "the smallest member of the group splits, a trunk member here"
    assert all(plan_ownership(grown, m).split is None for m in members[1:]), "one member splits"
    layout = split(XY, 4)  # 4 -> 6, 7
    settling = lanes_view(members, layout, owners=dict(grown.owners), member_lanes=readers)
    assert split_candidate(settling) is None, "2 VPs for 2 readers: split once, the children wait for VP 4"
    drained = lanes_view(members, layout, owners=dict(grown.owners), member_lanes=readers, sealed={4: 30},
                         committed={4: 30})
    target = target_assignment(drained)
    assert {target[6], target[7]} == {"x1", "x2"} and 4 in plan_ownership(drained, "x1").release
    capped = lanes_view(members, open_lane(open_lane(TopicLayout.initial(2, 4, VirtualConfig(virtual_partitions_max=6)),
                                                     "x"), "y"), member_lanes=readers)
    assert split_candidate(capped) is None, "virtual_partitions_max counts every lane's VPs"


def test_members_reading_a_lane_by_fallback_never_split_it():
    trunk_members = [f"t{i}" for i in range(8)]
    many = lanes_view(trunk_members, open_lane(TopicLayout.initial(2, 8), "x"), lag={8: 10_000})
    assert split_candidate(many) is None, "8 trunk readers for 8 trunk VPs; lane x has no reader of its own"
    more = lanes_view(trunk_members + ["t8"], many.layout, lag={8: 10_000, 3: 1})
    assert split_candidate(more) == 3, "the trunk is short of VPs: a trunk VP splits, never the busy fallback lane"


def test_quotas_are_per_lane_among_its_readers():
    layout = split(split(XY, 4, 100), 5, 200)  # lane x: 6, 7; lane y: 8, 9
    layout = split(layout, 6, 300)  # lane x: 7, 10, 11
    members = ["a", "b", "c", "x1", "x2"]
    sealed = {4: 0, 5: 0, 6: 0}
    view = lanes_view(members, layout, member_lanes={"x1": {"x"}, "x2": {"x"}}, sealed=sealed)
    target = target_assignment(view)
    assert set(target) == {0, 1, 2, 3, 7, 8, 9, 10, 11}
    lane_x = sorted(target[vp] for vp in (7, 10, 11))
    assert lane_x in (["x1", "x1", "x2"], ["x1", "x2", "x2"]), "lane x: 3 VPs over its 2 readers"
    trunk = [target[vp] for vp in (0, 1, 2, 3)]
    assert sorted(trunk.count(m) for m in "abc") == [1, 1, 2], "the trunk: 4 VPs over its 3 readers"
    lane_y = [target[vp] for vp in (8, 9)]
    assert set(lane_y) <= set("abc") and len(set(lane_y)) == 2, "lane y falls back: 2 VPs to 2 of the trunk's readers"
    busiest = {m for m in "abc" if trunk.count(m) == 2}
    assert not set(lane_y) & busiest, "the fallback lane goes to the trunk members with fewer VPs"


def test_a_member_reading_two_lanes_reads_both():
    view = lanes_view(["a", "xy"], XY, member_lanes={"xy": {"x", "y"}})
    target = target_assignment(view)
    assert target == {0: "a", 1: "a", 2: "a", 3: "a", 4: "xy", 5: "xy"}
    both = lanes_view(["a", "xy", "y"], XY, owners=dict(target), member_lanes={"xy": {"x", "y"}, "y": {"y"}})
    assert target_assignment(both)[5] == "xy", "sticky: lane y's one VP stays with a reader of it"
    reads_all = lanes_view(["a", "all"], XY, member_lanes={"all": {TRUNK, "x", "y"}})
    target = target_assignment(reads_all)
    assert sorted(target[vp] for vp in range(4)) == ["a", "a", "all", "all"] and {target[4], target[5]} == {"all"}
    assert split_candidate(lanes_view(["a", "xy"], XY, member_lanes={"xy": {"x", "y"}})) is None


def test_a_lane_not_opened_yet_is_read_by_nobody_and_splits_nothing():
    view = lanes_view(["a", "z1", "z2"], TopicLayout.initial(2, 1), member_lanes={"z1": {"z"}, "z2": {"z"}})
    assert target_assignment(view) == {0: "a"} and split_candidate(view) is None


def test_the_same_view_with_every_member_reading_the_trunk_named_plans_as_the_default():
    owners = {0: "a", 1: "a", 2: "b", 4: "b"}
    implicit = lanes_view(["a", "b", "c"], XY, owners=owners)
    explicit = lanes_view(["a", "b", "c"], XY, owners=owners, member_lanes={m: {TRUNK} for m in "abc"})
    assert all(plan_ownership(implicit, m) == plan_ownership(explicit, m) for m in "abc")


@st.composite
def lane_views(draw, trunk_only=False):
    """A layout of up to two lanes and three splits, sealed ends of closed VPs, members reading random
    lanes (or none named: the trunk), fallbacks, owners (members, a departed one or none), committed offsets."""
    layout = TopicLayout.initial(2, draw(st.integers(1, 3)), VirtualConfig(virtual_partitions_max=12))
    cut = 0
    for lane in [] if trunk_only else ["x", "y"][:draw(st.integers(0, 2))]:
        layout = open_lane(layout, lane)
    for _ in range(draw(st.integers(0, 3))):
        active = [vp for vp in layout.current.vp_ids if layout.current.range_of(vp).can_split()]
        cut += 10
        layout = split(layout, draw(st.sampled_from(active)), cut)
    vps = sorted({vp for epoch in layout.epochs for vp in epoch.children})
    sealed = {vp: draw(st.integers(0, 20)) for vp in vps if not layout.is_active(vp) and draw(st.integers(0, 3))}
    members = sorted(draw(st.sets(st.sampled_from("abcde"), min_size=1)))
    lanes = [TRUNK, *layout.current.lane_names, "z"]  # "z": a lane not open yet
    member_lanes = {} if trunk_only else {
        m: frozenset(draw(st.sets(st.sampled_from(lanes), min_size=1))) for m in members if draw(st.booleans())}
    fallback = {lane: draw(st.sampled_from([FALLBACK_TRUNK, FALLBACK_NONE]))
                for lane in layout.current.lane_names if draw(st.booleans())}
    owners, committed, lag = {}, {}, {}
    for vp in vps:
        owner = draw(st.sampled_from([*members, "gone", None]))
        if owner is not None:
            owners[vp] = owner
        if draw(st.booleans()):
            committed[vp] = max(sealed.get(vp, 10) + draw(st.integers(-5, 1)), 0)
        lag[vp] = draw(st.integers(0, 3))
    return GroupView(tuple(members), layout, sealed, owners, committed, lag, member_lanes=member_lanes,
                     lane_fallback=fallback)


def eligible(view: GroupView, lane: str) -> set[str]:
    """The members ``lane``'s VPs may go to, spelled out from the issue's rules."""
    readers = {m for m in view.members if lane in view.member_lanes.get(m, {TRUNK})}
    if readers or lane == TRUNK or view.lane_fallback.get(lane, "trunk") == "none":
        return readers
    return {m for m in view.members if TRUNK in view.member_lanes.get(m, {TRUNK})}


@settings(max_examples=400, deadline=None)
@given(lane_views())
def test_every_consumable_vp_with_an_eligible_member_goes_to_one_and_each_lane_is_balanced(view):
    target = target_assignment(view)
    consumable = view.consumable()
    assert set(target) == {vp for vp in consumable if eligible(view, view.layout.lane_of(vp))}
    for lane in (TRUNK, *view.layout.current.lane_names):
        members = eligible(view, lane)
        lane_vps = [vp for vp in consumable if view.layout.lane_of(vp) == lane]
        assert all(target.get(vp) in members for vp in lane_vps) or not members, lane
        counts = [sum(1 for vp in lane_vps if target[vp] == m) for m in members]
        assert not counts or max(counts) - min(counts) <= 1, (lane, counts)
        for vp in lane_vps:
            if view.owners.get(vp) in members and sum(1 for v in lane_vps if view.owners.get(v) == view.owners[vp]) \
                    <= len(lane_vps) // len(members):
                assert target[vp] == view.owners[vp], "sticky: an owner within every quota keeps its VPs"
    trunk_only = GroupView(tuple(m for m in view.members if TRUNK in view.lanes_of(m)), view.layout,
                           view.sealed_end_offsets, view.owners, view.committed, view.lag,
                           lane_fallback={lane: FALLBACK_NONE for lane in view.layout.current.lane_names})
    assert {vp: m for vp, m in target.items() if view.layout.lane_of(vp) == TRUNK} == target_assignment(trunk_only), \
        "the trunk's target depends on neither the lanes nor their readers"
    candidate = split_candidate(view)
    if candidate is not None:
        lane = view.layout.current.lane_of(candidate)
        readers = [m for m in view.members if lane in view.lanes_of(m)]
        assert len(readers) > len(view.layout.current.lane_ranges(view.layout.current.lane_id(lane)).vp_ids), \
            "a lane splits only for its own readers"
        assert candidate in consumable and len(view.layout.current.vp_ids) < view.layout.config.virtual_partitions_max
    plans = {m: plan_ownership(view, m) for m in view.members}
    claimed = [vp for plan in plans.values() for vp in plan.claim]
    assert len(claimed) == len(set(claimed)), "no VP is claimed by two members"
    assert sum(plan.split is not None for plan in plans.values()) <= 1


@settings(max_examples=300, deadline=None)
@given(lane_views(trunk_only=True))
def test_trunk_only_views_get_the_target_they_got_before_lanes(view):
    assert target_assignment(view) == old_target(view)


class LaneGroupModel:
    """Members reading random lanes act on fresh views one at a time; owner keys are created only
    if absent; releases commit what was read; splits and lanes opened as the topic's shell would."""

    LANES = ("x", "y", "z")

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.layout = TopicLayout.initial(2, rng.randint(1, 3), VirtualConfig(virtual_partitions_max=16))
        self.fallback = {lane: rng.choice([FALLBACK_TRUNK, FALLBACK_NONE]) for lane in self.LANES}
        self.member_lanes: dict[str, frozenset[str]] = {}
        self.owners: dict[int, str] = {}
        self.committed: dict[int, int] = {}
        self.ends: dict[int, int] = {vp: 0 for vp in self.layout.current.vp_ids}
        self.sealed: dict[int, int] = {}
        self.next_member = 0
        self.cut = 0

    def view(self) -> GroupView:
        return GroupView(tuple(sorted(self.member_lanes)), self.layout, dict(self.sealed), dict(self.owners),
                         dict(self.committed), {vp: end - self.committed.get(vp, 0) for vp, end in self.ends.items()},
                         member_lanes=dict(self.member_lanes), lane_fallback=dict(self.fallback))

    def step(self) -> None:
        self.rng.choices([self.join, self.leave, self.produce, self.act, self.consume, self.open],
                         weights=[2, 1, 4, 10, 6, 1])[0]()

    def join(self) -> None:
        if len(self.member_lanes) < 10:
            lanes = self.rng.choice([{TRUNK}, {TRUNK}, {"x"}, {"y"}, {"z"}, {"x", "y"}, {TRUNK, "x"}])
            self.member_lanes[f"m{self.next_member:02d}"] = frozenset(lanes)
            self.next_member += 1

    def leave(self) -> None:
        if self.member_lanes:
            member = self.rng.choice(sorted(self.member_lanes))
            del self.member_lanes[member]
            self.owners = {vp: m for vp, m in self.owners.items() if m != member}

    def open(self) -> None:
        """A lane's first message opens it."""
        closed = [lane for lane in self.LANES if self.layout.current.lane_id(lane) is None]
        if closed and len(self.layout.current.vp_ids) < self.layout.config.virtual_partitions_max:
            epoch = self.layout.plan_open_lane(self.rng.choice(closed))
            self.layout = self.layout.append(epoch)
            self.ends[epoch.children[0]] = 0

    def produce(self) -> None:
        for vp in self.layout.current.vp_ids:
            self.ends[vp] += self.rng.randint(0, 3)

    def consume(self) -> None:
        if self.owners:
            vp = self.rng.choice(sorted(self.owners))
            self.committed[vp] = self.ends[vp]

    def act(self, me: str | None = None) -> None:
        if not self.member_lanes:
            return
        me = me or self.rng.choice(sorted(self.member_lanes))
        positions = {vp: self.ends[vp] for vp, owner in sorted(self.owners.items()) if owner == me}
        view = with_read_positions(self.view(), me, positions)
        plan = plan_ownership(view, me)
        for vp in plan.release:
            assert self.owners.get(vp) == me
            self.committed[vp] = max(self.committed.get(vp, 0), positions[vp])
            del self.owners[vp]
        for vp in plan.claim:
            if vp not in self.owners:
                lane = self.layout.lane_of(vp)
                assert me in eligible(view, lane), f"{me} claims VP {vp} of lane {lane!r} it may not read"
                self.owners[vp] = me
        if plan.split is not None:
            self.cut += 10
            epoch = self.layout.plan_split(plan.split, (self.cut, self.cut), (self.cut, self.cut))
            self.layout = self.layout.append(epoch)
            self.sealed[plan.split] = self.ends[plan.split]
            for vp in epoch.children:
                self.ends[vp] = 0

    def settle(self) -> GroupView:
        for _ in range(500):
            before = (dict(self.owners), self.layout.current.epoch, dict(self.committed))
            order = sorted(self.member_lanes)
            self.rng.shuffle(order)
            for member in order:
                self.act(member)
            if before == (dict(self.owners), self.layout.current.epoch, dict(self.committed)):
                return self.view()
        raise AssertionError("the group never settled")


@pytest.mark.parametrize("seed", range(30))
def test_members_reading_random_lanes_settle_on_the_target_with_each_lane_balanced_and_split_for_its_readers(seed):
    model = LaneGroupModel(random.Random(seed))
    for _ in range(300):
        model.step()
    settled = model.settle()
    target = target_assignment(settled)
    assert dict(settled.owners) == target, f"seed {seed}: owners are the target once settled"
    assert set(target) == {vp for vp in settled.consumable() if eligible(settled, settled.layout.lane_of(vp))}
    current = settled.layout.current
    for lane in (TRUNK, *current.lane_names):
        members = eligible(settled, lane)
        counts = [sum(1 for vp, m in target.items() if m == member and settled.layout.lane_of(vp) == lane)
                  for member in members]
        assert not counts or max(counts) - min(counts) <= 1, f"seed {seed}: lane {lane!r} unbalanced {counts}"
        readers = [m for m in settled.members if lane in settled.lanes_of(m)]
        active = len(current.lane_ranges(current.lane_id(lane)).vp_ids)
        assert active >= len(readers) or len(current.vp_ids) >= 16, \
            f"seed {seed}: lane {lane!r} has {active} VPs for {len(readers)} readers"
