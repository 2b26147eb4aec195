"""``LeaseHolder`` and its runners against a tiny in-memory etcd: grants, refreshes, outages, revocation."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from dataclasses import dataclass

import pytest

from mafka4.errors import CoordinatorUnavailable
from mafka4.metadata.lease_holder import LeaseHolder, LeaseTask, LeaseThread


@dataclass(frozen=True)
class FakeLease:
    id: int


class FakeStore:
    """The lease calls of ``MetadataStore``; leases live until revoked or ``drop``ped (as if expired).

    ``put`` binds a key to a lease, as a put with a lease does: a key is under one lease at most,
    and goes with it.
    """

    def __init__(self) -> None:
        self.alive: set[FakeLease] = set()
        self.keys: dict[str, FakeLease] = {}
        self.down = False
        self.grants = self.refreshes = 0
        self._ids = itertools.count(1)

    def _answer(self) -> None:
        if self.down:
            raise CoordinatorUnavailable("etcd at fake did not answer")

    def grant_lease(self, ttl_s: int) -> FakeLease:
        self._answer()
        self.grants += 1
        lease = FakeLease(next(self._ids))
        self.alive.add(lease)
        return lease

    def refresh_lease(self, lease: FakeLease) -> int:
        self._answer()
        self.refreshes += 1
        return 5 if lease in self.alive else 0

    def revoke_lease(self, lease: FakeLease) -> None:
        self._answer()
        self.drop(lease)

    def put(self, key: str, lease: FakeLease) -> None:
        self._answer()
        self.keys[key] = lease

    def lease_keys(self, lease: FakeLease) -> frozenset[str]:
        self._answer()
        return frozenset(key for key, under in self.keys.items() if under == lease)

    def drop(self, lease: FakeLease) -> None:
        self.alive.discard(lease)
        self.keys = {key: under for key, under in self.keys.items() if under != lease}


class Clock:
    def __init__(self) -> None:
        self.ms = 100_000

    def __call__(self) -> int:
        return self.ms


def holder(store: FakeStore, clock: Clock, regrant: bool = False, ttl_s: int = 6, written: list | None = None) -> LeaseHolder:
    on_granted = (lambda lease: written.append(lease)) if written is not None else (lambda lease: None)
    return LeaseHolder(store, ttl_s, "test lease", on_granted=on_granted, regrant=regrant, now_ms=clock)


def outage(subject: LeaseHolder, store: FakeStore, clock: Clock, periods: int) -> None:
    """``periods`` periods, a third of the TTL apart, that etcd does not answer; then it is back."""
    store.down = True
    for _ in range(periods):
        clock.ms += subject.ttl_s * 1000 // 3
        with pytest.raises(CoordinatorUnavailable):
            subject.keep_alive()
    store.down = False


# --- the holder, one period at a time -----------------------------------------------------


def test_a_refreshed_lease_stays_held_and_each_period_is_due_a_third_of_the_ttl_later():
    store, clock = FakeStore(), Clock()
    subject = holder(store, clock)
    lease = subject.grant()
    assert subject.seconds_until_due() == 2.0

    for _ in range(10):
        clock.ms += 2_000
        assert subject.seconds_until_due() == 0
        subject.keep_alive()

    assert subject.lease == lease and not subject.expired()
    assert (store.grants, store.refreshes) == (1, 10)


def test_without_a_confirmed_refresh_for_a_whole_ttl_the_lease_counts_as_expired():
    store, clock = FakeStore(), Clock()
    subject = holder(store, clock)
    subject.grant()
    store.down = True

    clock.ms += 5_999
    assert not subject.expired(), "etcd renewed it at the grant: it lives a whole TTL from the grant's send"
    with pytest.raises(CoordinatorUnavailable):
        subject.keep_alive()
    assert subject.seconds_until_due() == 2.0, "an unanswered refresh still waits a period before the next"
    clock.ms += 1
    assert subject.expired()


def test_a_holder_that_does_not_regrant_stops_refreshing_a_lease_etcd_dropped_and_grants_nothing():
    store, clock = FakeStore(), Clock()
    subject = holder(store, clock)
    lease = subject.grant()
    store.drop(lease)

    clock.ms += 2_000
    subject.keep_alive()
    clock.ms += 2_000
    subject.keep_alive()

    assert subject.expired() and subject.lease == lease
    assert (store.grants, store.refreshes) == (1, 1), "the owner, not the holder, decides what to do next"


def test_a_holder_that_regrants_writes_its_keys_under_a_new_lease_once_etcd_dropped_the_old_one():
    store, clock, written = FakeStore(), Clock(), []
    subject = holder(store, clock, regrant=True, written=written)
    subject.keep_alive()  # the first period grants
    first = subject.lease
    store.drop(first)

    clock.ms += 2_000
    subject.keep_alive()

    assert written == [first, subject.lease] and subject.lease != first and subject.lease in store.alive
    assert not subject.expired()


def keeper_of(store: FakeStore, clock: Clock, written: list) -> LeaseHolder:
    """A re-granting holder of the key "liveness", as a read node's (``written``: each lease it wrote it under)."""
    def write(lease: FakeLease) -> None:
        store.put("liveness", lease)
        written.append(lease)

    return LeaseHolder(store, 6, "test lease", on_granted=write, regrant=True, keys=["liveness"], now_ms=clock)


