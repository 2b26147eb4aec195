"""``ReadNodeRecords``: what a read node writes to etcd (liveness, feed positions, read losses, load
reports), against an in-memory etcd that can be away. Waits are bounded loops on a condition."""

from __future__ import annotations

import asyncio
import itertools
import threading
from dataclasses import dataclass

import pytest

from mafka4.errors import CoordinatorUnavailable
from mafka4.limits.servers import ReadNodeConfig
from mafka4.log.read_loss import LostRange
from mafka4.metadata import keys
from mafka4.metadata.read_node_load import ReadNodeLoad
from mafka4.metadata.store import Versioned
from mafka4.virtual import read_node_records
from mafka4.virtual.read_node_records import ReadNodeRecords

CLUSTER, NODE, TOPIC = "test", "r0", "orders"
CONFIG = ReadNodeConfig(feed_position_interval_ms=100, load_report_interval_ms=100)
WAIT_STEPS_MAX = 2_000  # of 5 ms: a condition not met in 10 s is a failure


@dataclass(frozen=True)
class FakeLease:
    id: int


class FakeStore:
    """The ``MetadataStore`` calls of the records, in memory; ``down``: etcd does not answer.

    ``before_swap`` runs once before the next compare-and-swap, as another node's write between
    a read and the swap does."""

    def __init__(self) -> None:
        self.items: dict[str, tuple[object, int, FakeLease | None]] = {}
        self.alive: set[FakeLease] = set()
        self.down = False
        self.puts = 0
        self.written: list[tuple[str, object]] = []  # every put, in order
        self.before_swap = None
        self._revisions = itertools.count(1)
        self._leases = itertools.count(1)
        self._lock = threading.Lock()

    def _answer(self) -> None:
        if self.down:
            raise CoordinatorUnavailable("etcd at fake did not answer")

    def value(self, key: str):
        found = self.items.get(key)
        return None if found is None else found[0]

    def grant_lease(self, ttl_s: int) -> FakeLease:
        self._answer()
        lease = FakeLease(next(self._leases))
        self.alive.add(lease)
        return lease

    def refresh_lease(self, lease: FakeLease) -> int:
        self._answer()
        return 5 if lease in self.alive else 0

    def revoke_lease(self, lease: FakeLease) -> None:
        self._answer()
        self.alive.discard(lease)
        self.items = {key: item for key, item in self.items.items() if item[2] != lease}

    def lease_keys(self, lease: FakeLease) -> frozenset[str]:
        self._answer()
        return frozenset(key for key, item in self.items.items() if item[2] == lease)

    def put(self, key: str, value, lease: FakeLease | None = None) -> int:
        self._answer()
        with self._lock:
            self.puts += 1
            self.written.append((key, value))
            revision = next(self._revisions)
            self.items[key] = (value, revision, lease)
            return revision

    def delete(self, key: str) -> bool:
        self._answer()
        return self.items.pop(key, None) is not None

    def get(self, key: str) -> Versioned | None:
        self._answer()
        found = self.items.get(key)
        return None if found is None else Versioned(key, found[0], found[1])

    def compare_and_swap(self, key: str, value, mod_revision: int) -> bool:
        self._answer()
        interfere, self.before_swap = self.before_swap, None
        if interfere is not None:
            interfere()
        found = self.items.get(key)
        if (found[1] if found else 0) != mod_revision:
            return False
        self.put(key, value)
        return True

    def close(self) -> None:
        pass


@pytest.fixture
def store(monkeypatch) -> FakeStore:
    fake = FakeStore()
    monkeypatch.setattr(read_node_records, "MetadataStore", lambda endpoint: fake)
    return fake


async def wait_until(condition) -> None:
    for _ in range(WAIT_STEPS_MAX):
        if condition():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("condition not met in time")


def position_key(partition: int) -> str:
    return keys.feed_position(CLUSTER, TOPIC, partition, NODE)


def test_the_liveness_key_is_written_at_start_and_goes_with_its_lease_at_close(store):
    liveness_key = keys.read_node_liveness(CLUSTER, NODE)

    async def run() -> None:
        records = ReadNodeRecords(CLUSTER, NODE, "fake:2379", CONFIG)
        await records.start(dict, None)
        assert records.started and store.value(liveness_key)["node_id"] == NODE
        records.close()
        assert store.value(liveness_key) is None

    asyncio.run(run())


