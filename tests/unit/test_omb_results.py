"""The OpenMessaging-Benchmark-shaped results: OMB's keys, and values against numpy on fixed data."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from mafka4.bench.stats import nearest_rank_index
from simulations.analysis.job import read_event_frame
from simulations.analysis.omb import OMB_PERCENTILES, experiment_settings, omb_results, write_omb_results
from simulations.schema import RunInfo, event_log_files, write_events

SEED = 99
START_MS = 1.7e12
PERIOD_MS = 100.0
RUN = RunInfo(experiment_id="omb", source="runtime", mode="mafka4", consumers=2, topics=1, physical_partitions=2,
              virtual_partitions=2, write_nodes=2, read_nodes=2, actors=6, seed=SEED, git_commit="abc")
# TestResult's fields (io.openmessaging.benchmark.TestResult) this file must carry.
OMB_KEYS = {"workload", "driver", "messageSize", "topics", "partitions", "producersPerTopic", "consumersPerTopic",
            "publishRate", "consumeRate", "backlog"} | {
    f"{stem}{suffix}" for stem in ("publishLatency", "aggregatedPublishLatency", "endToEndLatency",
                                   "aggregatedEndToEndLatency")
    for suffix in ("Avg", "50pct", "75pct", "95pct", "99pct", "999pct", "9999pct", "99999pct", "Max")}


def write_run(directory: Path, run: RunInfo, rng: np.random.Generator, start_ms: float) -> dict[str, np.ndarray]:
    """250 messages, one per ms: 2 full periods of 100 ms and a part of a third."""
    produce = start_ms + np.arange(250, dtype=np.float64)
    ack = produce + np.round(rng.exponential(3.0, 250), 3)
    consume = produce + np.round(rng.exponential(8.0, 250), 3)
    consume[rng.random(250) < 0.1] = np.nan
    write_events(directory / f"run-{run.repetition}.parquet", run,
                 {"partition": np.zeros(250, dtype=np.int64), "produce_time_ms": produce, "ack_time_ms": ack,
                  "consume_time_ms": consume})
    return {"produce": produce, "ack": ack, "consume": consume, "start": produce[0]}


def nearest_rank(values: np.ndarray, percent: str) -> float:
    ordered = np.sort(values)
    return float(ordered[nearest_rank_index(percent, ordered.size)])


def test_omb_documents_carry_omb_keys_with_values_pooled_over_repetitions(spark, tmp_path):
    rng = np.random.default_rng(SEED)
    runs = [write_run(tmp_path / "logs", replace(RUN, seed=SEED + r, repetition=r), rng, START_MS + r * 10_000.0)
            for r in range(2)]
    (tmp_path / "logs" / "settings.json").write_text(json.dumps({"message_bytes": 1024}))
    (document,) = omb_results(read_event_frame(spark, event_log_files(tmp_path / "logs")), PERIOD_MS)
    paths = write_omb_results([document], tmp_path / "omb", experiment_settings(tmp_path / "logs"))
    assert set(paths) == {"mafka4-c002"}
    found = json.loads(paths["mafka4-c002"].read_text())
    assert OMB_KEYS <= set(found)
    assert (found["workload"], found["driver"], found["messageSize"], found["topics"], found["partitions"],
            found["producersPerTopic"], found["consumersPerTopic"]) == ("omb", "mafka4", 1024, 1, 2, 1, 2)
    assert (found["mafka4Repetitions"], found["mafka4Seeds"], found["mafka4Messages"]) == (2, [SEED, SEED + 1], 500)
    for latency, (later, stem) in {"produce": ("ack", "Publish"), "end_to_end": ("consume", "EndToEnd")}.items():
        pooled = np.concatenate([run[later] - run["produce"] for run in runs])
        pooled = pooled[~np.isnan(pooled)]
        assert found[f"aggregated{stem}LatencyAvg"] == pytest.approx(pooled.mean(), rel=1e-12)
        assert found[f"aggregated{stem}LatencyMax"] == pooled.max()
        for suffix, percent in OMB_PERCENTILES.items():
            assert found[f"aggregated{stem}Latency{suffix}"] == nearest_rank(pooled, percent), (stem, suffix)
        # Per period: the latencies observed (acknowledged, consumed) in that period, both repetitions.
        per_period = f"{stem[0].lower()}{stem[1:]}Latency"
        assert len(found[f"{per_period}99pct"]) == 2
        for period in range(2):
            in_period = np.concatenate([
                (run[later] - run["produce"])[np.floor((run[later] - run["start"]) / PERIOD_MS) == period] for run in runs])
            assert found[f"{per_period}50pct"][period] == nearest_rank(in_period, "50")
            assert found[f"{per_period}Max"][period] == in_period.max()
    # Rates per full period, the mean over repetitions; the last, partial period is not listed.
    assert found["publishRate"] == [1000.0, 1000.0]
    for period in range(2):
        consumed = [np.count_nonzero(np.floor((run["consume"] - run["start"]) / PERIOD_MS) == period) for run in runs]
        assert found["consumeRate"][period] == pytest.approx(np.mean(consumed) / (PERIOD_MS / 1000.0))
        backlog = [(period + 1) * 100 - np.count_nonzero(run["consume"] < run["start"] + (period + 1) * PERIOD_MS)
                   for run in runs]
        assert found["backlog"][period] == round(np.mean(backlog))


def test_settings_that_disagree_leave_the_message_size_unknown_and_stale_files_go(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "settings.json").write_text(json.dumps({"message_bytes": 256, "producers": 2}))
    (tmp_path / "b" / "settings.json").write_text(json.dumps({"message_bytes": 512, "producers": 2}))
    assert experiment_settings(tmp_path) == {"producers": 2}
    (tmp_path / "omb").mkdir()
    (tmp_path / "omb" / "mafka3-c064.json").write_text("{}")
    document = {"driver": "mafka3", "topics": 1, "mafka4Consumers": 8}
    paths = write_omb_results([document], tmp_path / "omb", experiment_settings(tmp_path))
    assert sorted(path.name for path in (tmp_path / "omb").iterdir()) == ["mafka3-c008.json"]
    assert json.loads(paths["mafka3-c008"].read_text())["messageSize"] is None


def test_a_recorded_layout_is_kept_when_every_run_agrees_on_it_and_a_flag_stays_a_flag(tmp_path):
    layout = {"consumers": "processes", "service_cpus": "unpinned"}
    for name, services in (("a", "unpinned"), ("b", "unpinned"), ("c", "read set")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "settings.json").write_text(json.dumps(
            {"pin_cpus": True, "client_layout": {**layout, "service_cpus": services}}))
    keys = ("pin_cpus", "client_layout")
    assert experiment_settings(tmp_path, keys) == {"pin_cpus": True}, "c's layout differs: not named"
    (tmp_path / "c" / "settings.json").unlink()
    agreed = experiment_settings(tmp_path, keys)
    assert agreed == {"pin_cpus": True, "client_layout": layout} and agreed["pin_cpus"] is True


def test_every_runs_profile_is_read_and_one_written_before_profiles_is_full(tmp_path):
    from simulations.analysis.omb import recorded_profiles

    assert recorded_profiles(tmp_path) == frozenset()
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "settings.json").write_text(json.dumps({"repetitions": 3}))
    assert recorded_profiles(tmp_path) == {"full"}
    (tmp_path / "quick").mkdir()
    (tmp_path / "quick" / "settings.json").write_text(json.dumps({"repetitions": 1, "profile": "quick"}))
    assert recorded_profiles(tmp_path) == {"full", "quick"}
    assert experiment_settings(tmp_path, ("profile",)) == {"profile": "quick"}, "a word is read like a number"


def test_a_lane_runs_file_is_named_by_its_lanes_and_lists_of_counts_are_read(tmp_path):
    from simulations.analysis.omb import document_name

    assert document_name({"driver": "mafka4", "topics": 1, "mafka4Consumers": 8}) == "mafka4-c008"
    assert document_name({"driver": "mafka4", "topics": 1, "mafka4Consumers": 8, "mafka4Lanes": 16}) == "mafka4-c008-l016"
    assert document_name({"driver": "mafka3", "topics": 2, "mafka4Consumers": 8, "mafka4Lanes": 4}) == "mafka3-c008-t002-l004"
    for name, consumers in (("a", [1, 4]), ("b", [1, 4]), ("c", [1, 8])):
        (tmp_path / name).mkdir()
        (tmp_path / name / "settings.json").write_text(json.dumps(
            {"lanes": [0, 4, 64], "mafka3_lanes_max": 16, "consumers": consumers}))
    keys = ("lanes", "mafka3_lanes_max", "consumers")
    assert experiment_settings(tmp_path, keys) == {"lanes": [0, 4, 64], "mafka3_lanes_max": 16}, "c's counts differ"
