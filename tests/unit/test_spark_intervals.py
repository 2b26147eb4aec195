"""The block bootstrap of the Mafka3 / Mafka4 ratios against numpy on fixed data.

The weighted nearest-rank percentile in Spark against a numpy reference, with given weights and
with the Poisson block weights Spark draws; the tail restriction against the full scan; the
interval of fixed replicate ratios against numpy's; the Poisson draws themselves.
"""

from __future__ import annotations

import math
from dataclasses import replace
from fractions import Fraction
from pathlib import Path
from types import MappingProxyType

import numpy as np
import pytest

from mafka4.bench.stats import nearest_rank_index
from simulations.analysis.intervals import (INTERVAL_PERCENTILES, TAIL_MULTIPLES, poisson_weight_sql, ratio_interval,
                                            replicate_statistics, run_arrays, threshold_sql, uniform_sql,
                                            weighted_percentile_sql, with_block_weights)
from simulations.analysis.job import read_event_frame
from simulations.analysis.runs import LATENCIES, RUN_KEYS
from simulations.schema import RunInfo, event_log_files, write_events

SEED = 20240601
START_MS = 1.7e12
BLOCK_MS = 100.0
REPLICATES = 40  # of the bootstrap over the 6 runs of ``bootstrap_data``
RUN = RunInfo(experiment_id="intervals", source="runtime", mode="mafka3", consumers=2, topics=1, physical_partitions=2,
              virtual_partitions=0, write_nodes=2, read_nodes=0, actors=4, seed=SEED, git_commit="abc")


def weighted_nearest_rank(values: np.ndarray, weights: np.ndarray, percent: str) -> float | None:
    """The smallest value whose cumulative weight (values ascending) reaches ceil(q * W)."""
    order = np.argsort(values, kind="stable")
    cumulative = np.cumsum(weights[order])
    total = int(cumulative[-1]) if cumulative.size else 0
    if total == 0:
        return None
    target = math.ceil(Fraction(percent) / 100 * total)
    return float(values[order][np.searchsorted(cumulative, target, side="left")])


def descending(values: np.ndarray, blocks: np.ndarray) -> list[dict]:
    order = sorted(range(values.size), key=lambda index: (values[index], blocks[index]), reverse=True)
    return [{"value": float(values[index]), "block": int(blocks[index])} for index in order]


def weighted_frame(spark, cases: list[tuple[np.ndarray, np.ndarray]]):
    """One row per case: every value its own block, so the block weights are the value weights."""
    rows = [(index, descending(values, np.arange(values.size)), [int(weight) for weight in weights],
             int(weights.sum())) for index, (values, weights) in enumerate(cases)]
    return spark.createDataFrame(rows, "case int, desc array<struct<value: double, block: int>>, weights array<int>, "
                                       "total long")


def weighted_sql(percent: str, prefix_lengths: tuple[int, ...] = ()) -> str:
    """SQL of the weighted percentile's value over ``desc``, scanning the given prefixes first."""
    prefixes = [f"slice(desc, 1, {length})" for length in prefix_lengths] + ["desc"]
    return f"{weighted_percentile_sql(prefixes, 'weights', threshold_sql('total', percent))}.value"


def spark_weighted(frame, queries: list[tuple[str, tuple[int, ...]]]) -> dict[tuple, dict[int, float | None]]:
    """(percent, prefix lengths) -> case -> value, every query a column of one Spark query."""
    columns = [f"{weighted_sql(percent, lengths)} as q{index}" for index, (percent, lengths) in enumerate(queries)]
    rows = frame.selectExpr("case", *columns).collect()
    return {query: {row["case"]: row[f"q{index}"] for row in rows} for index, query in enumerate(queries)}


PERCENTS = ("50", "99", "99.9", "12.5", "100", "0.1")


def test_weighted_percentile_equals_numpy_for_given_weights(spark):
    rng = np.random.default_rng(SEED)
    cases = []
    for size in (1, 2, 7, 100, 1000):
        values = np.round(rng.lognormal(0.0, 1.0, size), 1)  # rounded: ties
        cases.append((values, rng.integers(0, 5, size)))
    cases.append((np.array([3.0, 1.0, 2.0]), np.array([0, 0, 0])))  # no weight: no percentile
    cases.append((np.array([3.0, 1.0, 2.0]), np.array([0, 2, 0])))  # only 1.0 counts
    found = spark_weighted(weighted_frame(spark, cases), [(percent, lengths) for percent in PERCENTS
                                                         for lengths in ((), (1, 5))])
    for percent in PERCENTS:
        for index, (values, weights) in enumerate(cases):
            assert found[(percent, ())][index] == weighted_nearest_rank(values, weights, percent), (index, percent)
        # A prefix too short to hold the answer falls through to the next one: same result.
        assert found[(percent, (1, 5))] == found[(percent, ())]
    assert found[("99", ())][len(cases) - 2] is None
    assert found[("99", ())][len(cases) - 1] == 1.0


