"""A coordinator's memberships: one lease and one watch per prefix for every member it hosts.

A member that ran its own membership (``membership.GroupMembership``) held an etcd lease, a
thread refreshing it and watches of its own. A coordinator hosting many members must not: a
thousand idle members would be a thousand leases refreshed and two thousand watches. Here:

* **One lease** (``GROUP_HUB_LEASE_TTL_S``, re-granted if it lapsed), refreshed by one thread,
  holds every hosted member's key and the keys they claim. If the coordinator dies, the lease
  runs out and its members' keys go with it, as a dead member's did. If the lease lapsed
  while the coordinator lives (etcd was away longer than the TTL), every member is woken: its
  next sync finds its key gone and registers again, under the new lease.
* **One watch per prefix** (a group's, a topic's), shared by every member that needs it and
  ended with the last of them; each event is handed to every subscriber. A watch that ended
  is set up again at the next period, and every subscriber is woken (an event may have been
  missed meanwhile). Nothing else wakes a member but a recheck (below): an idle group costs
  nothing but its members' heartbeats.
* **Liveness** is the coordinator's to judge (``frontend.group_sessions``: heartbeats). A
  member that leaves, or that the coordinator drops, deletes its own keys
  (``HubMembership.leave``/``drop``), since they do not go with a lease of their own.
* **Rechecks.** Each period every member's protocol may ask for a sync (``recheck``): a
  mafka4-mode member that slept through an event its picture judged quiet syncs once
  (``vp_groups``), so a wrong judgement delays it by a period at most. A member that slept
  through nothing is not woken.
* **The rebalance timeout** is checked each period for every member: a member that did not
  sync for ``rebalance_timeout_ms`` after a change that asks it to is dropped from the group
  (its member key and owner keys deleted), so the others can proceed; its next sync registers
  it again.

``HubMembership`` offers what ``GroupMembership`` does (``changed``, ``lease``, ``join``,
``register``, ``leave``), so both group protocols run on either.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable, Sequence

import etcd3

from mafka4.coordinator.groups.partition_protocol import MemberInfo
from mafka4.errors import CoordinatorUnavailable
from mafka4.limits import GROUP_HUB_LEASE_TTL_S, ConsumerConfig
from mafka4.metadata import keys
from mafka4.metadata.lease_holder import LeaseHolder, LeaseThread
from mafka4.metadata.store import MetadataStore, WatchEvent

logger = logging.getLogger(__name__)


class GroupHub:
    """The lease and the watches of the members hosted through ``store``; see the module docstring."""

    def __init__(self, store: MetadataStore, name: str, ttl_s: int = GROUP_HUB_LEASE_TTL_S):
        self._store = store
        self._lock = threading.Lock()  # guards the fields below
        self._subscribers: dict[str, list[HubMembership]] = {}  # prefix -> members watching it
        self._watch_ids: dict[str, int] = {}  # prefix -> its watch
        self._members: set[HubMembership] = set()
        self._holder = LeaseHolder(store, ttl_s, f"{name}: group lease", on_granted=self._granted, regrant=True)
        self._thread = LeaseThread(self._holder, f"{name}-groups", each_period=self._each_period)
        self._started = False

    def membership(self, changed: threading.Event) -> Callable[..., "HubMembership"]:
        """A membership factory for a group protocol's member (``GroupMember``'s ``membership``)."""
        def make(store: MetadataStore, group: str, member: MemberInfo, config: ConsumerConfig, watched: Sequence[str],
                 on_events: Callable[[list[WatchEvent]], None], overdue: Callable[[], bool],
                 recheck: Callable[[], None] | None = None) -> HubMembership:
            return HubMembership(self, store, group, member, config, watched, on_events, overdue, changed, recheck)

        return make

    def lease(self) -> etcd3.Lease:
        """The lease members' keys go under, granted on first use; ``CoordinatorUnavailable`` if etcd does not answer."""
        with self._lock:
            start = not self._started
            self._started = True
        if start:
            self._thread.start()
        lease = self._holder.lease
        return lease if lease is not None else self._holder.grant()

    @property
    def held_lease(self) -> etcd3.Lease | None:
        return self._holder.lease

    def close(self) -> None:
        """Stop refreshing and revoke the lease (every hosted member's keys go with it); end the watches."""
        self._thread.close()
        with self._lock:
            watch_ids, self._watch_ids, self._subscribers = list(self._watch_ids.values()), {}, {}
        for watch_id in watch_ids:
            self._store.cancel_watch(watch_id)

    # --- subscriptions -----------------------------------------------------------------------

    def subscribe(self, member: "HubMembership", prefixes: Sequence[str]) -> None:
        """Hand ``member`` every event under ``prefixes``, watching each not watched yet (``CoordinatorUnavailable``)."""
        with self._lock:
            self._members.add(member)
            for prefix in prefixes:
                self._subscribers.setdefault(prefix, []).append(member)
        self._watch_missing()

    def unsubscribe(self, member: "HubMembership") -> None:
        """Stop handing ``member`` events; end the watches nobody needs any more."""
        ended = []
        with self._lock:
            self._members.discard(member)
            for prefix, members in list(self._subscribers.items()):
                if member in members:
                    members.remove(member)
                if not members:
                    del self._subscribers[prefix]
                    if prefix in self._watch_ids:
                        ended.append(self._watch_ids.pop(prefix))
        for watch_id in ended:
            self._store.cancel_watch(watch_id)

    def _watch_missing(self) -> None:
        with self._lock:
            missing = [prefix for prefix in self._subscribers if prefix not in self._watch_ids]
        for prefix in missing:
            watch_id = self._store.watch_prefix(prefix, lambda events, p=prefix: self._deliver(p, events),
                                                lambda p=prefix: self._broken(p))
            with self._lock:
                if prefix in self._subscribers and prefix not in self._watch_ids:
                    self._watch_ids[prefix] = watch_id
                    continue
            self._store.cancel_watch(watch_id)  # unsubscribed meanwhile, or watched by another thread

    def _deliver(self, prefix: str, events: list[WatchEvent]) -> None:
        with self._lock:
            members = list(self._subscribers.get(prefix, ()))
        for member in members:
            member.on_events(events)

    def _broken(self, prefix: str) -> None:
        with self._lock:
            watch_id = self._watch_ids.pop(prefix, None)
            members = list(self._subscribers.get(prefix, ()))
        if watch_id is None:
            return
        logger.warning("the watch of %s ended; watching again at the next period", prefix)
        self._store.cancel_watch(watch_id)
        for member in members:
            member.changed.set()

    # --- the lease thread --------------------------------------------------------------------

    def _granted(self, _lease: etcd3.Lease) -> None:
        """A new lease: the keys under a lapsed one are gone, so every member syncs (and registers again)."""
        with self._lock:
            members = list(self._members)
        for member in members:
            member.changed.set()

    def _each_period(self) -> None:
        """After each refresh: watch again what ended (waking the subscribers), recheck, enforce rebalance timeouts."""
        with self._lock:
            rewatch = {member for prefix, members in self._subscribers.items() if prefix not in self._watch_ids
                       for member in members}
            members = list(self._members)
        if rewatch:
            self._watch_missing()
            for member in rewatch:
                member.changed.set()
        for member in members:
            member.recheck()
            member.enforce_rebalance_timeout()


