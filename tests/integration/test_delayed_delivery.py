"""Delayed delivery on a real cluster (issue 41): never early, all delivered, cancelled ones never.

A producer sends delayed messages (2 to 7 s) between messages without delay; some are cancelled
soon after. Meanwhile the delay scheduler is killed (the controller starts it again and it rebuilds
its schedule from the delay topic) and so is the read node leading the topic's VPs (they fail over
to the other read node). A group member records when it first sees each message; checked against
the due time the producer's header carries, on the same clock. Bad input gets errors that name
the problem.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import psutil
import pytest
import ray

from mafka4.client.admin import Admin
from mafka4.client.consumer import Consumer
from mafka4.client.producer import Producer
from mafka4.client.topic_admin import cancel_delayed, describe_topic
from mafka4.delays import DELIVER_AT_HEADER, MessageId, decode_deliver_at, delay_topic_name
from mafka4.errors import DelayOutOfRange, InvalidLaneName, InvalidMessageId, InvalidRecord, UnknownTopic
from mafka4.limits import DELAY_MS_MAX_DEFAULT
from mafka4.virtual.handles import read_node_handle

from fault_helpers import active_controller, vp_state
from virtual_helpers import topic_name
from wait_helpers import wait_until

pytestmark = pytest.mark.integration

DELAYED, PLAIN, CANCELLED = 240, 60, 24
DELAY_MS_FIRST, DELAY_MS_SPREAD = 2000, 5000


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class Member:
    """A group member polling in a thread: (first time seen in ms, due time or None) per value."""

    def __init__(self, connection, topic: str):
        self.seen: dict[bytes, tuple[int, int | None]] = {}
        self.duplicates = 0
        self._stop = threading.Event()
        self._consumer = Consumer(topic, group="delays-reader", connection=connection, from_beginning=True,
                                  auto_commit_interval_ms=500)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for message in self._consumer.poll(200):
                due = next((decode_deliver_at(v) for n, v in message.headers if n == DELIVER_AT_HEADER), None)
                if message.value in self.seen:
                    self.duplicates += 1
                else:
                    self.seen[message.value] = (now_ms(), due)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(30)
        self._consumer.close()


def scheduler_pid(connection) -> int | None:
    controller = psutil.Process(active_controller(connection)["pid"])
    found = [child.pid for child in controller.children()
             if "mafka4.scheduling.delay_service" in " ".join(child.cmdline())]
    return found[0] if found else None


def test_delayed_messages_come_at_their_time_through_a_scheduler_kill_and_a_vp_failover(read_cluster):
    topic = topic_name("delays")
    admin = Admin(read_cluster)
    admin.create_topic(topic, partitions=2, read_mode="mafka4", virtual_partitions=2, read_replicas=2)
    member = Member(read_cluster, topic)
    futures = {}
    with Producer(topic, connection=read_cluster, linger_ms=2) as producer:
        for n in range(DELAYED + PLAIN):
            value = b"m%d" % n
            if n % 5 == 4:
                producer.send(value, key=b"k%d" % (n % 7))
                continue
            delay_ms = DELAY_MS_FIRST + (n * 7919) % DELAY_MS_SPREAD
            futures[value] = producer.send(value, key=b"k%d" % (n % 7), delay_ms=delay_ms)
    ids = {value: MessageId((sent := future.result(30)).partition, sent.offset) for value, future in futures.items()}
    # The latest-due ones are cancelled: seconds before they are due, so the cancel is read in time.
    cancelled = sorted(ids, key=lambda value: -(int(value[1:]) * 7919 % DELAY_MS_SPREAD))[:CANCELLED]
    for value in cancelled:
        cancel_delayed(topic, str(ids[value]), where=read_cluster)

    pid = wait_until(lambda: scheduler_pid(read_cluster), 30)
    assert pid is not None, "the active controller runs no delay scheduler"
    os.kill(pid, signal.SIGKILL)
    leader = vp_state(read_cluster, topic, 0).leader
    ray.kill(read_node_handle(read_cluster.cluster, leader))

    expected = set(ids) - set(cancelled) | {b"m%d" % n for n in range(DELAYED + PLAIN) if n % 5 == 4}
    try:
        assert wait_until(lambda: expected <= set(member.seen), 120), \
            f"{len(expected - set(member.seen))} of {len(expected)} messages never came"
        last_due = max(d for _, d in member.seen.values() if d is not None)
        time.sleep(max(0, (last_due - now_ms()) / 1000) + 3)  # room for a cancelled one to (wrongly) come
    finally:
        member.close()
    early = [(value, seen_ms, due_ms) for value, (seen_ms, due_ms) in member.seen.items()
             if due_ms is not None and seen_ms < due_ms]
    assert not early, f"{len(early)} delayed messages came before their due time, e.g. {early[:3]}"
    late = sorted(seen_ms - due_ms for seen_ms, due_ms in member.seen.values() if due_ms is not None)
    print(f"delayed messages seen after their due time (ms): min {late[0]}, median {late[len(late) // 2]}, "
          f"max {late[-1]}; {member.duplicates} seen twice")
    assert not set(cancelled) & set(member.seen), sorted(set(cancelled) & set(member.seen))[:5]
    assert set(member.seen) == expected
    assert all(member.seen[value][1] is not None for value in ids if value in member.seen)
    assert wait_until(lambda: scheduler_pid(read_cluster) not in (None, pid), 30), "the scheduler was not started again"
    delays = wait_until(lambda: (d := describe_topic(topic, where=read_cluster)["delays"]) and d["waiting"] == 0 and d, 30)
    assert delays, describe_topic(topic, where=read_cluster)["delays"]


def test_bad_delays_and_cancels_are_refused_with_errors_that_name_them(read_cluster):
    topic = topic_name("delays-bad")
    Admin(read_cluster).create_topic(topic, partitions=1, read_mode="mafka4")
    with Producer(topic, connection=read_cluster) as producer:
        for bad in (-1, 0, 999, DELAY_MS_MAX_DEFAULT + 1):
            with pytest.raises(DelayOutOfRange, match="out of range"):
                producer.send(b"x", delay_ms=bad)
        with pytest.raises(DelayOutOfRange, match="past"):
            producer.send(b"x", deliver_at_ms=now_ms() - 10_000)
        with pytest.raises(InvalidRecord, match="both"):
            producer.send(b"x", delay_ms=5000, deliver_at_ms=now_ms() + 5000)
        with pytest.raises(InvalidRecord, match="partition"):
            producer.send(b"x", partition=0, delay_ms=5000)
        with pytest.raises(InvalidLaneName, match="mafka4"):
            producer.send(b"x", lane="mafka4-delays")
        with pytest.raises(UnknownTopic):
            cancel_delayed(topic, "0:0", where=read_cluster)  # no delayed message yet: no delay topic
        producer.send_sync(b"x", delay_ms=60_000)
    assert delay_topic_name(topic) in Admin(read_cluster).list_topics()
    with pytest.raises(InvalidMessageId, match="PARTITION:OFFSET"):
        cancel_delayed(topic, "zero", where=read_cluster)
    with pytest.raises(InvalidMessageId, match="partition 5"):
        cancel_delayed(topic, "5:0", where=read_cluster)
    Admin(read_cluster).delete_topic(topic)
    assert wait_until(lambda: delay_topic_name(topic) not in Admin(read_cluster).list_topics(), 30)