def test_with_all_weights_one_it_is_the_unweighted_percentile(spark):
    rng = np.random.default_rng(SEED + 1)
    cases = [(np.round(rng.exponential(3.0, size), 2), np.ones(size, dtype=np.int64)) for size in (1, 2, 999, 1000, 2001)]
    found = spark_weighted(weighted_frame(spark, cases), [(percent, ()) for percent in PERCENTS])
    for percent in PERCENTS:
        for index, (values, _) in enumerate(cases):
            expected = float(np.sort(values)[nearest_rank_index(percent, values.size)])
            assert found[(percent, ())][index] == expected, (index, percent)


def test_interval_of_fixed_replicate_ratios_equals_numpy(spark):
    rng = np.random.default_rng(SEED + 2)
    groups = {1: rng.lognormal(0.2, 0.3, 400), 2: rng.lognormal(0.0, 0.1, 400), 3: rng.lognormal(0.0, 0.1, 37)}
    rows = [(consumers, float(ratio)) for consumers, ratios in groups.items() for ratio in ratios]
    rows += [(1, None), (1, None)]  # a Mafka4 statistic of 0 gives no ratio
    frame = spark.createDataFrame(rows, "consumers int, ratio double")
    found = {row["consumers"]: row for row in ratio_interval(frame, ["consumers"]).collect()}
    for consumers, ratios in groups.items():
        low, high = np.percentile(ratios, [2.5, 97.5], method="inverted_cdf")
        ordered = np.sort(ratios)
        assert found[consumers]["ratio_low"] == float(low) == ordered[nearest_rank_index("2.5", ratios.size)]
        assert found[consumers]["ratio_high"] == float(high) == ordered[nearest_rank_index("97.5", ratios.size)]
        assert found[consumers]["replicates_used"] == ratios.size


def write_run(directory: Path, run: RunInfo, rng: np.random.Generator, rows: int, clustered_block: int | None) -> dict:
    produce = START_MS + np.arange(rows, dtype=np.float64) * (BLOCK_MS * 10 / rows)  # 10 blocks
    latencies = {"produce_latency_ms": np.round(rng.lognormal(0.0, 0.5, rows), 3),
                 "end_to_end_latency_ms": np.round(rng.lognormal(1.0, 0.5, rows), 3)}
    blocks = np.floor((produce - produce[0]) / BLOCK_MS).astype(np.int64)
    if clustered_block is not None:  # a pause: the whole block is slower than every other message
        for values in latencies.values():
            values[blocks == clustered_block] += 100.0
    latencies["end_to_end_latency_ms"][rng.random(rows) < 0.05] = np.nan  # some never consumed
    write_events(directory / f"{run.mode}-{run.repetition}.parquet", run,
                 {"partition": np.zeros(rows, dtype=np.int64), "produce_time_ms": produce, **latencies})
    return {"blocks": blocks, **latencies}


@pytest.fixture(scope="module")
def bootstrap_data(spark, tmp_path_factory):
    directory = tmp_path_factory.mktemp("bootstrap")
    rng = np.random.default_rng(SEED + 3)
    written = {}
    for mode in ("mafka3", "mafka4"):
        for repetition in (0, 1, 2):
            run = replace(RUN, mode=mode, repetition=repetition, seed=SEED + repetition,
                          virtual_partitions=2 if mode == "mafka4" else 0)
            clustered = 7 if (mode, repetition) == ("mafka4", 1) else None
            written[(mode, SEED + repetition, repetition)] = write_run(directory, run, rng, 1000, clustered)
    runs = run_arrays(read_event_frame(spark, event_log_files(directory)), BLOCK_MS).cache()
    yield runs, written
    runs.unpersist()


def statistics_by_key(frame) -> dict[tuple, tuple[float | None, int | None]]:
    return {(row["mode"], row["seed"], row["repetition"], row["latency"], row["percentile"], row["replicate"]):
            (row["value"], row["level"]) for row in frame.collect()}


