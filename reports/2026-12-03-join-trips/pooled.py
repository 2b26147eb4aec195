"""Pooled medians of every trial of each side (A = runs/*-a.json, B = runs/*-b.json): python pooled.py"""
import glob
import json
import statistics

M4 = ["split_stored_ms", "child_claimed_ms", "new_member_first_message_ms", "other_member_stall_ms", "split_member_stall_ms"]
M3 = ["max_member_stall_ms", "new_member_first_message_ms"]
pool: dict[tuple[str, str], list[float]] = {}
for path in sorted(glob.glob("runs/vp_join-r*-*.json")):
    side = path[-6]
    report = json.load(open(path))
    for trial in report["mafka4_trials"]:
        for key in M4:
            pool.setdefault((side, "mafka4 " + key), []).append(trial[key])
    for trial in report["mafka3_trials"]:
        for key in M3:
            pool.setdefault((side, "mafka3 " + key), []).append(trial[key])
for key in [f"mafka4 {k}" for k in M4] + [f"mafka3 {k}" for k in M3]:
    a, b = pool[("a", key)], pool[("b", key)]
    print(json.dumps({"figure": key, "a_median": round(statistics.median(a), 1), "b_median": round(statistics.median(b), 1),
                      "b_over_a": round(statistics.median(b) / statistics.median(a), 2), "trials_each": [len(a), len(b)]}))
