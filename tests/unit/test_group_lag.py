"""``metrics.group_lag``: a group's lag in messages and in time, the one rule of ``group describe`` and
of the leaders' metrics, and the committed offsets read from the groups' etcd keys."""

from __future__ import annotations

from mafka4.metadata import keys
from mafka4.metrics.group_lag import GroupLag, committed_offsets, group_lag


def test_the_lag_is_the_messages_below_the_hw_not_committed_and_the_age_of_the_oldest():
    assert group_lag(60, 90, first_unread_timestamp_ms=10_000, now_ms=22_500) == GroupLag(30, 12_500)


def test_a_caught_up_group_lags_nothing_whatever_the_timestamps():
    assert group_lag(90, 90, None, now_ms=50_000) == GroupLag(0, 0)
    assert group_lag(95, 90, None, now_ms=50_000) == GroupLag(0, 0), "an offset past the HW (a reset) is no lag"


def test_nothing_committed_or_no_hw_is_no_figure():
    assert group_lag(None, 90, 1_000, 5_000) == GroupLag(None, None)
    assert group_lag(10, None, 1_000, 5_000) == GroupLag(None, None), "the leader did not answer"


def test_a_lag_whose_records_retention_deleted_has_messages_but_no_age():
    assert group_lag(10, 90, None, 5_000) == GroupLag(80, None)


def test_a_record_stamped_ahead_of_the_node_s_clock_is_no_negative_age():
    assert group_lag(10, 90, 6_000, 5_000) == GroupLag(80, 0)


def test_committed_offsets_are_picked_out_of_every_group_key():
    cluster = "c1"
    items = [
        (keys.group_vp_offset(cluster, "billing", "orders", 0), {"offset": 60, "member_id": "m", "high_watermark": 70}),
        (keys.group_vp_offset(cluster, "billing", "orders", 1), {"offset": 5, "member_id": "m", "high_watermark": 5}),
        (keys.group_vp_offset(cluster, "audit", "orders", 0), {"offset": 90, "member_id": "a", "high_watermark": 90}),
        (keys.group_offset(cluster, "legacy", "a/b", 3), {"offset": 30, "member_id": "l", "generation": 2}),
        (keys.group_member(cluster, "billing", "m"), {"member_id": "m", "topic": "orders", "assignor": "vp"}),
        (keys.group_vp_owner(cluster, "billing", "orders", 0), {"member_id": "m"}),
        (keys.group_generation(cluster, "legacy"), {"generation": 2}),
        (keys.group_vp_offset(cluster, "broken", "orders", 0), {"offset": "60"}),
        (keys.group_vp_offset("c2", "other", "orders", 0), {"offset": 1}),
    ]
    found = committed_offsets(cluster, items)
    assert found.vps == {("orders", 0): {"billing": 60, "audit": 90}, ("orders", 1): {"billing": 5}}
    assert found.partitions == {("a/b", 3): {"legacy": 30}}


def test_a_committed_offset_key_names_its_group_mode_topic_and_number():
    assert keys.parse_group_offset("c", keys.group_vp_offset("c", "g", "t", 7)) == ("g", True, "t", 7)
    assert keys.parse_group_offset("c", keys.group_offset("c", "g", "t", 2)) == ("g", False, "t", 2)
    assert keys.parse_group_offset("c", keys.group_owner("c", "g", "t", 2)) is None
    assert keys.parse_group_offset("c", keys.group_generation("c", "g")) is None
