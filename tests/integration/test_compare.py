"""``mafka4 compare`` at a tiny size: both modes, 2 repetitions, a fleet of 100 topics, the report.

Each mode runs on a throwaway cluster of its own, measured twice on one topic. The run is a
process of its own, as a user's would be: its Spark JVM and its clusters end with it, and this
driver stays on the session cluster. No figure is checked: only that every step ran and the
report holds what it must (both modes, the repetitions, the stages, OMB summaries).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq

RUN_TINY_COMPARE = """
import sys
from pathlib import Path
from simulations.analysis import AnalysisSettings
from simulations.compare import run_compare
from simulations.fleet.sweep import SweepSettings
from simulations.scaling import ScalingSettings

tiny = ScalingSettings(consumers=(2,), repetitions=2, rate_msgs_per_s=200, duration_s=1.5, experiment_id="tiny")
fleet = SweepSettings(topics=(100,), consumer_scales=(1.0,), rows=500)
# A smoke test needs the bootstrap to run, not its 400 replicates' precision.
print(run_compare(Path(sys.argv[1]), tiny, None, sweep=fleet, analysis=AnalysisSettings(bootstrap_replicates=20)))
"""


def test_compare_runs_both_modes_twice_and_writes_the_report(tmp_path):
    out = tmp_path / "compare"
    run = subprocess.run([sys.executable, "-c", RUN_TINY_COMPARE, str(out)], capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    report = Path(run.stdout.strip().splitlines()[-1])
    runs = sorted(path.name for path in (out / "runtime" / "tiny").glob("*.parquet"))
    assert runs == ["mafka3-c002-r0.parquet", "mafka3-c002-r1.parquet", "mafka4-c002-r0.parquet", "mafka4-c002-r1.parquet"]
    for name in runs:
        events = pq.read_table(out / "runtime" / "tiny" / name).to_pydict()
        assert len(events["partition"]) == 300 and set(events["deliveries"]) == {1}  # drained, once each
        assert None not in events["committed_time_ms"] and None not in events["sent_time_ms"]
        if name.startswith("mafka4"):
            assert None not in events["vp_committed_time_ms"]
    assert json.loads((out / "runtime" / "tiny" / "settings.json").read_text())["repetitions"] == 2
    text = report.read_text()
    assert "mafka3" in text and "mafka4" in text
    analysis = report.parent
    assert (analysis / "stage_latency.csv").exists()
    summaries = sorted(analysis.glob("omb/*.json"))
    assert len(summaries) == 2
    assert "aggregatedEndToEndLatency999pct" in json.loads(summaries[0].read_text())
