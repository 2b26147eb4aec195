"""Per run of the freeze A/B: produce and end-to-end p50 / p99 / p99.9 per mode, the longest stall, and the
collector passes of 40 ms or more inside the measured windows, by process kind (from the gcprobe logs)."""
import collections, glob, json, os, sys
import numpy as np, pyarrow.parquet as pq
rows = []
for run in sorted(glob.glob(os.path.join(sys.argv[1], "r*-*"))):
    for f in sorted(glob.glob(f"{run}/events/*/*.parquet")):
        t = pq.read_table(f, columns=["produce_latency_ms", "end_to_end_latency_ms"])
        p = np.array(t.column(0).to_pylist(), dtype=float); e = np.array(t.column(1).to_pylist(), dtype=float)
        rows.append({"run": os.path.basename(run), "mode": os.path.basename(f).split("-")[0],
                     "produce_ms": [round(float(np.nanpercentile(p, q)), 2) for q in (50, 99, 99.9)],
                     "e2e_ms": [round(float(np.nanpercentile(e, q)), 2) for q in (50, 99, 99.9)],
                     "produce_max_ms": round(float(np.nanmax(p)), 1)})
    windows = []  # (start, end) in s of each mode's measured produce times
    for f in glob.glob(f"{run}/events/*/*.parquet"):
        times = pq.read_table(f, columns=["produce_time_ms"]).column(0).to_pylist()
        windows.append((min(times) / 1000, max(times) / 1000))
    long = collections.Counter()
    for g in glob.glob(f"{run}/gc/*.log"):
        for line in open(g):
            parts = line.split()
            inside = any(a <= float(parts[0]) <= b for a, b in windows)
            if inside and float(parts[2].rstrip("ms")) >= 40:
                kind = "PhysicalPartition" if "PhysicalPartition" in line else "ReadNode" if "ReadNode" in line else "other"
                long[kind] += 1
    rows.append({"run": os.path.basename(run), "collector_passes_40ms_or_more_while_measured": dict(long)})
for r in rows:
    print(json.dumps(r))
