"""A member's picture of its group (``coordinator.groups.vp_pictures.WatchedGroup``): a read with the
watch events since applied holds what a fresh read would, and plans on it as a fresh read does.

No etcd: a dict of keys stands for etcd; each write to it is also a ``WatchEvent``, and a
"fresh read" parses the dict as ``VirtualGroupStore.snapshot`` parses etcd's answer.
"""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from mafka4.coordinator.groups.partition_protocol import VIRTUAL_ASSIGNOR, MemberInfo
from mafka4.coordinator.groups.vp_groups import VirtualGroupSnapshot, VpOffset
from mafka4.coordinator.groups.vp_ownership import plan_ownership
from mafka4.coordinator.groups.vp_pictures import Applied, WatchedGroup
from mafka4.limits import GROUP_PICTURE_ENTRIES_MAX, VirtualConfig
from mafka4.metadata import keys
from mafka4.metadata.store import WatchEvent
from mafka4.virtual.layout import TopicLayout
from mafka4.virtual.vp_state import VirtualPartitionState, epoch_from_json, epoch_to_json

CONFIG = VirtualConfig()
PARTITIONS = 2
MEMBERS = ("a", "b", "c", "d")
MEMBERS_PREFIX = keys.group_members_prefix("c", "g")
OWNERS_PREFIX = keys.group_vp_owners_prefix("c", "g")
OFFSETS_PREFIX = keys.group_vp_offsets_prefix("c", "g")
EPOCHS_PREFIX = keys.split_epochs_prefix("c", "orders")
STATES_PREFIX = keys.virtual_partitions_prefix("c", "orders")


def state_json(vp: int, layout: TopicLayout, sealed: int | None = None, retired: bool = False,
               risr: tuple[str, ...] = ("r0",)) -> dict:
    hash_range = next(r for epoch in layout.epochs for r, v in epoch.ranges.items() if v == vp)
    return VirtualPartitionState(vp, hash_range, "r0", 0, ("r0", "r1"), risr, sealed, retired).to_json()


class Etcd:
    """The keys of group ``g`` and topic ``orders``; every write is also recorded as a watch event."""

    def __init__(self, virtual_partitions: int = 2):
        self.values: dict[str, object] = {}
        self.events: list[WatchEvent] = []
        self.layout = TopicLayout.initial(PARTITIONS, virtual_partitions, CONFIG)
        for epoch in self.layout.epochs:
            self.put(keys.split_epoch("c", "orders", epoch.epoch), epoch_to_json(epoch))
        for vp in self.layout.current.ranges.vp_ids:
            self.put(keys.virtual_partition("c", "orders", vp), state_json(vp, self.layout))

    def put(self, key: str, value) -> None:
        self.values[key] = value
        self.events.append(WatchEvent(key, value, len(self.events) + 1))

    def delete(self, key: str) -> None:
        self.values.pop(key, None)
        self.events.append(WatchEvent(key, None, len(self.events) + 1))

    def read(self) -> VirtualGroupSnapshot:
        """What ``VirtualGroupStore.snapshot`` makes of these keys."""
        members, owners, offsets, epochs, states = [], {}, {}, [], {}
        for key, value in sorted(self.values.items()):
            if key.startswith(MEMBERS_PREFIX):
                members.append(MemberInfo(value["member_id"], value["topic"], value["assignor"]))
            elif (parsed := keys.parse_group_partition(OWNERS_PREFIX, key)) is not None and parsed[0] == "orders":
                owners[parsed[1]] = value["member_id"]
            elif (parsed := keys.parse_group_partition(OFFSETS_PREFIX, key)) is not None and parsed[0] == "orders":
                offsets[parsed[1]] = VpOffset.from_json(value)
            elif key.startswith(EPOCHS_PREFIX):
                epochs.append(epoch_from_json(value))
            elif key.startswith(STATES_PREFIX):
                vp = int(key[len(STATES_PREFIX):])
                states[vp] = VirtualPartitionState.from_json(vp, value)
        layout = TopicLayout(PARTITIONS, sorted(epochs, key=lambda e: e.epoch), CONFIG)
        return VirtualGroupSnapshot(tuple(sorted(members, key=lambda m: m.member_id)), owners, offsets, layout, states)


def picture_of(snapshot: VirtualGroupSnapshot) -> WatchedGroup:
    picture = WatchedGroup("c", "g", "orders", PARTITIONS, CONFIG)
    assert picture.read(snapshot.members, snapshot.owners,
                        {vp: (o.offset, o.high_watermark) for vp, o in snapshot.offsets.items()},
                        snapshot.layout, snapshot.states)
    return picture


def assert_same(picture: WatchedGroup, snapshot: VirtualGroupSnapshot) -> None:
    seen, read = picture.view(), snapshot.view()
    assert seen.layout.epochs == read.layout.epochs
    assert dataclasses.replace(seen, layout=read.layout) == read
    for member in seen.members:
        assert plan_ownership(seen, member) == plan_ownership(read, member), member


# --- random histories ----------------------------------------------------------------------

