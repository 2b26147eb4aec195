"""The Spark analysis: exact nearest-rank percentiles per repetition and their median, the drain
check, the outputs of a run, bad input.

The Spark session is the run's shared one (``spark`` in tests/unit/conftest.py).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

import simulations.schema as schema
from mafka4.bench.stats import nearest_rank_index
from mafka4.errors import InvalidConfig, NoEventLogs, RunInTwoEventLogs
from simulations.analysis.command import add_analyze_parser
from simulations.analysis.job import (PERCENTILES, AnalysisSettings, analyze, latency_by_config, latency_by_repetition,
                                      rank_expression, read_event_frame)
from simulations.analysis.percentiles import at_rank, beyond_rank
from simulations.schema import RunInfo, event_log_files, write_events

SEED = 20240601
START_MS = 1.7e12
RUNTIME3 = RunInfo(experiment_id="scaling", source="runtime", mode="mafka3", consumers=1, topics=1, physical_partitions=1,
                   virtual_partitions=0, write_nodes=3, read_nodes=0, actors=1, seed=SEED, git_commit="abc")
RUNTIME4 = replace(RUNTIME3, mode="mafka4", virtual_partitions=1, read_nodes=2, actors=2)
LATENCIES = ("produce_latency_ms", "end_to_end_latency_ms")


def write_runtime_run(directory: Path, run: RunInfo, latencies_ms: np.ndarray, end_to_end_ms: np.ndarray,
                      deliveries: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Writes the run; returns the latencies as stored (derived from epoch-ms times, so rounded)."""
    produce = START_MS + np.arange(latencies_ms.size, dtype=np.float64)
    ack, consume = produce + latencies_ms, produce + end_to_end_ms
    columns = {"partition": np.arange(latencies_ms.size) % run.physical_partitions, "produce_time_ms": produce,
               "ack_time_ms": ack, "consume_time_ms": consume}
    if deliveries is not None:
        columns["deliveries"] = deliveries
    write_events(directory / f"{run.mode}-{run.consumers}-{run.seed}-r{run.repetition}.parquet", run, columns)
    return {"produce_latency_ms": ack - produce, "end_to_end_latency_ms": consume - produce}


def nearest_rank(values: np.ndarray, percent: str) -> float | None:
    present = np.sort(values[~np.isnan(values)])
    return None if present.size == 0 else float(present[nearest_rank_index(percent, present.size)])


def test_percentiles_per_repetition_equal_exact_nearest_rank_and_configurations_take_their_median(spark, tmp_path):
    rng = np.random.default_rng(SEED)
    expected: dict[tuple, list[dict[str, np.ndarray]]] = {}
    # Sizes include 1, 2 and 1000 (where the float rank ceil(0.999 * 1000) would be 1000, not 999).
    for consumers, size in ((1, 1), (2, 2), (4, 1000), (8, 137)):
        runs = (replace(RUNTIME3, consumers=consumers, physical_partitions=consumers), replace(RUNTIME4, consumers=consumers))
        for run in runs:
            for repetition in range(2 if size == 2 else 3):  # an even and an odd number of repetitions
                produce = np.round(rng.lognormal(0.0, 1.0, size + repetition), 3)
                end_to_end = produce + np.round(rng.exponential(5.0, size + repetition), 3)
                if size == 137:
                    produce[rng.random(produce.size) < 0.1] = np.nan  # never acknowledged
                    end_to_end[rng.random(produce.size) < 0.2] = np.nan  # never consumed
                stored = write_runtime_run(tmp_path, replace(run, seed=SEED + repetition, repetition=repetition),
                                           produce, end_to_end)
                expected.setdefault((run.mode, consumers), []).append(stored)
    by_repetition = latency_by_repetition(read_event_frame(spark, event_log_files(tmp_path))).cache()
    for row in by_repetition.collect():
        stored = expected[(row["mode"], row["consumers"])][row["repetition"]]
        assert row["seed"] == SEED + row["repetition"] and row["drained"]  # deliveries not counted: nothing to check
        for latency, values in stored.items():
            assert row[f"{latency}_count"] == np.count_nonzero(~np.isnan(values))
            for name, percent in PERCENTILES.items():
                exact = nearest_rank(values, percent)
                assert row[f"{latency}_{name}"] == exact, (row["mode"], row["consumers"], latency, name)
                # numpy's inverted_cdf is nearest rank with a floating-point rank: where that rank
                # is off by one (99.9 % of 2,000 values), numpy returns the next value.
                present = np.sort(values[~np.isnan(values)])
                float_rank = math.ceil(float(percent) / 100 * present.size)
                if float_rank == nearest_rank_index(percent, present.size) + 1:
                    assert exact == float(np.percentile(present, float(percent), method="inverted_cdf"))
    rows = latency_by_config(by_repetition).collect()
    assert len(rows) == len(expected)
    for row in rows:
        repetitions = expected[(row["mode"], row["consumers"])]
        assert (row["runs"], row["repetitions"], row["runs_excluded"]) == (len(repetitions), len(repetitions), 0)
        for latency in LATENCIES:
            counts = [np.count_nonzero(~np.isnan(stored[latency])) for stored in repetitions]
            assert (row[f"{latency}_count"], row[f"{latency}_count_min"]) == (sum(counts), min(counts))
            for name, percent in PERCENTILES.items():
                values = [nearest_rank(stored[latency], percent) for stored in repetitions]
                assert row[f"{latency}_{name}"] == pytest.approx(float(np.median(values)), rel=1e-12, abs=0)
                assert (row[f"{latency}_{name}_min"], row[f"{latency}_{name}_max"]) == (min(values), max(values))
        assert row["seeds"] == ",".join(str(SEED + r) for r in range(len(repetitions))) and row["few_tp999_samples"]
    by_repetition.unpersist()


