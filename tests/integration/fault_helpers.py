"""Helpers of the fault tests (``test_faults_stop_partition``, ``test_faults_power_disk``): small
topics on the session or read cluster, acks=all production in numbered steps, and the checks a
user relies on after a fault: every acknowledged message read back once and in order, and the
replicas (physical or VP) holding identical logs.

Every wait is bounded by ``RECOVERY_S``: a fault's repair can span a lease expiry, a ping and
an actor restart.
"""

from __future__ import annotations

import time

import ray

from mafka4.batch_payload import decode_batches
from mafka4.client.admin import Admin
from mafka4.client.consumer import Consumer
from mafka4.client.producer import Producer
from mafka4.metadata import keys
from mafka4.physical.handles import replica_handle
from mafka4.physical.partition_state import PartitionState
from mafka4.virtual.vp_store import VirtualStore

from virtual_helpers import ProduceLoop, check_exactly_once, read_everything, topic_name, vp_log
from wait_helpers import wait_until

RECOVERY_S = 180  # lease expiry, a ping, a restart: generous, the machine is shared and noisy
LAG_MS = 2000  # replica_lag_ms_max of the topics here: a stopped or cut-off replica leaves within it
MESSAGES = 100  # per step: a few hundred per test


# --- physical topics ---------------------------------------------------------------------------------


def create_physical_topic(connection, prefix: str) -> tuple[str, PartitionState]:
    """A mafka3-mode topic (no VPs): P=1, RF=3, min ISR 2; its partition's first state."""
    topic = topic_name(prefix)
    metadata = Admin(connection).create_topic(topic, partitions=1, replication_factor=3, min_insync_replicas=2,
                                              read_mode="mafka3", replica_lag_ms_max=LAG_MS)
    return topic, metadata.partitions[0]


def partition_state(connection, topic: str) -> PartitionState:
    value = connection.store.get(keys.physical_partition(connection.cluster, topic, 0)).value
    return PartitionState.from_json(0, value)


def full_isr(connection, topic: str) -> bool:
    state = partition_state(connection, topic)
    return set(state.isr) == set(state.replicas)


def active_controller(connection) -> dict:
    found = wait_until(lambda: connection.store.get(keys.controller(connection.cluster)), 60)
    assert found is not None, "no active controller"
    return found.value


def send(producer: Producer, first: int, count: int = MESSAGES) -> list:
    """Send ``count`` messages "v<n>" from ``first`` on; (value, future) of each."""
    return [(f"v{n}".encode(), producer.send(f"v{n}".encode(), key=f"k{n % 5}".encode()))
            for n in range(first, first + count)]


def acknowledged_of(sent: list) -> list[tuple[int, int, bytes]]:
    """(partition, offset, value) of every message ``send`` sent, once each is acknowledged."""
    acknowledged = []
    for value, future in sent:
        metadata = future.result(timeout=RECOVERY_S)
        acknowledged.append((metadata.partition, metadata.offset, value))
    return acknowledged


def produce(connection, topic: str, first: int, count: int = MESSAGES) -> list[tuple[int, int, bytes]]:
    """``count`` acks=all messages "v<n>" from ``first`` on, each acknowledged."""
    with Producer(topic, connection=connection, acks="all", linger_ms=1) as producer:
        sent = send(producer, first, count)
        producer.flush()
        return acknowledged_of(sent)


def assert_read_back_once_in_order(connection, topic: str, acknowledged: list) -> None:
    messages = []
    with Consumer(topic, connection=connection, from_beginning=True) as consumer:
        deadline = time.monotonic() + RECOVERY_S
        while len(messages) < len(acknowledged) and time.monotonic() < deadline:
            messages.extend(consumer.poll(timeout_ms=500))
        messages.extend(consumer.poll(timeout_ms=300))  # anything more would be a duplicate
    values = [m.value for m in sorted(messages, key=lambda m: (m.partition, m.offset))]
    assert len(values) == len(set(values)), "no message is stored twice (idempotent retries)"
    read = {(m.partition, m.offset): m.value for m in messages}
    for partition, offset, value in acknowledged:
        assert read.get((partition, offset)) == value, f"acknowledged {value!r} at {partition}/{offset} was lost"
    numbers = [int(value[1:]) for value in values]
    assert numbers == sorted(numbers), "out of send order"


