"""Within-mode scaling ratios without Spark: which consumer counts are compared, the point ratio from the
medians, the interval from the per-replicate statistics, and the report's section."""

from __future__ import annotations

import math
from fractions import Fraction

from hypothesis import given, settings
from hypothesis import strategies as st

from simulations.analysis.report import _scale_section
from simulations.analysis.scale_ratios import (COLUMNS, consumer_spans, nearest_rank_bounds, replicate_ratios,
                                               scale_ratios)

LATENCIES = ("produce_latency_ms", "end_to_end_latency_ms")
BOOTSTRAP = {"replicates": 5, "block_ms": 1000.0, "seed": 7}


def config(mode: str, consumers: int, median_ms: float, repetitions: int = 3, source: str = "runtime",
           lanes: int = 0) -> dict:
    row = {"source": source, "mode": mode, "consumers": consumers, "topics": 1, "lanes": lanes,
           "repetitions": repetitions}
    for latency in LATENCIES:
        for name in ("tp50", "tp99", "tp999"):
            row[f"{latency}_{name}"] = median_ms
    return row


def statistics(mode: str, consumers: int, values: list, scans_full: int = 0, lanes: int = 0) -> list[dict]:
    """Per latency and percentile, replicate r's statistic ``values[r]``."""
    return [{"source": "runtime", "mode": mode, "consumers": consumers, "topics": 1, "lanes": lanes, "latency": latency,
             "percentile": name, "replicate": replicate, "statistic": value, "scans_full": scans_full}
            for latency in LATENCIES for name in ("tp99", "tp999") for replicate, value in enumerate(values)]


def test_each_mode_compares_its_fewest_drained_consumers_with_its_most():
    latency = [config("mafka4", 1, 10.0), config("mafka4", 8, 11.0), config("mafka4", 32, 25.0),
               config("mafka3", 1, 9.0), config("mafka3", 32, 90.0, repetitions=0),  # no drained run at 32
               config("mafka3", 4, 9.0, source="fleet_model"), config("mafka3", 40, 9.0, source="fleet_model")]
    assert consumer_spans(latency) == {("runtime", "mafka4", 1, 0): (1, 32)}
    lanes = [config("mafka4", 4, 10.0, lanes=8), config("mafka4", 16, 10.0, lanes=8), config("mafka3", 32, 9.0, lanes=8)]
    assert consumer_spans(latency + lanes) == {("runtime", "mafka4", 1, 0): (1, 32), ("runtime", "mafka4", 1, 8): (4, 16)}, \
        "a lane count is compared with itself only: Mafka3's 1 consumer without lanes is not its fewest with 8 lanes"


def test_the_ratio_is_high_over_low_and_the_interval_the_nearest_ranks_of_the_replicate_ratios():
    latency = [config("mafka4", 1, 10.0), config("mafka4", 8, 11.0), config("mafka4", 32, 25.0), config("mafka3", 1, 9.0)]
    rows = statistics("mafka4", 1, [10.0, 20.0, 4.0, 0.0, None], scans_full=1)
    rows += statistics("mafka4", 32, [15.0, 20.0, 10.0, 5.0, 3.0], scans_full=2)
    rows += statistics("mafka4", 8, [1000.0] * 5)  # between the two: not compared
    rows += statistics("mafka3", 1, [1.0] * 5)
    found = scale_ratios(latency, rows, **BOOTSTRAP)
    assert [(row["latency"], row["percentile"]) for row in found] == [
        (latency, name) for latency in LATENCIES for name in ("tp99", "tp999")]
    for row in found:
        assert list(row) == list(COLUMNS)
        assert (row["source"], row["mode"], row["topics"], row["consumers_low"], row["consumers_high"]) == (
            "runtime", "mafka4", 1, 1, 32)
        assert (row["ratio"], row["median_at_low"], row["median_at_high"]) == (2.5, 10.0, 25.0)
        # Replicate ratios 1.5, 1.0, 2.5; a low statistic of 0 or None gives none. Of 3 values the
        # 2.5 % nearest rank is the 1st (ceil(0.075)), the 97.5 % the 3rd (ceil(2.925)).
        assert (row["ratio_low"], row["ratio_high"], row["replicates_used"]) == (1.0, 2.5, 3)
        assert (row["replicates"], row["scans_full"], row["block_ms"], row["bootstrap_seed"]) == (5, 5 * 1 + 5 * 2, 1000.0, 7)


