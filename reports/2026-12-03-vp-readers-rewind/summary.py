"""One line per run and mode of run_ab.sh's experiments: python summary.py (in runs/), printed as JSON lines.

Latencies in ms over the delivered messages of each run (nearest-rank percentiles). For Mafka4 the
read-path stages from the messages' stamps: committed -> VP appended (feeding), VP appended -> VP
committed (the VP HW reaching the record: in A, with one read replica, the wait for its fsync), VP
committed -> consumed. For Mafka3: committed -> consumed (ack -> reader through the physical partition).
"""
import glob
import json
import math

import pyarrow.parquet as pq


def rank(values, q):
    values = sorted(v for v in values if v is not None and not math.isnan(v))
    return None if not values else round(values[min(len(values) - 1, max(0, math.ceil(q * len(values)) - 1))], 2)


def stage(rows, start, end):
    return [e - s for s, e in zip(rows[start], rows[end]) if s is not None and e is not None]


for path in sorted(glob.glob("experiments/r*-*/scaling-seed7/mafka*-c*-r0.parquet")):
    run = path.split("/")[1]
    mode = path.rsplit("/", 1)[1].split("-")[0]
    rows = pq.read_table(path).to_pydict()
    e2e, produce = rows["end_to_end_latency_ms"], rows["produce_latency_ms"]
    runs = [json.loads(line) for line in open(path.rsplit("/", 1)[0] + "/runs.jsonl")]
    consumers = rows["consumers"][0]
    load = next(r["load_average_before"][0] for r in runs if r["consumers"] == consumers and r["mode"] == mode)
    line = {"run": run, "mode": mode, "consumers": consumers, "load_1m_before": load, "messages": len(e2e),
            "e2e_p50": rank(e2e, 0.5), "e2e_p99": rank(e2e, 0.99), "e2e_p999": rank(e2e, 0.999),
            "produce_p50": rank(produce, 0.5), "produce_p999": rank(produce, 0.999)}
    if mode == "mafka4":
        line.update({
            "feed_p50": rank(stage(rows, "committed_time_ms", "vp_appended_time_ms"), 0.5),
            "vp_commit_p50": rank(stage(rows, "vp_appended_time_ms", "vp_committed_time_ms"), 0.5),
            "vp_commit_p999": rank(stage(rows, "vp_appended_time_ms", "vp_committed_time_ms"), 0.999),
            "to_reader_p50": rank(stage(rows, "vp_committed_time_ms", "consume_time_ms"), 0.5),
            "ack_to_reader_p50": rank(stage(rows, "committed_time_ms", "consume_time_ms"), 0.5)})
    else:
        line["ack_to_reader_p50"] = rank(stage(rows, "committed_time_ms", "consume_time_ms"), 0.5)
    print(json.dumps(line))
