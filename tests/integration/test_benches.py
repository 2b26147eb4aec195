"""The join benchmarks run end to end at a tiny size: what they measure is in their JSON, not checked here.

Wall-clock figures are never asserted (the machine is shared); what is checked is that a trial
of each mode runs, loses no message and writes the report the README and the notes quote.
"""

from __future__ import annotations

import json

from mafka4.bench.vp_join import VpJoinBenchSettings, run_vp_join_bench


def test_the_vp_join_bench_runs_a_mafka4_and_a_mafka3_trial_and_writes_its_report(cluster, tmp_path):
    settings = VpJoinBenchSettings(partitions=2, consumers=2, rate_msgs_per_s=200, warmup_s=2.0, after_join_s=4.0,
                                   trials=1)
    output = tmp_path / "vp_join.json"
    report = run_vp_join_bench(settings, str(output))
    assert json.loads(output.read_text()) == json.loads(json.dumps(report))
    mafka4, mafka3 = report["summary"]["mafka4"], report["summary"]["mafka3"]
    assert mafka4["missing_each"] == [0] and mafka3["missing_each"] == [0]
    (trial,) = report["mafka4_trials"]
    assert trial["split_vps"], "one VP per member: the joiner gets capacity by a split"
    assert trial["virtual_partitions_after"] == 3
    assert set(trial["member_stall_ms"]) == {"member-0", "member-1"}
    assert trial["new_member_first_message_ms"] is not None
    assert report["mafka3_trials"][0]["new_member_first_message_ms"] is not None
