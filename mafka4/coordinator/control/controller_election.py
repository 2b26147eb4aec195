"""The controller election: winning, holding and losing ``keys.controller``.

Candidates race for ``keys.controller`` in one etcd transaction that creates it under the
candidate's lease only while it is absent and moves ``keys.controller_epoch`` one up
(compare-and-swap, so the epoch never decreases; the rule is
``partition_decisions.decide_campaign``). The winner's key revision is the *fence* of every
write it makes (``MetadataStore.compare_and_swap(fence=...)``): a controller whose key expired
writes nothing. Standbys watch the key and campaign when it disappears, or after a TTL
without news. A thread refreshes the lease every third of ``lease_ttl_s``
(``lease_holder.LeaseThread``); after a whole TTL without a confirmed refresh the controller
steps down (``lease.LeaseLife.expired``). Stepping down revokes the lease, so on SIGTERM a
standby takes over at once; a lease that etcd was not there to revoke is revoked before the
next campaign.

``ControllerElection`` is one candidate; ``Controller`` runs its loop and asks it whether it is
active. ``SteppedDown`` is how any part of the controller that finds the key gone or another
controller's stops acting at once.
"""

from __future__ import annotations

import logging
import os
import queue
import time

from mafka4.coordinator.control.partition_decisions import Campaign, decide_campaign
from mafka4.coordinator.control.watches import Watches
from mafka4.errors import CoordinatorUnavailable
from mafka4.limits import CONTROLLER_WAIT_SLICE_S, ETCD_REQUEST_TIMEOUT_S_DEFAULT, LEASE_REFRESHES_PER_TTL
from mafka4.limits.servers import ControllerConfig
from mafka4.metadata import keys
from mafka4.metadata.lease_holder import LeaseHolder, LeaseThread
from mafka4.metadata.store import Fence, MetadataStore
from mafka4.metrics.targets import METRICS_FIELD

log = logging.getLogger("mafka4.controller")


class SteppedDown(Exception):
    """The controller's key is gone or another controller's: stop acting at once.

    A signal inside the controller process, caught by its loop, never shown to a user: so no
    ``MafkaError``.
    """


def check_fence(store: MetadataStore, fence: Fence) -> None:
    """Raise ``SteppedDown`` unless the controller key is still the one that made ``fence``."""
    current = store.get(fence[0])
    if current is None or current.mod_revision != fence[1]:
        raise SteppedDown("the controller key expired or belongs to another controller")


class ControllerElection:
    """One candidate for ``keys.controller``; ``fence`` is set while it is the active controller."""

    def __init__(self, store: MetadataStore, etcd_endpoint: str, cluster: str, controller_id: str,
                 config: ControllerConfig, watches: Watches, events: "queue.Queue", metrics_address: str | None = None):
        self._store, self._cluster, self._controller_id, self._config = store, cluster, controller_id, config
        self._metrics_address = metrics_address  # where its process serves Prometheus metrics (``metrics.targets``)
        # A refresh must fail fast enough for the next one to come within the TTL.
        self._lease_store = MetadataStore(
            etcd_endpoint, timeout_s=min(ETCD_REQUEST_TIMEOUT_S_DEFAULT, config.lease_ttl_s / LEASE_REFRESHES_PER_TTL))
        # The standby's watch shares the controller's watch client and queue: only one of them runs at a time.
        self._watches, self._events = watches, events
        self._lease: LeaseThread | None = None
        self.fence: Fence | None = None
        self.controller_epoch: int | None = None
        self._unrevoked: list[LeaseThread] = []  # leases of past terms that etcd was not there to revoke

    @property
    def active(self) -> bool:
        return self.fence is not None

    def campaign(self) -> bool:
        """Try once to become the active controller; True if it did.

        A standby (another controller holds the key) first waits until the key is deleted, or
        a TTL passed.
        """
        # A key of our own past term would otherwise block everyone, us included, for a TTL.
        self._unrevoked = [lease for lease in self._unrevoked if not lease.close()]
        key, epoch_key = keys.controller(self._cluster), keys.controller_epoch(self._cluster)
        # One read of both keys (the epoch key shares the controller key's prefix).
        items, revision = self._store.get_prefix_at(key)
        current = next((item for item in items if item.key == key), None)
        counter = next((item for item in items if item.key == epoch_key), None)
        decision = decide_campaign(current.value if current else None, counter.value if counter else None)
        if not isinstance(decision, Campaign):
            self._wait_for_vacancy(revision)
            return False
        lease = LeaseThread(LeaseHolder(self._lease_store, self._config.lease_ttl_s, "controller lease"),
                            "controller-lease")
        # The pid lets an operator (or a chaos run) find the active controller's process; Prometheus
        # finds its metrics through ``metrics`` (``metrics.targets``).
        value = {"controller_id": self._controller_id, "controller_epoch": decision.controller_epoch, "pid": os.getpid(),
                 METRICS_FIELD: self._metrics_address}
        swaps = {epoch_key: (decision.controller_epoch, counter.mod_revision if counter else 0)}
        granted = lease.holder.grant()
        try:
            revision = self._store.create_leased(key, value, granted, swaps)
        except CoordinatorUnavailable:
            self._unrevoked.append(lease)  # the key may exist under it, unanswered: revoke it before campaigning again
            raise
        if revision is None:
            lease.close()  # another candidate won the race
            return False
        lease.start()
        self._lease, self.fence, self.controller_epoch = lease, (key, revision), decision.controller_epoch
        log.info("controller %s is active with controller epoch %d", self._controller_id, decision.controller_epoch)
        return True

    def _wait_for_vacancy(self, read_revision: int) -> None:
        """Sleep until the controller key is deleted, or a TTL passed (then look again)."""
        key = keys.controller(self._cluster)
        if not self._watches.watching:
            self._watches.cancel_all()
            # From just after our read: a deletion before the watch exists is still delivered.
            self._watches.start(key, read_revision + 1, "controller")
        deadline = time.monotonic() + self._config.lease_ttl_s
        while time.monotonic() < deadline:
            try:
                kind, events = self._events.get(timeout=CONTROLLER_WAIT_SLICE_S)
            except queue.Empty:
                continue
            if kind == "broken" or any(e.key == key and e.value is None for e in events):
                return

    def lease_expired(self) -> bool:
        """The lease went a whole TTL without a confirmed refresh: etcd may have expired it."""
        return self._lease.holder.expired()

    def check_still_active(self) -> None:
        """Raise ``SteppedDown`` unless our controller key is still the one we created."""
        check_fence(self._store, self.fence)

    def step_down(self, reason: str) -> None:
        """Give up the key (revoke its lease) if held; a no-op for a standby."""
        if self._lease is not None:
            log.warning("controller %s steps down (epoch %s): %s", self._controller_id, self.controller_epoch, reason)
            if not self._lease.close():
                self._unrevoked.append(self._lease)
        self._lease = self.fence = None

    def close(self) -> None:
        self._lease_store.close()