def test_rank_is_exact_where_floating_point_is_not(spark):
    counts = [1, 2, 3, 137, 1000, 2000, 10**7 + 1]
    frame = spark.createDataFrame([(count,) for count in counts], "n long")
    ranks = frame.select("n", *[rank_expression(percent, "n").alias(name) for name, percent in PERCENTILES.items()]).collect()
    for row in ranks:
        for name, percent in PERCENTILES.items():
            assert row[name] == nearest_rank_index(percent, row["n"]) + 1, (row["n"], name)
    assert next(row for row in ranks if row["n"] == 1000)["tp999"] == 999  # math.ceil(99.9 / 100 * 1000) is 1000


def test_tp999_samples_beyond_the_rank_fall_below_50_under_50000_samples(spark):
    frame = spark.createDataFrame([(n,) for n in (999, 1000, 49_999, 50_000)], "n int").selectExpr(
        "n", "sequence(1, n) as sorted")
    beyond = {row["n"]: row["beyond"] for row in frame.select("n", beyond_rank("sorted", "99.9").alias("beyond")).collect()}
    assert beyond == {999: 0, 1000: 1, 49_999: 49, 50_000: 50}
    # 99999 * 50,000 overflows the int that size() returns: the rank is computed in bigint.
    found = frame.select("n", at_rank("sorted", "99.999").alias("value")).collect()
    assert {row["n"]: row["value"] for row in found} == {
        n: nearest_rank_index("99.999", n) + 1 for n in (999, 1000, 49_999, 50_000)}


def test_a_run_not_drained_is_left_out_of_the_percentiles_and_counted(spark, tmp_path):
    rng = np.random.default_rng(SEED + 1)
    stored = []
    for repetition in range(3):
        deliveries = np.ones(100, dtype=np.int64)
        deliveries[:3] = 2  # three duplicates per run
        end_to_end = rng.exponential(10.0, 100)
        if repetition == 1:  # five acknowledged messages never delivered: the run did not drain
            deliveries[-5:], end_to_end[-5:] = 0, np.nan
        produce = rng.exponential(2.0, 100)
        produce[10] = np.nan  # never acknowledged, so never delivered either
        deliveries[10] = 0
        stored.append(write_runtime_run(tmp_path, replace(RUNTIME4, seed=SEED + repetition, repetition=repetition),
                                        produce, end_to_end, deliveries))
    by_repetition = latency_by_repetition(read_event_frame(spark, event_log_files(tmp_path))).cache()
    runs = {row["repetition"]: row for row in by_repetition.collect()}
    assert [runs[r]["drained"] for r in range(3)] == [True, False, True]
    assert (runs[1]["acknowledged"], runs[1]["undelivered"], runs[0]["undelivered"]) == (99, 5, 0)
    assert runs[0]["duplicates"] == 3 and runs[0]["never_acknowledged"] == 1
    (row,) = latency_by_config(by_repetition).collect()
    assert (row["runs"], row["repetitions"], row["runs_excluded"]) == (3, 2, 1)
    assert (row["duplicates"], row["never_acknowledged"], row["undelivered"]) == (9, 3, 5)
    drained = [stored[0], stored[2]]
    assert row["end_to_end_latency_ms_tp99"] == pytest.approx(
        float(np.median([nearest_rank(run["end_to_end_latency_ms"], "99") for run in drained])), rel=1e-12)
    assert row["end_to_end_latency_ms_count"] == 2 * 100
    by_repetition.unpersist()


