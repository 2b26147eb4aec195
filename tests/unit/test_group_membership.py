"""The membership both group protocols share: the member key under a lease, kept alive, watched, left.

Against an in-memory etcd; the lease thread runs in real time with the shortest TTL allowed
(a period every 2/3 s).
"""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass

import pytest

from mafka4.coordinator.groups.membership import GroupMembership, PendingChange
from mafka4.coordinator.groups.partition_protocol import MemberInfo
from mafka4.errors import CoordinatorUnavailable
from mafka4.limits import ConsumerConfig
from mafka4.metadata import keys

MEMBER = MemberInfo("m0", "orders", "range")
MEMBER_KEY = keys.group_member("c", "g", "m0")
CONFIG = ConsumerConfig(member_lease_ttl_s=2)
WAIT_S = 10


@dataclass(frozen=True)
class FakeLease:
    id: int


class FakeStore:
    """The calls a membership makes: leases, puts under them (deleted with them), prefix watches."""

    cluster = "c"

    def __init__(self) -> None:
        self.values: dict[str, tuple[dict, FakeLease | None]] = {}
        self.leases: set[FakeLease] = set()
        self.watches: dict[int, tuple[str, object]] = {}
        self.down = False
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    def _answer(self) -> None:
        if self.down:
            raise CoordinatorUnavailable("etcd at fake did not answer")

    def grant_lease(self, ttl_s: int) -> FakeLease:
        self._answer()
        lease = FakeLease(next(self._ids))
        self.leases.add(lease)
        return lease

    def refresh_lease(self, lease: FakeLease) -> int:
        self._answer()
        return 2 if lease in self.leases else 0

    def revoke_lease(self, lease: FakeLease) -> None:
        self._answer()
        with self._lock:
            self.leases.discard(lease)
            for key in [k for k, (_, bound) in self.values.items() if bound == lease]:
                del self.values[key]

    def put(self, key: str, value: dict, lease: FakeLease | None = None) -> int:
        self._answer()
        with self._lock:
            self.values[key] = (value, lease)
        return 1

    def watch_prefix(self, prefix: str, on_events, on_broken) -> int:
        self._answer()
        watch_id = next(self._ids)
        self.watches[watch_id] = (prefix, on_broken)
        return watch_id

    def cancel_watch(self, watch_id: int) -> None:
        self.watches.pop(watch_id, None)

    def break_watches(self) -> None:
        for _, on_broken in list(self.watches.values()):
            on_broken()


def membership(store: FakeStore, overdue=lambda: False, prefixes=("p/group/", "p/topic/")) -> GroupMembership:
    return GroupMembership(store, "g", MEMBER, CONFIG, list(prefixes), lambda events: None, overdue)


def wait_until(condition) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_join_puts_the_member_key_under_the_members_lease_and_watches_every_prefix():
    store = FakeStore()
    subject = membership(store)
    subject.join()
    try:
        assert store.values[MEMBER_KEY] == (MEMBER.to_json(), subject.lease)
        assert sorted(prefix for prefix, _ in store.watches.values()) == ["p/group/", "p/topic/"]
        assert subject.changed.is_set(), "a new member syncs at once"
    finally:
        subject.leave(lambda: None)


def test_each_refresh_wakes_the_consumer_and_an_ended_watch_is_set_up_again():
    store = FakeStore()
    subject = membership(store)
    subject.join()
    try:
        subject.changed.clear()
        store.break_watches()
        assert subject.changed.is_set() and not store.watches
        subject.changed.clear()
        wait_until(subject.changed.is_set)
        wait_until(lambda: len(store.watches) == 2)
        assert store.values[MEMBER_KEY][1] in store.leases
    finally:
        subject.leave(lambda: None)


def test_an_overdue_member_revokes_its_lease_and_a_new_registration_holds_a_new_one():
    store, overdue = FakeStore(), threading.Event()
    subject = membership(store, overdue=overdue.is_set)
    subject.join()
    try:
        first = subject.lease
        overdue.set()
        wait_until(lambda: subject.lease is None)
        assert MEMBER_KEY not in store.values and first not in store.leases
        overdue.clear()

        subject.register()  # what the protocol's next sync does when it finds its key gone
        assert store.values[MEMBER_KEY] == (MEMBER.to_json(), subject.lease) and subject.lease != first
    finally:
        subject.leave(lambda: None)


def test_a_lapsed_lease_is_left_for_the_protocols_sync_to_notice_not_replaced_behind_its_back():
    store = FakeStore()
    subject = membership(store)
    subject.join()
    try:
        lapsed = subject.lease
        store.revoke_lease(lapsed)  # as etcd after the lease expired
        time.sleep(2 * CONFIG.member_lease_ttl_s / 3)
        assert subject.lease == lapsed and MEMBER_KEY not in store.values
    finally:
        subject.leave(lambda: None)


def test_leave_releases_what_is_owned_before_it_revokes_the_lease_and_ends_the_watches():
    store = FakeStore()
    subject = membership(store)
    subject.join()
    lease, seen = subject.lease, []

    subject.leave(lambda: seen.append(lease in store.leases))

    assert seen == [True], "commits and releases happen while the member still holds its keys"
    assert lease not in store.leases and MEMBER_KEY not in store.values and not store.watches


def test_when_the_final_commit_fails_leave_does_not_revoke_and_the_lease_expires_by_itself():
    store = FakeStore()
    subject = membership(store)
    subject.join()
    lease = subject.lease

    def commit_fails() -> None:
        raise CoordinatorUnavailable("etcd at fake did not answer")

    with pytest.raises(CoordinatorUnavailable):
        subject.leave(commit_fails)
    assert lease in store.leases and not store.watches


def test_a_member_that_failed_to_join_can_leave():
    store = FakeStore()
    store.down = True
    subject = membership(store)
    with pytest.raises(CoordinatorUnavailable):
        subject.join()
    store.down = False

    subject.leave(lambda: None)
    assert not store.values and not store.watches


def test_the_rebalance_timeout_runs_from_the_first_change_seen_since_the_last_sync():
    now = [100.0]
    pending = PendingChange(clock=lambda: now[0])
    now[0] += 3600
    assert not pending.overdue(1500), "no change: a member that does not poll stays, however long"
    pending.seen()
    now[0] += 1.0
    pending.seen()  # a later change does not restart the clock
    now[0] += 0.4
    assert not pending.overdue(1500)
    now[0] += 0.2
    assert pending.overdue(1500), "1.6 s after the first change"
    pending.synced()
    assert not pending.overdue(1500)
