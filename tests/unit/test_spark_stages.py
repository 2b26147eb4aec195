"""The per-stage latency breakdown against numpy on fixed data: per-stage percentiles per
repetition and their median, the means that add up, and the tail composition."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from mafka4.bench.stats import nearest_rank_index
from simulations.analysis.job import latency_by_repetition, read_event_frame
from simulations.analysis.percentiles import PERCENTILES
from simulations.analysis.stages import PATHS, stage_latency, stage_path
from simulations.schema import RunInfo, event_log_files, write_events

SEED = 4242
START_MS = 1.7e12
RUN4 = RunInfo(experiment_id="stages", source="runtime", mode="mafka4", consumers=2, topics=1, physical_partitions=2,
               virtual_partitions=2, write_nodes=2, read_nodes=2, actors=6, seed=SEED, git_commit="abc")
RUN3 = replace(RUN4, mode="mafka3", virtual_partitions=0, read_nodes=0)
STAMPS = ("sent_time_ms", "leader_received_time_ms", "leader_appended_time_ms", "committed_time_ms",
          "vp_appended_time_ms", "vp_committed_time_ms")


def test_stage_paths_link_send_to_ack_and_to_the_poll():
    assert [name for name, _, _ in stage_path("mafka3", "ack_time_ms")] == [
        "accumulator", "request_queue", "append", "isr_wait", "ack_return"]
    assert [name for name, _, _ in stage_path("mafka3", "consume_time_ms")] == [
        "accumulator", "request_queue", "append", "isr_wait", "fetch"]
    path = stage_path("mafka4", "consume_time_ms")
    assert [name for name, _, _ in path] == ["accumulator", "request_queue", "append", "isr_wait", "feeding",
                                             "vp_hw_wait", "fetch"]
    assert path[0][2] == "produce_time_ms" and all(path[i][1] == path[i + 1][2] for i in range(len(path) - 1))


def write_run(directory: Path, run: RunInfo, rng: np.random.Generator, rows: int) -> dict[str, np.ndarray]:
    columns = {"produce_time_ms": START_MS + np.arange(rows) * 5.0}
    previous = columns["produce_time_ms"]
    for stamp in STAMPS[:4]:
        columns[stamp] = previous + np.round(rng.exponential(1.0, rows), 3)
        previous = columns[stamp]
    columns["ack_time_ms"] = previous + np.round(rng.exponential(0.5, rows), 3)
    read_from = columns["committed_time_ms"]
    if run.mode == "mafka4":
        columns["vp_appended_time_ms"] = read_from + np.round(rng.exponential(2.0, rows), 3)
        columns["vp_committed_time_ms"] = columns["vp_appended_time_ms"] + np.round(rng.exponential(0.5, rows), 3)
        read_from = columns["vp_committed_time_ms"]
        columns["vp_appended_time_ms"][rng.random(rows) < 0.05] = np.nan  # a stamp lost: incomplete rows
    columns["consume_time_ms"] = read_from + np.round(rng.exponential(3.0, rows), 3)
    columns["sent_time_ms"][rng.random(rows) < 0.05] = np.nan
    columns["consume_time_ms"][rng.random(rows) < 0.05] = np.nan  # never consumed
    write_events(directory / f"{run.mode}-r{run.repetition}.parquet", run,
                 {"partition": np.zeros(rows, dtype=np.int64), **columns})
    for stamp in STAMPS[4:]:
        columns.setdefault(stamp, np.full(rows, np.nan))
    columns["produce_latency_ms"] = columns["ack_time_ms"] - columns["produce_time_ms"]
    columns["end_to_end_latency_ms"] = columns["consume_time_ms"] - columns["produce_time_ms"]
    return columns


def nearest_rank(values: np.ndarray, percent: str) -> float | None:
    present = np.sort(values[~np.isnan(values)])
    return None if present.size == 0 else float(present[nearest_rank_index(percent, present.size)])


def expected_run(columns: dict[str, np.ndarray], mode: str, path: str) -> dict[str, dict[str, float | None]]:
    """Per stage (and 'total') of ``path``: count, percentiles, mean and tail mean, by numpy."""
    end, latency = PATHS[path]
    links = stage_path(mode, end) + [("total", end, "produce_time_ms")]
    complete = ~np.isnan(columns[latency])
    for _, later, _ in links:
        complete &= ~np.isnan(columns[later])
    tail = complete & (columns[latency] >= nearest_rank(columns[latency], "99"))
    expected = {}
    for stage, later, earlier in links:
        duration = columns[later] - columns[earlier]
        values = {name: nearest_rank(duration, percent) for name, percent in PERCENTILES.items()}
        values.update(count=int(np.count_nonzero(~np.isnan(duration))), mean=float(duration[complete].mean()),
                      tail_mean=float(duration[tail].mean()), tail_complete=int(np.count_nonzero(tail)))
        expected[stage] = values
    return expected


def test_stage_percentiles_means_and_tail_composition_equal_numpy(spark, tmp_path):
    rng = np.random.default_rng(SEED)
    written = {}
    for run in (RUN3, RUN4):
        for repetition in range(3):
            written[(run.mode, repetition)] = write_run(
                tmp_path, replace(run, seed=SEED + repetition, repetition=repetition), rng, 600)
    events = read_event_frame(spark, event_log_files(tmp_path))
    rows = stage_latency(events, latency_by_repetition(events)).collect()
    assert {(row["mode"], row["path"]) for row in rows} == {(m, p) for m in ("mafka3", "mafka4") for p in PATHS}
    for row in rows:
        per_run = [expected_run(written[(row["mode"], repetition)], row["mode"], row["path"])[row["stage"]]
                   for repetition in range(3)]
        assert row["repetitions"] == 3
        assert (row["count"], row["count_min"]) == (sum(r["count"] for r in per_run), min(r["count"] for r in per_run))
        for name in PERCENTILES:
            values = [r[name] for r in per_run]
            assert row[f"duration_ms_{name}"] == float(np.median(values)), (row["mode"], row["stage"], name)
            assert (row[f"duration_ms_{name}_min"], row[f"duration_ms_{name}_max"]) == (min(values), max(values))
        assert row["duration_ms_mean"] == pytest.approx(np.mean([r["mean"] for r in per_run]), rel=1e-9)
        assert row["duration_ms_tail_mean"] == pytest.approx(np.mean([r["tail_mean"] for r in per_run]), rel=1e-9)
        assert row["tail_complete_rows"] == sum(r["tail_complete"] for r in per_run)
    # Means over the same messages add up to the latency's; here is where the tail's milliseconds go.
    for mode in ("mafka3", "mafka4"):
        for path in PATHS:
            stages = [row for row in rows if (row["mode"], row["path"]) == (mode, path)]
            total = next(row for row in stages if row["stage"] == "total")
            parts = [row for row in stages if row["stage"] != "total"]
            assert len(parts) == len(stage_path(mode, PATHS[path][0]))
            for column in ("duration_ms_mean", "duration_ms_tail_mean"):
                assert sum(row[column] for row in parts) == pytest.approx(total[column], rel=1e-9)
