"""Node registrations: the lease-bound etcd key that makes a node eligible for replicas.

Shared by what registers nodes: the local daemon (``mafka4 up``, one registration per
simulated node) and the node agent (``mafka4.runtime.node``, one per machine of a Ray
cluster, run as a process or as a Ray actor: ``mafka4.runtime.node_agents``). Placement
reads the keys (``TopicStore.live_nodes``); a key lives as long as its lease is refreshed,
so a node whose process stops refreshing drops out after ``node_lease_ttl_s``.

``NodeRegistration`` keeps one node's key alive (a re-granting ``LeaseHolder``: once its lease
is to be treated as expired, the key is written again under a new one);
``refresh_registrations`` is one refresh period for all of them and survives etcd outages:
after a failed call every registration moves to a fresh etcd client and is written again
under a new lease once etcd answers. ``keep_registered``
repeats that every period until its stop event is set (a node agent run as a Ray actor,
``runtime.node_agents``) or until SIGTERM/SIGINT, which ``install_stop_handlers`` turns into
``StopRequested`` so that the caller unwinds through its cleanup (revoking the leases).
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from typing import Callable

import etcd3

from mafka4.errors import CoordinatorUnavailable
from mafka4.limits import LEASE_REFRESHES_PER_TTL, REGISTRATION_ETCD_TIMEOUT_S_MAX
from mafka4.metadata import keys
from mafka4.metadata.lease_holder import LeaseHolder
from mafka4.metadata.store import MetadataStore
from mafka4.runtime.node_identity import NodeRole
from mafka4.transport.ray_names import node_resource, pinned_ray_node

log = logging.getLogger("mafka4.registration")


def open_registration_store(etcd_endpoint: str, lease_ttl_s: int) -> MetadataStore:
    """A client whose requests time out within one refresh period of the lease."""
    refresh_period_s = lease_ttl_s / LEASE_REFRESHES_PER_TTL
    return MetadataStore(etcd_endpoint, timeout_s=min(REGISTRATION_ETCD_TIMEOUT_S_MAX, refresh_period_s))


class NodeRegistration:
    """One node's key ``keys.node(cluster, node_id)``, bound to its own lease."""

    def __init__(self, store: MetadataStore, cluster: str, node_id: str, role: NodeRole, lease_ttl_s: int,
                 client_port: int = 0, ray_node_id: str = ""):
        self.key = keys.node(cluster, node_id)
        self.value = {"node_id": node_id, "role": NodeRole(role).value}
        if pinned_ray_node(node_id) is None:  # else no resource names the node: actors pin by node affinity
            self.value["resource"] = node_resource(node_id)
        if client_port:  # where the node serves clients; 0: any port its server gets
            self.value["client_port"] = client_port
        if ray_node_id:  # the Ray node an agent actor registers from: whoever sees it die drops the key
            self.value["ray_node_id"] = ray_node_id
        self.lease_ttl_s = lease_ttl_s
        self.rebind(store)

    def keep_alive(self) -> None:
        """Refresh the lease, or register anew under a new lease if there is none or it expired.

        Raises CoordinatorUnavailable if etcd does not answer; the caller retries next period.
        """
        self._lease.keep_alive()

    def rebind(self, store: MetadataStore) -> None:
        """Use another client; the next ``keep_alive`` registers under a new lease.

        A lease object refreshes only through the client that granted it, so it is dropped
        (left to expire; the new put detaches the key from it).
        """
        self.store = store
        self._lease = LeaseHolder(store, self.lease_ttl_s, f"registration {self.key}", on_granted=self._write,
                                  regrant=True, keys=[self.key])

    def revoke(self) -> None:
        """Remove the registration now instead of waiting for the lease to expire."""
        self._lease.revoke()

    def _write(self, lease: etcd3.Lease) -> None:
        self.store.put(self.key, self.value, lease=lease)


def refresh_registrations(registrations: list[NodeRegistration], open_store: Callable[[], MetadataStore]) -> bool:
    """One refresh period: keep every registration alive; False if etcd did not answer.

    After a failure every registration moves to a fresh client from ``open_store``: the etcd3
    client refuses an endpoint for 300 s after one failed call, far longer than a lease lives.
    """
    try:
        for registration in registrations:
            registration.keep_alive()
        return True
    except CoordinatorUnavailable:
        old_stores = {id(r.store): r.store for r in registrations}.values()
        fresh = open_store()
        for registration in registrations:
            registration.rebind(fresh)
        for store in old_stores:
            store.close()
        return False


def keep_registered(
    registrations: list[NodeRegistration], open_store: Callable[[], MetadataStore], period_s: float,
    each_period: Callable[[], None] = lambda: None, stop: threading.Event | None = None,
) -> None:
    """Refresh every registration each period until ``stop`` is set (then return) or a signal
    arrives (``StopRequested``, in the main thread); log outages once each."""
    stop = threading.Event() if stop is None else stop
    etcd_down_since = None
    while not stop.wait(period_s):
        each_period()
        if not refresh_registrations(registrations, open_store):
            if etcd_down_since is None:
                etcd_down_since = time.monotonic()
                log.warning("etcd does not answer; node registrations will be refreshed when it does")
        elif etcd_down_since is not None:
            log.info("etcd answers again after %.1f s", time.monotonic() - etcd_down_since)
            etcd_down_since = None


class RefreshWhenDue:
    """Calls ``refresh`` once ``period_s`` passed since its last call: the registrations' refresh,
    polled by a loop that waits for something else (the daemon's wait for its read nodes)."""

    def __init__(self, refresh: Callable[[], object], period_s: float, clock: Callable[[], float] = time.monotonic):
        self._refresh, self._period_s, self._clock = refresh, period_s, clock
        self._due = clock() + period_s

    def __call__(self) -> None:
        if self._clock() >= self._due:
            self._refresh()
            self._due = self._clock() + self._period_s


class StopRequested(Exception):
    """Raised in the main thread by the first SIGTERM/SIGINT, to unwind through cleanup."""


def install_stop_handlers() -> None:
    """Make the first SIGTERM/SIGINT raise ``StopRequested`` in the main thread."""

    def on_signal(signum: int, _frame) -> None:
        # Later signals only log, so they cannot interrupt the cleanup the first one started.
        signal.signal(signal.SIGTERM, _log_repeated_signal)
        signal.signal(signal.SIGINT, _log_repeated_signal)
        raise StopRequested(signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)


def _log_repeated_signal(signum: int, _frame) -> None:
    log.info("%s received while stopping; still stopping", signal.Signals(signum).name)
