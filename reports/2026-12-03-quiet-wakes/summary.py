"""One line per run of run_ab.sh: python summary.py DIR... (each holding vp_join-r<round>-<side>.json)."""
import glob
import json
import sys

for directory in sys.argv[1:]:
    for path in sorted(glob.glob(f"{directory}/vp_join-r*-*.json")):
        report = json.load(open(path))
        m4, m3 = report["summary"]["mafka4"], report["summary"]["mafka3"]
        print(json.dumps({
            "run": path, "load_1m_before_after": [round(v, 2) for v in report["load_average_1m"].values()],
            "m4_other_stall_ms_median": m4["other_member_stall_ms_median"], "m4_other_stall_ms_each": m4["other_member_stall_ms_each"],
            "m4_baseline_gap_ms_max_each": m4["baseline_gap_ms_max_each"],
            "m4_split_member_stall_ms_median": m4["split_member_stall_ms_median"],
            "m4_joiner_first_ms_median": m4["new_member_first_message_ms_median"],
            "m4_joiner_first_ms_each": m4["new_member_first_message_ms_each"],
            "m4_split_stored_ms_median": m4["split_stored_ms_median"], "m4_child_claimed_ms_median": m4["child_claimed_ms_median"],
            "m4_missing": sum(m4["missing_each"]),
            "m3_stall_ms_median": m3["max_member_stall_ms_median"], "m3_stall_ms_each": m3["max_member_stall_ms_each"],
            "m3_joiner_first_ms_median": m3["new_member_first_message_ms_median"], "m3_missing": sum(m3["missing_each"]),
        }))