@pytest.fixture(scope="module")
def restricted_statistics(bootstrap_data) -> MappingProxyType:
    """``statistics_by_key`` of ``replicate_statistics`` with the tail restriction, read-only."""
    runs, _ = bootstrap_data
    return MappingProxyType(statistics_by_key(replicate_statistics(runs, REPLICATES, SEED)))


def test_replicate_statistics_equal_numpy_with_the_drawn_block_weights(spark, bootstrap_data, restricted_statistics):
    runs, written = bootstrap_data
    weights = {(row["mode"], row["seed"], row["repetition"]): np.array(row["weights"])
               for row in with_block_weights(runs, REPLICATES, SEED).select(*RUN_KEYS, "weights").collect()}
    assert len(restricted_statistics) == len(written) * len(LATENCIES) * len(INTERVAL_PERCENTILES) * REPLICATES
    for run_key, data in written.items():
        for latency in LATENCIES:
            present = ~np.isnan(data[latency])
            for name, percent in INTERVAL_PERCENTILES.items():
                for replicate in range(REPLICATES):
                    row_weights = weights[run_key][replicate][data["blocks"][present]]
                    expected = weighted_nearest_rank(data[latency][present], row_weights, percent)
                    assert restricted_statistics[(*run_key, latency, name, replicate)][0] == expected


def test_the_tail_restriction_gives_the_same_statistics_as_the_full_scan(spark, bootstrap_data, restricted_statistics):
    runs, _ = bootstrap_data
    restricted = restricted_statistics
    full = statistics_by_key(replicate_statistics(runs, REPLICATES, SEED, tail_multiples=()))
    assert {key: value for key, (value, _) in restricted.items()} == {key: value for key, (value, _) in full.items()}
    levels = {level for _, level in restricted.values()}
    # The clustered run's slow block draws weight 0 in some replicates: the deeper levels are used,
    # down to the whole run.
    assert 1 in levels and len(TAIL_MULTIPLES) + 1 in levels
    clustered = [level for key, (_, level) in restricted.items() if key[:3] == ("mafka4", SEED + 1, 1)]
    assert max(clustered) == len(TAIL_MULTIPLES) + 1


def test_block_weights_are_poisson_and_fixed_by_the_seed(spark):
    frame = spark.range(200_000)
    drawn = frame.selectExpr(f"{poisson_weight_sql(uniform_sql(SEED, 'id'))} as draw",
                             f"{poisson_weight_sql(uniform_sql(SEED + 1, 'id'))} as other").toArrow()
    draws, other = drawn["draw"].to_numpy(), drawn["other"].to_numpy()
    assert abs(draws.mean() - 1.0) < 0.01 and abs(draws.var() - 1.0) < 0.02
    assert abs(np.mean(draws == 0) - math.exp(-1)) < 0.004 and abs(np.mean(draws == 3) - math.exp(-1) / 6) < 0.002
    # Drawn again with the rows dealt out to 3 partitions, then put back in id order.
    again = frame.repartition(3).selectExpr("id", f"{poisson_weight_sql(uniform_sql(SEED, 'id'))} as draw").toArrow()
    again = again["draw"].to_numpy()[np.argsort(again["id"].to_numpy())]
    assert np.array_equal(draws, again) and not np.array_equal(draws, other)


def test_a_run_without_lanes_draws_as_before_lanes_and_a_lane_run_draws_its_own_weights(spark):
    columns = "experiment_id string, mode string, consumers int, topics int, lanes int, seed long, repetition int, blocks int"
    runs = spark.createDataFrame([("e", "mafka4", 4, 1, lanes, 7, 0, 40) for lanes in (0, 8, 16)], columns)
    weights = {row["lanes"]: row["weights"] for row in with_block_weights(runs, 3, SEED).collect()}
    before = (f"transform(sequence(0, 2), r -> transform(transform(sequence(0, blocks - 1), b -> "
              f"{uniform_sql(SEED, 'experiment_id', 'mode', 'consumers', 'topics', 'seed', 'repetition', 'b', 'r')}), "
              f"u -> {poisson_weight_sql('u')}))")
    (unchanged,) = runs.filter("lanes = 0").selectExpr(f"{before} as weights").collect()
    assert weights[0] == unchanged["weights"], "the formula before lanes, so old results keep their intervals"
    assert weights[8] != weights[0] and weights[16] != weights[8]
