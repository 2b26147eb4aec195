"""Physical retention and the read path: nothing is lost silently.

A read node that stopped feeding (here its feed streams are paused by fault injection, which
keeps its recorded position where it was) holds physical retention back: segments past
``retention_ms`` stay until the node fed them. Past ``unfed_hold_ms_max`` they are deleted
anyway, and the loss shows in ``topic describe``, in ``group describe`` and as ``RecordsLost``
to the consumers, in order, after which they read on.
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
import ray

from mafka4 import errors
from mafka4.client.admin import Admin
from mafka4.client.consumer import Consumer
from mafka4.client.group_admin import GroupAdmin
from mafka4.client.producer import Producer
from mafka4.client.virtual_consumer import VirtualConsumer
from mafka4.physical.handles import replica_handle

from virtual_helpers import WAIT_S, topic_name
from wait_helpers import wait_until

MESSAGES = 200
# Small segments and a short retention, checked often: many segments pass retention quickly.
RETENTION = dict(segment_bytes_max=4096, retention_ms=500, retention_check_interval_ms=200)
# The bound of reading a topic with a loss: reached only when something is broken.
LOSS_READ_WAIT_S = 20
# How often that read re-reads the recorded loss (one etcd read) to see whether it is complete.
LOSS_RECHECK_INTERVAL_S = 0.5
# Once complete, the read goes on this long: a message returned twice would show then.
DUPLICATE_WATCH_S = 0.3


def create(admin: Admin, prefix: str, unfed_hold_ms_max: int) -> str:
    topic = topic_name(prefix)
    admin.create_topic(topic, partitions=1, replication_factor=1, virtual_partitions=2, read_replicas=1,
                       read_mode="mafka4", unfed_hold_ms_max=unfed_hold_ms_max, **RETENTION)
    return topic


def produce_one_batch_each(connection, topic: str) -> list[bytes]:
    """``MESSAGES`` keyed messages of 500 bytes, one batch each (so they fill many segments)."""
    values = [b"%d:" % n + b"x" * 500 for n in range(MESSAGES)]
    with Producer(topic, connection=connection, acks="all", linger_ms=0) as producer:
        for n, value in enumerate(values):
            producer.send_sync(value, key=b"k%d" % (n % 7))
    return values


def read_until_each_message_is_read_or_lost(consumer, admin: Admin,
                                            topic: str) -> tuple[list[bytes], list[errors.RecordsLost]]:
    """What ``consumer`` reads, and the ``RecordsLost`` it raises, until a loss was reported to it and
    every message was either read or is recorded lost (then ``DUPLICATE_WATCH_S`` more), at most
    ``LOSS_READ_WAIT_S`` in all."""
    read, lost = [], []
    deadline = time.monotonic() + LOSS_READ_WAIT_S - DUPLICATE_WATCH_S
    while True:
        poll_for(consumer, min(LOSS_RECHECK_INTERVAL_S, deadline - time.monotonic()), read, lost)
        if (lost and each_message_is_read_or_lost(read, admin.read_loss(topic))) or time.monotonic() >= deadline:
            break
    poll_for(consumer, DUPLICATE_WATCH_S, read, lost)
    return read, lost


def poll_for(consumer, duration_s: float, read: list[bytes], lost: list[errors.RecordsLost]) -> None:
    """Poll for ``duration_s``, adding the values read to ``read`` and each ``RecordsLost`` to ``lost``."""
    deadline = time.monotonic() + duration_s
    while (remaining_s := deadline - time.monotonic()) > 0:
        try:
            read.extend(m.value for m in consumer.poll(timeout_ms=max(int(remaining_s * 1000), 1)))
        except errors.RecordsLost as error:  # once per VP that lacked records there, then reading goes on
            lost.append(error)


def each_message_is_read_or_lost(read: list[bytes], losses: dict[int, list[list[int]]]) -> bool:
    # One batch per message on one partition: message n is physical offset n.
    survived = {int(value.split(b":")[0]) for value in read}
    lost_offsets = {n for first, end in losses.get(0, []) for n in range(first, end)}
    return survived | lost_offsets == set(range(MESSAGES))


def log_start(connection, topic: str) -> int:
    leader = Admin(connection).topic_metadata(topic).partitions[0].leader
    return ray.get(replica_handle(connection.cluster, topic, 0, leader).list_offsets.remote(), timeout=WAIT_S)[0]


def test_retention_waits_for_a_read_node_that_stopped_feeding_and_nothing_is_lost(cluster):
    admin = Admin(cluster)
    topic = create(admin, "hold", unfed_hold_ms_max=600_000)
    admin.inject_fault(topic, kind="feed", replica="r0", paused=True)
    values = produce_one_batch_each(cluster, topic)
    time.sleep(3)  # six times retention_ms, with a retention pass every 200 ms
    assert log_start(cluster, topic) == 0, "retention deleted segments the read node had not fed"
    admin.inject_fault(topic, kind="feed", replica="r0", paused=False)
    read = []
    with VirtualConsumer(topic, connection=cluster, from_beginning=True) as consumer:
        deadline = time.monotonic() + WAIT_S
        while len(read) < MESSAGES and time.monotonic() < deadline:
            read.extend(m.value for m in consumer.poll(timeout_ms=500))
    assert sorted(read) == sorted(values)
    assert admin.describe_topic(topic)["read_loss"] == {}
    # Fed now: retention goes on.
    assert wait_until(lambda: log_start(cluster, topic) > 0, 30), "retention never resumed"


def test_past_the_hold_bound_the_loss_is_reported_in_describe_and_to_consumers(cluster):
    admin = Admin(cluster)
    topic, group = create(admin, "lost", unfed_hold_ms_max=1000), topic_name("g")
    admin.inject_fault(topic, kind="feed", replica="r0", paused=True)
    values = produce_one_batch_each(cluster, topic)
    assert wait_until(lambda: log_start(cluster, topic) > 0, 30), "retention held past its bound"
    deleted_up_to = log_start(cluster, topic)
    admin.inject_fault(topic, kind="feed", replica="r0", paused=False)
    assert wait_until(lambda: admin.describe_topic(topic)["read_loss"] != {}, 30), "the loss was not recorded"
    losses = admin.describe_topic(topic)["read_loss"]
    assert list(losses) == [0] and losses[0][0][0] == 0 and losses[0][0][1] >= deleted_up_to

    with Consumer(topic, group=group, connection=cluster, from_beginning=True) as consumer:
        read, lost = read_until_each_message_is_read_or_lost(consumer, admin, topic)
    assert lost and all("retention deleted them before every read node had fed them" in str(e) for e in lost)
    # Retention may go on deleting (past the bound) while the node catches up: judge by the final record.
    losses = admin.describe_topic(topic)["read_loss"]
    with GroupAdmin(cluster) as groups:
        assert groups.describe_group(group).read_loss == {topic: losses}
    survived = [int(value.split(b":")[0]) for value in read]
    assert len(survived) == len(set(survived)) and survived, "each survivor once, and some survive"
    lost_offsets = {n for first, end in losses[0] for n in range(first, end)}
    # One batch per message on one partition: message n is physical offset n.
    assert set(survived) | lost_offsets == set(range(MESSAGES)) and not set(survived) & lost_offsets, \
        "every message is either read or reported lost, never both, never neither"
    described = subprocess.run([sys.executable, "-m", "mafka4.cli", "topic", "describe", topic], capture_output=True,
                               timeout=120)
    assert described.returncode == 0 and b"LOST" in described.stdout and b"unfed_hold_ms_max" in described.stdout
    assert len(values) == MESSAGES


def test_a_feed_fault_names_the_read_node_it_needs(cluster):
    admin = Admin(cluster)
    topic = create(admin, "fault", unfed_hold_ms_max=600_000)
    with pytest.raises(errors.InvalidConfig, match="needs replica=<read node id>"):
        admin.inject_fault(topic, kind="feed", paused=True)
