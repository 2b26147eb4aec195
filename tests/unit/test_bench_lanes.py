"""The lanes bench's pure parts: its run order, ratios and gaps (``benchmarks.lanes_settings``)."""

from __future__ import annotations

import pytest

from benchmarks.lanes_settings import LanesBenchSettings, largest_gap_ms, produce_ratios
from mafka4.errors import InvalidConfig


def test_the_modes_alternate_and_mafka3_stops_at_its_lane_bound():
    settings = LanesBenchSettings(repetitions=2, lane_counts=(1, 10, 100), mafka3_lanes_max=10)
    assert settings.runs() == [
        (0, "mafka3", 1), (0, "mafka4", 1), (0, "mafka3", 10), (0, "mafka4", 10), (0, "mafka4", 100),
        (1, "mafka4", 1), (1, "mafka3", 1), (1, "mafka4", 10), (1, "mafka3", 10), (1, "mafka4", 100)]


@pytest.mark.parametrize("changes", [{"lane_counts": ()}, {"lane_counts": (0,)}, {"repetitions": 0},
                                     {"produce_s": 0}, {"rate_msgs_s": True}])
def test_bad_settings_are_refused_by_name(changes):
    with pytest.raises(InvalidConfig, match=next(iter(changes))):
        LanesBenchSettings(**changes)


def test_ratios_are_each_modes_p999_over_its_own_at_the_fewest_lanes():
    def run(mode, lanes, p999, partitions):
        return {"mode": mode, "lanes": lanes, "repetition": 0, "latency": {"p99_9_ms": p999},
                "physical_partitions": partitions, "replica_actors": partitions}
    ratios = produce_ratios([run("mafka4", 1, 4.0, 2), run("mafka4", 100, 5.0, 2), run("mafka3", 1, 4.0, 4),
                             run("mafka3", 10, 12.0, 22)])
    assert [(r["mode"], r["lanes"], r["p99_9_ratio"], r["physical_partitions"]) for r in ratios] == [
        ("mafka3", 1, 1.0, 4), ("mafka3", 10, 3.0, 22), ("mafka4", 1, 1.0, 2), ("mafka4", 100, 1.25, 2)]


def test_the_largest_gap_counts_the_window_edges():
    assert largest_gap_ms([1.0, 1.1, 1.5], 0.9, 2.0) == 500.0
    assert largest_gap_ms([1.2, 1.3], 1.0, 1.35) == 200.0
    assert largest_gap_ms([5.0], 0.0, 1.0) is None