class HubMembership:
    """One hosted member's key in ``group``, under its hub's lease and watches (``GroupMembership``'s interface)."""

    def __init__(self, hub: GroupHub, store: MetadataStore, group: str, member: MemberInfo, config: ConsumerConfig,
                 watched: Sequence[str], on_events: Callable[[list[WatchEvent]], None], overdue: Callable[[], bool],
                 changed: threading.Event, recheck: Callable[[], None] | None = None):
        self._hub, self._store, self.group, self.member, self._config = hub, store, group, member, config
        self._watched, self._on_events, self._overdue = tuple(watched), on_events, overdue
        self._recheck = recheck
        self.changed = changed
        self._registered = False
        self._left = threading.Event()

    @property
    def lease(self) -> etcd3.Lease | None:
        """The lease claims go under; None while this member is dropped (until ``register``)."""
        return self._hub.held_lease if self._registered else None

    def join(self) -> None:
        self._hub.subscribe(self, self._watched)
        try:
            self.register()
        except CoordinatorUnavailable:
            self._hub.unsubscribe(self)
            raise

    def register(self) -> None:
        """Write the member key under the hub's lease (at join, and again after it was dropped or lapsed)."""
        lease = self._hub.lease()
        self._store.put(self._member_key(), self.member.to_json(), lease=lease)
        self._registered = True
        self.changed.set()

    def leave(self, release_owned: Callable[[], None]) -> None:
        """Stop the events, let ``release_owned`` commit and release, delete the member key.

        Raises ``CoordinatorUnavailable`` if etcd does not answer: the keys then stay until the
        hub's lease ends (a coordinator's closing revokes it)."""
        self._left.set()
        self._hub.unsubscribe(self)
        release_owned()
        self._store.delete(self._member_key())

    def on_events(self, events: list[WatchEvent]) -> None:
        if not self._left.is_set():
            self._on_events(events)

    def recheck(self) -> None:
        """The protocol's periodic recheck (it may wake this member), while the member is in the group."""
        if self._recheck is not None and not self._left.is_set() and self._registered:
            self._recheck()

    def enforce_rebalance_timeout(self) -> None:
        """Drop this member from the group if a change waited for its sync for longer than the rebalance timeout."""
        if self._left.is_set() or not self._registered or not self._overdue():
            return
        logger.warning("group %s: member %s did not poll within rebalance_timeout_ms=%d after a change; dropping it "
                       "from the group so the others can proceed", self.group, self.member.member_id,
                       self._config.rebalance_timeout_ms)
        self.drop()

    def drop(self) -> None:
        """Delete the member key and the owner keys that are this member's (what the end of its own lease did)."""
        self._registered = False
        cluster, member_id = self._store.cluster, self.member.member_id
        owned = [item for prefix in (keys.group_owners_prefix(cluster, self.group),
                                     keys.group_vp_owners_prefix(cluster, self.group))
                 for item in self._store.get_prefix(prefix)
                 if isinstance(item.value, dict) and item.value.get("member_id") == member_id]
        for item in owned:
            self._store.delete_if(item.key, item.mod_revision)  # unless it changed owner meanwhile
        self._store.delete(self._member_key())
        self.changed.set()

    def _member_key(self) -> str:
        return keys.group_member(self._store.cluster, self.group, self.member.member_id)
