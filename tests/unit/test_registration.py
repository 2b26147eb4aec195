"""Node registrations against an in-memory etcd: kept alive, written again after a lapse or an outage."""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass

from mafka4.errors import CoordinatorUnavailable
from mafka4.metadata import keys
from mafka4.runtime.ray_cluster import NodeRole
from mafka4.runtime.registration import NodeRegistration, RefreshWhenDue, keep_registered, refresh_registrations

KEY = keys.node("c", "w1")


@dataclass(frozen=True)
class FakeLease:
    id: int


class FakeEtcd:
    """Leases and the keys bound to them, shared by every client opened on it."""

    def __init__(self) -> None:
        self.values: dict[str, tuple[dict, FakeLease]] = {}
        self.leases: set[FakeLease] = set()
        self.down = False
        self.ids = itertools.count(1)

    def expire(self, lease: FakeLease) -> None:
        self.leases.discard(lease)
        self.values = {k: v for k, v in self.values.items() if v[1] != lease}


class FakeClient:
    def __init__(self, etcd: FakeEtcd) -> None:
        self.etcd, self.closed = etcd, False

    def _answer(self) -> None:
        if self.etcd.down or self.closed:
            raise CoordinatorUnavailable("etcd at fake did not answer")

    def grant_lease(self, ttl_s: int) -> FakeLease:
        self._answer()
        lease = FakeLease(next(self.etcd.ids))
        self.etcd.leases.add(lease)
        return lease

    def refresh_lease(self, lease: FakeLease) -> int:
        self._answer()
        return 10 if lease in self.etcd.leases else 0

    def revoke_lease(self, lease: FakeLease) -> None:
        self._answer()
        self.etcd.expire(lease)

    def put(self, key: str, value: dict, lease: FakeLease) -> int:
        self._answer()
        self.etcd.values[key] = (value, lease)
        return 1

    def lease_keys(self, lease: FakeLease) -> frozenset[str]:
        self._answer()
        return frozenset(key for key, (_, under) in self.etcd.values.items() if under == lease)

    def close(self) -> None:
        self.closed = True


def test_a_registration_is_written_under_its_lease_kept_and_removed_on_revoke():
    etcd = FakeEtcd()
    registration = NodeRegistration(FakeClient(etcd), "c", "w1", NodeRole.WRITE, 10)

    registration.keep_alive()
    value, lease = etcd.values[KEY]
    assert value == {"node_id": "w1", "role": "write", "resource": "mafka4_node_w1"}
    registration.keep_alive()
    assert etcd.values[KEY][1] == lease, "a live lease is refreshed, not replaced"

    registration.revoke()
    assert KEY not in etcd.values


def test_a_node_named_after_its_ray_node_registers_no_resource():
    # No mafka4_node_<id> resource names it: its actors are pinned by node affinity (transport.node_pinning).
    ray_node_id = "a" * 56
    registration = NodeRegistration(FakeClient(FakeEtcd()), "c", f"ray-{ray_node_id}", NodeRole.READ, 10,
                                    ray_node_id=ray_node_id)
    assert registration.value == {"node_id": f"ray-{ray_node_id}", "role": "read", "ray_node_id": ray_node_id}


def test_a_registration_another_process_wrote_and_took_with_its_lease_is_written_again():
    etcd = FakeEtcd()
    client = FakeClient(etcd)
    registration = NodeRegistration(client, "c", "w1", NodeRole.WRITE, 10)
    registration.keep_alive()
    _, lease = etcd.values[KEY]
    ghost = client.grant_lease(10)
    client.put(KEY, {"node_id": "w1"}, ghost)  # an agent of w1 that was replaced but ran on for a moment
    etcd.expire(ghost)

    registration.keep_alive()
    assert etcd.values[KEY] == ({"node_id": "w1", "role": "write", "resource": "mafka4_node_w1"}, lease)


def test_a_registration_whose_lease_expired_is_written_again_under_a_new_lease():
    etcd = FakeEtcd()
    registration = NodeRegistration(FakeClient(etcd), "c", "w1", NodeRole.WRITE, 10)
    registration.keep_alive()
    lapsed = etcd.values[KEY][1]
    etcd.expire(lapsed)

    registration.keep_alive()

    assert etcd.values[KEY][1] not in (None, lapsed)


def test_after_an_outage_every_registration_is_written_again_from_a_fresh_client():
    etcd = FakeEtcd()
    opened = [FakeClient(etcd)]

    def open_store() -> FakeClient:
        opened.append(FakeClient(etcd))
        return opened[-1]

    registrations = [NodeRegistration(opened[0], "c", node, NodeRole.READ, 10) for node in ("r1", "r2")]
    assert refresh_registrations(registrations, open_store)
    etcd.down = True
    assert not refresh_registrations(registrations, open_store)
    assert opened[0].closed and all(r.store is opened[1] for r in registrations)
    etcd.down = False

    assert refresh_registrations(registrations, open_store)
    assert len(etcd.leases) == 4, "each registered again under a new lease; the old ones are left to expire"
    assert {etcd.values[keys.node("c", node)][1] for node in ("r1", "r2")} <= etcd.leases


def test_a_refresh_polled_by_a_wait_runs_once_per_period():
    now, calls = [0.0], []
    refresh = RefreshWhenDue(lambda: calls.append(now[0]), 3.0, clock=lambda: now[0])
    for now[0] in (0.5, 2.9, 3.0, 3.1, 5.9, 6.5, 20.0):
        refresh()
    assert calls == [3.0, 6.5, 20.0]


def test_keeping_registered_ends_when_the_stop_is_set_and_leaves_revoking_to_the_caller():
    """A node agent run as a Ray actor has no signal to stop it: its stop event ends the loop."""
    etcd = FakeEtcd()
    registration = NodeRegistration(FakeClient(etcd), "c", "w1", NodeRole.WRITE, 10)
    stop, periods = threading.Event(), []

    def each_period() -> None:
        periods.append(len(periods))
        if len(periods) == 3:
            stop.set()

    keep_registered([registration], lambda: FakeClient(etcd), 0, each_period, stop=stop)
    assert len(periods) == 3 and KEY in etcd.values


def test_an_agent_actors_registration_names_its_ray_node():
    """So that whoever sees that Ray node die can drop the registration (``runtime.agent_plan``)."""
    etcd = FakeEtcd()
    NodeRegistration(FakeClient(etcd), "c", "w1", NodeRole.WRITE, 10, ray_node_id="ab12").keep_alive()
    assert etcd.values[KEY][0] == {"node_id": "w1", "role": "write", "resource": "mafka4_node_w1", "ray_node_id": "ab12"}