def test_each_lane_count_scales_on_its_own_runs():
    latency = [config("mafka4", 1, 10.0), config("mafka4", 32, 25.0),
               config("mafka4", 1, 10.0, lanes=8), config("mafka4", 32, 40.0, lanes=8)]
    rows = statistics("mafka4", 1, [10.0, 20.0]) + statistics("mafka4", 32, [15.0, 20.0])
    rows += statistics("mafka4", 1, [10.0, 10.0], lanes=8) + statistics("mafka4", 32, [40.0, 30.0], lanes=8)
    found = scale_ratios(latency, rows, **BOOTSTRAP)
    by_lanes = {lanes: [row for row in found if row["lanes"] == lanes] for lanes in (0, 8)}
    assert len(by_lanes[0]) == len(by_lanes[8]) == 4 and len(found) == 8
    assert {(row["ratio"], row["ratio_low"], row["ratio_high"]) for row in by_lanes[0]} == {(2.5, 1.0, 1.5)}
    assert {(row["ratio"], row["ratio_low"], row["ratio_high"]) for row in by_lanes[8]} == {(4.0, 3.0, 4.0)}
    text = _scale_section([row for row in found if row["lanes"] == 0], latency[:2])
    assert "2.500 [1.000, 1.500]" in text and "4.000" not in text


def test_a_low_median_of_zero_gives_no_ratio_and_missing_statistics_no_interval():
    latency = [config("mafka4", 1, 0.0), config("mafka4", 4, 3.0)]
    (row, *_) = scale_ratios(latency, statistics("mafka4", 4, [1.0, 2.0]), **BOOTSTRAP)
    assert (row["ratio"], row["ratio_low"], row["ratio_high"], row["replicates_used"]) == (None, None, None, 0)


def test_one_consumer_count_gives_no_rows_and_the_report_says_so():
    latency = [config("mafka3", 4, 9.0), config("mafka4", 4, 3.0), config("mafka4", 8, 3.0, repetitions=0)]
    assert scale_ratios(latency, statistics("mafka4", 4, [1.0]), **BOOTSTRAP) == []
    assert _scale_section([], latency) == ("No runtime mode has drained runs at two consumer counts or more (counts "
                                           "with a drained run: consumers 4), so no scaling ratio.")


def test_the_report_table_has_one_line_per_mode_with_ratio_interval_and_medians():
    latency = [config("mafka4", 1, 10.0), config("mafka4", 32, 25.0)]
    rows = statistics("mafka4", 1, [10.0, 20.0, 4.0]) + statistics("mafka4", 32, [15.0, 20.0, 10.0])
    text = _scale_section(scale_ratios(latency, rows, **BOOTSTRAP), latency)
    assert "lanes" not in text
    assert ("| mode | topics | consumers | produce_latency_ms_tp999 | end_to_end_latency_ms_tp999 | "
            "produce_latency_ms_tp99 | end_to_end_latency_ms_tp99 |") in text
    assert "| mafka4 | 1 | 32 / 1 | " + " | ".join(["2.500 [1.000, 2.500] (25.000 / 10.000)"] * 4) + " |" in text


def nearest_rank(values: list[float], percent: str) -> float:
    """The smallest value with at least ceil(percent / 100 * n) values at or below it."""
    needed = math.ceil(Fraction(percent) / 100 * len(values))
    return min(value for value in values if sum(other <= value for other in values) >= needed)


statistic = st.one_of(st.none(), st.just(0.0), st.floats(min_value=1e-3, max_value=1e4))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(statistic, statistic), max_size=60), st.sampled_from([0.25, 2.0, 8.0]))
def test_bounds_are_nearest_ranks_of_the_valid_replicates_and_follow_a_scaled_high_side(pairs, factor):
    at_low = {replicate: low for replicate, (low, _) in enumerate(pairs)}
    at_high = {replicate: high for replicate, (_, high) in enumerate(pairs)}
    ratios = replicate_ratios(at_low, at_high)
    assert len(ratios) == sum(low not in (None, 0.0) and high is not None for low, high in pairs)
    low_bound, high_bound = nearest_rank_bounds(ratios)
    if not ratios:
        assert (low_bound, high_bound) == (None, None)
        return
    assert (low_bound, high_bound) == (nearest_rank(ratios, "2.5"), nearest_rank(ratios, "97.5"))
    assert min(ratios) <= low_bound <= high_bound <= max(ratios)
    # Scaling the high count's statistics by a power of two scales every ratio, so both bounds, exactly.
    scaled = {replicate: None if high is None else high * factor for replicate, high in at_high.items()}
    assert nearest_rank_bounds(replicate_ratios(at_low, scaled)) == (low_bound * factor, high_bound * factor)
