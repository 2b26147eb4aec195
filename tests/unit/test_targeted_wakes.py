"""Which members a join wakes (``vp_wakes.asks_to_act`` on each member's ``vp_pictures.WatchedGroup``):
only those its plan asks to act. A member whose VP is not split sleeps through the whole join.

The first test is pure: a group's picture and the writes a join makes, in the protocol's order.
The others drive ``VirtualGroupMember`` (``test_virtual_group_sync``'s in-memory store; watch
events handed in directly): the picture its sync reads, the events in flight during a sync, a
picture lost, and the periodic recheck after a quiet judgement.
"""

from __future__ import annotations

from mafka4.coordinator.groups.partition_protocol import VIRTUAL_ASSIGNOR, MemberInfo
from mafka4.coordinator.groups.vp_groups import VirtualGroupMember, VirtualGroupSnapshot
from mafka4.coordinator.groups.vp_ownership import plan_ownership
from mafka4.coordinator.groups.vp_pictures import WatchedGroup
from mafka4.coordinator.groups.vp_wakes import LastAnswer, asks_to_act
from mafka4.limits import VirtualConfig
from mafka4.metadata import keys
from mafka4.metadata.store import WatchEvent
from mafka4.virtual.layout import TopicLayout
from mafka4.virtual.ranges import HASH_SPACE, HashRange
from mafka4.virtual.vp_state import VirtualPartitionState, epoch_to_json
from tests.unit.test_virtual_group_sync import MemoryGroupStore, member

NOBODY_ACTS = LastAnswer({}, None)


def member_key(member_id: str) -> tuple[str, dict]:
    return keys.group_member("c", "g", member_id), {"member_id": member_id, "topic": "orders",
                                                    "assignor": VIRTUAL_ASSIGNOR}


def owner_key(vp: int, member_id: str | None) -> tuple[str, dict | None]:
    return keys.group_vp_owner("c", "g", "orders", vp), None if member_id is None else {"member_id": member_id}


def offset_key(vp: int, offset: int, high_watermark: int) -> tuple[str, dict]:
    return keys.group_vp_offset("c", "g", "orders", vp), {"offset": offset, "member_id": "x",
                                                          "high_watermark": high_watermark}


def state_key(vp: int, sealed: int | None = None) -> tuple[str, dict]:
    state = VirtualPartitionState(vp, HashRange(0, HASH_SPACE), "r0", 0, ("r0",), ("r0",), sealed_end_offset=sealed)
    return keys.virtual_partition("c", "orders", vp), state.to_json()


def events(*writes: tuple[str, object]) -> list[WatchEvent]:
    return [WatchEvent(key, value, revision) for revision, (key, value) in enumerate(writes, 1)]


def test_a_join_wakes_the_splitter_the_split_vps_owner_and_the_claimers_and_nobody_else():
    layout = TopicLayout.initial(2, 3)
    picture = WatchedGroup("c", "g", "orders", 2, VirtualConfig())
    picture.read([MemberInfo(m, "orders", VIRTUAL_ASSIGNOR) for m in "abc"], {0: "a", 1: "b", 2: "c"}, {1: (0, 100)}, layout,
                 {vp: VirtualPartitionState.from_json(vp, state_key(vp)[1]) for vp in range(3)})
    answered = {m: NOBODY_ACTS for m in "abcd"}

    def acting(*writes) -> set[str]:
        for event in events(*writes):
            picture.apply(event)
        return {m for m in "abcd" if m in picture.view().members and asks_to_act(picture, m, answered[m])}

    assert acting(member_key("d")) == {"a"}, "a (the smallest id) splits v1, the busiest; d's own sync follows its join"
    answered["a"] = LastAnswer({}, 1)
    assert acting() == set(), "a asked for the split: not again"
    split = layout.plan_split(1, (10, 10), (10, 10))
    children = split.children
    assert acting((keys.split_epoch("c", "orders", 1), epoch_to_json(split)),
                  *(state_key(child) for child in children)) == set(), "the children wait for their parent"
    assert acting(state_key(1, sealed=100)) == {"b"}, "b learns where its parent ends"
    answered["b"] = LastAnswer({1: 100}, 1)
    assert acting(offset_key(1, 100, 100), owner_key(1, None)) == {"b", "d"}, "the parent consumed: its children"
    assert acting(owner_key(children[0], "b"), owner_key(children[1], "d")) == set()


