"""A consumer's membership of a group on etcd, shared by both group protocols.

Both ``partition_groups.GroupMember`` (Mafka3 mode, eager rebalance) and
``vp_groups.VirtualGroupMember`` (mafka4 mode, VP ownership) are one of these plus their
protocol steps. It owns what a member is, apart from what it owns:

* **Join.** The member key ``keys.group_member`` (the ``MemberInfo``) under a lease of the
  member's own (``member_lease_ttl_s``), and watches on the protocol's prefixes, so that a join,
  a leave or a lapsed lease wakes the members it asks something of (``changed``; the protocol
  judges each event: ``vp_wakes`` for mafka4-mode groups). The protocol binds the keys it
  claims to the same lease (``lease``), so a crashed member's claims free themselves.
* **Keep alive.** A ``LeaseThread`` refreshes the lease every third of the TTL. Each period
  it also watches again if a watch ended, and sets ``changed`` (a missed watch event must not
  stall the group). A member the protocol calls ``overdue`` (it has not synced for
  ``rebalance_timeout_ms`` after a change) revokes its own lease, so the others can proceed.
* **Lapse.** A lease etcd dropped is logged and no longer refreshed; its member key went with
  it, and the protocol's next sync, finding that, joins again (``register``) under a new lease.
  While etcd does not answer, nothing changes: the member keeps what it owns.
* **Leave.** The protocol commits and releases what it owns, then the lease is revoked
  (deleting the member key and every key bound to it); watches and thread end.

Threads: ``join``, ``register`` and ``leave`` run in the consumer's thread; the lease thread
and the watch callbacks only set ``changed``, watch again, and revoke on the rebalance timeout.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable, Protocol, Sequence

import etcd3

from mafka4.coordinator.groups.partition_protocol import MemberInfo
from mafka4.errors import CoordinatorUnavailable
from mafka4.limits import ConsumerConfig
from mafka4.metadata import keys
from mafka4.metadata.lease_holder import LeaseHolder, LeaseThread
from mafka4.metadata.store import MetadataStore, WatchEvent

logger = logging.getLogger(__name__)


class PendingChange:
    """Since when a change that asks this member to act (another member's join or leave, ...)
    has waited for its next sync: the start of its rebalance timeout.

    The watch thread marks a change ``seen``, the consumer's thread ``synced`` at each sync, and
    the lease thread asks ``overdue``. Only a change starts the clock: a member that does not
    poll while nothing changes stays in the group (the lease thread's periodic wake-ups, and
    the events of the member's own writes, are no change).
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self._clock = clock
        self._lock = threading.Lock()
        self._since: float | None = None

    def seen(self) -> None:
        with self._lock:
            if self._since is None:
                self._since = self._clock()

    def synced(self) -> None:
        with self._lock:
            self._since = None

    def overdue(self, timeout_ms: int) -> bool:
        with self._lock:
            since = self._since
        return since is not None and (self._clock() - since) * 1000 > timeout_ms


class Membership(Protocol):
    """What a group protocol's member needs of its membership (``GroupMembership``, or a coordinator's
    ``group_hub.HubMembership``)."""

    changed: threading.Event

    @property
    def lease(self) -> etcd3.Lease | None: ...

    def join(self) -> None: ...

    def register(self) -> None: ...

    def leave(self, release_owned: Callable[[], None]) -> None: ...


# (store, group, member, config, watched prefixes, on_events, overdue) -> the member's membership;
# a protocol that may leave its member asleep through an event also passes ``recheck=``, a callable
# the membership calls once a period (``vp_groups``: it wakes a member that slept through one).
MembershipFactory = Callable[..., Membership]


class GroupMembership:
    """``member``'s key in ``group``, its lease, its watches on ``watched`` and the rebalance timeout.

    ``store`` is the member's own client (its watch thread delivers ``on_events``); its
    ``cluster`` names the cluster. ``overdue`` is the protocol's rebalance-timeout rule, asked
    once a period from the lease thread. ``recheck`` is not called: every period wakes the
    member here anyway.
    """

    def __init__(self, store: MetadataStore, group: str, member: MemberInfo, config: ConsumerConfig,
                 watched: Sequence[str], on_events: Callable[[list[WatchEvent]], None], overdue: Callable[[], bool],
                 recheck: Callable[[], None] | None = None):
        self._store, self.group, self.member, self._config = store, group, member, config
        self._watched, self._on_events, self._overdue = tuple(watched), on_events, overdue
        self.changed = threading.Event()
        self._lock = threading.Lock()  # guards the watch ids, which the watch callbacks and the lease thread change
        self._watch_ids: list[int] = []
        self._left = threading.Event()
        self._holder = LeaseHolder(store, config.member_lease_ttl_s,
                                   f"group {group}: lease of member {member.member_id}", on_granted=self._write_member_key)
        self._thread = LeaseThread(self._holder, f"group-{group}-{member.member_id}", each_period=self._each_period)

    @property
    def lease(self) -> etcd3.Lease | None:
        """The member's lease; None after the rebalance timeout revoked it, until ``register``."""
        return self._holder.lease

    def join(self) -> None:
        """Watch, register and start the lease thread (raises ``CoordinatorUnavailable`` if etcd does not answer)."""
        self._watch()
        self.register()
        self._thread.start()

    def register(self) -> None:
        """Write the member key under a new lease (at join, and again after the old one lapsed)."""
        self._holder.grant()
        self.changed.set()

    def leave(self, release_owned: Callable[[], None]) -> None:
        """Quiet the background, let ``release_owned`` commit and release, revoke the lease, end watches and thread.

        Raises ``CoordinatorUnavailable`` if etcd does not answer (before the revocation, if a
        commit failed): the lease then expires by itself. Also right after a failed ``join``.
        """
        self._left.set()
        self._thread.stop()
        try:
            release_owned()
            self._holder.release()
        finally:
            with self._lock:
                watch_ids, self._watch_ids = self._watch_ids, []
            for watch_id in watch_ids:
                self._store.cancel_watch(watch_id)

    def _write_member_key(self, lease: etcd3.Lease) -> None:
        key = keys.group_member(self._store.cluster, self.group, self.member.member_id)
        self._store.put(key, self.member.to_json(), lease=lease)

    def _watch(self) -> None:
        watch_ids: list[int] = []
        try:
            for prefix in self._watched:
                watch_ids.append(self._store.watch_prefix(prefix, self._on_events, self._on_broken))
        except CoordinatorUnavailable:
            for watch_id in watch_ids:  # all or none, so that the next period watches every prefix again
                self._store.cancel_watch(watch_id)
            raise
        with self._lock:
            self._watch_ids = watch_ids

    def _on_broken(self) -> None:
        if self._left.is_set():
            return
        logger.warning("group %s: a watch of member %s ended; watching again", self.group, self.member.member_id)
        with self._lock:
            watch_ids, self._watch_ids = self._watch_ids, []
        for watch_id in watch_ids:
            self._store.cancel_watch(watch_id)
        self.changed.set()

    def _each_period(self) -> None:
        """After each refresh, on the lease thread: watch again, enforce the rebalance timeout, wake the consumer."""
        if self._holder.lease is None:
            return  # revoked on the rebalance timeout: nothing to do until the next sync registers again
        with self._lock:
            watching = bool(self._watch_ids)
        if not watching:
            self._watch()
        if self._overdue():
            logger.warning("group %s: member %s did not poll within rebalance_timeout_ms=%d after a change; leaving "
                           "the group so the others can proceed", self.group, self.member.member_id,
                           self._config.rebalance_timeout_ms)
            self._holder.revoke()
        # A missed watch event must not stall the group: sync after every refresh.
        self.changed.set()