def committed_log(connection, topic: str, replica: str) -> list[tuple[int, bytes]]:
    """(offset, value) of every record a replica holds below its high watermark."""
    handle = replica_handle(connection.cluster, topic, 0, replica)
    records, offset = [], 0
    while True:
        result = ray.get(handle.fetch.remote(offset, 1 << 20, 0, True), timeout=60)
        batch = decode_batches(result.data)
        if not batch:
            return records
        records += [(record.offset, record.value) for record in batch]
        offset = batch[-1].offset + 1


def assert_replicas_identical(connection, topic: str) -> None:
    state = partition_state(connection, topic)
    leader_log = committed_log(connection, topic, state.leader)
    for replica in state.replicas:
        assert wait_until(lambda: committed_log(connection, topic, replica) == leader_log, RECOVERY_S), \
            f"replica {replica} does not hold the leader's committed log"


def assert_physical_topic_whole(connection, topic: str, acknowledged: list) -> None:
    """Every acknowledged message read back once and in send order, and every replica holding the
    leader's committed log."""
    assert_read_back_once_in_order(connection, topic, acknowledged)
    assert_replicas_identical(connection, topic)


# --- virtual topics ----------------------------------------------------------------------------------


def create_virtual_topic(connection, prefix: str, read_replicas: int) -> str:
    topic = topic_name(prefix)
    Admin(connection).create_topic(topic, partitions=2, replication_factor=1, virtual_partitions=2,
                                   read_replicas=read_replicas, read_mode="mafka4", read_replica_lag_ms_max=LAG_MS)
    return topic


def produce_keyed(connection, topic: str, after=()) -> list:
    """``MESSAGES`` keyed messages continuing ``after``'s numbering (``virtual_helpers.ProduceLoop``)."""
    loop = ProduceLoop(connection, topic, after=after, messages_max=MESSAGES)
    assert wait_until(lambda: loop.done, RECOVERY_S), "the producer did not finish"
    return list(after) + loop.stop()


def vp_state(connection, topic: str, vp: int):
    return VirtualStore(connection.store, connection.cluster).state(topic, vp)[0]


def virtual_topic_in_sync(connection, prefix: str) -> tuple[str, list]:
    """A topic of ``create_virtual_topic`` with two read replicas, holding ``MESSAGES`` keyed
    messages, once both VPs have both replicas in their RISR; the topic and what was acknowledged."""
    topic = create_virtual_topic(connection, prefix, read_replicas=2)
    acknowledged = produce_keyed(connection, topic)
    assert wait_until(lambda: all(len(vp_state(connection, topic, vp).risr) == 2 for vp in (0, 1)), RECOVERY_S)
    return topic, acknowledged


def assert_vp_replicas_identical(connection, topic: str, logs: dict) -> None:
    for vp, records in logs.items():
        for replica in vp_state(connection, topic, vp).replicas:
            assert wait_until(lambda: vp_log(connection, topic, vp, replica) == records, RECOVERY_S), \
                f"replica {replica} of VP {vp} does not hold its leader's log"


def assert_virtual_topic_whole(connection, topic: str, acknowledged: list) -> None:
    """Every acknowledged message once in the VP leaders' logs (placed and ordered right), every VP
    replica holding its leader's log, and a consumer reading each message back."""
    assert_vp_replicas_identical(connection, topic, check_exactly_once(connection, topic, acknowledged))
    messages = read_everything(connection, topic, len(acknowledged))
    assert sorted(m.value for m in messages) == sorted(value for _, _, _, value in acknowledged)
