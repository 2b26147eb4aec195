"""A mafka4-mode member's sync (``VirtualGroupMember.sync``) releasing a parent it read to its sealed end.

The sync carries the member's read positions; a parent read to its sealed end is released by
that sync, whose release transaction writes the commit, without a commit call first. A claim
in the same sync that relies on that commit goes ahead only once it was stored.

No etcd: ``MemoryGroupStore`` holds the keys and applies ``VirtualGroupStore``'s transactions
with their conditions (a commit only while the owner key is the member's, only forward, and
only if the offset key is unchanged since it was read; a claim only of absent owner keys while
the member key exists).
"""

from __future__ import annotations

import threading
from typing import Callable, Mapping, Sequence

from mafka4.coordinator.groups.partition_protocol import VIRTUAL_ASSIGNOR, MemberInfo
from mafka4.coordinator.groups.vp_groups import VirtualGroupMember, VirtualGroupSnapshot, VpOffset
from mafka4.coordinator.groups.vp_ownership import commit_moves_forward
from mafka4.errors import CoordinatorUnavailable
from mafka4.limits import ConsumerConfig, TopicConfig
from mafka4.virtual.layout import TopicLayout
from mafka4.virtual.ranges import HASH_SPACE, HashRange
from mafka4.virtual.vp_state import VirtualPartitionState

LEASE = object()


class MemoryGroupStore:
    """One group's member, owner and offset keys, and the topic's layout and sealed ends."""

    cluster = "c"

    def __init__(self, layout: TopicLayout, sealed: Mapping[int, int], owners: Mapping[int, str],
                 offsets: Mapping[int, int]):
        self.layout = layout
        self.states = {vp: VirtualPartitionState(vp, HashRange(0, HASH_SPACE), "r0", 0, ("r0",), ("r0",),
                                                 sealed_end_offset=sealed.get(vp))
                       for epoch in layout.epochs for vp in epoch.children}
        self.members: set[str] = set()
        self.owners = dict(owners)
        self.offsets = {vp: VpOffset(offset, offset) for vp, offset in offsets.items()}
        self.commits: list[tuple[str, dict[int, int], tuple[int, ...]]] = []  # (member, offsets, release) per call
        self.read_before: list[dict[int, int] | None] = []  # per call, the committed offsets it was given (None: none)
        self.before_commit: Callable[[], None] | None = None  # what happens between a commit's read and its txn
        self.moved: set[int] = set()  # offset keys another write changes between a commit's read and its txn
        self.answer_lost = False  # the commit's txn is applied, its answer lost
        self.claim_run_vps: int | None = None  # a claim goes in runs of this many VPs, and its second is refused

    def snapshot(self, group: str, topic: str, config: TopicConfig) -> VirtualGroupSnapshot:
        members = tuple(MemberInfo(member, topic, VIRTUAL_ASSIGNOR) for member in sorted(self.members))
        return VirtualGroupSnapshot(members, dict(self.owners), dict(self.offsets), self.layout, dict(self.states),
                                    dict.fromkeys(self.offsets, 1))

    def commit(self, group: str, member_id: str, topic: str, offsets: Mapping[int, VpOffset],
               release: Sequence[int] = (), committed_before=None) -> tuple[set[int], set[int]]:
        self.commits.append((member_id, {vp: o.offset for vp, o in offsets.items()}, tuple(release)))
        self.read_before.append(None if committed_before is None
                                else {vp: o.offset for vp, (o, _) in committed_before.items()})
        if self.before_commit is not None:
            self.before_commit()
        written, lost = set(), set()
        for vp, offset in sorted(offsets.items()):
            before = self.offsets.get(vp)
            if before is not None and not commit_moves_forward(offset.offset, offset.high_watermark,
                                                               before.offset, before.high_watermark,
                                                               offset.leader_epoch, before.leader_epoch):
                continue
            if self.owners.get(vp) != member_id:
                lost.add(vp)
            elif vp not in self.moved:
                self.offsets[vp] = offset
                written.add(vp)
        for vp in release:
            if self.owners.get(vp) == member_id:
                del self.owners[vp]
        if self.answer_lost:
            raise CoordinatorUnavailable("etcd at memory: the answer was lost")
        return written, lost

    def claim(self, group: str, member_id: str, topic: str, vps: list[int], lease) -> dict[int, VpOffset | None] | None:
        if self.claim_run_vps is not None:
            vps = vps[:self.claim_run_vps]
        if member_id not in self.members or any(vp in self.owners for vp in vps):
            return None
        self.owners.update({vp: member_id for vp in vps})
        return {vp: self.offsets.get(vp) for vp in vps}


class MemoryMembership:
    """The member key in the store, under a lease that never lapses unless a test drops it."""

    def __init__(self, store: MemoryGroupStore, group, member: MemberInfo, config, watched, on_events, overdue,
                 recheck=None):
        self._store, self._member_id = store, member.member_id
        self.changed = threading.Event()
        self.lease = LEASE

    def join(self) -> None:
        self.register()
        self.changed.set()

    def register(self) -> None:
        self._store.members.add(self._member_id)

    def leave(self, release_owned: Callable[[], None]) -> None:
        release_owned()
        self._store.members.discard(self._member_id)


def member(store: MemoryGroupStore, member_id: str) -> VirtualGroupMember:
    subject = VirtualGroupMember(store, "g", "orders", TopicConfig(read_mode="mafka4"), member_id, ConsumerConfig(),
                                 MemoryMembership)
    subject.join()
    return subject


def positions(**offsets: int) -> dict[int, VpOffset]:
    return {int(vp[1:]): VpOffset(offset, offset) for vp, offset in offsets.items()}


