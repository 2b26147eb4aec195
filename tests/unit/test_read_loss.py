"""Unit tests of what retention may delete (the floor) and of the losses read nodes record."""

from __future__ import annotations

import json

import pytest

from mafka4.log.read_loss import LostRange, ReadLoss, feed_position_from_json, feed_position_to_json, retention_floor
from mafka4.metadata import keys


def test_the_floor_is_the_position_of_the_slowest_read_node():
    assert retention_floor([120, 40, 300]) == 40
    assert retention_floor(iter([7])) == 7
    assert retention_floor([]) is None, "no read node recorded a position: no floor known"


@pytest.mark.parametrize("first, end", [(5, 5), (6, 5), (-1, 3)])
def test_an_empty_or_negative_lost_range_is_refused(first, end):
    with pytest.raises(AssertionError):
        LostRange(0, first, end)


def test_losses_are_merged_sorted_and_counted():
    loss = ReadLoss(2)
    for first, end in [(100, 200), (10, 20), (300, 400), (150, 250), (20, 30)]:
        loss = loss.add(LostRange(2, first, end))
    assert [(r.first_offset, r.end_offset) for r in loss.ranges] == [(10, 30), (100, 250), (300, 400)]
    assert loss.offsets == 20 + 150 + 100


def test_adding_a_loss_again_changes_nothing():
    loss = ReadLoss(0).add(LostRange(0, 10, 20)).add(LostRange(0, 50, 60))
    assert loss.add(LostRange(0, 10, 20)) == loss
    assert loss.add(LostRange(0, 12, 18)) == loss


def test_a_range_bridging_two_losses_merges_them():
    loss = ReadLoss(0).add(LostRange(0, 10, 20)).add(LostRange(0, 50, 60)).add(LostRange(0, 20, 50))
    assert loss.ranges == (LostRange(0, 10, 60),)


def test_a_loss_of_another_partition_is_refused():
    with pytest.raises(AssertionError):
        ReadLoss(0).add(LostRange(1, 10, 20))


def test_a_loss_survives_its_etcd_value():
    loss = ReadLoss(3).add(LostRange(3, 500, 900)).add(LostRange(3, 0, 100))
    value = json.loads(json.dumps(loss.to_json()))
    assert value == {"ranges": [[0, 100], [500, 900]]}
    assert ReadLoss.from_json(3, value) == loss


def test_a_feed_position_survives_its_etcd_value():
    assert feed_position_from_json(json.loads(json.dumps(feed_position_to_json(42)))) == 42


def test_feed_positions_of_a_partition_are_below_the_topic_and_apart_from_other_partitions():
    position = keys.feed_position("c", "orders", 1, "r0")
    assert position == "/mafka4/c/topics/orders/feed_positions/1/r0"
    assert position.startswith(keys.feed_positions_prefix("c", "orders", 1))
    assert position.startswith(keys.topic_feed_positions_prefix("c", "orders"))
    assert position.startswith(keys.topic_children_prefix("c", "orders")), "deleting the topic deletes it"
    assert not keys.feed_position("c", "orders", 10, "r0").startswith(keys.feed_positions_prefix("c", "orders", 1))


def test_read_losses_are_below_the_topic():
    assert keys.read_loss("c", "orders", 4) == "/mafka4/c/topics/orders/read_loss/4"
    assert keys.read_loss("c", "orders", 4).startswith(keys.read_losses_prefix("c", "orders"))
    assert keys.read_losses_prefix("c", "orders").startswith(keys.topic_children_prefix("c", "orders"))