def write(etcd: Etcd, operation: tuple) -> None:
    """Carry out one drawn operation on ``etcd`` (skipped when it does not apply to its layout)."""
    kind, a, b, c = operation
    layout = etcd.layout
    if kind == "join":
        etcd.put(keys.group_member("c", "g", a), {"member_id": a, "topic": "orders", "assignor": VIRTUAL_ASSIGNOR})
    elif kind == "leave":
        etcd.delete(keys.group_member("c", "g", a))
    elif kind == "own":
        etcd.put(keys.group_vp_owner("c", "g", "orders", b), {"member_id": a})
    elif kind == "release":
        etcd.delete(keys.group_vp_owner("c", "g", "orders", b))
    elif kind == "commit":
        etcd.put(keys.group_vp_offset("c", "g", "orders", b), {"offset": c, "member_id": a, "high_watermark": c + b})
    elif kind == "split":
        active = layout.current.ranges.vp_ids
        if len(active) < 5:
            cut = (10 * len(layout.epochs),) * PARTITIONS  # cuts only move forward
            epoch = layout.plan_split(active[b % len(active)], cut, cut)
            etcd.layout = layout = layout.append(epoch)
            etcd.put(keys.split_epoch("c", "orders", epoch.epoch), epoch_to_json(epoch))
            for child in epoch.children:
                etcd.put(keys.virtual_partition("c", "orders", child), state_json(child, layout))
    elif kind == "seal":
        closed = sorted({vp for epoch in layout.epochs for vp in epoch.parents})
        if closed:
            vp = closed[b % len(closed)]
            etcd.put(keys.virtual_partition("c", "orders", vp), state_json(vp, layout, sealed=c, retired=a == "a"))
    elif kind == "risr":
        vp = layout.current.ranges.vp_ids[b % len(layout.current.ranges.vp_ids)]
        etcd.put(keys.virtual_partition("c", "orders", vp), state_json(vp, layout, risr=("r0", "r1")))
    elif kind == "quiet":  # keys no plan reads
        etcd.put(keys.feed_position("c", "orders", 0, "r0"), {"offset": c})
        etcd.put(keys.group_vp_owner("c", "g", "payments", b), {"member_id": a})
        etcd.put(keys.group_vp_offset("c", "g", "payments", b), {"offset": c, "member_id": a})


OPERATIONS = st.tuples(st.sampled_from(["join", "join", "leave", "own", "release", "commit", "split", "seal", "risr",
                                        "quiet"]),
                       st.sampled_from(MEMBERS), st.integers(0, 9), st.integers(0, 50))


@settings(max_examples=150, deadline=None)
@given(st.lists(OPERATIONS, max_size=40), st.data())
def test_a_read_with_the_events_since_applied_plans_as_a_fresh_read(operations, data):
    """Applying events then planning equals planning on a fresh read, also when the events replayed
    begin before the read (they were in flight while it ran)."""
    etcd = Etcd()
    history = []  # (events so far, snapshot) after each operation
    for operation in operations:
        history.append((len(etcd.events), etcd.read()))
        write(etcd, operation)
    history.append((len(etcd.events), etcd.read()))
    read_at = data.draw(st.integers(0, len(history) - 1), label="read after operation")
    replay_from = data.draw(st.integers(0, history[read_at][0]), label="first event replayed")
    picture = picture_of(history[read_at][1])
    for event in etcd.events[replay_from:]:
        assert picture.apply(event) is not Applied.LOST, event
    assert_same(picture, etcd.read())


# --- what the picture cannot follow ------------------------------------------------------------

def test_keys_it_does_not_know_and_unreadable_values_lose_the_picture():
    etcd = Etcd()
    picture = picture_of(etcd.read())
    lost = [WatchEvent(keys.group_generation("c", "g"), {}, 1),
            WatchEvent(keys.group_owner("c", "g", "orders", 0), {"member_id": "a"}, 2),  # a Mafka3-mode owner key
            WatchEvent(keys.topic_children_prefix("c", "orders") + "something_new", {}, 3),
            WatchEvent(STATES_PREFIX + "x", {}, 4),
            WatchEvent(keys.group_member("c", "g", "a"), {"topic": "orders"}, 5),
            WatchEvent(keys.group_vp_owner("c", "g", "orders", 1), {"member_id": 7}, 6),
            WatchEvent(keys.group_vp_offset("c", "g", "orders", 1), {"offset": "x"}, 7),
            WatchEvent(keys.split_epoch("c", "orders", 0), None, 8),
            WatchEvent(keys.split_epoch("c", "orders", 1), {"epoch": 1}, 9),
            WatchEvent(keys.virtual_partition("c", "orders", 0), {"range": [0, 1]}, 10)]
    for event in lost:
        assert picture.apply(event) is Applied.LOST, event.key


def test_keys_no_plan_reads_are_ignored():
    picture = picture_of(Etcd().read())
    for key in (keys.feed_position("c", "orders", 0, "r0"), keys.physical_partition("c", "orders", 1),
                keys.feeder_hold("c", "orders", 0, "r0"), keys.read_loss("c", "orders", 0),
                keys.group_vp_owner("c", "g", "payments", 0), keys.group_vp_offset("c", "g", "payments", 0)):
        assert picture.apply(WatchEvent(key, {"member_id": "a"}, 1)) is Applied.IGNORED, key


def test_a_picture_past_its_bound_is_not_used():
    etcd = Etcd()
    picture = picture_of(etcd.read())
    room = GROUP_PICTURE_ENTRIES_MAX - picture.entries()
    for index in range(room):
        assert picture.apply(WatchEvent(keys.group_member("c", "g", f"m{index:05}"), {"member_id": f"m{index:05}"},
                                        index)) is Applied.CHANGED
    assert picture.apply(WatchEvent(keys.group_member("c", "g", "one-more"), {"member_id": "one-more"}, room)) \
        is Applied.LOST
    too_large = WatchedGroup("c", "g", "orders", PARTITIONS, CONFIG)
    snapshot = etcd.read()
    assert not too_large.read([MemberInfo(f"m{index}", "orders", VIRTUAL_ASSIGNOR)
                               for index in range(GROUP_PICTURE_ENTRIES_MAX)], {}, {}, snapshot.layout,
                              snapshot.states)
