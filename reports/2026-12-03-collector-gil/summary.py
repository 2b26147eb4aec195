"""One table row per run and consumer count, from each run's analysis and run records:
python3 summary.py a-r1 b-r1 a-r2 b-r2 (run from this directory, or with RUNS=<its runs dir>)."""
import csv
import json
import os
import sys

runs = os.environ.get("RUNS", "runs")
print("| side | round | consumers | load before | produce p50 | produce p99.9 | accumulator p99.9 | ack return p99.9 "
      "| end to end p99.9 | undelivered / duplicates |")
print("|---|---|---|---|---|---|---|---|---|---|")
for run in sys.argv[1:]:
    configs = {row["consumers"]: row for row in csv.DictReader(open(f"{runs}/{run}/analysis/latency_by_config.csv"))}
    stages = list(csv.DictReader(open(f"{runs}/{run}/analysis/stage_latency.csv")))
    records = [json.loads(line) for line in open(f"{runs}/{run}/scaling-seed31/runs.jsonl")]
    loads = {str(record["consumers"]): record["load_average_before"][0] for record in records}

    def stage(consumers, name):
        return next(float(row["duration_ms_tp999"]) for row in stages
                    if row["consumers"] == consumers and row["stage"] == name and row["path"] == "produce")

    for consumers, row in sorted(configs.items(), key=lambda item: int(item[0])):
        print(f"| {run[0].upper()} | {run[-1]} | {consumers} | {loads[consumers]} | {float(row['produce_latency_ms_tp50']):.1f} "
              f"| {float(row['produce_latency_ms_tp999']):.1f} | {stage(consumers, 'accumulator'):.1f} "
              f"| {stage(consumers, 'ack_return'):.1f} | {float(row['end_to_end_latency_ms_tp999']):.1f} "
              f"| {row['undelivered']} / {row['duplicates']} |")
