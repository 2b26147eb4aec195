"""Read-path metadata: topic read-mode config, the initial layout and VP placement, JSON forms,
the VP leader failover decision, and leader-epoch truncation of VP followers."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json

import pytest

from mafka4 import cli
from mafka4.client.admin import Admin, new_topic_config
from mafka4.coordinator.control.placement import leaving_read_nodes, placeable_read_nodes, plan_children, plan_read_path
from mafka4.errors import InvalidConfig, NotEnoughReadNodes
from mafka4.faults import FaultGate
from mafka4.limits import READ_MODE_DEFAULT, ReadMode, TopicConfig
from mafka4.metadata import keys
from mafka4.metadata.store import Versioned
from mafka4.log.epochs import NO_EPOCH, EpochHistory
from mafka4.physical.partition_state import config_from_json, config_to_json
from mafka4.virtual.divergence import divergence, truncation_offset
from mafka4.virtual.failover import decide_failover
from mafka4.virtual.layout import TopicLayout
from mafka4.virtual.ranges import HASH_SPACE, HashRange
from mafka4.virtual.vp_state import VirtualPartitionState, epoch_from_json, epoch_to_json
from mafka4.virtual.vp_store import read_path_values

# --- topic config -----------------------------------------------------------------------------


def test_mafka4_mode_defaults_to_one_vp_per_partition_and_one_read_replica():
    assert TopicConfig(partitions=3).read_mode == "mafka3", "a stored config without read_mode is a Mafka3 topic"
    config = TopicConfig(partitions=3, read_mode="mafka4").resolved()
    assert (config.read_mode, config.virtual_partitions, config.read_replicas) == ("mafka4", 3, 1)
    assert TopicConfig(partitions=3, virtual_partitions=8, read_replicas=2, read_mode="mafka4").resolved().virtual_partitions == 8


@pytest.mark.parametrize("mode", list(ReadMode))
def test_read_mode_is_stored_as_its_plain_string_and_read_back_as_the_enum(mode):
    config = TopicConfig(partitions=2, read_mode=mode.value).resolved()
    assert config.read_mode is mode, "a string given at construction is held as the ReadMode"
    stored = json.loads(json.dumps(config_to_json(config)))  # as etcd holds it
    assert stored["read_mode"] == mode.value and type(config_to_json(config)["read_mode"]) is str
    assert config_from_json(stored) == config and config_from_json(stored).read_mode is mode


def test_a_stored_config_from_before_read_modes_reads_as_a_mafka3_topic():
    stored = json.loads(json.dumps(config_to_json(TopicConfig(partitions=3))))
    for read_path_field in ("read_mode", "virtual_partitions", "read_replicas", "read_replica_lag_ms_max"):
        del stored[read_path_field]
    config = config_from_json(stored)
    assert config.read_mode is ReadMode.MAFKA3 and config.virtual_partition_count == 0


@pytest.mark.parametrize("mode", ["kafka", "MAFKA4", "", None, 4])
def test_a_bad_read_mode_is_refused_naming_the_choices(mode):
    with pytest.raises(InvalidConfig, match=r"read_mode=.* is not valid: use one of 'mafka4', 'mafka3'"):
        TopicConfig(read_mode=mode)
    with pytest.raises(InvalidConfig, match="use one of 'mafka4', 'mafka3'"):
        config_from_json({"partitions": 1, "read_mode": mode})


def test_topics_are_created_in_mafka4_mode_unless_asked_otherwise_by_the_library_and_the_cli_alike():
    assert READ_MODE_DEFAULT == "mafka4"
    config = new_topic_config("orders", partitions=2)
    assert (config.read_mode, config.virtual_partitions, config.read_replicas) == ("mafka4", 2, 1)
    assert inspect.signature(Admin.create_topic).parameters["read_mode"].default == READ_MODE_DEFAULT
    assert cli.build_parser().parse_args(["topic", "create", "orders"]).read_mode == READ_MODE_DEFAULT
    assert new_topic_config("orders", read_mode="mafka3").virtual_partitions == 0


def test_mafka3_topics_have_no_virtual_partitions_and_no_read_replicas():
    config = TopicConfig(partitions=3, read_mode="mafka3").resolved()
    assert (config.virtual_partitions, config.read_replicas) == (0, 0)
    assert plan_read_path(config, ["r0"]) is None
    with pytest.raises(InvalidConfig, match="no virtual partitions"):
        TopicConfig(read_mode="mafka3", virtual_partitions=4)


@pytest.mark.parametrize("changes, message", [
    ({"read_mode": "kafka"}, "read_mode='kafka' is not valid"),
    ({"virtual_partitions": 0}, "virtual_partitions=0 must be at least 1"),
    ({"virtual_partitions": 5000}, "at most 1024"),
    ({"read_replicas": 0}, "read_replicas=0 must be at least 1"),
    ({"read_replicas": 8}, "at most 7"),
    ({"read_replica_lag_ms_max": 0}, "read_replica_lag_ms_max=0"),
    ({"virtual_partitions": 9, "virtual_partitions_max": 8}, "virtual_partitions=9 must be at least 1 and at most 8"),
    ({"virtual_partitions_max": 0}, "virtual_partitions_max=0 must be at least 1"),
])
def test_bad_read_path_settings_are_refused_with_the_field_named(changes, message):
    with pytest.raises(InvalidConfig, match=message):
        TopicConfig(**{"read_mode": "mafka4", **changes})


# --- initial read path ------------------------------------------------------------------------


def test_new_topic_gets_even_ranges_and_replicas_on_distinct_read_nodes_in_rotation():
    plan = plan_read_path(TopicConfig(partitions=2, virtual_partitions=4, read_replicas=2, read_mode="mafka4"), ["r1", "r0", "r2"])
    assert plan.layout == TopicLayout.initial(2, 4)
    assert [s.vp for s in plan.states] == [0, 1, 2, 3]
    assert [s.hash_range for s in plan.states] == list(plan.layout.current.ranges.ranges)
    assert all(len(set(s.replicas)) == 2 and s.risr == s.replicas and s.leader == s.replicas[0] for s in plan.states)
    assert [s.leader for s in plan.states] == ["r0", "r1", "r2", "r0"], "leaders spread over the read nodes"
    assert all(s.leader_epoch == 0 for s in plan.states)


def test_more_read_replicas_than_live_read_nodes_is_refused_with_what_to_do():
    with pytest.raises(NotEnoughReadNodes, match=r"read_replicas=2 needs 2 live read nodes, 1 are live \(r0\).*"
                                                  r"--read-nodes 2.*read_mode='mafka3'"):
        plan_read_path(TopicConfig(read_replicas=2, read_mode="mafka4"), ["r0"])
    with pytest.raises(NotEnoughReadNodes, match="0 are live"):
        plan_read_path(TopicConfig(read_mode="mafka4"), [])


def test_new_vp_replicas_go_to_serving_read_nodes_that_are_not_leaving():
    registered = ["r0", "r1", "r2", "r3"]
    assert placeable_read_nodes(registered, {"r0", "r1", "r2"}, {"r1"}, 2) == ["r0", "r2"]


def test_placement_falls_back_to_leaving_then_to_unstarted_read_nodes_rather_than_refuse_a_split():
    registered = ["r0", "r1", "r2"]
    assert placeable_read_nodes(registered, {"r0", "r1"}, {"r1"}, 2) == ["r0", "r1"], "a node being released"
    assert placeable_read_nodes(registered, {"r0"}, set(), 2) == registered, "read nodes not started yet"
    assert placeable_read_nodes(registered, set(), set(), 1) == registered


def test_leaving_read_nodes_are_the_released_ones_and_the_one_being_released():
    released = [Versioned(keys.released_read_node("c", "r3"), {"released_ms": 1}, 7)]
    scaling = [Versioned(keys.read_scaling("c"), {"kind": "release", "releasing": "r1"}, 8)]
    assert leaving_read_nodes("c", released, scaling) == {"r1", "r3"}
    assert leaving_read_nodes("c", [], [Versioned(keys.read_scaling("c"), {"kind": "hold", "releasing": None}, 9)]) \
        == frozenset()


def test_read_path_keys_round_trip_through_json():
    plan = plan_read_path(TopicConfig(partitions=3, virtual_partitions=3, read_mode="mafka4"), ["r0"])
    values = json.loads(json.dumps(read_path_values("c", "orders", plan)))
    assert sorted(values) == ["/mafka4/c/topics/orders/virtual/0"] + [f"/mafka4/c/topics/orders/vp/{v}" for v in range(3)]
    assert epoch_from_json(values["/mafka4/c/topics/orders/virtual/0"]) == plan.layout.epochs[0]
    assert [VirtualPartitionState.from_json(v, values[f"/mafka4/c/topics/orders/vp/{v}"]) for v in range(3)] == list(plan.states)
    assert values["/mafka4/c/topics/orders/vp/2"]["range"][1] == HASH_SPACE, "64-bit bounds survive JSON"


def test_a_later_split_epoch_round_trips_too():
    layout = TopicLayout.initial(2, 2)
    epoch = layout.plan_split(1, cut=(5, 9), fed_through=(5, 9))
    assert epoch_from_json(json.loads(json.dumps(epoch_to_json(epoch)))) == epoch


def test_the_children_of_a_split_get_new_states_on_distinct_read_nodes_and_a_sealed_end_round_trips():
    layout = TopicLayout.initial(2, 2)
    epoch = layout.plan_split(1, cut=(5, 9), fed_through=(5, 9))
    children = plan_children(epoch, 2, ["r0", "r1", "r2"])
    assert [s.vp for s in children] == [2, 3] and [s.hash_range for s in children] == [
        epoch.ranges.range_of(2), epoch.ranges.range_of(3)]
    assert all(len(set(s.replicas)) == 2 and s.risr == s.replicas and s.leader_epoch == 0 for s in children)
    assert children[0].leader != children[1].leader, "the children's leaders spread over the read nodes"
    with pytest.raises(NotEnoughReadNodes, match="read_replicas=3 needs 3 live read nodes for the new virtual "
                                                 "partitions, 2 are live"):
        plan_children(epoch, 3, ["r0", "r1"])
    sealed = VirtualPartitionState(1, HashRange(0, 8), "r0", 2, ("r0",), ("r0",), sealed_end_offset=42)
    assert VirtualPartitionState.from_json(1, json.loads(json.dumps(sealed.to_json()))) == sealed
    assert "sealed_end_offset" not in children[0].to_json(), "an open VP has no sealed end"


def test_a_retired_vp_round_trips_and_must_be_sealed():
    retired = VirtualPartitionState(0, HashRange(0, 8), "r0", 1, ("r0", "r1"), ("r0",), sealed_end_offset=12, retired=True)
    assert retired.to_json()["retired"] is True
    assert VirtualPartitionState.from_json(0, json.loads(json.dumps(retired.to_json()))) == retired
    kept = dataclasses.replace(retired, retired=False)
    assert "retired" not in kept.to_json() and VirtualPartitionState.from_json(0, kept.to_json()) == kept
    with pytest.raises(AssertionError, match="retired before it was sealed"):
        VirtualPartitionState(0, HashRange(0, 8), "r0", 1, ("r0",), ("r0",), retired=True)


# --- VP leader failover -----------------------------------------------------------------------

STATE = VirtualPartitionState(1, HashRange(0, HASH_SPACE), "r0", 3, ("r0", "r1", "r2"), ("r0", "r2"))


def test_a_dead_leader_is_replaced_by_a_live_risr_member_at_the_next_epoch():
    decided = decide_failover(STATE, alive={"r1", "r2"})
    assert (decided.leader, decided.leader_epoch, decided.risr) == ("r2", 4, ("r2",))
    assert decided.replicas == STATE.replicas and decided.hash_range == STATE.hash_range


def test_a_live_leader_is_kept_and_no_risr_member_means_no_leader():
    assert decide_failover(STATE, alive={"r0"}) is STATE
    assert decide_failover(STATE, alive={"r1"}) is None, "r1 is outside the RISR: it may lack what readers saw"


def test_a_restarted_leader_gives_way_to_a_risr_member_that_kept_running():
    decided = decide_failover(STATE, alive={"r0", "r2"}, restarted={"r0"})
    assert (decided.leader, decided.leader_epoch, decided.risr) == ("r2", 4, ("r2",))


def test_a_restarted_only_risr_member_leads_the_next_epoch_from_its_own_log():
    alone = VirtualPartitionState(1, HashRange(0, HASH_SPACE), "r0", 3, ("r0", "r1"), ("r0",))
    decided = decide_failover(alone, alive={"r0", "r1"}, restarted={"r0"})
    assert (decided.leader, decided.leader_epoch, decided.risr) == ("r0", 4, ("r0",))
    assert decide_failover(alone, alive={"r1"}, restarted={"r1"}) is None, "r1 is outside the RISR"


def test_the_only_replica_restarted_after_a_power_loss_leads_a_new_epoch():
    """So what it feeds again after losing its unflushed tail is in a later epoch than what it
    lost, and a reader of the lost tail is told (``VpReplicaCore.reader_divergence``)."""
    only = VirtualPartitionState(1, HashRange(0, HASH_SPACE), "r0", 3, ("r0",), ("r0",))
    decided = decide_failover(only, alive={"r0"}, restarted={"r0"}, log_end_offsets={"r0": 4})
    assert (decided.leader, decided.leader_epoch, decided.risr) == ("r0", 4, ("r0",))


def test_restarted_risr_members_lead_in_preferred_order_when_none_kept_running_and_their_logs_tie():
    decided = decide_failover(STATE, alive={"r0", "r2"}, restarted={"r0", "r2"})
    assert (decided.leader, decided.leader_epoch, decided.risr) == ("r0", 4, ("r0",)), "r2 rejoins once caught up"
    decided = decide_failover(STATE, alive={"r0", "r2"}, restarted={"r0", "r2"}, log_end_offsets={"r0": 9, "r2": 9})
    assert decided.leader == "r0"


def test_a_restarted_follower_leaves_the_risr_in_a_new_epoch_while_its_leader_stays():
    decided = decide_failover(STATE, alive={"r0", "r1", "r2"}, restarted={"r2"})
    assert (decided.leader, decided.leader_epoch, decided.risr) == ("r0", 4, ("r0",))
    assert decide_failover(STATE, alive={"r0", "r1", "r2"}, restarted={"r1"}) is STATE, "r1 is no RISR member"


def test_among_restarted_risr_members_the_longest_recovered_log_leads():
    """A follower that lost power (its unflushed tail) and a leader whose process only crashed:
    the leader's whole log leads, not the follower's shorter one (simulator, seeds 645 and 918)."""
    decided = decide_failover(STATE, alive={"r0", "r2"}, restarted={"r0", "r2"}, log_end_offsets={"r0": 115, "r2": 100})
    assert decided.leader == "r0"
    decided = decide_failover(STATE, alive={"r0", "r2"}, restarted={"r0", "r2"}, log_end_offsets={"r0": 90, "r2": 100})
    assert decided.leader == "r2"


def test_restarted_risr_members_wait_for_the_other_risr_members_unless_those_are_gone_for_good():
    assert decide_failover(STATE, alive={"r2"}, restarted={"r2"}) is None, "r0 may hold the longest log"
    decided = decide_failover(STATE, alive={"r2"}, restarted={"r2"}, gone={"r0"})
    assert (decided.leader, decided.risr) == ("r2", ("r2",)), "the gone old leader leaves the RISR"
    assert decide_failover(STATE, alive={"r0", "r2"}, restarted={"r0"}).leader == "r2", \
        "a RISR member that kept running needs no wait"


# --- VP follower truncation -------------------------------------------------------------------


def history(*entries) -> EpochHistory:
    return EpochHistory(entries)


def test_a_follower_holding_the_old_leaders_unreplicated_tail_truncates_to_the_new_leaders_epoch_start():
    leader = history((0, 0), (1, 120))  # took over at 120, appended to 150
    answer = divergence(leader, 150, fetch_offset=135, last_fetched_epoch=0)
    assert answer == (0, 120)
    follower = history((0, 0))
    assert truncation_offset(follower, 135, 110, *answer) == 120


def test_a_follower_that_is_a_prefix_fetches_on_and_an_empty_one_may_not_claim_more():
    leader = history((0, 0), (1, 120))
    assert divergence(leader, 150, fetch_offset=100, last_fetched_epoch=0) is None
    assert divergence(leader, 150, fetch_offset=150, last_fetched_epoch=1) is None
    assert divergence(leader, 150, fetch_offset=0, last_fetched_epoch=NO_EPOCH) is None
    assert divergence(leader, 150, fetch_offset=160, last_fetched_epoch=NO_EPOCH) == (NO_EPOCH, 150)
    assert truncation_offset(history(), 160, 0, NO_EPOCH, 150) == 150


def test_a_follower_whose_epoch_the_leader_never_had_walks_back_to_a_common_epoch():
    leader = history((0, 0), (2, 80))
    answer = divergence(leader, 100, fetch_offset=95, last_fetched_epoch=1)
    assert answer == (0, 80)
    follower = history((0, 0), (1, 70))  # epoch 1's leader died before anyone copied 70..95
    assert truncation_offset(follower, 95, 60, *answer) == 70


# --- fault gate -------------------------------------------------------------------------------


def test_a_paused_gate_holds_replication_until_unpaused_but_never_consumer_reads():
    async def scenario():
        gate = FaultGate()
        gate.set(paused=True)
        replication = asyncio.ensure_future(gate.replication())
        await asyncio.wait_for(gate.serving(), 1)
        await asyncio.sleep(0.01)
        assert not replication.done()
        gate.set(paused=False)
        await asyncio.wait_for(replication, 1)

    asyncio.run(scenario())


def test_fault_settings_are_checked():
    with pytest.raises(InvalidConfig, match="delay_ms=-1"):
        FaultGate().set(delay_ms=-1)
    with pytest.raises(InvalidConfig, match="paused='yes'"):
        FaultGate().set(paused="yes")
    assert FaultGate().set(delay_ms=5).delay_ms == 5


def test_both_replica_kinds_describe_a_fault_alike():
    assert FaultGate().set(delay_ms=5, paused=True).describe() == {"delay_ms": 5, "paused": True}
    assert FaultGate().fault.describe() == {"delay_ms": 0, "paused": False}