def test_a_key_another_process_wrote_under_its_lease_is_written_again_under_the_holders_at_the_next_period():
    store, clock, written = FakeStore(), Clock(), []
    subject = keeper_of(store, clock, written)
    subject.keep_alive()
    ghost = store.grant_lease(6)
    store.put("liveness", ghost)  # a replaced process that ran on for a moment
    store.drop(ghost)  # ... and died: the key went with its lease

    clock.ms += 2_000
    subject.keep_alive()

    assert store.keys == {"liveness": subject.lease} and written == [subject.lease] * 2
    assert store.grants == 2 and subject.lease != ghost, "the holder's lease lived on: no new grant"


def test_keys_still_under_the_lease_are_not_written_again():
    store, clock, written = FakeStore(), Clock(), []
    subject = keeper_of(store, clock, written)
    subject.keep_alive()
    for _ in range(5):
        clock.ms += 2_000
        subject.keep_alive()

    assert len(written) == 1 and store.refreshes == 5


def test_a_key_lost_while_etcd_did_not_answer_the_check_is_written_at_the_next_period_that_it_answers(monkeypatch):
    store, clock, written = FakeStore(), Clock(), []
    subject = keeper_of(store, clock, written)
    subject.keep_alive()
    del store.keys["liveness"]  # deleted by hand

    def unanswered(_lease):
        raise CoordinatorUnavailable("etcd at fake did not answer")

    with monkeypatch.context() as patched:
        patched.setattr(store, "lease_keys", unanswered)  # the refresh is answered, the check is not
        clock.ms += 2_000
        with pytest.raises(CoordinatorUnavailable):
            subject.keep_alive()
    assert "liveness" not in store.keys

    clock.ms += 2_000
    subject.keep_alive()
    assert store.keys == {"liveness": subject.lease} and len(written) == 2


def test_after_an_outage_shorter_than_the_ttl_the_same_lease_is_refreshed_not_replaced():
    store, clock, written = FakeStore(), Clock(), []
    subject = holder(store, clock, regrant=True, written=written)
    subject.keep_alive()
    outage(subject, store, clock, periods=1)

    clock.ms += 2_000
    subject.keep_alive()

    assert len(written) == 1 and store.grants == 1 and not subject.expired()


def test_after_an_outage_of_a_whole_ttl_a_regranting_holder_trusts_a_new_lease_not_the_old():
    store, clock, written = FakeStore(), Clock(), []
    subject = holder(store, clock, regrant=True, written=written)
    subject.keep_alive()
    first = subject.lease
    outage(subject, store, clock, periods=3)

    clock.ms += 2_000
    subject.keep_alive()

    assert written == [first, subject.lease] and subject.lease != first
    assert store.refreshes == 0, "the old lease, perhaps gone with its keys, is not refreshed again"


def test_a_lease_whose_keys_could_not_be_written_is_not_held_and_the_next_period_grants_again():
    store, clock, written = FakeStore(), Clock(), []

    def write(lease) -> None:
        if not written:
            written.append(None)
            raise CoordinatorUnavailable("etcd at fake did not answer")
        written.append(lease)

    subject = LeaseHolder(store, 6, "test lease", on_granted=write, regrant=True, now_ms=clock)
    with pytest.raises(CoordinatorUnavailable):
        subject.keep_alive()
    assert subject.lease is None

    clock.ms += 2_000
    subject.keep_alive()
    assert subject.lease is not None and written == [None, subject.lease]


