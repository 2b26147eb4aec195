"""``bench read-scale``'s figures from what a run recorded (``benchmarks.read_scale_figures``)."""

from __future__ import annotations

import math

import pytest

from benchmarks.read_scale_figures import (SCALE_UP_STEPS, SERVING_STEPS, Trigger, ack_latencies_ms, member_gaps_ms,
                                           move_window_ms, pair_summary, steps_after_trigger_ms, steps_between_ms)
from benchmarks.read_scale_settings import ReadScaleBenchSettings
from mafka4.errors import InvalidConfig

MS = 1_000_000
TRIGGER = Trigger(monotonic_ns=1_000 * MS, wall_ms=50_000)


def test_steps_are_ms_after_the_growth_and_unseen_steps_stay_none():
    steps = steps_after_trigger_ms({"decided": 51_500, "registered": 60_000, "first_records_served": None}, TRIGGER)
    assert list(steps) == [*SCALE_UP_STEPS, *SERVING_STEPS]
    assert steps["decided"] == 1_500 and steps["registered"] == 10_000
    assert steps["ray_node_up"] is None and steps["first_records_served"] is None


def test_steps_between_name_each_step_of_the_chain_after_the_one_before_and_the_decision_to_serving():
    steps = {"decided": 1_000, "ray_node_up": 6_000, "registered": 9_000, "first_move": 9_500,
             "first_in_risr": 10_000, "moves_done": None, "first_leader": None, "first_records_served": 12_000}
    between = steps_between_ms(steps)
    assert between["decided_to_ray_node_up"] == 5_000
    assert between["first_move_to_first_in_risr"] == 500
    assert between["first_in_risr_to_moves_done"] is None
    assert between["decided_to_first_in_risr"] == 9_000
    assert between["decided_to_first_leader"] is None
    assert between["decided_to_first_records_served"] == 11_000


def test_the_move_window_needs_a_start_and_an_end_after_it():
    assert move_window_ms({"first_move": 9_500, "moves_done": 20_000}) == (9_500, 20_000)
    assert move_window_ms({"first_move": 9_500, "moves_done": None}) is None
    assert move_window_ms({"first_move": None, "moves_done": 20_000}) is None
    assert move_window_ms({"first_move": 9_500, "moves_done": 9_000}) is None  # an end seen before any start


def test_ack_latencies_count_only_messages_sent_inside_the_window_and_the_unacknowledged_apart():
    sent = [TRIGGER.monotonic_ns + offset * MS for offset in (-5, 10, 20, 30, 500)]
    acked = [sent[0] + 1 * MS, sent[1] + 2 * MS, sent[2] + 4 * MS, None, sent[4] + 9 * MS]
    figures = ack_latencies_ms(sent, acked, TRIGGER, (0, 100))
    assert figures["messages"] == 3 and figures["unacknowledged"] == 1
    assert figures["p50"] == 2.0 and figures["p99.9"] == 4.0


def test_ack_latencies_of_an_empty_window_are_nan():
    figures = ack_latencies_ms([TRIGGER.monotonic_ns], [TRIGGER.monotonic_ns + MS], TRIGGER, (10, 20))
    assert figures["messages"] == 0 and math.isnan(figures["p99.9"])


def test_member_gaps_are_the_longest_stretch_without_a_poll_inside_the_window_edges_included():
    polls = {"b": [TRIGGER.monotonic_ns + offset * MS for offset in (10, 20, 90)],
             "a": [TRIGGER.monotonic_ns + offset * MS for offset in (150,)]}
    gaps = member_gaps_ms(polls, TRIGGER, (0, 100))
    assert list(gaps) == ["a", "b"]
    assert gaps["b"] == 70.0  # 20 -> 90
    assert gaps["a"] == 100.0  # no poll inside: the whole window


def _run(window, p999, gaps):
    return {"steps_ms": {}, "steps_between_ms": {}, "move_window_ms": window, "load_before": 0.5,
            "whole_window_produce_ms": {"p99.9": 30.0},
            "in_move_window": None if window is None and p999 is None else {
                "produce_ms": {"p50": 1.0, "p99": 2.0, "p99.9": p999}, "member_gaps_ms": gaps}}


def test_a_pair_sets_the_scaling_runs_move_window_beside_the_same_stretch_of_the_fixed_run():
    summary = pair_summary(_run((9_000, 20_000), 12.0, {"a": 30.0, "b": 80.0}), _run(None, 8.0, {"a": 40.0}))
    window = summary["in_move_window"]
    assert summary["move_window_ms"] == (9_000, 20_000)
    assert window["largest_member_gap_ms"] == {"scaling": 80.0, "fixed": 40.0}
    assert window["produce_p999_scaling_over_fixed"] == 1.5


def test_a_pair_without_a_move_window_has_no_window_figures():
    summary = pair_summary(_run(None, None, {}), _run(None, None, {}))
    assert summary["in_move_window"] is None and summary["move_window_ms"] is None


@pytest.mark.parametrize("read_nodes", [2, 3])
def test_the_replicas_bound_holds_the_grown_group_and_not_the_trigger(read_nodes):
    settings = ReadScaleBenchSettings()
    bound = settings.vp_replicas_bound(read_nodes)
    grown = settings.consumers_at_most * settings.read_replicas
    assert grown < read_nodes * bound < grown + settings.ballast_vps * settings.read_replicas


def test_a_trigger_too_small_for_the_bound_is_refused():
    with pytest.raises(ValueError, match="ballast VPs"):
        ReadScaleBenchSettings(ballast_vps=1).vp_replicas_bound(2)


@pytest.mark.parametrize("changes", [{"pairs": 0}, {"consumers_at_start": 8}, {"consumers_at_start": 0},
                                     {"rate_msgs_per_s": 0}, {"window_s": 0}])
def test_bad_settings_are_refused_naming_the_field(changes):
    with pytest.raises(InvalidConfig, match=next(iter(changes))):
        ReadScaleBenchSettings(**changes)
