"""Retries and dead letters on a real cluster (issue 41).

A group's handler fails certain keys always and some messages once. Unordered: the always-failing
messages (and only they) reach the dead-letter topic after ``deliveries_max`` deliveries, the rest
are handled, the once-failing ones on their second delivery; a replay sends the dead letters back
to the topic once. Ordered: each key's messages are handled in produce order, a failing one holding
its key's VP until it succeeds or is dead-lettered. Bad input gets errors that name the problem.
"""

from __future__ import annotations

import collections
import threading

import pytest

from mafka4.client.admin import Admin
from mafka4.client.consumer import Consumer
from mafka4.client.dead_letter_queue import read_dead_letters, replay_dead_letters
from mafka4.client.message import Message
from mafka4.client.producer import Producer
from mafka4.client.retry_policy import RetryPolicy
from mafka4.dead_letters import REPLAY_KEY_HEADER
from mafka4.errors import InvalidConfig, PartitionNotAssigned, UnknownTopic

from virtual_helpers import topic_name
from wait_helpers import wait_until

pytestmark = pytest.mark.integration

KEYS = [b"k%d" % i for i in range(10)]
POISON = {b"k3", b"k7"}  # every delivery fails
MESSAGES = 200
WAIT_S = 120


def produce(connection, topic: str) -> list[tuple[bytes, int]]:
    """MESSAGES keyed messages "<key>:<n>", n counting per key; returns (key, n) in produce order."""
    sent, counts = [], collections.Counter()
    with Producer(topic, connection=connection, linger_ms=2) as producer:
        for i in range(MESSAGES):
            key = KEYS[i % len(KEYS)]
            n = counts[key]
            counts[key] += 1
            producer.send(b"%s:%d" % (key, n), key=key)
            sent.append((key, n))
    return sent


class Handler:
    """Fails every delivery of a poison key, and the first delivery of every 4th message of the others."""

    def __init__(self):
        self.handled: list[tuple[bytes, int, int]] = []  # (key, n, delivery_count), in handling order
        self.failed = collections.Counter()
        self.lock = threading.Lock()

    def __call__(self, message: Message) -> None:
        key, n = message.value.split(b":")
        with self.lock:
            if message.key in POISON or (int(n) % 4 == 0 and message.delivery_count == 1):
                self.failed[message.value] += 1
                raise RuntimeError(f"cannot handle {message.value.decode()}")
            self.handled.append((key, int(n), message.delivery_count))


def run_members(connection, topic: str, group: str, policy: RetryPolicy, handler: Handler, members: int,
                done) -> None:
    stop = threading.Event()
    consumers = [Consumer(topic, group=group, connection=connection, from_beginning=True, retry_policy=policy,
                          auto_commit_interval_ms=500) for _ in range(members)]
    threads = [threading.Thread(target=consumer.run, args=(handler, stop), daemon=True) for consumer in consumers]
    for thread in threads:
        thread.start()
    try:
        assert wait_until(done, WAIT_S), f"handled {len(handler.handled)}; failures {sum(handler.failed.values())}"
    finally:
        stop.set()
        for thread in threads:
            thread.join(30)
        for consumer in consumers:
            consumer.close()


def test_unordered_retries_handle_transient_failures_and_dead_letter_exactly_the_poison_ones(read_cluster):
    topic, group = topic_name("retries"), "billing"
    Admin(read_cluster).create_topic(topic, partitions=2, read_mode="mafka4", virtual_partitions=2)
    sent = produce(read_cluster, topic)
    poison = {b"%s:%d" % (key, n) for key, n in sent if key in POISON}
    healthy = {(key, n) for key, n in sent if key not in POISON}
    policy = RetryPolicy(backoff_ms=[300, 600], backoff_ms_max=1000, deliveries_max=3)
    handler = Handler()

    def done() -> bool:
        if not {(k, n) for k, n, _ in handler.handled} >= healthy:
            return False
        try:
            return len(read_dead_letters(topic, group, read_cluster).letters) >= len(poison)
        except UnknownTopic:
            return False  # no dead letter yet

    run_members(read_cluster, topic, group, policy, handler, 2, done)
    found = read_dead_letters(topic, group, read_cluster)
    assert {message.value for message, _ in found.letters} == poison
    assert all(letter.delivery_count == 3 and "cannot handle" in letter.error for _, letter in found.letters)
    assert {(k, n) for k, n, _ in handler.handled} == healthy
    retried = {(k, n): count for k, n, count in handler.handled if n % 4 == 0}
    assert retried and all(count == 2 for count in retried.values()), retried

    assert replay_dead_letters(topic, group, read_cluster).replayed == len(poison)
    assert replay_dead_letters(topic, group, read_cluster).replayed == 0  # each dead letter once
    replayed = []
    with Consumer(topic, group="audit", connection=read_cluster, from_beginning=True) as reader:
        wait_until(lambda: replayed.extend(m for m in reader.poll(500) if any(n == REPLAY_KEY_HEADER for n, _ in m.headers))
                   or len(replayed) >= len(poison), WAIT_S)
    assert sorted(m.value for m in replayed) == sorted(poison)


