"""The controller's read-node scaling decisions (issue 38): when to ask Ray for read nodes, when to
release one, and the reasons given."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mafka4.coordinator.control.read_node_scaling import (AddReadNodes, HoldReadNodes, ReadNodeScaling,
                                                          ReleaseReadNode, read_node_bundles)
from mafka4.errors import InvalidConfig
from mafka4.limits import MiB
from mafka4.limits.servers import ClusterConfig, ControllerConfig
from mafka4.metadata.read_node_load import ReadNodeLoad

# Small bounds, so that the numbers in the tests read easily.
CONFIG = ControllerConfig(read_node_vp_replicas_max=256, read_node_fed_bytes_per_s_max=32 * MiB,
                          read_node_fetch_millicores_max=500, read_node_idle_fed_bytes_per_s_max=MiB // 4,
                          read_node_idle_fetch_millicores_max=50, read_node_idle_release_delay_ms=600_000,
                          read_nodes_min=2, read_nodes_max=6, read_node_add_cooldown_ms=300_000,
                          read_node_load_stale_ms=60_000)
DELAY_MS = CONFIG.read_node_idle_release_delay_ms


def load(node: str, now_ms: int, replicas: int = 10, fed_mib: float = 4.0, cores: float = 0.2,
         measured_at_ms: int | None = None, sealed: int = 0) -> ReadNodeLoad:
    return ReadNodeLoad(node, replicas, fed_mib * MiB, cores, 10_000, now_ms if measured_at_ms is None else measured_at_ms,
                        sealed_vp_replicas=sealed)


def idle(node: str, now_ms: int, replicas: int = 10, sealed: int = 0) -> ReadNodeLoad:
    return load(node, now_ms, replicas=replicas, fed_mib=0.0, cores=0.01, sealed=sealed)


# --- the bounds -----------------------------------------------------------------------------------


def test_the_bounds_default_sensibly_reach_the_controller_setting_and_refuse_nonsense():
    config = ControllerConfig()
    assert (config.read_nodes_min, config.read_nodes_max) == (2, 16)
    assert config.read_node_idle_fed_bytes_per_s_max < config.read_node_fed_bytes_per_s_max
    assert config.read_node_idle_fetch_millicores_max < config.read_node_fetch_millicores_max
    # Integers, so `mafka4 up --controller-setting read_node_vp_replicas_max=8` reaches them.
    cluster = ClusterConfig(controller_settings=(("read_node_vp_replicas_max", 8), ("read_nodes_max", 3)))
    assert (cluster.controller_config().read_node_vp_replicas_max, cluster.controller_config().read_nodes_max) == (8, 3)
    with pytest.raises(InvalidConfig, match="read_nodes_min=5 is above read_nodes_max=4: raise read_nodes_max"):
        ControllerConfig(read_nodes_min=5, read_nodes_max=4)
    with pytest.raises(InvalidConfig, match="read_node_idle_fetch_millicores_max=500 must be below "
                                            "read_node_fetch_millicores_max=500: a node would count idle and overloaded"):
        ControllerConfig(read_node_idle_fetch_millicores_max=500)
    with pytest.raises(InvalidConfig, match="read_node_add_cooldown_ms=0 must be at least 1"):
        ControllerConfig(read_node_add_cooldown_ms=0)


def test_the_bundles_ask_for_whole_read_nodes_and_never_a_write_node():
    assert read_node_bundles(3) == [{"read_node": 1000}] * 3
    assert read_node_bundles(0) == []


# --- adding read nodes ----------------------------------------------------------------------------


def test_too_many_hosted_replicas_add_read_nodes_by_the_total_and_say_which_node_and_bound():
    scaling = ReadNodeScaling(CONFIG)
    decision = scaling.decide({"r0", "r1"}, [load("r0", 0, replicas=410), load("r1", 0, replicas=200)], now_ms=0)
    assert isinstance(decision, AddReadNodes)
    assert (decision.count, decision.target_read_nodes) == (1, 3), "610 replicas need ceil(610 / 256) = 3 nodes"
    assert decision.reason.startswith("r0 hosts 410 VP replicas, over the bound of 256 VP replicas per read node; "
                                      "2 read nodes carry 610 VP replicas in all, 3 read nodes keep each within it")
    assert str(decision).startswith("add 1 read node (to 3): r0 hosts 410 VP replicas")
    assert read_node_bundles(decision.target_read_nodes) == [{"read_node": 1000}] * 3


def test_too_many_fed_bytes_add_read_nodes():
    decision = ReadNodeScaling(CONFIG).decide(
        {"r0", "r1"}, [load("r0", 0, fed_mib=40.0), load("r1", 0, fed_mib=35.0)], now_ms=0)
    assert isinstance(decision, AddReadNodes) and decision.target_read_nodes == 3, decision
    assert "r0 is fed 40.00 MiB/s, r1 is fed 35.00 MiB/s, over the bound of 32.00 MiB/s fed per read node" \
        in decision.reason


def test_too_much_fetch_cpu_adds_read_nodes():
    decision = ReadNodeScaling(CONFIG).decide(
        {"r0", "r1"}, [load("r0", 0, cores=0.9), load("r1", 0, cores=0.9)], now_ms=0)
    assert isinstance(decision, AddReadNodes) and (decision.count, decision.target_read_nodes) == (2, 4), decision
    assert "r0 spends 0.90 CPU cores on fetches, r1 spends 0.90 CPU cores on fetches, over the bound of " \
           "0.50 fetch CPU cores per read node" in decision.reason


def test_the_measure_that_needs_the_most_nodes_sets_the_target():
    reports = [load("r0", 0, replicas=300, fed_mib=50.0), load("r1", 0, replicas=300, fed_mib=50.0)]
    decision = ReadNodeScaling(CONFIG).decide({"r0", "r1"}, reports, now_ms=0)
    assert decision.target_read_nodes == 4, "600 replicas need 3 nodes, 100 MiB/s need 4"
    assert "VP replicas" in decision.reason and "MiB/s" in decision.reason, "both measures over are named"


def test_one_node_over_a_bound_with_the_total_within_adds_nothing():
    reports = [load("r0", 0, replicas=400), load("r1", 0, replicas=20), load("r2", 0, replicas=20)]
    decision = ReadNodeScaling(CONFIG).decide({"r0", "r1", "r2"}, reports, now_ms=0)
    assert isinstance(decision, HoldReadNodes) and decision.target_read_nodes == 3
    assert "r0 hosts 400 VP replicas, over the bound of 256 VP replicas per read node: moving replicas evens it " \
           "out, no node added" in decision.reason


def test_nodes_exactly_at_a_bound_need_no_node_more_despite_float_sums():
    config = ControllerConfig(read_node_fetch_millicores_max=200, read_node_idle_fetch_millicores_max=50)
    reports = [load(node, 0, cores=0.2) for node in ("r0", "r1", "r2")]  # 0.2 * 3 == 0.6000000000000001
    assert isinstance(ReadNodeScaling(config).decide({"r0", "r1", "r2"}, reports, now_ms=0), HoldReadNodes)


def test_too_few_registered_read_nodes_are_brought_up_to_the_minimum():
    decision = ReadNodeScaling(CONFIG).decide({"r0"}, [load("r0", 0)], now_ms=0)
    assert isinstance(decision, AddReadNodes) and (decision.count, decision.target_read_nodes) == (1, 2)
    assert "1 read node registered, below read_nodes_min of 2" in decision.reason


def test_the_target_never_passes_the_maximum_and_the_reason_says_it_is_capped():
    scaling = ReadNodeScaling(CONFIG)
    reports = [load(f"r{i}", 0, replicas=1000) for i in range(3)]
    decision = scaling.decide({"r0", "r1", "r2"}, reports, now_ms=0)
    assert isinstance(decision, AddReadNodes) and decision.target_read_nodes == 6, "12 needed, 6 at most"
    assert "(capped by read_nodes_max; 12 read nodes needed)" in decision.reason
    at_max = [f"r{i}" for i in range(6)]
    decision = ReadNodeScaling(CONFIG).decide(at_max, [load(node, 0, replicas=500) for node in at_max], now_ms=0)
    assert isinstance(decision, HoldReadNodes) and decision.target_read_nodes == 6
    assert "12 read nodes needed, but read_nodes_max is 6: no more asked for" in decision.reason


def test_the_same_overload_is_not_asked_for_again_while_the_added_nodes_start():
    scaling = ReadNodeScaling(CONFIG)

    def over(now_ms):
        return [load("r0", now_ms, replicas=300), load("r1", now_ms, replicas=300)]

    assert isinstance(scaling.decide({"r0", "r1"}, over(0), now_ms=0), AddReadNodes)
    waiting = scaling.decide({"r0", "r1"}, over(299_900), now_ms=299_900)
    assert isinstance(waiting, HoldReadNodes) and waiting.target_read_nodes == 3, "the request for 3 stands"
    assert "asked for 3 read nodes 299.9 s ago, 2 registered: waiting for them to start" in waiting.reason
    again = scaling.decide({"r0", "r1"}, over(300_000), now_ms=300_000)
    assert isinstance(again, AddReadNodes) and again.target_read_nodes == 3, "past the cooldown, asked again"


def test_a_larger_overload_is_asked_for_at_once_during_the_cooldown():
    scaling = ReadNodeScaling(CONFIG)
    scaling.decide({"r0", "r1"}, [load("r0", 0, replicas=300), load("r1", 0, replicas=300)], now_ms=0)
    grown = scaling.decide({"r0", "r1"}, [load("r0", 0, replicas=600), load("r1", 0, replicas=600)], now_ms=1000)
    assert isinstance(grown, AddReadNodes) and (grown.count, grown.target_read_nodes) == (3, 5)


def test_the_cooldown_ends_when_the_asked_nodes_registered():
    scaling = ReadNodeScaling(CONFIG)
    scaling.decide({"r0", "r1"}, [load("r0", 0, replicas=300), load("r1", 0, replicas=300)], now_ms=0)
    arrived = [load("r0", 5000, replicas=300), load("r1", 5000, replicas=300), load("r2", 5000, replicas=0)]
    assert isinstance(scaling.decide({"r0", "r1", "r2"}, arrived, now_ms=5000), HoldReadNodes)
    more = [load("r0", 6000, replicas=500), load("r1", 6000, replicas=300), load("r2", 6000, replicas=0)]
    decision = scaling.decide({"r0", "r1", "r2"}, more, now_ms=6000)
    assert isinstance(decision, AddReadNodes) and decision.target_read_nodes == 4


# --- releasing read nodes -------------------------------------------------------------------------


def test_a_node_idle_for_the_whole_delay_is_released_and_the_reason_says_why():
    scaling = ReadNodeScaling(CONFIG)
    nodes = {"r0", "r1", "r2"}
    for now_ms in (0, DELAY_MS - 1):
        decision = scaling.decide(nodes, [load("r0", now_ms), load("r1", now_ms), idle("r2", now_ms)], now_ms)
        assert isinstance(decision, HoldReadNodes) and decision.target_read_nodes == 3
    decision = scaling.decide(nodes, [load("r0", DELAY_MS), load("r1", DELAY_MS), idle("r2", DELAY_MS)], DELAY_MS)
    assert isinstance(decision, ReleaseReadNode) and (decision.node, decision.target_read_nodes) == ("r2", 2)
    assert decision.reason == ("r2 idle for 600.0 s (release delay 600.0 s): fed 0.00 MiB/s (idle at most 0.25 MiB/s), "
                               "0.01 fetch CPU cores (idle at most 0.05); the other 2 read nodes carry the load "
                               "within their bounds")
    assert read_node_bundles(decision.target_read_nodes) == [{"read_node": 1000}] * 2, "one bundle fewer"


def test_the_idle_delay_starts_again_when_a_node_gets_load():
    scaling = ReadNodeScaling(CONFIG)
    nodes = {"r0", "r1", "r2"}
    scaling.decide(nodes, [load("r0", 0), load("r1", 0), idle("r2", 0)], now_ms=0)
    scaling.decide(nodes, [load("r0", 500_000), load("r1", 500_000), load("r2", 500_000)], now_ms=500_000)
    for now_ms in (500_001, 500_001 + DELAY_MS - 1):
        decision = scaling.decide(nodes, [load("r0", now_ms), load("r1", now_ms), idle("r2", now_ms)], now_ms)
        assert isinstance(decision, HoldReadNodes), decision
    now_ms = 500_001 + DELAY_MS
    decision = scaling.decide(nodes, [load("r0", now_ms), load("r1", now_ms), idle("r2", now_ms)], now_ms)
    assert isinstance(decision, ReleaseReadNode) and decision.node == "r2"


def test_a_cluster_started_past_the_maximum_is_asked_for_no_more_than_the_maximum():
    config = ControllerConfig(read_nodes_min=1, read_nodes_max=2, read_node_idle_release_delay_ms=1000)
    scaling = ReadNodeScaling(config)
    nodes = {"r0", "r1", "r2", "r3"}
    hold = scaling.decide(nodes, [load(node, 0) for node in nodes], now_ms=0)
    assert isinstance(hold, HoldReadNodes) and hold.target_read_nodes == 2, "fewer bundles end no busy node"
    scaling.decide(nodes, [load("r0", 1), load("r1", 1), load("r2", 1), idle("r3", 1)], now_ms=1)
    release = scaling.decide(nodes, [load("r0", 1001), load("r1", 1001), load("r2", 1001), idle("r3", 1001)], 1001)
    assert isinstance(release, ReleaseReadNode) and (release.node, release.target_read_nodes) == ("r3", 2)


def test_no_release_below_the_minimum():
    scaling = ReadNodeScaling(CONFIG)
    for now_ms in (0, DELAY_MS):
        decision = scaling.decide({"r0", "r1"}, [idle("r0", now_ms), idle("r1", now_ms)], now_ms)
    assert isinstance(decision, HoldReadNodes) and decision.target_read_nodes == 2
    assert "r0 idle for 600.0 s" in decision.reason and "but read_nodes_min is 2: kept" in decision.reason


def test_no_release_when_the_other_nodes_could_not_carry_the_replicas():
    scaling = ReadNodeScaling(CONFIG)
    nodes = {"r0", "r1", "r2"}
    for now_ms in (0, DELAY_MS):
        reports = [load("r0", now_ms, replicas=250), load("r1", now_ms, replicas=250), idle("r2", now_ms, replicas=100)]
        decision = scaling.decide(nodes, reports, now_ms)
    assert isinstance(decision, HoldReadNodes)
    assert "but the other 2 could not carry 600 VP replicas in all, over 2 x 256 VP replicas: kept" in decision.reason


def test_one_release_at_a_time_the_longest_idle_first():
    scaling = ReadNodeScaling(CONFIG)
    nodes = {"r0", "r1", "r2", "r3"}
    scaling.decide(nodes, [load("r0", 0), idle("r1", 0), load("r2", 0), load("r3", 0)], now_ms=0)
    first = scaling.decide(nodes, [load("r0", 1), idle("r1", 1), load("r2", 1), idle("r3", 1)], now_ms=1)
    assert isinstance(first, HoldReadNodes)
    first = scaling.decide(nodes, [load("r0", DELAY_MS + 1), idle("r1", DELAY_MS + 1), load("r2", DELAY_MS + 1),
                                   idle("r3", DELAY_MS + 1)], now_ms=DELAY_MS + 1)
    assert isinstance(first, ReleaseReadNode) and (first.node, first.target_read_nodes) == ("r1", 3)
    now_ms = 2 * DELAY_MS
    waiting = scaling.decide(nodes, [load("r0", now_ms), idle("r1", now_ms), load("r2", now_ms), idle("r3", now_ms)],
                             now_ms)
    assert isinstance(waiting, HoldReadNodes) and waiting.target_read_nodes == 3, "r1 still registered"
    assert "r1 is being released (its replicas move off, then Ray ends it): one release at a time" in waiting.reason
    assert scaling.releasing == "r1"
    gone = scaling.decide(nodes - {"r1"}, [load("r0", now_ms), load("r2", now_ms), idle("r3", now_ms)], now_ms)
    assert isinstance(gone, ReleaseReadNode) and (gone.node, gone.target_read_nodes) == ("r3", 2)


def test_a_release_called_off_makes_its_node_serve_again_with_a_fresh_idle_clock():
    scaling = ReadNodeScaling(CONFIG)
    nodes = {"r0", "r1", "r2"}
    scaling.decide(nodes, [load("r0", 0), idle("r1", 0), load("r2", 0)], now_ms=0)
    released = scaling.decide(nodes, [load("r0", DELAY_MS), idle("r1", DELAY_MS), load("r2", DELAY_MS)], DELAY_MS)
    assert isinstance(released, ReleaseReadNode) and released.node == "r1"
    assert scaling.cancel_release() == "r1" and scaling.releasing is None and scaling.cancel_release() is None
    now_ms = DELAY_MS + 1
    held = scaling.decide(nodes, [load("r0", now_ms), idle("r1", now_ms), load("r2", now_ms)], now_ms)
    assert isinstance(held, HoldReadNodes) and held.target_read_nodes == 3, "r1 serves again"
    now_ms = 2 * DELAY_MS
    again = scaling.decide(nodes, [load("r0", now_ms), idle("r1", now_ms), load("r2", now_ms)], now_ms)
    assert isinstance(again, HoldReadNodes), "its idle clock started afresh when it served again"
    now_ms = 2 * DELAY_MS + 1
    later = scaling.decide(nodes, [load("r0", now_ms), idle("r1", now_ms), load("r2", now_ms)], now_ms)
    assert isinstance(later, ReleaseReadNode) and later.node == "r1"


def test_no_release_while_added_nodes_start():
    scaling = ReadNodeScaling(CONFIG)
    nodes = {"r0", "r1", "r2"}
    scaling.decide(nodes, [load("r0", 0), load("r1", 0), idle("r2", 0)], now_ms=0)
    # r0 and r1 pass the bound: one more node is asked for, r2 still idle.
    over = [load("r0", DELAY_MS, replicas=380), load("r1", DELAY_MS, replicas=380), idle("r2", DELAY_MS)]
    assert isinstance(scaling.decide(nodes, over, DELAY_MS), AddReadNodes)
    calm = [load("r0", DELAY_MS + 1), load("r1", DELAY_MS + 1), idle("r2", DELAY_MS + 1)]
    decision = scaling.decide(nodes, calm, DELAY_MS + 1)
    assert isinstance(decision, HoldReadNodes) and decision.target_read_nodes == 4
    assert "asked for 4 read nodes, 3 registered: none released while they start" in decision.reason


# --- sealed VPs -----------------------------------------------------------------------------------


def test_replicas_of_sealed_vps_over_the_bound_add_no_node_and_the_reason_names_them():
    # 2 x 256 open replicas at most; 200 open and 900 sealed: counted together, 5 nodes would be asked for.
    scaling = ReadNodeScaling(CONFIG)
    decision = scaling.decide({"r0", "r1"}, [load("r0", 0, replicas=100, sealed=600),
                                             load("r1", 0, replicas=100, sealed=300)], now_ms=0)
    assert isinstance(decision, HoldReadNodes) and decision.target_read_nodes == 2, decision
    assert decision.reason.startswith("2 read nodes carry 200 VP replicas, ")
    assert "(and 900 replicas of sealed VPs, not counted)" in decision.reason
    assert "over the bound" not in decision.reason, "no node is over the bound on sealed replicas"


def test_an_add_for_open_replicas_names_the_sealed_ones_it_did_not_count():
    decision = ReadNodeScaling(CONFIG).decide({"r0", "r1"}, [load("r0", 0, replicas=410, sealed=1),
                                                             load("r1", 0, replicas=200)], now_ms=0)
    assert isinstance(decision, AddReadNodes) and decision.target_read_nodes == 3, "610 open replicas need 3"
    assert decision.reason.endswith("3 read nodes keep each within it (and 1 replica of sealed VPs, not counted): "
                                    "asking for 1 more, 3 read nodes in all")


def test_a_node_hosting_only_sealed_replicas_is_idle_and_released_whatever_the_others_host_of_them():
    # r2 hosts nothing but 400 replicas of sealed VPs, r0 and r1 hold 500 more: the other two carry
    # the 20 open replicas within their bounds, so r2 goes (its sealed replicas move off first).
    scaling = ReadNodeScaling(CONFIG)
    nodes = {"r0", "r1", "r2"}
    for now_ms in (0, DELAY_MS):
        reports = [load("r0", now_ms, sealed=250), load("r1", now_ms, sealed=250),
                   idle("r2", now_ms, replicas=0, sealed=400)]
        decision = scaling.decide(nodes, reports, now_ms)
    assert isinstance(decision, ReleaseReadNode) and (decision.node, decision.target_read_nodes) == ("r2", 2)
    assert ("0.01 fetch CPU cores (idle at most 0.05), hosts 400 replicas of sealed VPs (they move off too); "
            "the other 2 read nodes carry the load within their bounds") in decision.reason


def test_of_nodes_idle_as_long_the_one_hosting_fewer_replicas_sealed_ones_included_goes_first():
    scaling = ReadNodeScaling(CONFIG)
    nodes = {"r0", "r1", "r2", "r3"}
    for now_ms in (0, DELAY_MS):
        reports = [load("r0", now_ms), load("r1", now_ms), idle("r2", now_ms, replicas=5, sealed=100),
                   idle("r3", now_ms, replicas=10)]
        decision = scaling.decide(nodes, reports, now_ms)
    assert isinstance(decision, ReleaseReadNode) and decision.node == "r3", "10 replicas to move, not 105"


# --- unknown load ---------------------------------------------------------------------------------


def test_a_stale_report_is_ignored_and_said_so():
    scaling = ReadNodeScaling(CONFIG)
    stale = load("r1", 100_000, replicas=1000, measured_at_ms=100_000 - 60_001)
    decision = scaling.decide({"r0", "r1"}, [load("r0", 100_000), stale], now_ms=100_000)
    assert isinstance(decision, HoldReadNodes), "r1's 1000 replicas are not counted"
    assert decision.unmeasured == ("r1's load report is 60.0 s old, over the bound of 60.0 s: ignored, counted "
                                   "without load, never released",)
    assert str(decision).endswith("; r1's load report is 60.0 s old, over the bound of 60.0 s: ignored, counted "
                                  "without load, never released")
    on_the_bound = load("r1", 100_000, replicas=1000, measured_at_ms=100_000 - 60_000)
    assert isinstance(ReadNodeScaling(CONFIG).decide({"r0", "r1"}, [load("r0", 100_000), on_the_bound], 100_000),
                      AddReadNodes)


def test_a_report_from_a_clock_ahead_counts_as_fresh():
    ahead = load("r1", 0, replicas=1000, measured_at_ms=5000)
    assert isinstance(ReadNodeScaling(CONFIG).decide({"r0", "r1"}, [load("r0", 0), ahead], now_ms=0), AddReadNodes)


def test_a_node_without_a_report_counts_as_capacity_and_is_never_released():
    scaling = ReadNodeScaling(CONFIG)
    nodes = {"r0", "r1", "r2"}
    for now_ms in (0, DELAY_MS, 2 * DELAY_MS):
        decision = scaling.decide(nodes, [load("r0", now_ms, replicas=300), load("r1", now_ms, replicas=300)], now_ms)
        assert isinstance(decision, HoldReadNodes), "600 replicas fit 3 nodes, r2 included"
    assert decision.unmeasured == ("r2 has not reported its load yet: counted without load, never released",)


def test_a_stale_report_restarts_the_idle_clock():
    scaling = ReadNodeScaling(CONFIG)
    nodes = {"r0", "r1", "r2"}
    scaling.decide(nodes, [load("r0", 0), load("r1", 0), idle("r2", 0)], now_ms=0)
    # At 300 s r2's latest report is still the one of 0 s: stale, so r2 is not known idle.
    scaling.decide(nodes, [load("r0", 300_000), load("r1", 300_000), idle("r2", 0)], now_ms=300_000)
    reports = [load("r0", DELAY_MS), load("r1", DELAY_MS), idle("r2", DELAY_MS)]
    assert isinstance(scaling.decide(nodes, reports, DELAY_MS), HoldReadNodes), "idle since 600 s, not since 0"
    reports = [load("r0", 2 * DELAY_MS), load("r1", 2 * DELAY_MS), idle("r2", 2 * DELAY_MS)]
    assert isinstance(scaling.decide(nodes, reports, 2 * DELAY_MS), ReleaseReadNode)


def test_reports_of_nodes_not_registered_are_ignored():
    decision = ReadNodeScaling(CONFIG).decide({"r0", "r1"}, [load("r0", 0), load("r1", 0), load("r9", 0, replicas=9999)],
                                              now_ms=0)
    assert isinstance(decision, HoldReadNodes) and decision.reason.startswith("2 read nodes carry 20 VP replicas, ")


def test_the_clock_never_goes_back():
    scaling = ReadNodeScaling(CONFIG)
    scaling.decide({"r0", "r1"}, [], now_ms=1000)
    with pytest.raises(AssertionError, match="the clock went back from 1000 to 999"):
        scaling.decide({"r0", "r1"}, [], now_ms=999)


# --- properties -----------------------------------------------------------------------------------

NODES = ("r0", "r1", "r2", "r3", "r4", "r5")
# (hosted VP replicas, fed MiB/s, fetch CPU cores, the report's age in ms, replicas of sealed VPs)
report_values = st.tuples(st.integers(0, 700), st.sampled_from([0.0, 0.1, 10.0, 40.0]),
                          st.sampled_from([0.0, 0.01, 0.3, 0.9]), st.sampled_from([0, 0, 30_000, 90_000]),
                          st.sampled_from([0, 0, 5, 2_000]))
# (ms passed, nodes whose registration flips, nodes whose load changes): the rest stays as it was,
# so that nodes stay idle long enough to be released.
step = st.tuples(st.sampled_from([0, 1_000, 60_000, 300_000, 600_000]),
                 st.one_of(st.just(frozenset()), st.frozensets(st.sampled_from(NODES), max_size=2)),
                 st.one_of(st.just({}), st.dictionaries(st.sampled_from(NODES), report_values, max_size=3)))


@settings(max_examples=150, deadline=None)
@given(st.lists(step, max_size=40))
def test_every_decision_stays_within_the_bounds_and_releases_only_what_may_go(steps):
    scaling = ReadNodeScaling(CONFIG)
    now_ms = 0
    registered = {"r0", "r1", "r2"}
    values = {node: (0, 0.0, 0.0, 0, 0) for node in NODES}
    busy_at_ms = {node: 0 for node in NODES}  # the last time each node was not known idle
    releasing: str | None = None
    for advance_ms, flipped, changed in steps:
        now_ms += advance_ms
        registered ^= flipped
        values.update(changed)
        reports = [ReadNodeLoad(node, replicas, fed_mib * MiB, cores, 10_000, max(0, now_ms - age_ms), sealed)
                   for node, (replicas, fed_mib, cores, age_ms, sealed) in values.items()]
        if releasing not in registered:
            releasing = None
        for report in reports:
            fresh = now_ms - report.measured_at_ms <= CONFIG.read_node_load_stale_ms
            idle_now = fresh and report.fed_bytes_per_s <= MiB // 4 and report.fetch_cpu_cores <= 0.05
            if not idle_now or report.node_id not in registered:
                busy_at_ms[report.node_id] = now_ms
        decision = scaling.decide(registered, reports, now_ms)
        serving = len(registered - {releasing})
        assert CONFIG.read_nodes_min <= decision.target_read_nodes <= CONFIG.read_nodes_max
        assert decision.reason
        if isinstance(decision, AddReadNodes):
            assert decision.count >= 1 and decision.target_read_nodes == serving + decision.count
            fresh = [report for report in reports if report.node_id in registered
                     and now_ms - report.measured_at_ms <= CONFIG.read_node_load_stale_ms]
            needed = max(math.ceil(round(sum(r.hosted_vp_replicas for r in fresh) / 256, 9)),
                         math.ceil(round(sum(r.fed_bytes_per_s for r in fresh) / (32 * MiB), 9)),
                         math.ceil(round(sum(r.fetch_cpu_cores for r in fresh) / 0.5, 9)), CONFIG.read_nodes_min)
            assert needed > serving, "an add is for open replicas, feeding or fetch CPU: never for sealed replicas"
        if isinstance(decision, ReleaseReadNode):
            assert releasing is None, "one release at a time"
            assert decision.node in registered and serving - 1 >= CONFIG.read_nodes_min
            assert now_ms - busy_at_ms[decision.node] >= DELAY_MS, "idle continuously for the delay"
            assert decision.target_read_nodes == serving - 1
            releasing = decision.node
        assert scaling.releasing == releasing