def test_a_group_whose_splitter_named_a_split_it_did_not_ask_for_sleeps_with_fewer_vps_than_members():
    # The end state of bench read-scale ('fixed', pair 1): 2 VPs split three times (v0 -> 2, 3;
    # v1 -> 4, 5; v2 -> 6, 7), every parent consumed, eight members. The five active VPs have one
    # owner each; three members own nothing. The smallest member's plan names the next split,
    # which its last sync did not ask for (a split was still under way: ``hosted_members``), and
    # its wake rule counts it as asked: no member acts, so no event comes, and the group waits
    # for a wake from outside (the end of that split under way).
    layout = TopicLayout.initial(2, 2)
    for parent in (0, 1, 2):
        layout = layout.append(layout.plan_split(parent, (10, 10), (10, 10)))
    assert sorted(layout.current.ranges.vp_ids) == [3, 4, 5, 6, 7]
    members, owners = "abcdefgh", {3: "c", 4: "e", 5: "h", 6: "d", 7: "f"}
    picture = WatchedGroup("c", "g", "orders", 2, VirtualConfig())
    picture.read([MemberInfo(m, "orders", VIRTUAL_ASSIGNOR) for m in members], owners, {parent: (100, 100) for parent in (0, 1, 2)}, layout,
                 {vp: VirtualPartitionState.from_json(vp, state_key(vp, sealed=100 if vp < 3 else None)[1])
                  for vp in range(8)})
    view = picture.view()
    assert plan_ownership(view, "a").split == 3, "a, the smallest id, is to split a quarter of the hash space"
    answered = {m: LastAnswer({}, 3 if m == "a" else None) for m in members}
    assert not any(asks_to_act(picture, m, answered[m]) for m in members)
    assert all(not plan_ownership(view, m).claim for m in "abg"), "the idle members have nothing to claim"
    widths = {vp: layout.current.ranges.range_of(vp).width for vp in owners}
    assert widths[3] == widths[4] == widths[5] == 2 * widths[6] == 2 * widths[7], \
        "c, e and h read twice as many of the keyed messages as d and f"


def two_members() -> tuple[MemoryGroupStore, VirtualGroupMember, VirtualGroupMember]:
    """a owns v0 and v2, b v1 and v3; each synced since, and not woken."""
    store = MemoryGroupStore(TopicLayout.initial(2, 4), sealed={}, owners={}, offsets={})
    a, b = member(store, "a"), member(store, "b")
    a.sync({}), b.sync({})
    assert store.owners == {0: "a", 1: "b", 2: "a", 3: "b"}
    a.changed.clear()
    return store, a, b


def test_a_member_is_woken_when_a_leaver_frees_a_vp_for_it_and_not_by_a_joiner_it_owes_nothing():
    store, a, _ = two_members()
    a._on_events(events(member_key("c")))
    assert not a.changed.is_set(), "c takes one of b's VPs (b holds as many as a, and a has the smaller id)"
    a._on_events(events((member_key("c")[0], None), (member_key("b")[0], None), owner_key(1, None)))
    assert a.changed.is_set(), "b's VP is free and a's to claim"


def test_a_member_that_slept_through_a_change_syncs_at_the_next_recheck_once():
    _, a, _ = two_members()
    a._recheck()
    assert not a.changed.is_set(), "nothing happened: no sync"
    a._on_events(events(member_key("c")))
    assert not a.changed.is_set()
    a._recheck()
    assert a.changed.is_set(), "the quiet judgement is checked by one sync"
    a.changed.clear()
    a._recheck()
    assert not a.changed.is_set()
    assert not a._pending_change.overdue(timeout_ms=-1), "no rebalance timeout runs for a recheck"


def test_events_in_flight_during_a_sync_are_applied_to_its_read():
    store, a, _ = two_members()
    read = store.snapshot

    def read_then_b_lapses(group, topic, config) -> VirtualGroupSnapshot:
        snapshot = read(group, topic, config)  # b is a member here
        store.members.discard("b")
        a._on_events(events((member_key("b")[0], None)))  # delivered while a syncs
        return snapshot

    store.snapshot = read_then_b_lapses
    a.sync({})
    store.snapshot = read
    a.changed.clear()
    a._on_events(events(owner_key(1, None), owner_key(3, None)))
    assert a.changed.is_set(), "a's picture has b gone, though its read had not: b's VPs freed are a's to claim"


def test_a_key_the_picture_does_not_know_wakes_and_the_filter_rules_until_the_next_sync():
    _, a, _ = two_members()
    a._on_events(events((keys.group_generation("c", "g"), {})))
    assert a.changed.is_set()
    a.changed.clear()
    a._on_events(events(member_key("c")))
    assert a.changed.is_set(), "no picture: every member key wakes, as before pictures"
    a.sync({})
    a.changed.clear()
    a._on_events(events(member_key("c")))
    assert not a.changed.is_set(), "the sync read a picture again"


def test_an_unreadable_value_of_a_key_the_rule_calls_quiet_wakes_for_a_sync_without_the_rebalance_timeout():
    _, a, _ = two_members()
    a._on_events(events(offset_key(1, 5, 9)))
    assert not a.changed.is_set(), "a commit wakes nobody"
    a._on_events(events((keys.group_vp_offset("c", "g", "orders", 1), {"offset": "five"})))
    assert a.changed.is_set() and not a._pending_change.overdue(timeout_ms=-1)
