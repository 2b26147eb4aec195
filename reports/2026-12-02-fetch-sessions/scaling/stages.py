"""Each stage's tp999 (ms, over the repetitions) at 1 and 32 consumers, per side, from the analyses'
stage_latency.csv: python stages.py DIR (with DIR/threads/analysis and DIR/pinned/analysis)."""
import csv, sys
for side in ("threads", "pinned"):
    rows = list(csv.DictReader(open(f"{sys.argv[1]}/{side}/analysis/stage_latency.csv")))
    for path in ("produce", "end_to_end"):
        stages = {}
        for row in rows:
            if row["path"] == path:
                stages.setdefault(row["stage"], {})[row["consumers"]] = float(row["duration_ms_tp999"])
        print(f"{side} {path}: " + "; ".join(f"{stage} {v.get('1', float('nan')):.1f} / {v.get('32', float('nan')):.1f}"
                                          for stage, v in stages.items()))
