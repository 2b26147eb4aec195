"""The A/B runs of ``benchmarks/feed_split_micro.py`` in this directory as markdown tables.

    python summary.py            # every ab*_rounds_*.json: each run's rows, then per cell A's and B's median (min-max)
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path


def main(directory: Path) -> None:
    for path in sorted(directory.glob("ab*_rounds_*.json")):
        ab = json.loads(path.read_text())
        print(f"### {path.name}\n\n`{ab['command']}`\n")
        print("| repeat | side | load 1m before | workload | VPs | records per VP batch | CPU ms/MB | split | feed |")
        print("|---|---|---|---|---|---|---|---|---|")
        cells: dict[tuple, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
        for run in ab["runs"]:
            for row in run["results"]:
                workload = ("keyed" if row["keyed"] else "keyless") + ("" if row["column"] else ", decoding")
                print(f"| {run['repeat']} | {run['side']} | {run['load_average_1m_before']:.2f} | {workload} | "
                      f"{row['vps']} | {row['records_per_feed_call']} | {row['cpu_ms_per_mb']:.2f} | "
                      f"{row['split_cpu_ms_per_mb']:.2f} | {row['feed_cpu_ms_per_mb']:.2f} |")
                cells[(workload, row["vps"])][run["side"]].append(row["cpu_ms_per_mb"])
        print("\n| workload | VPs | A CPU ms/MB, median (min-max) | B CPU ms/MB, median (min-max) | A/B of medians |")
        print("|---|---|---|---|---|")
        for (workload, vps), sides in cells.items():
            a, b = statistics.median(sides["A"]), statistics.median(sides["B"])
            print(f"| {workload} | {vps} | {a:.2f} ({min(sides['A']):.2f}-{max(sides['A']):.2f}) | "
                  f"{b:.2f} ({min(sides['B']):.2f}-{max(sides['B']):.2f}) | {a / b:.2f}x |")
        print()


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent)
