"""Which etcd changes wake the members of a mafka4-mode group (each wake-up costs a sync: a
read of the group and the topic's layout), and which start the rebalance timeout
(``coordinator.groups.vp_wakes``). No etcd: the watch events are handed in directly.

These members never synced, so they hold no picture of their group and ``WakeFilter`` alone
decides, as for a group too large for a picture; ``test_targeted_wakes`` covers members with one."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

from mafka4.coordinator.groups.vp_groups import VirtualGroupMember
from mafka4.coordinator.groups.vp_wakes import Wake, WakeFilter
from mafka4.limits import ConsumerConfig, TopicConfig
from mafka4.metadata import keys
from mafka4.metadata.store import WatchEvent
from mafka4.virtual.ranges import HashRange
from mafka4.virtual.vp_state import VirtualPartitionState

V1 = VirtualPartitionState(1, HashRange(0, 2**31), "r0", 0, ("r0", "r1"), ("r0",))


def member() -> VirtualGroupMember:
    store = SimpleNamespace(cluster="c")  # only its cluster name is read when events arrive
    return VirtualGroupMember(store, "g", "orders", TopicConfig(read_mode="mafka4"), "m0", ConsumerConfig())


def deliver(subject: VirtualGroupMember, *events: tuple[str, object]) -> bool:
    """Hand ``subject`` one watch delivery of (key, value) writes; whether it woke (and clear that)."""
    subject._on_events([WatchEvent(key, value, revision) for revision, (key, value) in enumerate(events, 1)])
    woke = subject.changed.is_set()
    subject.changed.clear()
    return woke


def timeout_running(subject: VirtualGroupMember) -> bool:
    return subject._pending_change.overdue(timeout_ms=-1)  # overdue at once if a change was seen


def woken(events: list[str]) -> bool:
    return deliver(member(), *((key, {}) for key in events))


def vp_key(vp: int) -> str:
    return keys.virtual_partition("c", "orders", vp)


def test_feed_positions_and_commits_do_not_wake_members():
    assert not woken([keys.feed_position("c", "orders", 0, "r0"), keys.feed_position("c", "orders", 3, "r1")])
    assert not woken([keys.group_vp_offset("c", "g", "orders", 2), keys.feed_position("c", "orders", 0, "r0")])


def test_a_reshards_bookkeeping_and_the_write_path_do_not_wake_members():
    subject = member()
    for key in (keys.feeder_hold("c", "orders", 0, "r0"), keys.physical_partition("c", "orders", 1),
                keys.read_loss("c", "orders", 0)):
        assert not deliver(subject, (key, {"owner": "x"})), key
        assert not deliver(subject, (key, None)), f"{key} deleted"
    assert not timeout_running(subject)


def test_a_new_split_epoch_wakes_members_and_starts_their_rebalance_timeout():
    subject = member()
    assert deliver(subject, (keys.feed_position("c", "orders", 0, "r0"), {}), (keys.split_epoch("c", "orders", 2), {}))
    assert timeout_running(subject)


def test_risr_and_leader_writes_of_a_vp_do_not_wake_members():
    subject = member()
    assert deliver(subject, (vp_key(1), V1.to_json()))  # the first write seen of a VP: its previous value is unknown
    subject._pending_change.synced()
    assert not deliver(subject, (vp_key(1), dataclasses.replace(V1, risr=("r0", "r1")).to_json()))
    failed_over = dataclasses.replace(V1, leader="r1", leader_epoch=1, risr=("r1",))
    assert not deliver(subject, (vp_key(1), failed_over.to_json()))
    assert not timeout_running(subject)


def test_a_sealed_end_appearing_or_a_vp_retiring_wakes_members():
    subject = member()
    deliver(subject, (vp_key(1), V1.to_json()))
    sealed = dataclasses.replace(V1, sealed_end_offset=120)
    assert deliver(subject, (vp_key(1), sealed.to_json()))
    assert timeout_running(subject)
    assert not deliver(subject, (vp_key(1), dataclasses.replace(sealed, risr=("r0", "r1")).to_json()))
    assert deliver(subject, (vp_key(1), dataclasses.replace(sealed, retired=True).to_json()))


def test_a_vp_key_deleted_wakes_members_and_so_does_its_next_write():
    subject = member()
    deliver(subject, (vp_key(1), V1.to_json()))
    assert deliver(subject, (vp_key(1), None))
    assert deliver(subject, (vp_key(1), V1.to_json()))


def test_an_unparsable_vp_value_wakes_members_and_so_does_the_write_after_it():
    subject = member()
    deliver(subject, (vp_key(1), V1.to_json()))
    assert deliver(subject, (vp_key(1), {"range": [0, 1]}))
    assert deliver(subject, (vp_key(1), V1.to_json()))


def test_one_delivery_records_every_vp_it_holds():
    """A split epoch and its children arrive in one transaction: the children's RISR writes after it are quiet."""
    subject = member()
    v2 = dataclasses.replace(V1, vp=2, hash_range=HashRange(0, 2**30))
    v3 = dataclasses.replace(V1, vp=3, hash_range=HashRange(2**30, 2**31))
    assert deliver(subject, (keys.split_epoch("c", "orders", 1), {}), (vp_key(2), v2.to_json()),
                   (vp_key(3), v3.to_json()))
    assert not deliver(subject, (vp_key(2), dataclasses.replace(v2, risr=("r0", "r1")).to_json()),
                       (vp_key(3), dataclasses.replace(v3, risr=("r0", "r1")).to_json()))


def test_members_joining_and_leaving_wake_with_the_rebalance_timeout_owner_keys_without():
    subject = member()
    own_owner_key = keys.group_vp_owner("c", "g", "orders", 1)
    assert deliver(subject, (keys.group_member("c", "g", "m0"), {"member_id": "m0"}))
    assert deliver(subject, (own_owner_key, {"member_id": "m0"}), (own_owner_key, None))
    assert deliver(subject, (keys.group_vp_owner("c", "g", "orders", 2), {"member_id": "m1"}))
    assert not timeout_running(subject)
    assert not deliver(subject, (keys.group_vp_owner("c", "g", "payments", 2), {"member_id": "m1"}))
    assert deliver(subject, (keys.group_member("c", "g", "m1"), None))
    assert timeout_running(subject)


def test_keys_the_rule_does_not_name_wake():
    """When in doubt, sync: a new kind of key below the topic or the group wakes until it is shown quiet."""
    rule = WakeFilter("c", "g", "orders", "m0")
    assert rule.wake([WatchEvent(keys.topic_children_prefix("c", "orders") + "something_new", {}, 1)]) is Wake.REBALANCE
    assert rule.wake([WatchEvent(keys.virtual_partitions_prefix("c", "orders") + "x", {}, 2)]) is Wake.REBALANCE
    assert rule.wake([WatchEvent(keys.group_generation("c", "g"), {}, 3)]) is Wake.SYNC
    assert rule.wake([]) is Wake.QUIET
