"""The write path on a real cluster: replicated produce with acks, read back, failures, bad input."""

from __future__ import annotations

import secrets
import threading
import time
from collections import defaultdict

import pytest
import ray

from mafka4 import errors
from mafka4.batch_payload import decode_batches, encode_batch
from mafka4.client.admin import Admin
from mafka4.client.consumer import Consumer
from mafka4.client.producer import Producer
from mafka4.limits import Acks
from mafka4.physical.handles import replica_handle

from wait_helpers import wait_until


def topic_name(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(3)}"


def read_all(connection, topic: str, expected: int, timeout_s: float = 60) -> list:
    messages = []
    with Consumer(topic, connection=connection, from_beginning=True) as consumer:
        deadline = time.monotonic() + timeout_s
        while len(messages) < expected and time.monotonic() < deadline:
            messages.extend(consumer.poll(timeout_ms=500))
        messages.extend(consumer.poll(timeout_ms=300))  # anything beyond `expected` would be a duplicate
    return messages


def test_replicated_topic_reads_back_every_acknowledged_message_once_in_order(cluster):
    admin = Admin(cluster)
    topic = topic_name("rt")
    admin.create_topic(topic, partitions=2, replication_factor=2, read_mode="mafka3")
    with Producer(topic, connection=cluster, acks="all") as producer:
        futures = [producer.send(f"m{i}".encode(), key=f"k{i % 7}".encode()) for i in range(3000)]
        producer.flush()
        acknowledged = [f.result() for f in futures]
    messages = read_all(cluster, topic, 3000)
    assert sorted(m.value for m in messages) == sorted(f"m{i}".encode() for i in range(3000))
    by_partition = defaultdict(list)
    for message in messages:
        by_partition[message.partition].append(message)
    for partition, items in by_partition.items():
        assert [m.offset for m in items] == list(range(len(items))), "offsets are dense and in order"
    for metadata, index in zip(acknowledged, range(3000)):
        value = next(m.value for m in by_partition[metadata.partition] if m.offset == metadata.offset)
        assert value == f"m{index}".encode(), "the acknowledged offset holds the message sent"
    per_key = defaultdict(list)
    for message in sorted(messages, key=lambda m: (m.partition, m.offset)):
        per_key[message.key].append(int(message.value[1:]))
    assert all(values == sorted(values) for values in per_key.values()), "per-key order"
    description = admin.describe_topic(topic)
    for partition in description["partitions"]:
        assert partition["live"]["high_watermark"] == partition["live"]["log_end_offset"]
        assert sorted(partition["live"]["isr"]) == sorted(partition["replicas"])


def test_send_many_writes_every_value_in_order_and_answers_each_offset(cluster):
    admin = Admin(cluster)
    topic = topic_name("many")
    admin.create_topic(topic, partitions=2, replication_factor=2, read_mode="mafka3")
    answers = []
    with Producer(topic, connection=cluster, acks="all", batch_bytes_max=16 * 1024) as producer:
        first = producer.send_many([b"%05d" % i + b"x" * 200 for i in range(1000)],
                                   callback=lambda sent, error: answers.append((sent, error)))
        keyed = producer.send_many((b"k%03d" % i for i in range(300)), key=b"one-key")
        with pytest.raises(errors.InvalidRecord, match="message 2: .*not bytes"):
            producer.send_many([b"a", b"b", "c"])
        producer.flush()
        sent, keyed_sent = first.result(), keyed.result()
    assert answers == [(sent, None)] and len(sent) == 1000 and len(keyed_sent) == 300
    assert {m.partition for m in sent} == {0, 1}, "keyless values spread over the partitions batch by batch"
    assert len({m.partition for m in keyed_sent}) == 1
    by_place = {(m.partition, m.offset): m.value for m in read_all(cluster, topic, 1300)}
    assert len(by_place) == 1300, "the refused call wrote nothing"
    assert [by_place[(m.partition, m.offset)][:5] for m in sent] == [b"%05d" % i for i in range(1000)]
    assert [by_place[(m.partition, m.offset)] for m in keyed_sent] == [b"k%03d" % i for i in range(300)]


def test_rf3_keeps_accepting_acks_all_after_a_follower_dies(cluster):
    admin = Admin(cluster)
    topic = topic_name("rf3")
    metadata = admin.create_topic(topic, partitions=1, replication_factor=3, min_insync_replicas=2,
                                  replica_lag_ms_max=1500, read_mode="mafka3")
    state = metadata.partitions[0]
    acknowledged: list[bytes] = []
    failures: list[BaseException] = []
    stop = threading.Event()

    def produce_loop():
        with Producer(topic, connection=cluster, acks="all", linger_ms=1) as producer:
            number = 0
            while not stop.is_set():
                value = f"v{number}".encode()
                producer.send(value).add_callback(
                    lambda md, err, value=value: acknowledged.append(value) if err is None else failures.append(err))
                number += 1
                if number % 200 == 0:
                    producer.flush()
            producer.flush()

    worker = threading.Thread(target=produce_loop)
    worker.start()
    wait_until(lambda: len(acknowledged) >= 200 or failures)  # under way (a flush answered) when the follower dies
    ray.kill(replica_handle(cluster.cluster, topic, 0, state.replicas[2]))
    count_at_kill = len(acknowledged)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        isr = ray.get(replica_handle(cluster.cluster, topic, 0, state.leader).describe.remote())["isr"]
        if len(isr) == 2 and len(acknowledged) > count_at_kill + 2000:
            break
        time.sleep(0.2)
    stop.set()
    worker.join(timeout=60)
    assert not failures, failures[:3]
    assert sorted(isr) == sorted(state.replicas[:2]), "the dead follower left the ISR"
    assert len(acknowledged) > count_at_kill + 2000, "writes continued after the follower died"
    messages = read_all(cluster, topic, len(acknowledged))
    values = [m.value for m in messages]
    assert values == acknowledged, "every acknowledged message once, in order"


