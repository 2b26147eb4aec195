"""``mafka4 compare`` at a tiny size: both modes, 2 repetitions, a fleet of 100 topics, the report.

Each repetition of each mode starts a throwaway cluster of its own (4 in all), so the driver
leaves the session cluster's Ray meanwhile. No figure is checked: only that every step ran and
the report holds what it must (both modes, the repetitions, the stages, OMB summaries).
"""

from __future__ import annotations

import json

import pyarrow.parquet as pq

from conftest import away_from_session_ray
from simulations.compare import run_compare
from simulations.fleet.sweep import SweepSettings
from simulations.scaling import ScalingSettings

TINY = ScalingSettings(consumers=(2,), repetitions=2, rate_msgs_per_s=200, duration_s=1.5, experiment_id="tiny")
TINY_FLEET = SweepSettings(topics=(100,), consumer_scales=(1.0,), rows=500)


def test_compare_runs_both_modes_twice_and_writes_the_report(tmp_path):
    out = tmp_path / "compare"
    with away_from_session_ray():
        report = run_compare(out, TINY, None, sweep=TINY_FLEET)
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
