"""What a delete of a topic name answers when no topic of that name exists (``physical.topic_leftovers``):
the Kafka answer, ``UnknownTopic``, a usage error not worth retrying, naming what it deleted of a
dead creation. The deletion itself, against a real etcd: tests/integration/test_etcd_write_runs.py."""

from __future__ import annotations

import pytest

from mafka4.errors import UnknownTopic
from mafka4.physical.topic_leftovers import absent_topic


def test_a_name_with_nothing_below_it_is_an_unknown_topic_and_says_how_to_create_it():
    error = absent_topic("orders")
    assert isinstance(error, UnknownTopic) and error.usage_error and not error.retriable
    assert error.message == "topic 'orders' does not exist: create it with 'mafka4 topic create orders'"


def test_a_name_whose_leftovers_were_deleted_is_an_unknown_topic_that_says_what_was_deleted_and_why():
    error = absent_topic("orders", 12)
    assert isinstance(error, UnknownTopic) and error.usage_error and not error.retriable
    assert error.message.startswith("topic 'orders' does not exist; deleted the 12 key(s) left below its name")
    assert "a creation that failed between its transactions" in error.message
    assert error.message.endswith("create it with 'mafka4 topic create orders'")


def test_a_negative_count_of_deleted_keys_is_a_defect():
    with pytest.raises(AssertionError):
        absent_topic("orders", -1)
