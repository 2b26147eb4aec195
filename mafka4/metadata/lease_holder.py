"""``LeaseHolder``: one etcd lease kept alive, and the two runners that keep it.

Every keeper of a lease goes through here: the active controller, each member of a consumer
group (``membership``), the node registrations, and the liveness keys of the read nodes
and of the physical replicas. When to refresh and when a lease no longer counts is the rule of
``lease.py``; this module makes the etcd calls.

A holder either *re-grants* or it does not:

* One that re-grants keeps keys alive for as long as it runs (``on_granted`` writes them under
  each new lease): once its lease is to be treated as expired, or etcd says it is gone, the
  next period grants a new lease and writes the keys again. An etcd outage therefore costs the
  keys' absence at worst, never the keeper's life.
* One that does not (the controller, a group member) keeps refreshing the lease it was granted
  until etcd says it is gone, and leaves it to its owner to notice ``expired()`` and act: step
  down, or join again.

A holder given the ``keys`` its ``on_granted`` writes also checks, each period, that they are
still under its lease, and writes any that is not again. A key leaves a live lease when another
process writes it: a replaced read node that ran on for a moment after SIGCONT wrote its
liveness key under its own lease and died, and the key vanished with that lease while its
replacement refreshed a lease that no longer held it. Nothing else would ever write it again.

``revoke`` ends the lease (etcd deletes its keys) and leaves the holder ready for a new grant;
``release`` also stops it for good, so a period still running in another thread cannot grant a
lease behind its owner's back. A lease is forgotten only once etcd confirmed its revocation:
until then it is still held, so a failed revocation can be tried again.

Runners: ``LeaseThread`` runs ``keep_alive`` on a daemon thread of its own; ``LeaseTask`` on an
asyncio task, with the etcd calls in the loop's default executor (an actor's event loop must
not wait on etcd). Both run a period whenever one is due, log what etcd did not answer, and try
again at the next period.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Callable, Iterable

import etcd3

from mafka4.clocks import monotonic_ms
from mafka4.errors import CoordinatorUnavailable
from mafka4.metadata.lease import LeaseLife, refresh_due_ms
from mafka4.metadata.store import MetadataStore

log = logging.getLogger("mafka4.lease")


def _write_nothing(_lease: etcd3.Lease) -> None:
    pass


def _nothing() -> None:
    pass


class LeaseHolder:
    """One lease of ``ttl_s``, granted and refreshed through ``store``; safe to share between threads.

    ``name`` says whose lease it is in logs ("controller lease", "read node r0: liveness").
    ``keys``: the keys ``on_granted`` writes, kept under the lease (see the module docstring).
    """

    def __init__(self, store: MetadataStore, ttl_s: int, name: str, *,
                 on_granted: Callable[[etcd3.Lease], None] = _write_nothing, regrant: bool = False,
                 keys: Iterable[str] = (), now_ms: Callable[[], int] = monotonic_ms):
        self.store, self.ttl_s, self.name = store, ttl_s, name
        self._on_granted, self._regrant, self._now_ms = on_granted, regrant, now_ms
        self._keys = frozenset(keys)
        self._lock = threading.Lock()  # guards the fields below; etcd is called outside it
        self._lease: etcd3.Lease | None = None
        self._life: LeaseLife | None = None
        self._last_attempt_ms: int | None = None
        self._released = False

    @property
    def lease(self) -> etcd3.Lease | None:
        """The lease held (None before a grant and after a revocation); keys to bind to it go under it."""
        with self._lock:
            return self._lease

    def expired(self) -> bool:
        """True when no lease is held or the one held is to be treated as expired (``LeaseLife.expired``)."""
        with self._lock:
            life = self._life
        return life is None or life.expired(self._now_ms())

    def seconds_until_due(self) -> float:
        """How long until the next period is due (0 if it is due already)."""
        with self._lock:
            last_attempt_ms = self._last_attempt_ms
        return max(0, refresh_due_ms(last_attempt_ms, self.ttl_s) - self._now_ms()) / 1000

    def grant(self) -> etcd3.Lease:
        """Grant a new lease, write the keys under it (``on_granted``) and hold it from now on.

        Raises ``CoordinatorUnavailable`` if etcd does not answer; a lease whose keys were not
        written is not held (it expires by itself).
        """
        sent_ms = self._attempt()
        lease = self.store.grant_lease(self.ttl_s)
        try:
            self._on_granted(lease)
            with self._lock:
                released = self._released
                if not released:
                    self._lease, self._life = lease, LeaseLife.granted(self.ttl_s, sent_ms)
        except CoordinatorUnavailable:
            raise  # its keys were not written: the lease expires by itself
        except BaseException:
            # Interrupted (a stop signal raised in this thread) once the keys may be written but
            # before the lease is held, where the owner's revoke would not find it: revoke it here.
            with self._lock:
                held = self._lease is lease
            if not held:
                self._revoke_quietly(lease, "interrupted before the lease was held")
            raise
        if released:
            self._revoke_quietly(lease, "released while the grant was on its way")  # an actor closed: no keys left behind
        return lease

    def keep_alive(self) -> None:
        """One period: refresh the lease, or, if this holder re-grants, grant a new one when it needs one.

        Raises ``CoordinatorUnavailable`` if etcd does not answer; the next period tries again.
        """
        started_ms = self._attempt()
        with self._lock:
            if self._released:
                return
            lease, life = self._lease, self._life
        if lease is None:
            if self._regrant:
                self.grant()
            return  # otherwise nothing to refresh until the owner grants again
        if self._regrant and life.expired(started_ms):
            if not life.gone:  # (a lease etcd dropped was logged when it said so)
                log.warning("%s: no refresh confirmed within the lease's TTL of %d s; granting a new lease",
                            self.name, self.ttl_s)
            # Its keys may be gone with it: trust a new lease, not the hope that this one lives on.
            self.grant()
            return
        if life.gone:
            return  # nothing left to refresh; the owner sees expired()
        if self._refresh(lease, life, started_ms):
            if self._regrant:
                self.grant()
            return
        self._write_keys_lost(lease)

    def revoke(self) -> None:
        """Revoke the lease now (etcd deletes its keys); a later ``grant`` may hold a new one.

        Raises ``CoordinatorUnavailable`` if etcd does not answer; the lease is then still held.
        """
        with self._lock:
            lease = self._lease
        if lease is None:
            return
        self.store.revoke_lease(lease)
        with self._lock:
            if self._lease is lease:
                self._lease, self._life = None, None

    def release(self) -> None:
        """Stop for good (no grant or refresh from now on) and revoke the lease.

        Raises ``CoordinatorUnavailable`` if etcd does not answer: call again, or let the lease expire.
        """
        with self._lock:
            self._released = True
        self.revoke()

    def release_or_let_expire(self) -> bool:
        """``release``; False if etcd did not answer (logged: the lease then expires by itself)."""
        try:
            self.release()
            return True
        except CoordinatorUnavailable as error:
            log.warning("%s not revoked: %s", self.name, error)
            return False

    def _attempt(self) -> int:
        """Note that a period or a grant starts now: the next period is due an interval later, whatever etcd answers."""
        now_ms = self._now_ms()
        with self._lock:
            self._last_attempt_ms = now_ms
        return now_ms

    def _refresh(self, lease: etcd3.Lease, life: LeaseLife, sent_ms: int) -> bool:
        """Refresh ``lease``, sent at ``sent_ms``; True if etcd said it is gone while it is still the one held."""
        life = life.answered(sent_ms, self.store.refresh_lease(lease))
        with self._lock:
            if self._lease is not lease:
                return False  # revoked or replaced meanwhile by another thread: this answer is stale
            self._life = life
        if life.gone:
            log.warning("%s: etcd no longer holds the lease%s", self.name, "; granting a new one" if self._regrant else "")
        return life.gone

    def _write_keys_lost(self, lease: etcd3.Lease) -> None:
        """Write the keys again under ``lease`` (refreshed just now) if any of them is no longer under it."""
        if not self._keys:
            return
        lost = self._keys - self.store.lease_keys(lease)
        with self._lock:
            if self._lease is not lease or self._released:
                return  # revoked or replaced meanwhile: its keys are no longer this holder's to write
        if lost:
            log.warning("%s: %s no longer under its lease (deleted, or written by another process); writing again",
                        self.name, ", ".join(sorted(lost)))
            self._on_granted(lease)

    def _revoke_quietly(self, lease: etcd3.Lease, why: str) -> None:
        """Revoke a lease the holder does not hold (``why`` says how that came about) and its keys with it."""
        try:
            self.store.revoke_lease(lease)
        except CoordinatorUnavailable as error:
            log.warning("%s: a lease granted but not held (%s) could not be revoked (it expires by itself): %s",
                        self.name, why, error)


class LeaseThread:
    """Keeps ``holder``'s lease alive from a daemon thread: ``keep_alive``, then ``each_period``, whenever due.

    ``each_period`` is the owner's periodic work on the same thread (a group member watches
    again and checks its rebalance timeout); it is skipped in a period etcd did not answer.
    """

    def __init__(self, holder: LeaseHolder, thread_name: str, each_period: Callable[[], None] = _nothing):
        self.holder = holder
        self._each_period = each_period
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=thread_name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop the periods and wait for the one under way (the lease stays held: ``close`` also revokes it)."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()

    def close(self) -> bool:
        """Stop and release the lease; False if etcd did not answer (the lease then expires by itself)."""
        self.stop()
        return self.holder.release_or_let_expire()

    def _run(self) -> None:
        while not self._stop.wait(self.holder.seconds_until_due()):
            try:
                self.holder.keep_alive()
                self._each_period()
            except CoordinatorUnavailable as error:
                log.warning("%s not refreshed: %s", self.holder.name, error)


class LeaseTask:
    """Keeps ``holder``'s lease alive from an asyncio task; the etcd calls run in the loop's default executor."""

    def __init__(self, holder: LeaseHolder):
        self.holder = holder
        self._task: asyncio.Task | None = None

    async def keep_alive(self) -> None:
        """One period now; what etcd did not answer is logged (the next period tries again)."""
        try:
            await asyncio.get_running_loop().run_in_executor(None, self.holder.keep_alive)
        except CoordinatorUnavailable as error:
            log.warning("%s not refreshed: %s", self.holder.name, error)

    def start(self) -> None:
        """Run the periods on a task of the running loop, the first at once unless one just ran."""
        assert self._task is None, f"{self.holder.name}: started twice"
        self._task = asyncio.get_running_loop().create_task(self._run())

    def close(self) -> bool:
        """Cancel the task and release the lease; False if etcd did not answer (the lease then expires by itself).

        Blocks on etcd, as an actor's final call may: a period still running in the executor
        finds the holder released and grants nothing.
        """
        if self._task is not None:
            self._task.cancel()
        return self.holder.release_or_let_expire()

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.holder.seconds_until_due())
            await self.keep_alive()
