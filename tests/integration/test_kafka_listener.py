"""Kafka's own tools against a running cluster's Kafka listener: kcat (librdkafka), confluent-kafka
and kafka-python.

Every client authenticates with SASL SCRAM-SHA-256 as the cluster's admin (the listener refuses
anything else), reads the metadata, produces keyed records and reads them all back: from a
Mafka4-mode topic (its VPs are the partitions Kafka clients see) and from a Mafka3-mode one. A
wrong password is refused, and the listener goes on serving. Idempotent producers (confluent-kafka
with enable.idempotence, kafka-python by default) get their producer id from InitProducerId and
have every record appended once. kafka-python's admin client
creates a topic (CreateTopics) that kcat then lists, and deletes it (DeleteTopics).
"""

from __future__ import annotations

import collections
import secrets
import shutil
import subprocess
from pathlib import Path

import pytest

from mafka4.client.admin import Admin
from mafka4.metadata import keys
from mafka4.security.admin_credential import CREDENTIAL_FILE, load_credential

pytestmark = pytest.mark.skipif(shutil.which("kcat") is None, reason="needs kcat (Debian's package; .ci/run installs it)")

KCAT_TIMEOUT_S = 120
LINES = 10_000
KEYS = 50


def kafka_bootstrap(cluster) -> str:
    prefix = keys.read_nodes_prefix(cluster.cluster)
    addresses = [item.value["kafka"] for item in cluster.store.get_prefix(prefix) if item.value.get("kafka")]
    assert addresses, "every read node names its Kafka listener in its liveness key"
    return ",".join(addresses)


def sasl(cluster, password: str | None = None) -> list[str]:
    user, stored = load_credential(Path(cluster.state.home) / CREDENTIAL_FILE)
    return ["-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanisms=SCRAM-SHA-256",
            "-X", f"sasl.username={user}", "-X", f"sasl.password={password or stored}"]


def kcat(cluster, *arguments: str, stdin: bytes | None = None, password: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["kcat", "-b", kafka_bootstrap(cluster), *sasl(cluster, password), *arguments], input=stdin,
                          capture_output=True, timeout=KCAT_TIMEOUT_S)


def keyed_lines() -> list[tuple[str, str]]:
    return [(f"key-{index % KEYS}", f"value-{index}") for index in range(LINES)]


def produce_and_consume_with_kcat(cluster, topic: str) -> list[tuple[str, str, int, int]]:
    lines = keyed_lines()
    produced = kcat(cluster, "-P", "-t", topic, "-K", ":", "-X", "acks=all",
                    stdin="".join(f"{key}:{value}\n" for key, value in lines).encode())
    assert produced.returncode == 0, produced.stderr.decode()
    consumed = kcat(cluster, "-C", "-t", topic, "-o", "beginning", "-e", "-q", "-f", "%k\t%s\t%p\t%o\n")
    assert consumed.returncode == 0, consumed.stderr.decode()
    rows = [line.split("\t") for line in consumed.stdout.decode().splitlines() if line]
    return [(key, value, int(partition), int(offset)) for key, value, partition, offset in rows]


def check_everything_once_in_key_order(rows: list[tuple[str, str, int, int]]) -> None:
    assert sorted((key, value) for key, value, _, _ in rows) == sorted(keyed_lines()), "each line once"
    by_key = collections.defaultdict(list)
    partitions_of_key = collections.defaultdict(set)
    for key, value, partition, offset in sorted(rows, key=lambda row: (row[2], row[3])):
        by_key[key].append(int(value.removeprefix("value-")))
        partitions_of_key[key].add(partition)
    assert all(len(partitions) == 1 for partitions in partitions_of_key.values()), "a key lives in one partition"
    assert all(values == sorted(values) for values in by_key.values()), "each key's lines in the order produced"


def test_kcat_lists_the_metadata_with_a_mafka4_topics_vps_as_its_partitions(cluster):
    topic = f"kafka-meta-{secrets.token_hex(3)}"
    Admin(cluster).create_topic(topic, partitions=2, virtual_partitions=3)
    listed = kcat(cluster, "-L", "-t", topic)
    assert listed.returncode == 0, listed.stderr.decode()
    text = listed.stdout.decode()
    assert f'topic "{topic}" with 3 partitions' in text, text
    assert "broker" in text


def test_kcat_produces_keyed_lines_and_reads_them_all_from_a_mafka4_topic(cluster):
    topic = f"kafka-m4-{secrets.token_hex(3)}"
    Admin(cluster).create_topic(topic, partitions=2, virtual_partitions=4)
    rows = produce_and_consume_with_kcat(cluster, topic)
    check_everything_once_in_key_order(rows)
    assert {partition for _, _, partition, _ in rows} == {0, 1, 2, 3}, "the VPs are the partitions"


def test_kcat_produces_keyed_lines_and_reads_them_all_from_a_mafka3_topic(cluster):
    topic = f"kafka-m3-{secrets.token_hex(3)}"
    Admin(cluster).create_topic(topic, partitions=3, read_mode="mafka3")
    rows = produce_and_consume_with_kcat(cluster, topic)
    check_everything_once_in_key_order(rows)
    assert {partition for _, _, partition, _ in rows} == {0, 1, 2}