def test_a_retried_batch_is_appended_once(cluster):
    admin = Admin(cluster)
    topic = topic_name("idem")
    state = admin.create_topic(topic, partitions=1, replication_factor=2, read_mode="mafka3").partitions[0]
    leader = replica_handle(cluster.cluster, topic, 0, state.leader)
    batch = encode_batch([(None, b"once", 1, None), (None, b"twice?", 2, None)], producer_id=42, base_sequence=0)
    first = ray.get(leader.produce.remote(batch, Acks.ALL))
    again = ray.get(leader.produce.remote(batch, Acks.ALL))
    after = ray.get(leader.produce.remote(encode_batch([(None, b"next", 3, None)], 42, 2), Acks.ALL))
    assert (first, again, after) == (0, 0, 2)
    data = ray.get(leader.fetch.remote(0, 1 << 20)).data
    assert [r.value for r in decode_batches(data)] == [b"once", b"twice?", b"next"]
    with pytest.raises(errors.OutOfOrderSequence):
        ray.get(leader.produce.remote(encode_batch([(None, b"gap", 4, None)], 42, 9), Acks.ALL))
    with pytest.raises(errors.UnknownProducer):  # a producer the partition does not know starts at 0
        ray.get(leader.produce.remote(encode_batch([(None, b"stranger", 5, None)], 43, 5), Acks.ALL))


@pytest.mark.parametrize("acks", ["0", "1"])
def test_weaker_acks_deliver_too(cluster, acks):
    admin = Admin(cluster)
    topic = topic_name(f"acks{acks}")
    admin.create_topic(topic, partitions=1, replication_factor=2, read_mode="mafka3")
    with Producer(topic, connection=cluster, acks=acks) as producer:
        offsets = [producer.send(f"{i}".encode()) for i in range(500)]
        producer.flush()
    assert all(f.result().offset == (-1 if acks == "0" else i) for i, f in enumerate(offsets))
    assert sorted(int(m.value) for m in read_all(cluster, topic, 500)) == list(range(500))


def test_acks_all_is_refused_while_the_isr_is_below_min_insync_replicas(cluster):
    admin = Admin(cluster)
    topic = topic_name("minisr")
    state = admin.create_topic(topic, partitions=1, replication_factor=2, min_insync_replicas=2,
                               replica_lag_ms_max=500, read_mode="mafka3").partitions[0]
    ray.kill(replica_handle(cluster.cluster, topic, 0, state.replicas[1]))
    leader = replica_handle(cluster.cluster, topic, 0, state.leader)
    deadline = time.monotonic() + 20
    while len(ray.get(leader.describe.remote())["isr"]) > 1 and time.monotonic() < deadline:
        time.sleep(0.1)
    with pytest.raises(errors.NotEnoughReplicas, match="min_insync_replicas=2") as raised:
        ray.get(leader.produce.remote(encode_batch([(None, b"x", 1, None)]), Acks.ALL))
    assert raised.value.retriable
    assert ray.get(leader.produce.remote(encode_batch([(None, b"y", 1, None)]), Acks.LEADER)) == 0, "acks=1 still works"


def test_bad_input_gets_clear_errors_and_leaves_nothing_behind(cluster):
    admin = Admin(cluster)
    with pytest.raises(errors.InvalidTopicName, match="letters, digits"):
        admin.create_topic("bad name")
    with pytest.raises(errors.UnknownTopic, match="mafka4 topic create"):
        Producer("no-such-topic", connection=cluster)
    with pytest.raises(errors.NotEnoughWriteNodes, match="needs 4 live write nodes, 3 are live"):
        admin.create_topic("too-wide", replication_factor=4)
    assert "too-wide" not in admin.list_topics()
    topic = topic_name("bad")
    admin.create_topic(topic, read_mode="mafka3")
    with pytest.raises(errors.TopicExists):
        admin.create_topic(topic, read_mode="mafka3")
    with pytest.raises(errors.InvalidConfig, match="'all', '1' or '0'"):
        Producer(topic, connection=cluster, acks="2")
    with Producer(topic, connection=cluster, message_bytes_max=1000) as producer:
        with pytest.raises(errors.MessageTooLarge, match="message_bytes_max=1000"):
            producer.send(b"x" * 2000)
        with pytest.raises(errors.InvalidRecord, match="value_serializer"):
            producer.send("text, not bytes")
    with Producer(topic, connection=cluster, value_serializer=str.encode) as producer:
        assert producer.send_sync("text is fine with a serializer").offset == 0


def test_delete_topic_removes_metadata_actors_and_data(cluster):
    admin = Admin(cluster)
    topic = topic_name("del")
    state = admin.create_topic(topic, partitions=1, replication_factor=2, read_mode="mafka3").partitions[0]
    admin.delete_topic(topic)
    assert topic not in admin.list_topics()
    assert all(replica_handle(cluster.cluster, topic, 0, r) is None for r in state.replicas)
    with pytest.raises(errors.UnknownTopic):
        admin.delete_topic(topic)
    # The name is free again, with empty logs.
    admin.create_topic(topic, partitions=1, replication_factor=2, read_mode="mafka3")
    with Consumer(topic, connection=cluster, from_beginning=True) as consumer:
        assert consumer.poll(timeout_ms=300) == []
