"""``mafka4 compare`` end to end: the experiment on real clusters, the fleet model, the Spark report.

What a user relies on, checked at every size: each repetition of each mode runs on a throwaway
cluster of its own (the equal-hardware design: Mafka3 gets all the machines as brokers, Mafka4
splits them into write and read nodes, so the modes cannot share one cluster), the modes taking
turns by repetition; every configuration is measured ``repetitions`` times, each run on a topic
and settled group of its own whose setup times ``runs.jsonl`` records; every event log holds each message
sent, delivered exactly once, with the stage stamps of the physical leader (and of the VP, for
Mafka4); the report gives each consumer count its Mafka3 / Mafka4 ratios with their bootstrap
interval and the fleet model its node ratio; and the tables, stage breakdown and OMB files are
written. No latency figure is checked: the machine is shared.

The ``experiment`` step of CI runs it at the smallest size that still exercises each of those: one
consumer count of 2 (a group of more than one member, its ownership split), no lanes and 1
lane (the lanes dimension: Mafka4's lane run, and the report's lanes section with Mafka3's
lane run "not run" past ``mafka3_lanes_max=0``: a Mafka3 lane run, a topic per lane, cost the
smoke run a minute; ``test_lanes`` and ``test_scaling_consumer_process`` cover its parts), 2
repetitions (so the modes take turns), 300 messages per run, one fleet size, a 20-replicate bootstrap. More
consumer counts or messages would run the same code again; the time goes to what no size
avoids: four cluster starts and stops (one per repetition and mode), the fleet model's fixed
cost and one Spark JVM. The full-scale run (the command's defaults, about 50 minutes here) is the
``slow`` test below.

The run is a process of its own, as a user's would be: its Spark JVM and its clusters end with
it, and this driver stays on the session cluster.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from process_helpers import REPO_ROOT, agent_environment

RUN_TINY_COMPARE = """
import sys
from pathlib import Path
from simulations.analysis.job import AnalysisSettings
from simulations.compare import run_compare
from simulations.fleet.sweep import SweepSettings
from simulations.scaling.experiment import ScalingSettings

tiny = ScalingSettings(consumers=(2,), repetitions=2, rate_msgs_per_s=200, duration_s=1.5, experiment_id="tiny",
                      lanes=(0, 1), mafka3_lanes_max=0)
