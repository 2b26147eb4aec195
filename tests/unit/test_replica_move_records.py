"""A replica move in flight as the controller records it in etcd (so a new controller resumes
it), its age bound, and how many planned moves start beside those in flight."""

from __future__ import annotations

import json

import pytest

from mafka4.coordinator.control.replica_move_records import MoveRecord, moves_to_start
from mafka4.coordinator.control.replica_moves import MovePurpose, ReplicaMove
from mafka4.metadata import keys


def test_a_record_survives_json_with_its_move_purpose_reason_and_start():
    for purpose, name in ((MovePurpose.BALANCE, "onto"), (MovePurpose.RELEASE, "off")):
        record = MoveRecord(ReplicaMove("orders/eu", 7, "r1", "r3", purpose), "r3 hosts 0 VP replicas", 1_000)
        value = json.loads(json.dumps(record.to_json()))
        assert value == {"source": "r1", "target": "r3", "purpose": name, "reason": "r3 hosts 0 VP replicas",
                         "started_ms": 1_000}
        back = MoveRecord.from_json("orders/eu", 7, value)
        assert back == record and back.move.purpose is purpose


@pytest.mark.parametrize("change, names", [
    ({"purpose": "sideways"}, "purpose must be one of"),
    ({"target": "r1"}, "two different read node ids"),
    ({"source": ""}, "two different read node ids"),
    ({"started_ms": -1}, "started_ms must be an integer >= 0"),
    ({"started_ms": True}, "started_ms must be an integer >= 0"),
])
def test_a_record_that_does_not_hold_together_is_refused_naming_the_field(change, names):
    value = {"source": "r1", "target": "r3", "purpose": "off", "reason": "", "started_ms": 5} | change
    with pytest.raises(ValueError, match=names):
        MoveRecord.from_json("t", 0, value)
    with pytest.raises(ValueError, match="lacks reason, started_ms"):
        MoveRecord.from_json("t", 0, {"source": "r1", "target": "r3", "purpose": "off"})


def test_a_move_waited_too_long_only_past_its_bound_and_another_clock_behind_counts_as_no_time():
    record = MoveRecord(ReplicaMove("t", 0, "r1", "r2"), "", started_ms=10_000)
    assert not record.waited_too_long(wall_ms=10_000 + 500, move_time_ms_max=500)
    assert record.waited_too_long(wall_ms=10_000 + 501, move_time_ms_max=500)
    assert not record.waited_too_long(wall_ms=9_000, move_time_ms_max=500)


def test_planned_moves_start_in_plan_order_only_as_far_as_the_in_flight_bound_leaves_room():
    planned = [ReplicaMove("t", vp, "r1", "r2") for vp in range(5)]
    assert moves_to_start(planned, in_flight=0, in_flight_max=3) == tuple(planned[:3])
    assert moves_to_start(planned, in_flight=2, in_flight_max=3) == tuple(planned[:1])
    assert moves_to_start(planned, in_flight=4, in_flight_max=3) == (), "over the bound (it was lowered): none"
    assert moves_to_start([], in_flight=0, in_flight_max=3) == ()


def test_a_move_key_names_its_topic_and_vp_even_when_the_topic_holds_a_slash():
    key = keys.replica_move("c", "orders/eu", 12)
    assert key == "/mafka4/c/replica_moves/orders/eu/12"
    assert keys.parse_replica_move("c", key) == ("orders/eu", 12)
    assert keys.parse_replica_move("c", "/mafka4/c/replica_moves/orders") is None
    assert keys.parse_replica_move("c", "/mafka4/c/replica_moves/orders/x") is None
    assert keys.parse_replica_move("c2", key) is None
