"""Print the runs of runs.jsonl as the README's table, with each side's medians."""
import json
import statistics

rows = [json.loads(line) for line in open("runs.jsonl")]
for command in ("topic describe", "group list", "group describe"):
    for side in ("old", "new"):
        runs = [row for row in rows if row["command"] == command and row["side"] == side]
        walls = ", ".join("%.2f" % row["wall_s"] for row in runs)
        cpus = ", ".join("%.2f" % row["cpu_s"] for row in runs)
        rss = [row["max_rss_kb"] / 1024 for row in runs]
        loads = [row["load_1m"] for row in runs]
        print(f"| `{command}` | {side} | {walls} | {cpus} | {min(rss):.1f}-{max(rss):.1f} | {min(loads)}-{max(loads)} |")
        print(f"  medians: {statistics.median(row['wall_s'] for row in runs):.2f} s wall, "
              f"{statistics.median(row['cpu_s'] for row in runs):.2f} s CPU, {statistics.median(rss):.1f} MB")