def runtime_run(directory: Path, run: RunInfo, rng: np.random.Generator, rows: int, undelivered: int = 0) -> None:
    """A runtime run with every stage stamp, deliveries and some duplicates."""
    produce = START_MS + np.arange(rows) * 20.0
    stamps = {"sent_time_ms": produce + rng.exponential(0.5, rows)}
    stamps["leader_received_time_ms"] = stamps["sent_time_ms"] + rng.exponential(0.3, rows)
    stamps["leader_appended_time_ms"] = stamps["leader_received_time_ms"] + rng.exponential(0.2, rows)
    stamps["committed_time_ms"] = stamps["leader_appended_time_ms"] + rng.exponential(1.0, rows)
    read_from = stamps["committed_time_ms"]
    if run.mode == "mafka4":
        stamps["vp_appended_time_ms"] = read_from + rng.exponential(1.0, rows)
        stamps["vp_committed_time_ms"] = stamps["vp_appended_time_ms"] + rng.exponential(0.5, rows)
        read_from = stamps["vp_committed_time_ms"]
    consume = read_from + rng.exponential(2.0 * run.consumers if run.mode == "mafka3" else 2.0, rows)
    deliveries = np.where(rng.random(rows) < 0.02, 2, 1)
    if undelivered:
        deliveries[-undelivered:], consume[-undelivered:] = 0, np.nan
    write_events(directory / "runtime" / f"{run.mode}-c{run.consumers}-r{run.repetition}.parquet", run,
                 {"partition": np.zeros(rows, dtype=np.int64), "produce_time_ms": produce,
                  "ack_time_ms": stamps["committed_time_ms"] + rng.exponential(0.3, rows), "consume_time_ms": consume,
                  "deliveries": deliveries, **stamps,
                  **({"virtual_partition": np.zeros(rows, dtype=np.int64)} if run.mode == "mafka4" else {})})