def test_a_wrong_password_is_refused_and_the_listener_goes_on_serving(cluster):
    refused = kcat(cluster, "-L", "-m", "10", password="not-the-password")
    assert refused.returncode != 0
    assert b"Authentication failed" in refused.stderr or b"SASL" in refused.stderr, refused.stderr.decode()
    assert kcat(cluster, "-L").returncode == 0


def test_an_idempotent_confluent_kafka_producer_has_each_keyed_line_appended_once_in_order(cluster):
    confluent_kafka = pytest.importorskip("confluent_kafka")

    topic = f"kafka-idem-{secrets.token_hex(3)}"
    Admin(cluster).create_topic(topic, partitions=2, virtual_partitions=4)
    user, password = load_credential(Path(cluster.state.home) / CREDENTIAL_FILE)
    producer = confluent_kafka.Producer({
        "bootstrap.servers": kafka_bootstrap(cluster), "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanisms": "SCRAM-SHA-256", "sasl.username": user, "sasl.password": password,
        "enable.idempotence": True, "acks": "all", "linger.ms": 5})
    failures, delivered = [], []

    def report(error, message) -> None:
        (failures if error is not None else delivered).append(error or message.offset())

    for key, value in keyed_lines():
        while True:
            try:
                producer.produce(topic, key=key.encode(), value=value.encode(), on_delivery=report)
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                producer.poll(0.1)
        producer.poll(0)
    assert producer.flush(KCAT_TIMEOUT_S) == 0, "every message delivered or failed within the timeout"
    assert not failures, failures[:5]
    assert len(delivered) == LINES
    consumed = kcat(cluster, "-C", "-t", topic, "-o", "beginning", "-e", "-q", "-f", "%k\t%s\t%p\t%o\n")
    assert consumed.returncode == 0, consumed.stderr.decode()
    rows = [line.split("\t") for line in consumed.stdout.decode().splitlines() if line]
    check_everything_once_in_key_order([(key, value, int(partition), int(offset))
                                        for key, value, partition, offset in rows])


def test_kafka_python_produces_and_consumes_a_round_trip(cluster):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    topic = f"kafka-py-{secrets.token_hex(3)}"
    Admin(cluster).create_topic(topic, partitions=2, virtual_partitions=2)
    user, password = load_credential(Path(cluster.state.home) / CREDENTIAL_FILE)
    settings = dict(bootstrap_servers=kafka_bootstrap(cluster).split(","), security_protocol="SASL_PLAINTEXT",
                    sasl_mechanism="SCRAM-SHA-256", sasl_plain_username=user, sasl_plain_password=password)
    producer = KafkaProducer(acks="all", **settings)  # idempotent: kafka-python's default
    try:
        for index in range(100):
            producer.send(topic, key=b"k%d" % (index % 7), value=b"v%d" % index).get(timeout=30)
    finally:
        producer.close()
    consumer = KafkaConsumer(consumer_timeout_ms=10_000, **settings)
    try:
        consumer.assign([TopicPartition(topic, partition) for partition in (0, 1)])
        consumer.seek_to_beginning()
        values = {message.value for message in consumer}
    finally:
        consumer.close()
    assert values == {b"v%d" % index for index in range(100)}


def test_kafka_pythons_admin_client_creates_and_deletes_a_topic_that_kcat_lists_then_not(cluster):
    from kafka.admin import KafkaAdminClient

    topic = f"kafka-admin-{secrets.token_hex(3)}"
    user, password = load_credential(Path(cluster.state.home) / CREDENTIAL_FILE)
    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap(cluster).split(","), security_protocol="SASL_PLAINTEXT",
                             sasl_mechanism="SCRAM-SHA-256", sasl_plain_username=user, sasl_plain_password=password)
    try:
        created = admin.create_topics({topic: {"num_partitions": 3, "replication_factor": 1,
                                               "configs": {"retention.ms": "3600000"}}})
        (result,) = created["topics"]
        assert (result["name"], result["error_code"], result["num_partitions"]) == (topic, 0, 3), created
        metadata = Admin(cluster).topic_metadata(topic)
        assert (len(metadata.partitions), metadata.config.read_mode, metadata.config.virtual_partitions,
                metadata.config.retention_ms) == (3, "mafka4", 3, 3_600_000), "a Mafka4-mode topic, one VP a partition"
        listed = kcat(cluster, "-L")
        assert listed.returncode == 0, listed.stderr.decode()
        assert f'topic "{topic}" with 3 partitions' in listed.stdout.decode(), listed.stdout.decode()
        refused = admin.create_topics({topic: {"num_partitions": 1}}, raise_errors=False)
        assert refused["topics"][0]["error_code"] == 36, "TOPIC_ALREADY_EXISTS"
        deleted = admin.delete_topics([topic])
        assert [(t["name"], t["error_code"]) for t in deleted["topics"]] == [(topic, 0)], deleted
    finally:
        admin.close()
    listed = kcat(cluster, "-L")
    assert listed.returncode == 0, listed.stderr.decode()
    assert f'topic "{topic}"' not in listed.stdout.decode(), "the delete returns once this node's view lost the topic"
