"""``TopicStore.record_isr``: a leader's ISR compare-and-swapped into its partition key.

What the replica actor's etcd side (``physical.replica_metadata``) writes before the core may
count a new ISR: only while the key names that leader and epoch, with the eligible leader
replicas the ISR implies, retrying a lost race and giving up (retriably) after a bound.
"""

from __future__ import annotations

import pytest

from mafka4.errors import CoordinatorUnavailable
from mafka4.limits import ISR_WRITE_ATTEMPTS_MAX
from mafka4.metadata import keys
from mafka4.metadata.store import MetadataStore, Versioned
from mafka4.physical.partition_state import PartitionState
from mafka4.physical.topics import TopicStore

KEY = keys.physical_partition("c", "orders", 0)


class FakeStore:
    """``get`` and ``compare_and_swap`` of ``MetadataStore`` on one dict, and its own ``update`` over
    them; ``races`` writes by someone else land just before that many of this writer's swaps."""

    update = MetadataStore.update

    def __init__(self, value: dict | None):
        self.values = {} if value is None else {KEY: (value, 1)}
        self.races = 0
        self.swaps = 0

    def get(self, key: str) -> Versioned | None:
        found = self.values.get(key)
        return None if found is None else Versioned(key, found[0], found[1])

    def compare_and_swap(self, key: str, value: dict, mod_revision: int) -> bool:
        self.swaps += 1
        current, revision = self.values[key]
        if self.races:
            self.races -= 1
            self.values[key] = (current, revision + 1)
            return False
        if revision != mod_revision:
            return False
        self.values[key] = (value, revision + 1)
        return True


def partition(leader="r0", epoch=3, isr=("r0", "r1", "r2")) -> dict:
    return {**PartitionState(0, leader, epoch, ("r0", "r1", "r2"), isr).to_json(), "extra": "kept"}


def record(store: FakeStore, isr, leader="r0", epoch=3, min_insync_replicas=2) -> bool:
    return TopicStore(store, "c").record_isr("orders", 0, leader, epoch, isr, min_insync_replicas)


def test_the_isr_and_the_elr_it_implies_are_written_for_the_leader_of_the_epoch():
    store = FakeStore(partition())
    assert record(store, ("r0",))
    value = store.values[KEY][0]
    assert (value["isr"], value["elr"], value["extra"]) == (["r0"], ["r1", "r2"], "kept")
    assert record(store, ("r0",)) and store.swaps == 1  # already there: nothing to write


def test_a_fenced_leader_or_a_deleted_topic_writes_nothing():
    store = FakeStore(partition(epoch=4))
    assert not record(store, ("r0",))
    assert not record(FakeStore(partition(leader="r1")), ("r0",))
    assert not record(FakeStore(None), ("r0",))
    assert store.swaps == 0


def test_a_lost_race_is_retried_and_a_bounded_number_of_them_is_retriable():
    store = FakeStore(partition())
    store.races = ISR_WRITE_ATTEMPTS_MAX - 1
    assert record(store, ("r0", "r1"))
    assert store.values[KEY][0]["isr"] == ["r0", "r1"]
    store.races = ISR_WRITE_ATTEMPTS_MAX
    with pytest.raises(CoordinatorUnavailable, match="ISR write for orders-0 kept conflicting") as raised:
        record(store, ("r0",))
    assert raised.value.retriable
