"""A confluent-kafka consumer group on a Mafka4-mode topic, through the read node's Kafka listener.

Two members of one group (librdkafka, SASL SCRAM-SHA-256 as the cluster's admin, the eager
``range`` assignor, manual synchronous commits after each message) read a topic of 2 physical
partitions and 4 VPs while a confluent-kafka producer writes keyed messages. Midway a VP is
split (``Admin.scale``, what ``mafka4 scale`` runs), and then one member leaves. The same group on a
Mafka3-mode topic (its physical partitions are the partitions, one to one; no split). Checked:

- every produced message is read, and read twice only if its commit failed (a commit answered
  is never read again by the group: the next owner starts at the committed offset);
- each key's messages are first seen in the order produced, across the split and the leave: a
  child VP is assigned only once the group committed its parent to its sealed end;
- the split's children were read by the group, and the leaver's VPs by the member that stayed.

And a client with a wrong password is refused with librdkafka's authentication error.
"""

from __future__ import annotations

import collections
import secrets
import threading
import time
from pathlib import Path

import pytest

from mafka4.client.admin import Admin
from mafka4.metadata import keys
from mafka4.security.admin_credential import CREDENTIAL_FILE, load_credential

confluent_kafka = pytest.importorskip("confluent_kafka")

MESSAGES = 1500
KEYS = 30
PRODUCE_PAUSE_S = 0.01  # about 100 messages a second: the split and the leave happen while it runs
WAIT_S = 300


def kafka_bootstrap(cluster) -> str:
    addresses = [item.value["kafka"] for item in cluster.store.get_prefix(keys.read_nodes_prefix(cluster.cluster))
                 if item.value.get("kafka")]
    assert addresses, "every read node names its Kafka listener in its liveness key"
    return ",".join(addresses)


def settings(cluster) -> dict:
    user, password = load_credential(Path(cluster.state.home) / CREDENTIAL_FILE)
    return {"bootstrap.servers": kafka_bootstrap(cluster), "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": "SCRAM-SHA-256", "sasl.username": user, "sasl.password": password}