def split_group() -> tuple[MemoryGroupStore, VirtualGroupMember, VirtualGroupMember]:
    """VP 0 split into 1 and 2, sealed at 60; a owns it and committed 40; b joined (the split's reason)."""
    layout = TopicLayout.initial(2, 1)
    layout = layout.append(layout.plan_split(0, (100, 100), (100, 100)))
    store = MemoryGroupStore(layout, sealed={0: 60}, owners={}, offsets={0: 40})
    a, b = member(store, "a"), member(store, "b")
    a.sync({})
    assert store.owners == {0: "a"}
    return store, a, b


def test_a_sync_with_the_parent_read_to_its_sealed_end_commits_and_releases_it_and_claims_a_child():
    store, a, b = split_group()
    assert not b.sync(positions(v0=60)).claimed, "the children wait; b's position of a's VP counts for nothing"
    store.commits.clear()
    a.sync(positions(v0=59))
    assert not store.commits and store.owners == {0: "a"}, "not read to its end: kept, and a sync commits nothing"
    result = a.sync(positions(v0=60))
    assert store.commits == [("a", {0: 60}, (0,))], "one transaction commits and releases the parent"
    assert store.read_before[-1] == {0: 40}, "against the committed offsets the sync read: no read of its own"
    assert store.offsets[0].offset == 60 and 0 not in store.owners
    assert result.revoked == (0,) and result.claimed == {1: None} and a.owned == {1}, "a child claimed in that sync"
    assert b.sync({}).claimed == {2: None}, "the other child: b sees the stored commit"


def test_a_join_traced_release_sync_stamps_its_read_and_its_release_transaction():
    """``sync_read`` / ``release_written`` (``mafka4.join_trace``): of a release sync's time, the
    snapshot's round trip and the release's, before the claims that follow in the same sync."""
    from mafka4.join_trace import JOIN_TRACES

    store, a, _ = split_group()
    JOIN_TRACES.start("orders")
    try:
        a.sync(positions(v0=60))
        rows = [(hop, who, detail) for hop, _, who, detail in JOIN_TRACES.take("orders")["rows"]]
    finally:
        JOIN_TRACES.stop("orders")
    assert rows == [("sync_read", "a", ""), ("release_written", "a", "0")]


def test_a_child_is_not_claimed_on_a_commit_the_release_did_not_store():
    for lost_how in ("the owner key lapsed, the member key was written again", "the offset key moved"):
        store, a, _ = split_group()
        if lost_how == "the offset key moved":
            store.moved = {0}
        else:
            store.before_commit = lambda: store.owners.pop(0)
        result = a.sync(positions(v0=60))
        assert result.revoked == (0,) and not result.claimed, lost_how
        assert store.offsets[0].offset == 40 and not {1, 2} & store.owners.keys(), lost_how
        assert a.changed.is_set(), f"{lost_how}: the next sync plans on what etcd holds"
        store.moved = set()
        assert a.sync({}).claimed == {0: VpOffset(40, 40)}, f"{lost_how}: the parent is read again from its commit"


def test_a_release_whose_answer_was_lost_is_found_applied_and_the_child_claimed_by_the_next_sync():
    store, a, _ = split_group()
    store.answer_lost = True
    result = a.sync(positions(v0=60))
    assert result.snapshot is None and result.revoked == (0,) and not result.claimed and a.changed.is_set()
    assert store.offsets[0].offset == 60 and not store.owners
    store.answer_lost = False
    assert a.sync({}).claimed == {1: None}


def test_a_merged_child_is_claimed_once_both_parents_are_stored_consumed():
    layout = TopicLayout.initial(2, 2)
    layout = layout.append(layout.plan_merge(0, 1, (100, 100), (100, 100)))  # VPs 0 + 1 -> 2
    store = MemoryGroupStore(layout, sealed={0: 50, 1: 70}, owners={}, offsets={0: 10, 1: 20})
    a, b = member(store, "a"), member(store, "b")
    a.sync({})
    b.sync({})
    assert store.owners == {0: "a", 1: "b"}
    assert not a.sync(positions(v0=50)).claimed, "b has not read VP 1 to its end"
    assert store.offsets[0].offset == 50 and store.owners == {1: "b"}
    assert not b.sync(positions(v1=70)).claimed and store.offsets[1].offset == 70 and not store.owners
    assert a.sync({}).claimed == {2: None}


def test_a_member_owning_both_parents_claims_the_merged_child_only_if_both_commits_were_stored():
    layout = TopicLayout.initial(2, 2)
    layout = layout.append(layout.plan_merge(0, 1, (100, 100), (100, 100)))
    for moved, claimed in (((), {2: None}), ((1,), {})):
        store = MemoryGroupStore(layout, sealed={0: 50, 1: 70}, owners={}, offsets={0: 10, 1: 20})
        a = member(store, "a")
        a.sync({})
        store.moved = set(moved)
        result = a.sync(positions(v0=50, v1=70))
        assert result.revoked == (0, 1) and result.claimed == claimed, moved


def test_a_claim_cut_short_between_its_runs_keeps_the_vps_it_claimed_and_the_next_sync_claims_the_rest():
    """A claim too large for one etcd transaction goes in runs; a refused run ends it."""
    store = MemoryGroupStore(TopicLayout.initial(1, 4), sealed={}, owners={}, offsets={2: 7})
    store.claim_run_vps = 2
    alone = member(store, "a")
    first = alone.sync({})
    assert (first.claimed, first.owned) == ({0: None, 1: None}, (0, 1)) and alone.changed.is_set()
    store.claim_run_vps = None
    second = alone.sync({})
    assert second.claimed == {2: VpOffset(7, 7), 3: None} and second.owned == (0, 1, 2, 3)
