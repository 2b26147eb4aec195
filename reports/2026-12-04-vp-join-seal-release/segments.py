"""Per run of the vp-join A/B: medians over its Mafka4 trials of the join's segments, from each trial's hops."""
import json, statistics, sys
from pathlib import Path
SEGMENTS = [("join_sent", "split_asked"), ("split_asked", "epoch_stored"), ("epoch_stored", "parent_sealed"),
            ("parent_sealed", "released"), ("released", "claimed"), ("claimed", "first_data"), ("join_sent", "first_data")]
for path in sorted(Path(sys.argv[1]).glob("vp-join-r*-*.json")):
    trials = json.loads(path.read_text())["mafka4_trials"]
    row = {"run": path.stem}
    for a, b in SEGMENTS:
        values = [t["join_hops_ms"][b] - t["join_hops_ms"][a] for t in trials
                  if t["join_hops_ms"].get(a) is not None and t["join_hops_ms"].get(b) is not None]
        row[f"{a}->{b}"] = round(statistics.median(values), 1) if values else None
    print(json.dumps(row))
