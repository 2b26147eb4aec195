"""A retry's headers and topics (``mafka4.retries``): what a nack writes and what reads it back."""

from __future__ import annotations

import pytest

from mafka4.batch_payload import LANE_HEADER
from mafka4.delays import DELIVER_AT_HEADER, MessageId, decode_deliver_at
from mafka4.errors import CorruptRecord, InvalidGroupName
from mafka4.limits import ReadMode, TopicConfig
from mafka4.retries import (DELIVERY_COUNT_HEADER, ORIGIN_HEADER, RETRY_GROUP_HEADER, companion_config,
                            companion_of_lane, dead_letter_lane, delivery_count_of, origin_of, retry_group_of,
                            retry_headers, retry_lane, retry_topic_name)


def test_a_retry_keeps_the_lane_and_own_headers_and_adds_its_group_count_origin_and_due_time():
    original = [(LANE_HEADER, b"swim"), ("trace", b"1"), ("mafka4.deliver_at", b"5"), (DELIVERY_COUNT_HEADER, b"3")]
    headers = retry_headers(original, group="billing", delivery_count=4, origin=MessageId(2, 17), due_ms=99)
    assert headers[:2] == [(LANE_HEADER, b"swim"), ("trace", b"1")]
    assert retry_group_of(headers) == "billing" and delivery_count_of(headers) == 4
    assert origin_of(headers, 0, 0) == MessageId(2, 17)
    assert [decode_deliver_at(v) for n, v in headers if n == DELIVER_AT_HEADER] == [99]
    assert sum(1 for n, _ in headers if n == DELIVERY_COUNT_HEADER) == 1


def test_an_original_is_delivery_1_from_where_it_is_and_no_retry():
    assert delivery_count_of((("trace", b"1"),)) == 1 and delivery_count_of(None) == 1
    assert origin_of(None, 3, 8) == MessageId(3, 8)
    assert retry_group_of(()) is None


@pytest.mark.parametrize("value", [b"1", b"0", b"-2", b"x", b"1" * 10])
def test_a_delivery_count_mafka4_did_not_write_is_refused(value):
    with pytest.raises(CorruptRecord, match="delivery number"):
        delivery_count_of(((DELIVERY_COUNT_HEADER, value),))


def test_a_bad_origin_is_refused():
    with pytest.raises(CorruptRecord, match="PARTITION:OFFSET"):
        origin_of(((ORIGIN_HEADER, b"3-8"),), 0, 0)


def test_reserved_lanes_name_the_group_s_retry_and_dead_letter_topics():
    assert retry_topic_name("orders", "billing") == "orders.billing.retry"
    assert companion_of_lane("orders", retry_lane("billing")) == "orders.billing.retry"
    assert companion_of_lane("orders", dead_letter_lane("billing")) == "orders.billing.dlq"
    assert companion_of_lane("orders", "swim") is None
    with pytest.raises(InvalidGroupName, match="retry topic"):
        retry_topic_name("t" * 190, "g" * 20)
    assert RETRY_GROUP_HEADER.startswith("mafka4.")


def test_a_companion_topic_is_read_from_its_partitions_with_the_topic_s_replication():
    config = companion_config(TopicConfig(partitions=8, replication_factor=3, min_insync_replicas=2,
                                          read_mode=ReadMode.MAFKA4, virtual_partitions=16).resolved(), 1)
    assert (config.partitions, config.replication_factor, config.min_insync_replicas) == (1, 3, 2)
    assert config.read_mode is ReadMode.MAFKA3 and config.virtual_partition_count == 0