def test_a_revocation_etcd_did_not_answer_leaves_the_lease_held_so_it_can_be_tried_again():
    store, clock = FakeStore(), Clock()
    subject = holder(store, clock)
    lease = subject.grant()
    store.down = True
    with pytest.raises(CoordinatorUnavailable):
        subject.release()
    assert subject.lease == lease

    store.down = False
    subject.release()
    assert subject.lease is None and lease not in store.alive


def test_a_revoked_lease_can_be_followed_by_a_new_grant_but_a_released_holder_grants_nothing():
    store, clock = FakeStore(), Clock()
    subject = holder(store, clock, regrant=True)
    subject.keep_alive()
    subject.revoke()
    assert subject.lease is None and not store.alive

    clock.ms += 2_000
    subject.keep_alive()
    assert subject.lease in store.alive, "revoke is not the end: the next period grants again"

    subject.release()
    clock.ms += 2_000
    subject.keep_alive()
    assert subject.lease is None and not store.alive and store.grants == 2


def test_a_grant_under_way_when_the_holder_is_released_is_revoked_at_once():
    store, clock = FakeStore(), Clock()
    subject: LeaseHolder

    def release_meanwhile(_lease) -> None:
        subject.release()  # as an actor's close() while its period runs in the executor

    subject = LeaseHolder(store, 6, "test lease", on_granted=release_meanwhile, regrant=True, now_ms=clock)
    subject.keep_alive()

    assert store.grants == 1 and not store.alive and subject.lease is None


class StopSignal(BaseException):
    """Stands for the exception a stop-signal handler raises in the main thread (``StopRequested``)."""


def test_a_stop_signal_after_the_keys_were_written_revokes_the_lease_the_holder_never_held():
    store, clock = FakeStore(), Clock()

    def write_then_interrupted(_lease) -> None:
        raise StopSignal  # as SIGTERM arriving once the put went out, before the holder took the lease

    subject = LeaseHolder(store, 6, "test lease", on_granted=write_then_interrupted, regrant=True, now_ms=clock)
    with pytest.raises(StopSignal):
        subject.keep_alive()

    assert store.grants == 1 and not store.alive and subject.lease is None


# --- the runners ---------------------------------------------------------------------------


def wait_until(condition, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_the_thread_refreshes_when_due_runs_each_period_and_revokes_on_close():
    store = FakeStore()
    subject = LeaseHolder(store, 1, "test lease")  # a period every 333 ms of real time
    lease = subject.grant()
    periods = threading.Semaphore(0)
    runner = LeaseThread(subject, "test-lease", each_period=periods.release)
    runner.start()

    wait_until(lambda: store.refreshes >= 2)
    assert periods.acquire(timeout=1)
    assert runner.close()
    assert lease not in store.alive and subject.lease is None


def test_the_thread_logs_what_etcd_did_not_answer_and_goes_on(caplog):
    store = FakeStore()
    subject = LeaseHolder(store, 1, "test lease")
    subject.grant()
    store.down = True
    runner = LeaseThread(subject, "test-lease")
    runner.start()

    wait_until(lambda: "test lease not refreshed" in caplog.text)
    store.down = False
    wait_until(lambda: store.refreshes >= 1)
    assert runner.close()


def test_the_task_grants_at_once_refreshes_when_due_and_releases_on_close():
    store, written = FakeStore(), []
    subject = LeaseHolder(store, 1, "test lease", on_granted=written.append, regrant=True)

    async def scenario() -> None:
        runner = LeaseTask(subject)
        runner.start()
        while store.refreshes < 2:
            await asyncio.sleep(0.01)
        assert runner.close()
        await asyncio.sleep(0)

    asyncio.run(scenario())
    assert len(written) == 1 and written[0] not in store.alive and subject.lease is None


def test_the_task_logs_an_unanswered_period_instead_of_failing(caplog):
    store = FakeStore()
    store.down = True
    subject = LeaseHolder(store, 1, "test lease", regrant=True)

    async def scenario() -> None:
        runner = LeaseTask(subject)
        await runner.keep_alive()
        assert subject.lease is None
        store.down = False
        runner.start()  # the first period waits a third of the TTL after the failed one
        await asyncio.sleep(0.1)
        assert subject.lease is None
        while subject.lease is None:
            await asyncio.sleep(0.01)
        assert runner.close()

    asyncio.run(scenario())
    assert "test lease not refreshed: etcd at fake did not answer" in caplog.text
