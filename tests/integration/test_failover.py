"""Leader failover by the controller, and an etcd restart, under acks=all production.

Checked as a user relies on it: production resumes, every acknowledged message is read back
exactly once and in order per partition, the replication factor comes back, a stale leader
is fenced, and an etcd restart changes no leader of a healthy partition.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import threading
import time
from collections import defaultdict

import psutil
import pytest
import ray

import conftest
from mafka4 import errors
from mafka4.batch_payload import encode_batch
from mafka4.client.admin import Admin
from mafka4.client.consumer import Consumer
from mafka4.client.producer import Producer
from mafka4.limits import Acks
from mafka4.limits.servers import ClusterConfig
from mafka4.metadata import keys
from mafka4.physical.handles import replica_handle
from mafka4.physical.partition_state import PartitionState
from mafka4.runtime.etcd_member import EtcdServer
from mafka4.runtime.etcd_server import restart_etcd

from wait_helpers import wait_until

RECOVERY_S = 90  # generous: the machine is shared and noisy; the figures are in bench_failover.json
ETCD_DOWN_S = 7  # longer than every lease TTL (replicas 5 s, controller 5 s)
OWN_CLUSTER = ClusterConfig(write_nodes=2, read_nodes=0)  # small: it runs beside the session's cluster


def topic_name(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(3)}"


def partition_state(connection, topic: str, partition: int) -> PartitionState:
    return PartitionState.from_json(partition, connection.store.get(keys.physical_partition(connection.cluster, topic, partition)).value)


def live_replicas(connection, topic: str, partition: int) -> set[str]:
    prefix = f"{keys.replicas_prefix(connection.cluster)}{topic}/{partition}/"
    return {item.value["replica_id"] for item in connection.store.get_prefix(prefix)}


class ProduceLoop:
    """acks=all production on a thread; records acknowledged (partition, offset, value) and failures."""

    def __init__(self, connection, topic: str):
        self.acknowledged: list[tuple[int, int, bytes]] = []
        self.failures: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(connection, topic))
        self._thread.start()

    def _run(self, connection, topic: str) -> None:
        with Producer(topic, connection=connection, acks="all", linger_ms=1) as producer:
            number = 0
            while not self._stop.is_set():
                value = f"v{number}".encode()
                producer.send(value, key=f"k{number % 5}".encode()).add_callback(
                    lambda md, err, value=value: self.acknowledged.append((md.partition, md.offset, value))
                    if err is None else self.failures.append(err))
                number += 1
                if number % 200 == 0:
                    producer.flush()
            producer.flush()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=180)
        assert not self._thread.is_alive(), "the producer did not finish flushing"


def assert_read_back_exactly_once_in_order(connection, topic: str, acknowledged: list) -> None:
    expected = len(acknowledged)
    messages = []
    with Consumer(topic, connection=connection, from_beginning=True) as consumer:
        deadline = time.monotonic() + RECOVERY_S
        while len(messages) < expected and time.monotonic() < deadline:
            messages.extend(consumer.poll(timeout_ms=500))
        messages.extend(consumer.poll(timeout_ms=300))
    read = {(m.partition, m.offset): m.value for m in messages}
    assert len(read) == len(messages), "no offset is returned twice"
    values = [m.value for m in messages]
    assert len(values) == len(set(values)), "no message is stored twice (idempotent retries)"
    for partition, offset, value in acknowledged:
        assert read.get((partition, offset)) == value, f"acknowledged {value!r} at {partition}/{offset} was lost"
    per_partition = defaultdict(list)
    for message in sorted(messages, key=lambda m: (m.partition, m.offset)):
        per_partition[message.partition].append(int(message.value[1:]))
    for partition, numbers in per_partition.items():
        assert numbers == sorted(numbers), f"partition {partition} is out of send order"


def wait_for_controller(connection) -> dict:
    controller = wait_until(lambda: connection.store.get(keys.controller(connection.cluster)), 60)
    assert controller is not None, "no active controller"
    return controller.value


def test_killing_a_leader_during_acks_all_production_fails_over_without_losing_or_duplicating(cluster):
    wait_for_controller(cluster)
    admin = Admin(cluster)
    topic = topic_name("failover")
    admin.create_topic(topic, partitions=2, replication_factor=3, min_insync_replicas=2, read_mode="mafka3")
    old = partition_state(cluster, topic, 0)
    loop = ProduceLoop(cluster, topic)
    try:
        assert wait_until(lambda: len(loop.acknowledged) > 1000, 60), "production did not start"
        ray.kill(replica_handle(cluster.cluster, topic, 0, old.leader))
        count_at_kill = len(loop.acknowledged)

        new = wait_until(lambda: (s := partition_state(cluster, topic, 0)).leader_epoch > old.leader_epoch and s,
                         RECOVERY_S)
        assert new and new.leader != old.leader and new.leader in old.isr
        assert wait_until(lambda: len(loop.acknowledged) > count_at_kill + 2000, RECOVERY_S), \
            "production did not resume"
        restored = wait_until(lambda: len(partition_state(cluster, topic, 0).isr) == 3
                              and live_replicas(cluster, topic, 0) == set(old.replicas), RECOVERY_S)
        assert restored, f"replication factor not restored: {partition_state(cluster, topic, 0)}"
        leader = replica_handle(cluster.cluster, topic, 0, new.leader)
        assert wait_until(lambda: len(ray.get(leader.describe.remote())["isr"]) == 3, RECOVERY_S)
    finally:
        loop.stop()
    assert not loop.failures, loop.failures[:3]
    assert partition_state(cluster, topic, 1).leader_epoch == 0, "the other partition kept its leader"

    # The old leader runs again (restarted on its node as a follower): its epoch is fenced.
    stale = replica_handle(cluster.cluster, topic, 0, old.leader)
    with pytest.raises(errors.StaleEpoch):
        ray.get(stale.become_leader.remote(old.leader_epoch, list(old.replicas), list(old.isr)))
    with pytest.raises(errors.NotLeader):
        ray.get(stale.produce.remote(encode_batch([(None, b"stale", 1, None)]), Acks.ALL))
    with pytest.raises(errors.StaleEpoch):
        ray.get(leader.replica_fetch.remote(old.leader, old.leader_epoch, 0, -1, 1024, 0))
    assert_read_back_exactly_once_in_order(cluster, topic, loop.acknowledged)


def test_a_new_epoch_under_the_same_leader_fails_pending_acks_and_the_retries_do_not_duplicate(cluster):
    """NotLeader from a pending acks=all (the epoch moved on under it): the producer resends idempotently."""
    admin = Admin(cluster)
    topic = topic_name("epoch")
    state = admin.create_topic(topic, partitions=1, replication_factor=2, read_mode="mafka3").partitions[0]
    leader = replica_handle(cluster.cluster, topic, 0, state.leader)
    follower = replica_handle(cluster.cluster, topic, 0, state.replicas[1])
    key = keys.physical_partition(cluster.cluster, topic, 0)
    loop = ProduceLoop(cluster, topic)
    try:
        for epoch in range(1, 4):  # what the controller does when it changes the replica set
            count = len(loop.acknowledged)
            assert wait_until(lambda: len(loop.acknowledged) > count + 500, 60), "production stalled"
            current = cluster.store.get(key)
            assert cluster.store.compare_and_swap(key, {**current.value, "leader_epoch": epoch}, current.mod_revision)
            ray.get(leader.become_leader.remote(epoch, list(state.replicas), list(state.isr)))
            ray.get(follower.become_follower.remote(epoch, state.leader))
        count = len(loop.acknowledged)
        assert wait_until(lambda: len(loop.acknowledged) > count + 500, 60), "production did not resume"
    finally:
        loop.stop()
    assert not loop.failures, loop.failures[:3]
    assert_read_back_exactly_once_in_order(cluster, topic, loop.acknowledged)


def stop_daemon_child(pid: int) -> None:
    """SIGTERM a process the cluster daemon started and wait until it exited (a zombie counts)."""
    os.kill(pid, signal.SIGTERM)

    def exited() -> bool:
        try:
            return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True

    assert wait_until(exited, 30)


@pytest.fixture
def own_cluster():
    """A cluster of its own; yields the connection and the list of etcd servers the test restarts."""
    with contextlib.ExitStack() as stack:
        try:
            local = stack.enter_context(conftest.own_cluster(OWN_CLUSTER))
        except errors.ClusterNotRunning:
            # On this shared machine a Ray head may time out while it starts next to the
            # session's cluster; that is not what this test is about, so try once more.
            local = stack.enter_context(conftest.own_cluster(OWN_CLUSTER))
        yield local.connection, local.etcd_started


def test_an_etcd_restart_during_production_loses_nothing_and_changes_no_leader(own_cluster):
    connection, restarted = own_cluster
    wait_for_controller(connection)
    admin = Admin(connection)
    topic = topic_name("outage")
    admin.create_topic(topic, partitions=2, replication_factor=2, min_insync_replicas=2, read_mode="mafka3")
    before = [partition_state(connection, topic, p) for p in range(2)]
    state = connection.state
    etcd = EtcdServer(state.etcd_pid, int(state.etcd_endpoint.rpartition(":")[2]),
                      os.path.join(state.home, "etcd"), os.path.join(state.home, "etcd.log"))
    loop = ProduceLoop(connection, topic)
    try:
        assert wait_until(lambda: len(loop.acknowledged) > 1000, 60), "production did not start"
        stop_daemon_child(state.etcd_pid)
        stopped_at, count_at_stop = time.monotonic(), len(loop.acknowledged)
        with pytest.raises(errors.CoordinatorUnavailable, match="did not answer") as raised:
            admin.list_topics()  # metadata operations fail with a clear, retriable error
        assert raised.value.retriable
        assert wait_until(lambda: len(loop.acknowledged) > count_at_stop + 2000, 60), "production stopped with etcd"
        time.sleep(max(0.0, stopped_at + ETCD_DOWN_S - time.monotonic()))
        restarted.append(restart_etcd(etcd))
        assert wait_until(lambda: all(len(live_replicas(connection, topic, p)) == 2 for p in range(2)), RECOVERY_S), \
            "replicas did not register again"
        assert wait_until(lambda: connection.store.get(keys.controller(connection.cluster)) is not None, RECOVERY_S)
        count_after = len(loop.acknowledged)
        assert wait_until(lambda: len(loop.acknowledged) > count_after + 1000, RECOVERY_S), \
            "production stopped after the restart"
        time.sleep(3)  # room for a (wrong) failover to show
    finally:
        loop.stop()
    assert not loop.failures, loop.failures[:3]
    after = [partition_state(connection, topic, p) for p in range(2)]
    assert [(s.leader, s.leader_epoch) for s in after] == [(s.leader, s.leader_epoch) for s in before], \
        "no leader change for healthy partitions"
    assert all(len(s.isr) == 2 for s in after)
    assert_read_back_exactly_once_in_order(connection, topic, loop.acknowledged)


# --- a 3-member etcd loses its leader -------------------------------------------------------------

THREE_MEMBER_CLUSTER = ClusterConfig(write_nodes=2, read_nodes=0, etcd_members=3)


class GroupReader:
    """A group consumer polling on a thread; remembers (time.monotonic(), value) of every message."""

    def __init__(self, connection, topic: str):
        self.received: list[tuple[float, bytes]] = []
        self.error: BaseException | None = None
        self._consumer = Consumer(topic, group=topic_name("g"), connection=connection, from_beginning=True)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="group-reader", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self.received.extend((time.monotonic(), m.value) for m in self._consumer.poll(timeout_ms=200))
        except BaseException as error:  # the test reports it
            self.error = error

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        self._consumer.close()


def test_losing_the_etcd_leader_of_three_members_stops_neither_production_nor_consumption():
    with conftest.own_cluster(THREE_MEMBER_CLUSTER) as local:
        connection = local.connection
        wait_for_controller(connection)
        topic = topic_name("etcdleader")
        Admin(connection).create_topic(topic, partitions=2, replication_factor=2, min_insync_replicas=2,
                                       read_mode="mafka3")
        before = [partition_state(connection, topic, p) for p in range(2)]
        members = {member.name: member for member in connection.state.etcd_members}
        assert len(members) == 3
        loop, reader = ProduceLoop(connection, topic), GroupReader(connection, topic)
        try:
            assert wait_until(lambda: len(reader.received) > 500, 60), "consumption did not start"
            leader = members[wait_until(connection.store.leader_name, 30)]
            os.kill(leader.pid, signal.SIGKILL)
            killed_at, produced_at_kill, read_at_kill = time.monotonic(), len(loop.acknowledged), len(reader.received)
            assert wait_until(lambda: len(loop.acknowledged) > produced_at_kill + 2000, 60), \
                "production stopped with the etcd leader"
            assert wait_until(lambda: len(reader.received) > read_at_kill + 2000, 60), \
                "consumption stopped with the etcd leader"
            assert wait_until(lambda: connection.store.leader_name() not in (None, leader.name), 30), \
                "the two members left elected no leader"
            # Metadata still answers and changes: a second topic is created with one member down.
            Admin(connection).create_topic(topic_name("after"), partitions=1, replication_factor=2, read_mode="mafka3")
            local.etcd_started.append(restart_etcd(leader))  # the member rejoins; stopped with the cluster
        finally:
            loop.stop()
            reader.stop()
        assert not loop.failures, loop.failures[:3]
        assert reader.error is None, reader.error
        after = [partition_state(connection, topic, p) for p in range(2)]
        assert [(s.leader, s.leader_epoch) for s in after] == [(s.leader, s.leader_epoch) for s in before], \
            "an etcd election moved a partition leader"
        gaps = [b[0] - a[0] for a, b in zip(reader.received, reader.received[1:]) if a[0] >= killed_at - 1]
        print(f"longest gap between two consumed messages after the kill: {max(gaps) * 1000:.0f} ms")
        assert_read_back_exactly_once_in_order(connection, topic, loop.acknowledged)
