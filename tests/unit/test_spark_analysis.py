"""The Spark analysis: exact nearest-rank percentiles, the outputs of a run, bad input.

One local Spark session (one core, loopback only, no UI) serves the whole module.
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

from mafka4.bench.stats import nearest_rank_index
from mafka4.errors import NoEventLogs
from simulations.analysis import (PERCENTILES, AnalysisSettings, analyze, latency_by_config, rank_expression,
                                  read_event_frame, spark_session)
from simulations.analysis_command import add_analyze_parser
from simulations.schema import RunInfo, event_log_files, write_events

SEED = 20240601
START_MS = 1.7e12
RUNTIME3 = RunInfo(experiment_id="scaling", source="runtime", mode="mafka3", consumers=1, topics=1, physical_partitions=1,
                   virtual_partitions=0, write_nodes=3, read_nodes=0, actors=1, seed=SEED, git_commit="abc")
RUNTIME4 = replace(RUNTIME3, mode="mafka4", virtual_partitions=1, read_nodes=2, actors=2)


@pytest.fixture(scope="module")
def spark():
    session = spark_session(AnalysisSettings(master="local[1]", shuffle_partitions=2))
    yield session
    session.stop()


def write_runtime_run(directory: Path, run: RunInfo, latencies_ms: np.ndarray,
                      end_to_end_ms: np.ndarray) -> dict[str, np.ndarray]:
    """Writes the run; returns the latencies as stored (derived from epoch-ms times, so rounded)."""
    produce = START_MS + np.arange(latencies_ms.size, dtype=np.float64)
    ack, consume = produce + latencies_ms, produce + end_to_end_ms
    write_events(directory / f"{run.mode}-{run.consumers}-{run.seed}.parquet", run,
                 {"partition": np.arange(latencies_ms.size) % run.physical_partitions, "produce_time_ms": produce,
                  "ack_time_ms": ack, "consume_time_ms": consume})
    return {"produce_latency_ms": ack - produce, "end_to_end_latency_ms": consume - produce}


def nearest_rank(values: np.ndarray, percent: str) -> float | None:
    present = np.sort(values[~np.isnan(values)])
    return None if present.size == 0 else float(present[nearest_rank_index(percent, present.size)])


def test_spark_percentiles_equal_exact_nearest_rank_percentiles(spark, tmp_path):
    rng = np.random.default_rng(SEED)
    expected: dict[tuple, dict[str, np.ndarray]] = {}
    # Sizes include 1, 2 and 1000 (where the float rank ceil(0.999 * 1000) would be 1000, not 999).
    for consumers, size in ((1, 1), (2, 2), (4, 1000), (8, 137)):
        runs = (replace(RUNTIME3, consumers=consumers, physical_partitions=consumers), replace(RUNTIME4, consumers=consumers))
        for run in runs:
            for seed in (SEED, SEED + 1):  # two runs pooled in one configuration
                produce = np.round(rng.lognormal(0.0, 1.0, size), 3)
                end_to_end = produce + np.round(rng.exponential(5.0, size), 3)
                if size == 137:
                    produce[rng.random(size) < 0.1] = np.nan  # never acknowledged
                    end_to_end[rng.random(size) < 0.2] = np.nan  # never consumed
                stored = write_runtime_run(tmp_path, replace(run, seed=seed), produce, end_to_end)
                group = expected.setdefault((run.mode, consumers), {"produce_latency_ms": [], "end_to_end_latency_ms": []})
                for latency, values in stored.items():
                    group[latency].append(values)
    rows = latency_by_config(read_event_frame(spark, event_log_files(tmp_path))).collect()
    assert len(rows) == len(expected)
    for row in rows:
        group = expected[(row["mode"], row["consumers"])]
        for latency, chunks in group.items():
            values = np.concatenate(chunks)
            assert row[f"{latency}_count"] == np.count_nonzero(~np.isnan(values))
            for name, percent in PERCENTILES.items():
                exact = nearest_rank(values, percent)
                assert row[f"{latency}_{name}"] == exact, (row["mode"], row["consumers"], latency, name)
                # numpy's inverted_cdf is nearest rank with a floating-point rank: where that rank
                # is off by one (99.9 % of 2,000 values), numpy returns the next value.
                present = np.sort(values[~np.isnan(values)])
                float_rank = math.ceil(float(percent) / 100 * present.size)
                assert float(np.percentile(present, float(percent), method="inverted_cdf")) == present[float_rank - 1]
                if float_rank == nearest_rank_index(percent, present.size) + 1:
                    assert exact == float(np.percentile(present, float(percent), method="inverted_cdf"))
        assert row["rows"] == 2 * len(chunks[0]) and row["runs"] == 1 and row["seeds"] == f"{SEED},{SEED + 1}"


def test_rank_is_exact_where_floating_point_is_not(spark):
    counts = [1, 2, 3, 137, 1000, 2000, 10**7 + 1]
    frame = spark.createDataFrame([(count,) for count in counts], "n long")
    ranks = frame.select("n", *[rank_expression(percent, "n").alias(name) for name, percent in PERCENTILES.items()]).collect()
    for row in ranks:
        for name, percent in PERCENTILES.items():
            assert row[name] == nearest_rank_index(percent, row["n"]) + 1, (row["n"], name)
    assert next(row for row in ranks if row["n"] == 1000)["tp999"] == 999  # math.ceil(99.9 / 100 * 1000) is 1000


def tiny_fixture(directory: Path) -> None:
    rng = np.random.default_rng(SEED)
    for consumers in (1, 4):
        write_runtime_run(directory / "runtime", replace(RUNTIME3, consumers=consumers, physical_partitions=consumers),
                          rng.exponential(8.0, 20), rng.exponential(30.0, 20))
        write_runtime_run(directory / "runtime", replace(RUNTIME4, consumers=consumers, virtual_partitions=consumers),
                          rng.exponential(1.0, 20), rng.exponential(20.0, 20))
    for topics in (100, 1000):
        designs = (("mafka3", topics // 10, 0, 0), ("mafka4", topics // 20, topics // 50, topics * 4))
        for mode, write_nodes, read_nodes, virtual in designs:
            run = RunInfo(experiment_id=f"fleet-{topics}", source="fleet_model", mode=mode, consumers=8, topics=topics,
                          physical_partitions=topics * 2, virtual_partitions=virtual, write_nodes=write_nodes,
                          read_nodes=read_nodes, actors=topics * 3, seed=SEED + 2, git_commit="abc", sample_rate=0.01)
            write_events(directory / "fleet" / f"{mode}-{topics}.parquet", run,
                         {"partition": np.arange(10), "produce_time_ms": np.zeros(10),
                          "produce_latency_ms": rng.exponential(2.0, 10), "end_to_end_latency_ms": rng.exponential(9.0, 10)})
    (directory / "fleet" / "calibration.json").write_text(json.dumps({"replica_fetch_ms": 0.0265, "source": {"runs": 3}}))


def test_a_run_writes_tables_plots_and_a_report(spark, tmp_path):
    tiny_fixture(tmp_path)
    logs_before = event_log_files(tmp_path)
    result = analyze(tmp_path, spark=spark)
    assert result.out_dir == tmp_path / "analysis" and not result.skipped_plots
    for parquet_path, csv_path in result.table_paths.values():
        with open(csv_path, newline="") as source:
            assert len(list(csv.DictReader(source))) == pq.read_table(parquet_path).num_rows > 0
    ratios = pq.read_table(result.table_paths["mode_ratios"][0]).to_pylist()
    fleet_1000 = next(row for row in ratios if row["source"] == "fleet_model" and row["topics"] == 1000)
    assert fleet_1000["nodes_ratio"] == pytest.approx(100 / (50 + 20))
    assert {(row["source"], row["consumers"], row["topics"]) for row in ratios} == {
        ("runtime", 1, 1), ("runtime", 4, 1), ("fleet_model", 8, 100), ("fleet_model", 8, 1000)}
    for path in result.plot_paths.values():
        assert path.read_bytes().startswith(b"\x89PNG")
    text = result.report_path.read_text()
    for needed in (str(SEED), str(SEED + 2), "abc", "replica_fetch_ms", "0.0265", "source.runs",
                   "largest fleet (topics=1000, consumers=8): nodes Mafka3 / Mafka4 = 1.429",
                   "runtime, largest consumer count (consumers=4, topics=1)", "latency_vs_consumers.png",
                   "fleet_nodes_vs_topics.png", "sample_rate 0.01"):
        assert needed in text, needed
    # The result tables are Parquet too, but a later run must not take them for event logs.
    assert event_log_files(tmp_path) == logs_before


def test_absent_rows_skip_their_plots_and_the_report_says_so(spark, tmp_path):
    write_runtime_run(tmp_path, RUNTIME4, np.array([1.0, 2.0]), np.array([3.0, np.nan]))
    result = analyze(tmp_path, tmp_path / "out", spark=spark)
    assert set(result.plot_paths) == {"latency_vs_consumers"}
    assert set(result.skipped_plots) == {"fleet_nodes_vs_topics", "fleet_latency_vs_topics"}
    text = result.report_path.read_text()
    assert "fleet_nodes_vs_topics: skipped, no fleet_model rows" in text
    assert "No configuration has rows of both modes." in text
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
    args = parser.parse_args(["analyze", "d", "--out", "o", "--master", "local[1]"])
    assert (args.out, args.master) == ("o", "local[1]")