def test_feed_positions_are_written_when_they_change_and_a_stopped_streams_key_is_deleted(store):
    positions = {(TOPIC, 0): 5}

    async def run() -> None:
        records = ReadNodeRecords(CLUSTER, NODE, "fake:2379", CONFIG)
        await records.start(lambda: dict(positions), None)
        await wait_until(lambda: store.value(position_key(0)) == {"next_offset": 5})
        puts = store.puts
        await asyncio.sleep(3 * CONFIG.feed_position_interval_ms / 1000)
        assert store.puts == puts  # nothing changed: nothing written
        positions.update({(TOPIC, 0): 7, (TOPIC, 1): 3})
        await wait_until(lambda: store.value(position_key(0)) == {"next_offset": 7}
                         and store.value(position_key(1)) == {"next_offset": 3})
        del positions[(TOPIC, 0)]
        await wait_until(lambda: store.value(position_key(0)) is None)
        assert store.value(position_key(1)) == {"next_offset": 3}
        records.close()

    asyncio.run(run())


def test_positions_and_losses_met_by_an_etcd_outage_are_written_once_it_answers_keeping_another_nodes_loss(store):
    loss_key = keys.read_loss(CLUSTER, TOPIC, 0)

    def another_node_records_a_loss() -> None:
        store.put(loss_key, {"ranges": [[40, 50]]})

    async def run() -> None:
        records = ReadNodeRecords(CLUSTER, NODE, "fake:2379", CONFIG)
        await records.start(lambda: {(TOPIC, 0): 9}, None)
        store.down = True
        records.record_loss(TOPIC, LostRange(0, 0, 10))
        records.record_loss(TOPIC, LostRange(0, 10, 20))
        await asyncio.sleep(3 * CONFIG.feed_position_interval_ms / 1000)
        assert store.value(position_key(0)) is None and store.value(loss_key) is None
        store.before_swap = another_node_records_a_loss
        store.down = False
        await wait_until(lambda: store.value(position_key(0)) == {"next_offset": 9})
        await wait_until(lambda: store.value(loss_key) == {"ranges": [[0, 20], [40, 50]]})
        records.close()

    asyncio.run(run())


class CountingLoad:
    """The node's ``_measure_load``: a report numbered by its call (in ``hosted_vp_replicas``), or None."""

    def __init__(self) -> None:
        self.calls = 0
        self.nothing = False  # True: no time passed since the last report (``LoadMeter.report``'s None)

    def __call__(self) -> ReadNodeLoad | None:
        self.calls += 1
        if self.nothing:
            return None
        return ReadNodeLoad(NODE, hosted_vp_replicas=self.calls, fed_bytes_per_s=10.0, fetch_cpu_cores=0.5,
                            window_ms=CONFIG.load_report_interval_ms, measured_at_ms=self.calls)


def test_load_reports_are_written_every_interval_under_the_liveness_lease_and_go_with_it_at_close(store):
    load_key, liveness_key = keys.read_node_load(CLUSTER, NODE), keys.read_node_liveness(CLUSTER, NODE)
    load = CountingLoad()

    async def run() -> None:
        records = ReadNodeRecords(CLUSTER, NODE, "fake:2379", CONFIG)
        await records.start(dict, None, load)
        await wait_until(lambda: store.value(load_key) is not None and store.value(load_key)["hosted_vp_replicas"] >= 2)
        assert ReadNodeLoad.from_json(store.value(load_key)).node_id == NODE
        assert store.items[load_key][2] == store.items[liveness_key][2] is not None, "bound to the liveness lease"
        records.close()
        assert store.value(load_key) is None
        calls = load.calls
        await asyncio.sleep(3 * CONFIG.load_report_interval_ms / 1000)
        assert load.calls == calls, "no report after close"

    asyncio.run(run())


def test_a_load_report_etcd_did_not_take_is_dropped_and_the_next_one_is_written(store):
    load_key = keys.read_node_load(CLUSTER, NODE)
    load = CountingLoad()

    async def run() -> None:
        records = ReadNodeRecords(CLUSTER, NODE, "fake:2379", CONFIG)
        await records.start(dict, None, load)
        store.down = True
        await wait_until(lambda: load.calls >= 3)
        store.down = False
        # Only the report measured last may still be on its way to etcd: every earlier one met the outage.
        measured_in_outage = load.calls
        await wait_until(lambda: (store.value(load_key) or {}).get("hosted_vp_replicas", 0) > measured_in_outage)
        records.close()
        written = [value["hosted_vp_replicas"] for key, value in store.written if key == load_key]
        assert min(written) >= measured_in_outage, f"reports the outage met were written later: {written}"

    asyncio.run(run())


def test_nothing_is_written_while_the_meter_has_nothing_to_report(store):
    load = CountingLoad()
    load.nothing = True

    async def run() -> None:
        records = ReadNodeRecords(CLUSTER, NODE, "fake:2379", CONFIG)
        await records.start(dict, None, load)
        await wait_until(lambda: load.calls >= 3)
        assert store.value(keys.read_node_load(CLUSTER, NODE)) is None
        records.close()

    asyncio.run(run())
