"""Produce and end-to-end percentiles of each scaling run under DIR/threads and DIR/pinned (and pooled by side and
N), from the runs' Parquet: python tails.py DIR."""
import glob, json, sys
import pyarrow.parquet as pq
import numpy as np
root = sys.argv[1]
rows = []
pooled = {}
for path in sorted(glob.glob(f"{root}/*/r*-c*/*/*.parquet")):
    run = path.split("/")[-3]
    t = pq.read_table(path).to_pydict()
    prod = np.array([a - p for a, p in zip(t["ack_time_ms"], t["produce_time_ms"]) if a is not None])
    e2e = np.array([c - p for c, p in zip(t["consume_time_ms"], t["produce_time_ms"]) if c is not None])
    side, n = run.split("-")[1], int(run.split("-c")[1])
    pooled.setdefault((side, n), ([], []))
    pooled[(side, n)][0].extend(prod); pooled[(side, n)][1].extend(e2e)
    row = {"run": run, "messages": len(prod), "delivered": len(e2e),
           "produce_ms": {q: round(float(np.percentile(prod, q)), 1) for q in (50, 99, 99.9)},
           "end_to_end_ms": {q: round(float(np.percentile(e2e, q)), 1) for q in (50, 99, 99.9)}}
    rows.append(row); print(json.dumps(row))
for (side, n), (prod, e2e) in sorted(pooled.items()):
    print(json.dumps({"pooled": f"{side} N={n}", "produce_p999_ms": round(float(np.percentile(prod, 99.9)), 1),
                      "end_to_end_p999_ms": round(float(np.percentile(e2e, 99.9)), 1), "messages": len(prod)}))