fleet = SweepSettings(topics=(100,), consumer_scales=(1.0,), rows=500)
# A smoke test needs the bootstrap to run, not its 400 replicates' precision.
print(run_compare(Path(sys.argv[1]), tiny, None, sweep=fleet, analysis=AnalysisSettings(bootstrap_replicates=20)))
"""
MODES = ("mafka3", "mafka4")


def _lanes_part(lanes: int) -> str:
    return f"-l{lanes:03d}" if lanes else ""


def check_compare_outputs(out: Path, report: Path, run_id: str, consumers: tuple[int, ...], repetitions: int,
                          messages: int, lanes: tuple[int, ...] = (0,), mafka3_lanes_max: int = 10) -> None:
    """What every ``mafka4 compare`` run must leave under ``out``, whatever its size (module doc)."""
    runtime = out / "runtime" / run_id

    def lanes_run(mode: str) -> list[int]:
        return [lane_count for lane_count in lanes if mode == "mafka4" or lane_count <= mafka3_lanes_max]

    expected = sorted(f"{mode}-c{count:03d}{_lanes_part(lane_count)}-r{repetition}.parquet"
                      for mode in MODES for count in consumers for lane_count in lanes_run(mode)
                      for repetition in range(repetitions))
    assert sorted(path.name for path in runtime.glob("*.parquet")) == expected
    for name in expected:
        events = pq.read_table(runtime / name).to_pydict()
        assert len(events["partition"]) == messages and set(events["deliveries"]) == {1}, name  # drained, once each
        if "-l" in name:  # a lane run takes no stage stamps (the experiment's module doc)
            assert set(events["lanes"]) == {int(name.split("-l")[1][:3])}, name
            continue
        assert None not in events["committed_time_ms"] and None not in events["sent_time_ms"], name
        if name.startswith("mafka4"):
            assert None not in events["vp_committed_time_ms"], name
    recorded = json.loads((runtime / "settings.json").read_text())
    assert (recorded["repetitions"], recorded["profile"], recorded["run_order"]) == (repetitions, "full",
                                                                                     "repetition-major")
    runs = [json.loads(line) for line in (runtime / "runs.jsonl").read_text().splitlines()]
    assert [(run["repetition"], run["mode"], run["consumers"], run["lanes"]) for run in runs] == [
        (repetition, mode, count, lane_count) for repetition in range(repetitions) for mode in MODES
        for count in consumers for lane_count in lanes_run(mode)]
    assert all(run["topic_created_s"] is not None and run["group_settled_s"] is not None for run in runs)

    analysis = report.parent
    assert analysis == out / "analysis"
    with open(analysis / "latency_by_config.csv", newline="") as source:
        measured = {(row["mode"], int(row["consumers"]), int(row["lanes"])): row for row in csv.DictReader(source)
                    if row["source"] == "runtime"}
    assert sorted(measured) == sorted((mode, count, lane_count) for mode in MODES for count in consumers
                                      for lane_count in lanes_run(mode))
    for row in measured.values():
        assert (int(row["runs"]), int(row["repetitions"]), int(row["runs_excluded"])) == (repetitions, repetitions, 0)
    text = report.read_text()
    for count in consumers:
        line = next((line for line in text.splitlines() if line.startswith(f"* runtime, consumers={count}: ")), "")
        assert "Mafka3 / Mafka4 tp999 = " in line and " [" in line, f"no ratio with its interval: {line!r}"
    assert "* fleet_model, consumer scale x1: nodes Mafka3 / Mafka4 = " in text
    assert (analysis / "stage_latency.csv").exists() and (analysis / "stage_breakdown.png").exists()
    assert ("## Lanes: queue merging" in text) == any(lanes), "lane runs get a section of their own, and only they"
    if any(lane_count > mafka3_lanes_max for lane_count in lanes):
        assert f"Mafka3 was not run with more than {mafka3_lanes_max} lanes" in text
    summaries = sorted(path.name for path in analysis.glob("omb/*.json"))
    assert summaries == sorted(f"{mode}-c{count:03d}{_lanes_part(lane_count)}.json" for mode in MODES
                               for count in consumers for lane_count in lanes_run(mode))
    assert "aggregatedEndToEndLatency999pct" in json.loads((analysis / "omb" / summaries[0]).read_text())


@pytest.mark.experiment
def test_compare_runs_both_modes_twice_and_writes_the_report(tmp_path):
    out = tmp_path / "compare"
    run = subprocess.run([sys.executable, "-c", RUN_TINY_COMPARE, str(out)], capture_output=True, text=True,
                         timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    report = Path(run.stdout.strip().splitlines()[-1])
    check_compare_outputs(out, report, "tiny", consumers=(2,), repetitions=2, messages=300, lanes=(0, 1),
                          mafka3_lanes_max=0)


@pytest.mark.slow
def test_compare_at_full_scale_as_the_readme_runs_it(tmp_path):
    """``mafka4 compare --out DIR`` with every default: consumers 1 to 32, 3 repetitions of 50,000
    messages, the whole fleet model and a 400-replicate bootstrap (about 50 minutes here)."""
    out = tmp_path / "compare"
    run = subprocess.run([sys.executable, "-m", "mafka4.cli", "compare", "--out", str(out)], capture_output=True,
                         text=True, timeout=3 * 3600, cwd=REPO_ROOT, env=agent_environment())
    assert run.returncode == 0, run.stderr[-3000:]
    report = Path(run.stdout.strip().splitlines()[-1].removeprefix("report: "))
    check_compare_outputs(out, report, "scaling-seed7", consumers=(1, 2, 4, 8, 16, 32), repetitions=3,
                          messages=50_000)
