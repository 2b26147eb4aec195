"""Which etcd changes wake the members of a mafka4-mode group (each wake-up costs a sync: a
read of the group and the topic's layout). No etcd: the watch events are handed in directly."""

from __future__ import annotations

from types import SimpleNamespace

from mafka4.coordinator.groups.vp_groups import VirtualGroupMember
from mafka4.limits import ConsumerConfig, TopicConfig
from mafka4.metadata import keys
from mafka4.metadata.store import WatchEvent


def member() -> VirtualGroupMember:
    store = SimpleNamespace(cluster="c")  # only its cluster name is read when events arrive
    return VirtualGroupMember(store, "g", "orders", TopicConfig(read_mode="mafka4"), "m0", ConsumerConfig())


def woken(events: list[str]) -> bool:
    subject = member()
    subject._on_events([WatchEvent(key, {}, 1) for key in events])
    return subject.changed.is_set()


def test_feed_positions_and_commits_do_not_wake_members():
    assert not woken([keys.feed_position("c", "orders", 0, "r0"), keys.feed_position("c", "orders", 3, "r1")])
    assert not woken([keys.group_vp_offset("c", "g", "orders", 2), keys.feed_position("c", "orders", 0, "r0")])


def test_layout_and_vp_changes_and_read_losses_wake_members():
    assert woken([keys.feed_position("c", "orders", 0, "r0"), keys.virtual_partition("c", "orders", 1)])
    assert woken([keys.split_epoch("c", "orders", 2)])
    assert woken([keys.read_loss("c", "orders", 0)])