def tiny_fixture(directory: Path) -> None:
    rng = np.random.default_rng(SEED)
    for consumers in (1, 4):
        for repetition in range(3):
            seed = SEED + repetition
            runtime_run(directory, replace(RUNTIME3, consumers=consumers, physical_partitions=consumers, seed=seed,
                                           repetition=repetition), rng, 200)
            runtime_run(directory, replace(RUNTIME4, consumers=consumers, virtual_partitions=consumers, seed=seed,
                                           repetition=repetition), rng, 200,
                        undelivered=4 if (consumers, repetition) == (4, 2) else 0)
    (directory / "runtime" / "settings.json").write_text(json.dumps({"message_bytes": 512, "seed": SEED}))
    summary = []
    for topics in (100, 1000):
        for scale in (1.0, 4.0):
            designs = (("mafka3", topics // 10, 0, 0), ("mafka4", topics // 20, topics // 50, topics * 4))
            for mode, write_nodes, read_nodes, virtual in designs:
                consumers = int(8 * topics * scale)
                run = RunInfo(experiment_id="fleet-model", source="fleet_model", mode=mode, consumers=consumers,
                              topics=topics, physical_partitions=topics * 2, virtual_partitions=virtual,
                              write_nodes=write_nodes, read_nodes=read_nodes, actors=topics * 3, seed=SEED + 9,
                              git_commit="abc", sample_rate=0.01)
                write_events(directory / "fleet" / f"fleet-{mode}-topics{topics}-consumers_x{scale:g}.parquet", run,
                             {"partition": np.arange(10), "produce_time_ms": np.zeros(10),
                              "produce_latency_ms": rng.exponential(2.0, 10),
                              "end_to_end_latency_ms": rng.exponential(9.0, 10)})
                summary.append({"design": mode, "topics": topics, "consumers": consumers, "consumers_scale": scale})
    (directory / "fleet" / "fleet_summary.json").write_text(json.dumps({"experiment_id": "fleet-model", "runs": summary}))
    (directory / "fleet" / "calibration.json").write_text(json.dumps({"replica_fetch_ms": 0.0265, "source": {"runs": 3}}))


def test_a_run_measured_again_beside_its_first_file_is_refused_naming_both(spark, tmp_path):
    rng = np.random.default_rng(SEED)
    run = replace(RUNTIME3, consumers=2, physical_partitions=2)
    runtime_run(tmp_path, run, rng, rows=50)
    again = tmp_path / "runtime" / "again"
    again.mkdir()
    (tmp_path / "runtime" / "mafka3-c2-r0.parquet").rename(again / "first.parquet")
    runtime_run(tmp_path, run, rng, rows=50)
    with pytest.raises(RunInTwoEventLogs, match="mode=mafka3, consumers=2.*first.parquet.*mafka3-c2-r0.parquet.*move all but one"):
        analyze(tmp_path, spark=spark, settings=AnalysisSettings(bootstrap_replicates=5))


def test_a_run_writes_tables_plots_omb_files_and_a_report(spark, tmp_path):
    tiny_fixture(tmp_path)
    logs_before = event_log_files(tmp_path)
    result = analyze(tmp_path, spark=spark, settings=AnalysisSettings(bootstrap_replicates=20, bootstrap_block_ms=400.0))
    assert result.out_dir == tmp_path / "analysis" and not result.skipped_plots
    assert set(result.table_paths) == {"latency_by_config", "latency_by_repetition", "mode_ratios", "ratio_intervals",
                                       "scale_ratios", "stage_latency"}
    assert set(result.plot_paths) == {"latency_vs_consumers", "fleet_nodes_vs_topics", "fleet_latency_vs_topics",
                                      "stage_breakdown"}
    for parquet_path, csv_path in result.table_paths.values():
        with open(csv_path, newline="") as source:
            assert len(list(csv.DictReader(source))) == pq.read_table(parquet_path).num_rows > 0
    ratios = pq.read_table(result.table_paths["mode_ratios"][0]).to_pylist()
    assert {(row["source"], row["consumers"], row["topics"]) for row in ratios} == {
        ("runtime", 1, 1), ("runtime", 4, 1), *[("fleet_model", int(8 * t * s), t) for t in (100, 1000) for s in (1, 4)]}
    for row in ratios:
        bounded = row["source"] == "runtime"
        for column in ("produce_latency_ms_tp999", "end_to_end_latency_ms_tp99"):
            assert (row[f"{column}_ratio_low"] is not None) == bounded
            if bounded:
                assert row[f"{column}_ratio_low"] <= row[f"{column}_ratio_high"]
    fleet_1000 = next(row for row in ratios if row["source"] == "fleet_model" and row["consumers"] == 32_000)
    assert fleet_1000["nodes_ratio"] == pytest.approx(100 / (50 + 20))
    config = pq.read_table(result.table_paths["latency_by_config"][0]).to_pylist()
    excluded = next(row for row in config if (row["source"], row["mode"], row["consumers"]) == ("runtime", "mafka4", 4))
    assert (excluded["repetitions"], excluded["runs_excluded"], excluded["undelivered"]) == (2, 1, 4)
    assert {row["consumers_scale"] for row in config if row["source"] == "fleet_model"} == {1.0, 4.0}
    # Each runtime mode, 4 consumers over 1, on the same bootstrap (20 replicates) as the Mafka3 / Mafka4 intervals.
    scales = pq.read_table(result.table_paths["scale_ratios"][0]).to_pylist()
    assert sorted((row["mode"], row["latency"], row["percentile"]) for row in scales) == sorted(
        (mode, latency, name) for mode in ("mafka3", "mafka4") for latency in LATENCIES for name in ("tp99", "tp999"))
    medians = {(row["mode"], row["consumers"]): row for row in config if row["source"] == "runtime"}
    for row in scales:
        assert (row["source"], row["topics"], row["consumers_low"], row["consumers_high"]) == ("runtime", 1, 1, 4)
        column = f"{row['latency']}_{row['percentile']}"
        assert (row["median_at_low"], row["median_at_high"]) == (medians[(row["mode"], 1)][column],
                                                                 medians[(row["mode"], 4)][column])
        assert row["ratio"] == pytest.approx(row["median_at_high"] / row["median_at_low"], rel=1e-12)
        assert row["ratio_low"] <= row["ratio_high"] and 0 < row["replicates_used"] <= row["replicates"] == 20
    omb = json.loads(result.omb_paths["mafka4-c004"].read_text())
    assert (omb["driver"], omb["messageSize"], omb["mafka4Repetitions"], omb["consumersPerTopic"]) == ("mafka4", 512, 2, 4)
    assert set(result.omb_paths) == {"mafka3-c001", "mafka3-c004", "mafka4-c001", "mafka4-c004"}
    for path in result.plot_paths.values():
        assert path.read_bytes().startswith(b"\x89PNG")
    text = result.report_path.read_text()
    for needed in (str(SEED), str(SEED + 9), "abc", "replica_fetch_ms", "0.0265", "source.runs", "sample_rate 0.01",
                   "* runtime, consumers=1: Mafka3 / Mafka4 tp999 = ", "* runtime, consumers=4: Mafka3 / Mafka4 tp999 = ",
                   "* fleet_model, consumer scale x1: nodes Mafka3 / Mafka4 = 1.429",
                   "* fleet_model, consumer scale x4: nodes Mafka3 / Mafka4 = 1.429",
                   "**1 run was not drained**", "| runtime | mafka4 | 4 | 2 | 20240603 | scaling | 200 | 4 |",
                   "rest on few samples", "20 replicates", "blocks of 400 ms", "tp50 ratios have no interval",
                   "stage_breakdown.png", "latency_vs_consumers.png", "omb/mafka3-c001.json", "**End-to-end path**",
                   "## Scaling within a mode", "| mafka3 | 1 | 4 / 1 | ", "| mafka4 | 1 | 4 / 1 | ", "scale_ratios.csv"):
        assert needed in text, needed
    headline = text.split("## Result")[1].split("## Integrity")[0]
    assert headline.count(" [") >= 8  # every runtime ratio carries its interval
    # The result tables are Parquet too, but a later run must not take them for event logs.
    assert event_log_files(tmp_path) == logs_before


def to_version_2(path: Path) -> None:
    """Rewrite an event log as it was written before the ``lanes`` column (schema version 2)."""
    old = schema.READABLE_SCHEMAS["2"]
    pq.write_table(pq.read_table(path).drop_columns(["lanes"]).cast(old), path)


def test_lane_runs_are_configurations_of_their_own_and_logs_from_before_lanes_read_as_lanes_0(spark, tmp_path):
    tiny_fixture(tmp_path)
    for path in sorted((tmp_path / "runtime").glob("*.parquet")):
        to_version_2(path)  # the runs without lanes, as written before lanes existed
    (tmp_path / "runtime" / "settings.json").write_text(json.dumps({
        "message_bytes": 512, "seed": SEED, "consumers": [1, 4], "lanes": [0, 2, 64], "mafka3_lanes_max": 16,
        "replication_factor": 2}))
    rng = np.random.default_rng(SEED + 2)
    lane_runs = [replace(RUNTIME3, consumers=4, physical_partitions=12, actors=24, lanes=2),
                 replace(RUNTIME4, consumers=4, virtual_partitions=6, lanes=2),
                 replace(RUNTIME4, consumers=4, virtual_partitions=68, lanes=64)]
    for run in lane_runs:
        for repetition in range(2):
            slow = 10.0 if run.mode == "mafka3" else 1.0
            produce = rng.exponential(2.0 * slow, 300)
            write_runtime_run(tmp_path / "lanes" / f"l{run.lanes}", replace(run, seed=SEED + repetition,
                                                                              repetition=repetition),
                              produce, produce + rng.exponential(5.0 * slow, 300))
    result = analyze(tmp_path, spark=spark, settings=AnalysisSettings(bootstrap_replicates=20, bootstrap_block_ms=400.0))
    config = pq.read_table(result.table_paths["latency_by_config"][0]).to_pylist()
    runtime = {(row["mode"], row["consumers"], row["lanes"]): row for row in config if row["source"] == "runtime"}
    assert set(runtime) == {("mafka3", 1, 0), ("mafka3", 4, 0), ("mafka4", 1, 0), ("mafka4", 4, 0), ("mafka3", 4, 2),
                            ("mafka4", 4, 2), ("mafka4", 4, 64)}
    assert runtime[("mafka3", 4, 0)]["runs"] == 3 and runtime[("mafka3", 4, 2)]["runs"] == 2
    assert (runtime[("mafka3", 4, 2)]["physical_partitions"], runtime[("mafka4", 4, 64)]["virtual_partitions"]) == (12, 68)
    assert {row["lanes"] for row in config if row["source"] == "fleet_model"} == {0}
    ratios = pq.read_table(result.table_paths["mode_ratios"][0]).to_pylist()
    assert {(row["consumers"], row["lanes"]) for row in ratios if row["source"] == "runtime"} == {(1, 0), (4, 0), (4, 2)}
    lane_ratio = next(row for row in ratios if row["lanes"] == 2)
    assert lane_ratio["physical_partitions_ratio"] == 12.0 and lane_ratio["produce_latency_ms_tp999_ratio_low"] is not None
    intervals = pq.read_table(result.table_paths["ratio_intervals"][0]).to_pylist()
    assert {row["lanes"] for row in intervals} == {0, 2}
    stages = pq.read_table(result.table_paths["stage_latency"][0]).to_pylist()
    assert stages and {row["lanes"] for row in stages} == {0}, "lane runs take no stage stamps"
    scales = pq.read_table(result.table_paths["scale_ratios"][0]).to_pylist()
    assert {(row["mode"], row["lanes"]) for row in scales} == {("mafka3", 0), ("mafka4", 0)}
    assert set(result.omb_paths) == {"mafka3-c001", "mafka3-c004", "mafka4-c001", "mafka4-c004", "mafka3-c004-l002",
                                     "mafka4-c004-l002", "mafka4-c004-l064"}
    assert json.loads(result.omb_paths["mafka4-c004-l064"].read_text())["mafka4Lanes"] == 64
    assert "mafka4Lanes" not in json.loads(result.omb_paths["mafka4-c004"].read_text())
    text = result.report_path.read_text()
    headline = text.split("## Result")[1].split("## Integrity")[0]
    assert [line.split(":")[0] for line in headline.splitlines() if line.startswith("* runtime")] == [
        "* runtime, consumers=1", "* runtime, consumers=4"]
    lanes = text.split("## Lanes: queue merging")[1].split("\n## ")[0]
    assert "| mafka3 | 4 | 2 | 12 | 0 | 24 | 2 |" in lanes and "| mafka4 | 4 | 64 | 1 | 68 | 2 | 2 |" in lanes
    assert "| 4 | 2 | " in lanes.split("Mafka3 / Mafka4 per consumers and lanes")[1]
    assert "| 1 | 64 | not run | 65 | 130 |" in lanes and "| 4 | 64 | not run | 260 | 520 |" in lanes


def test_absent_rows_skip_their_plots_and_the_report_says_so(spark, tmp_path):
    write_runtime_run(tmp_path, RUNTIME4, np.array([1.0, 2.0]), np.array([3.0, np.nan]))
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "fleet_nodes_vs_topics.png").write_bytes(b"old")
    result = analyze(tmp_path, tmp_path / "out", spark=spark, settings=AnalysisSettings(bootstrap_replicates=5))
    assert set(result.plot_paths) == {"latency_vs_consumers"}
    assert set(result.skipped_plots) == {"fleet_nodes_vs_topics", "fleet_latency_vs_topics", "stage_breakdown"}
    assert not (tmp_path / "out" / "fleet_nodes_vs_topics.png").exists()
    text = result.report_path.read_text()
    assert "fleet_nodes_vs_topics: skipped, no fleet_model rows" in text
    assert "No configuration has rows of both modes." in text
    assert "* runtime, consumers=1: only mafka4 rows" in text
    assert "(counts with a drained run: consumers 1), so no scaling ratio." in text
    assert pq.read_table(result.table_paths["scale_ratios"][0]).num_rows == 0
    assert "No `calibration.json`" in text


def test_missing_or_empty_directory_names_it_and_what_to_run_first(tmp_path):
    with pytest.raises(NoEventLogs) as raised:
        analyze(tmp_path / "missing")
    assert str(tmp_path / "missing") in raised.value.message and "experiment" in raised.value.message
    with pytest.raises(NoEventLogs, match="no event-log Parquet files"):
        analyze(tmp_path)


def test_analyze_subcommand_registers_with_its_defaults():
    parser = argparse.ArgumentParser(prog="mafka4")
    add_analyze_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["analyze", "results/scaling"])
    assert (args.dir, args.out, args.master) == ("results/scaling", None, "local[*]") and callable(args.run)
    assert (args.replicates, args.block_ms, args.bootstrap_seed) == (400, 1000.0, AnalysisSettings().bootstrap_seed)
    args = parser.parse_args(["analyze", "d", "--out", "o", "--master", "local[1]", "--replicates", "50", "--block-ms", "250"])
    assert (args.out, args.master, args.replicates, args.block_ms) == ("o", "local[1]", 50, 250.0)


def test_settings_refuse_a_bootstrap_without_replicates_or_blocks():
    with pytest.raises(InvalidConfig, match="bootstrap_replicates"):
        AnalysisSettings(bootstrap_replicates=0)
    with pytest.raises(InvalidConfig, match="bootstrap_block_ms"):
        AnalysisSettings(bootstrap_block_ms=0.0)
