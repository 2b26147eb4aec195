"""Kafka's consumer protocol inside JoinGroup and SyncGroup (``kafka.consumer_protocol``), against
kafka-python's own encoding of subscriptions and assignments."""

from __future__ import annotations

import pytest
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment, ConsumerProtocolSubscription

from mafka4.errors import KafkaWireError
from mafka4.kafka.consumer_protocol import assignment_bytes, chosen_protocol, subscribed_topics


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_a_subscription_of_every_version_kafka_python_writes_names_its_topics(version):
    fields = {"topics": ["orders", "refunds"], "user_data": b"x"}
    if version >= 1:
        fields["owned_partitions"] = [ConsumerProtocolSubscription.TopicPartition(topic="orders", partitions=[0, 3])]
    if version >= 2:
        fields["generation_id"] = 7
    if version >= 3:
        fields["rack_id"] = "rack-a"
    metadata = ConsumerProtocolSubscription(version=version, **fields).encode()
    assert subscribed_topics(metadata) == ("orders", "refunds")


def test_a_subscription_of_a_newer_version_is_read_as_the_newest_known_one():
    metadata = ConsumerProtocolSubscription(version=3, topics=["orders"], user_data=None, owned_partitions=[],
                                            generation_id=-1, rack_id=None).encode()
    newer = b"\x00\x09" + metadata[2:] + b"fields of version 9"
    assert subscribed_topics(newer) == ("orders",)


@pytest.mark.parametrize("metadata", [b"", b"\x00", b"\xff\xff\x00\x00\x00\x01", b"\x00\x00\x7f\xff\xff\xff",
                                      b"\x00\x00\x00\x00\x00\x01\x00\x09abc"])
def test_a_subscription_that_does_not_parse_is_refused(metadata):
    with pytest.raises(KafkaWireError):
        subscribed_topics(metadata)


def test_an_assignment_is_what_kafka_python_writes_and_reads():
    written = assignment_bytes("orders", [3, 0, 2])
    expected = ConsumerProtocolAssignment(version=0, assigned_partitions=[
        ConsumerProtocolAssignment.TopicPartition(topic="orders", partitions=[0, 2, 3])], user_data=None).encode()
    assert written == expected
    decoded = ConsumerProtocolAssignment.decode(written)
    assert [(tp.topic, tp.partition) for tp in decoded.partitions()] == [("orders", 0), ("orders", 2), ("orders", 3)]


def test_an_empty_assignment_names_no_topic():
    assert ConsumerProtocolAssignment.decode(assignment_bytes("orders", [])).partitions() == []


def test_an_eager_assignor_is_chosen_before_cooperative_sticky_whatever_the_clients_order():
    assert chosen_protocol(["range", "roundrobin"]) == "range"
    assert chosen_protocol(["cooperative-sticky", "range"]) == "range"
    assert chosen_protocol(["cooperative-sticky"]) == "cooperative-sticky"
    assert chosen_protocol([]) is None
