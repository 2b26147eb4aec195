"""One row per run of the vp-join A/B: the summary's medians (and each trial) for both modes."""
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
for path in sorted(out.glob("vp-join-r*-*.json")):
    d = json.loads(path.read_text())
    m4, m3 = d["summary"]["mafka4"], d["summary"]["mafka3"]
    row = {"run": path.stem, "load_before": round(d["load_average_1m"]["before"], 2),
           "m4_other_stall_ms": m4["other_member_stall_ms_median"], "m4_other_stall_each": m4["other_member_stall_ms_each"],
           "m4_split_stall_ms": m4["split_member_stall_ms_median"],
           "m4_baseline_gap_max_each": m4["baseline_gap_ms_max_each"],
           "m4_other_join_gap_ms": m4.get("other_member_join_gap_ms_median"),
           "m4_joiner_first_ms": m4["new_member_first_message_ms_median"], "m4_joiner_first_each": m4["new_member_first_message_ms_each"],
           "m4_split_stored_ms": m4["split_stored_ms_median"], "m4_child_claimed_ms": m4["child_claimed_ms_median"],
           "m3_max_stall_ms": m3["max_member_stall_ms_median"], "m3_join_gap_ms": m3.get("max_member_join_gap_ms_median"),
           "m3_joiner_first_ms": m3["new_member_first_message_ms_median"],
           "missing": sum(m4["missing_each"]) + sum(m3["missing_each"])}
    print(json.dumps(row))