class Deliveries:
    """Every message the members returned, in the order they returned them (one lock: a global order)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.rows: list[tuple[str, str, str, int, int]] = []  # member, key, value, partition, offset
        self.uncommitted: set[tuple[str, str]] = set()  # (key, value) whose commit failed

    def add(self, member: str, message) -> None:
        with self.lock:
            self.rows.append((member, message.key().decode(), message.value().decode(), message.partition(),
                              message.offset()))

    def failed_commit(self, message) -> None:
        with self.lock:
            self.uncommitted.add((message.key().decode(), message.value().decode()))

    def seen(self) -> set[tuple[str, str]]:
        with self.lock:
            return {(key, value) for _, key, value, _, _ in self.rows}

    def by_member(self, member: str) -> int:
        with self.lock:
            return sum(1 for row in self.rows if row[0] == member)


class GroupMember(threading.Thread):
    def __init__(self, cluster, topic: str, group: str, name: str, deliveries: Deliveries):
        super().__init__(name=name, daemon=True)
        self.consumer = confluent_kafka.Consumer({
            **settings(cluster), "group.id": group, "client.id": name, "auto.offset.reset": "earliest",
            "enable.auto.commit": False, "partition.assignment.strategy": "range", "session.timeout.ms": 10_000,
            "heartbeat.interval.ms": 1000, "topic.metadata.refresh.interval.ms": 2000})
        self.consumer.subscribe([topic])
        self.deliveries, self.stopping, self.errors = deliveries, threading.Event(), []
        self.start()

    def run(self) -> None:
        try:
            while not self.stopping.is_set():
                message = self.consumer.poll(0.5)
                if message is None:
                    continue
                if message.error() is not None:
                    if message.error().fatal():  # others (a topic not in the metadata yet, ...) are retried
                        self.errors.append(str(message.error()))
                    continue
                self.deliveries.add(self.name, message)
                try:
                    self.consumer.commit(message=message, asynchronous=False)
                except confluent_kafka.KafkaException:
                    self.deliveries.failed_commit(message)  # it may be read again (at least once)
        finally:
            self.consumer.close()  # commits nothing more (manual commits), leaves the group

    def leave(self) -> None:
        self.stopping.set()
        self.join(60)
        assert not self.is_alive(), f"{self.name} did not close"


def produce(cluster, topic: str, produced: list, done: threading.Event) -> None:
    """Produce keyed messages; ``produced`` gets each one acknowledged. One request in flight, so
    that a retried request cannot land after a later one: each key's messages are stored in the
    order produced."""
    producer = confluent_kafka.Producer({**settings(cluster), "acks": "all", "enable.idempotence": False,
                                         "max.in.flight.requests.per.connection": 1})

    def acknowledged(error, message) -> None:
        if error is None:
            produced.append((message.key().decode(), message.value().decode()))

    try:
        for index in range(MESSAGES):
            producer.produce(topic, key=f"key-{index % KEYS}", value=f"value-{index}", on_delivery=acknowledged)
            producer.poll(0)
            time.sleep(PRODUCE_PAUSE_S)
        assert producer.flush(120) == 0, "every message was answered"
    finally:
        done.set()


def wait_until(condition, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.2)
    return condition()


@pytest.mark.parametrize("read_mode", ["mafka4", "mafka3"])
def test_a_group_of_two_reads_everything_once_in_key_order_across_a_split_and_a_leave(cluster, read_mode):
    """Mafka4 mode: 4 VPs, one split mid-stream; Mafka3 mode: 4 physical partitions, one to one (no split)."""
    topic, group = f"kafka-group-{secrets.token_hex(3)}", f"kgroup-{secrets.token_hex(3)}"
    admin = Admin(cluster)
    if read_mode == "mafka4":
        admin.create_topic(topic, partitions=2, virtual_partitions=4)
    else:
        admin.create_topic(topic, partitions=4, read_mode="mafka3")
    deliveries, produced, done = Deliveries(), [], threading.Event()
    producer = threading.Thread(target=produce, args=(cluster, topic, produced, done), daemon=True)
    producer.start()
    members = [GroupMember(cluster, topic, group, f"m{index}", deliveries) for index in range(2)]
    try:
        assert wait_until(lambda: all(deliveries.by_member(m.name) > 0 for m in members), WAIT_S), \
            "both members read"
        assert wait_until(lambda: len(produced) >= MESSAGES // 3, WAIT_S)
        if read_mode == "mafka4":
            admin.scale(topic, 5)  # splits one VP mid-stream: VP 4 and 5 are its children
        assert wait_until(lambda: len(produced) >= 2 * MESSAGES // 3, WAIT_S)
        members[0].leave()
        before = deliveries.by_member(members[1].name)
        assert wait_until(done.is_set, WAIT_S), "the producer finished"
        assert len(produced) == MESSAGES, "every message was acknowledged"
        assert wait_until(lambda: set(produced) <= deliveries.seen(), WAIT_S), (
            f"{len(set(produced) - deliveries.seen())} messages were not read")
        assert deliveries.by_member(members[1].name) > before, "the member that stayed read on"
    finally:
        for member in members:
            if member.is_alive():
                member.leave()
    assert not [error for member in members for error in member.errors]
    rows = deliveries.rows
    counts = collections.Counter((key, value) for _, key, value, _, _ in rows)
    twice = {row for row, count in counts.items() if count > 1}
    assert twice <= deliveries.uncommitted, f"read twice although committed: {sorted(twice - deliveries.uncommitted)[:5]}"
    assert set(counts) == set(produced), "nothing but what was produced"
    first_seen = collections.defaultdict(list)
    seen = set()
    for _, key, value, _, _ in rows:
        if (key, value) not in seen:
            seen.add((key, value))
            first_seen[key].append(int(value.removeprefix("value-")))
    assert all(values == sorted(values) for values in first_seen.values()), "each key's messages in produced order"
    if read_mode == "mafka4":
        assert {partition for _, _, _, partition, _ in rows} & {4, 5}, "the split's children were read"
    else:
        assert {partition for _, _, _, partition, _ in rows} == {0, 1, 2, 3}


def test_a_wrong_password_is_refused_to_a_confluent_kafka_client(cluster):
    errors = []
    consumer = confluent_kafka.Consumer({**settings(cluster), "sasl.password": "not-the-password",
                                         "group.id": f"kgroup-{secrets.token_hex(3)}",
                                         "error_cb": lambda error: errors.append(error)})
    try:
        with pytest.raises(confluent_kafka.KafkaException):
            consumer.list_topics(timeout=10)
    finally:
        consumer.close()
    assert any(error.code() == confluent_kafka.KafkaError._AUTHENTICATION for error in errors), errors
