"""A coordinator's one lease and shared watches for the members it hosts (``coordinator.groups.group_hub``).

Against the in-memory etcd of ``test_group_membership``; the hub's lease thread runs in real time
with the shortest TTL allowed (a period every 2/3 s).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from mafka4.coordinator.groups.group_hub import GroupHub
from mafka4.coordinator.groups.partition_protocol import MemberInfo
from mafka4.limits import ConsumerConfig
from mafka4.metadata import keys
from mafka4.metadata.store import WatchEvent
from test_group_membership import FakeStore, wait_until

CONFIG = ConsumerConfig(member_lease_ttl_s=2)
GROUP_PREFIX = keys.group_prefix("c", "g")
TOPIC_PREFIX = "p/topic/"


@dataclass(frozen=True)
class Item:
    key: str
    value: dict
    mod_revision: int


class HubStore(FakeStore):
    """The fake etcd, with what a hub's members also call: deletes, prefix reads and watch events."""

    def __init__(self):
        super().__init__()
        self.callbacks: dict[int, object] = {}
        self.refreshes = 0

    def refresh_lease(self, lease) -> int:
        self.refreshes += 1
        return super().refresh_lease(lease)

    def watch_prefix(self, prefix: str, on_events, on_broken) -> int:
        watch_id = super().watch_prefix(prefix, on_events, on_broken)
        self.callbacks[watch_id] = on_events
        return watch_id

    def event(self, key: str) -> None:
        for watch_id, (prefix, _) in list(self.watches.items()):
            if key.startswith(prefix):
                self.callbacks[watch_id]([WatchEvent(key, {}, 1)])

    def delete(self, key: str) -> bool:
        self._answer()
        return self.values.pop(key, None) is not None

    def delete_if(self, key: str, mod_revision: int) -> bool:
        return self.delete(key)

    def get_prefix(self, prefix: str) -> list[Item]:
        self._answer()
        return [Item(key, value, 1) for key, (value, _) in sorted(self.values.items()) if key.startswith(prefix)]


class Hosted:
    """A member hosted by the hub, as a group protocol holds it."""

    def __init__(self, hub: GroupHub, store: HubStore, member_id: str, overdue=lambda: False):
        self.events: list[WatchEvent] = []
        self.changed = threading.Event()
        make = hub.membership(self.changed)
        self.membership = make(store, "g", MemberInfo(member_id, "orders", "range"), CONFIG,
                               [GROUP_PREFIX, TOPIC_PREFIX], self.events.extend, overdue)
        self.key = keys.group_member("c", "g", member_id)


def test_members_share_one_lease_and_one_watch_per_prefix_and_each_gets_every_event():
    store = HubStore()
    hub = GroupHub(store, "n0", ttl_s=2)
    first, second = Hosted(hub, store, "m1"), Hosted(hub, store, "m2")
    first.membership.join()
    second.membership.join()
    try:
        assert store.values[first.key][1] == store.values[second.key][1] == hub.held_lease
        assert sorted(prefix for prefix, _ in store.watches.values()) == [GROUP_PREFIX, TOPIC_PREFIX]
        store.event(f"{TOPIC_PREFIX}orders/split_epochs/1")
        assert len(first.events) == len(second.events) == 1
        first.membership.leave(lambda: None)
        assert first.key not in store.values and len(store.watches) == 2, "the other still needs both watches"
        second.membership.leave(lambda: None)
        assert second.key not in store.values and not store.watches
    finally:
        hub.close()


def test_a_watch_that_ended_is_set_up_again_and_wakes_its_members():
    store = HubStore()
    hub = GroupHub(store, "n0", ttl_s=2)
    member = Hosted(hub, store, "m1")
    member.membership.join()
    try:
        member.changed.clear()
        store.break_watches()
        assert member.changed.is_set() and not store.watches
        member.changed.clear()
        wait_until(lambda: len(store.watches) == 2)
        assert member.changed.is_set(), "an event may have been missed meanwhile"
    finally:
        member.membership.leave(lambda: None)
        hub.close()


def test_an_idle_member_is_not_woken_by_the_lease_refreshes():
    store = HubStore()
    hub = GroupHub(store, "n0", ttl_s=2)
    member = Hosted(hub, store, "m1")
    member.membership.join()
    try:
        member.changed.clear()
        refreshed = store.refreshes
        wait_until(lambda: store.refreshes >= refreshed + 2)  # the lease thread's periods, 2/3 s each
        assert not member.changed.is_set()
    finally:
        member.membership.leave(lambda: None)
        hub.close()


def test_an_overdue_member_is_dropped_with_its_owner_keys_and_registers_again():
    store, overdue = HubStore(), threading.Event()
    hub = GroupHub(store, "n0", ttl_s=2)
    late, other = Hosted(hub, store, "m1", overdue.is_set), Hosted(hub, store, "m2")
    late.membership.join()
    other.membership.join()
    mine, theirs = keys.group_owner("c", "g", "orders", 0), keys.group_vp_owner("c", "g", "orders", 1)
    store.put(mine, {"member_id": "m1", "generation": 1}, lease=hub.held_lease)
    store.put(theirs, {"member_id": "m2"}, lease=hub.held_lease)
    try:
        overdue.set()
        wait_until(lambda: late.membership.lease is None)
        assert late.key not in store.values and mine not in store.values
        assert other.key in store.values and theirs in store.values
        overdue.clear()
        late.membership.register()  # what the protocol's next sync does when it finds its key gone
        assert store.values[late.key][1] == hub.held_lease == late.membership.lease
    finally:
        late.membership.leave(lambda: None)
        other.membership.leave(lambda: None)
        hub.close()


def test_a_lapsed_lease_is_granted_again_and_every_member_woken_to_register_again():
    store = HubStore()
    hub = GroupHub(store, "n0", ttl_s=2)
    member = Hosted(hub, store, "m1")
    member.membership.join()
    try:
        first = hub.held_lease
        member.changed.clear()
        store.revoke_lease(first)  # etcd dropped it (its keys with it)
        wait_until(lambda: hub.held_lease not in (None, first))
        assert member.changed.is_set() and member.key not in store.values
    finally:
        member.membership.leave(lambda: None)
        hub.close()


def test_closing_the_hub_revokes_its_lease_and_ends_its_watches():
    store = HubStore()
    hub = GroupHub(store, "n0", ttl_s=2)
    member = Hosted(hub, store, "m1")
    member.membership.join()
    hub.close()
    assert member.key not in store.values and not store.watches and not store.leases