def test_ordered_retries_keep_each_key_in_order_and_hold_only_its_vp(read_cluster):
    topic, group = topic_name("ordered"), "ledger"
    Admin(read_cluster).create_topic(topic, partitions=2, read_mode="mafka4", virtual_partitions=4)
    sent = produce(read_cluster, topic)
    healthy = [(key, n) for key, n in sent if key not in POISON]
    # Short holds: a key's poison messages are dead-lettered one after another (each holds the key's VP).
    policy = RetryPolicy(backoff_ms=[100], backoff_ms_max=100, deliveries_max=2, mode="ordered")
    handler = Handler()
    run_members(read_cluster, topic, group, policy, handler, 1,
                lambda: {(k, n) for k, n, _ in handler.handled} >= set(healthy))
    by_key = collections.defaultdict(list)
    for key, n, _ in handler.handled:
        if not by_key[key] or by_key[key][-1] != n:  # at least once: a redelivery repeats the last
            by_key[key].append(n)
    for key, ns in by_key.items():
        assert ns == sorted(ns), f"key {key!r} handled out of order: {ns[:20]}"
    assert {message.value for message, _ in read_dead_letters(topic, group, read_cluster).letters} == \
        {b"%s:%d" % (key, n) for key, n in sent if key in POISON}


def test_bad_nacks_and_replays_are_refused_with_errors_that_name_them(read_cluster):
    topic = topic_name("bad-nacks")
    Admin(read_cluster).create_topic(topic, partitions=1, read_mode="mafka4")
    with Consumer(topic, connection=read_cluster) as loner:
        with pytest.raises(InvalidConfig, match="no group"):
            loner.nack(Message(topic, 0, 0, 0, None, b"", ()))
    with Consumer(topic, group="g", connection=read_cluster, from_beginning=True) as member:
        member.poll(500)
        with pytest.raises(PartitionNotAssigned, match="does not own partition 7"):
            member.nack(Message(topic, 7, 0, 0, None, b"", ()))
        with pytest.raises(PartitionNotAssigned, match="this consumer reads"):
            member.nack(Message("elsewhere", 0, 0, 0, None, b"", ()))
        with pytest.raises(InvalidConfig, match="retry_after_ms"):
            member.nack(Message(topic, member.assignment()[0], 0, 0, None, b"", ()), retry_after_ms=-1)
    with pytest.raises(UnknownTopic, match="no dead letters"):
        read_dead_letters(topic, "g", read_cluster)
    with Producer(topic, connection=read_cluster) as producer:
        producer.send_sync(b"doomed", key=b"x")
    with Consumer(topic, group="g2", connection=read_cluster, from_beginning=True,
                  retry_policy=RetryPolicy(deliveries_max=1)) as member:
        messages = []
        wait_until(lambda: messages.extend(member.poll(500)) or messages, 30)
        member.nack(messages[0], error="boom")
    Admin(read_cluster).delete_topic(topic)
    with pytest.raises(UnknownTopic, match="no longer exists"):
        replay_dead_letters(topic, "g2", read_cluster)
    assert [m.value for m, _ in read_dead_letters(topic, "g2", read_cluster).letters] == [b"doomed"]


def test_mafka3_mode_delays_retries_and_dead_letters_on_the_same_code(read_cluster):
    """A mafka3-mode topic (consumers read its physical partitions) gets delays, retries and dead
    letters too: they live in the client, the scheduler and companion topics, not the read topology."""
    topic, group = topic_name("mafka3-retries"), "m3"
    Admin(read_cluster).create_topic(topic, partitions=2, read_mode="mafka3")
    with Producer(topic, connection=read_cluster, linger_ms=2) as producer:
        for n in range(40):
            producer.send(b"k%d:%d" % (n % 4, n), key=b"k%d" % (n % 4), delay_ms=1000 if n % 2 else None)
    policy = RetryPolicy(backoff_ms=[300], backoff_ms_max=300, deliveries_max=2)
    handler = Handler()  # k3 and k7 are poison: here k3's ten messages

    def done() -> bool:
        try:
            dead = read_dead_letters(topic, group, read_cluster).letters
        except UnknownTopic:
            return False
        return len(handler.handled) >= 30 and len(dead) >= 10

    run_members(read_cluster, topic, group, policy, handler, 1, done)
    assert {(k, n) for k, n, _ in handler.handled} == {(b"k%d" % (n % 4), n) for n in range(40) if n % 4 != 3}
    assert {m.value for m, _ in read_dead_letters(topic, group, read_cluster).letters} == \
        {b"k3:%d" % n for n in range(40) if n % 4 == 3}
