"""Every run of the A/B files of this directory as a markdown table: ``python3 summary.py ab_*.json``."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def rows(path: Path) -> list[str]:
    out = []
    for run in json.loads(path.read_text())["runs"]:
        for row in run["results"]:
            lead = f"| {path.name} | {run['repeat']} | {run['side']} `{run['commit']}` | {run['load_average_before']} | {row['vps']:,} |"
            if "error" in row:
                out.append(f"{lead} {row['error']} | | | | | | | |")
                continue
            heap = row["tracemalloc"]
            out.append(f"{lead} {row['rss']['bytes_per_vp']:,.0f} | {heap['bytes_per_vp']:,.0f} ({heap['vps']:,}) | "
                       f"{row['objects']['per_vp']:.1f} | {row['fds']['per_vp']:.2f} | {row['files']['per_vp']:.1f} / "
                       f"{row['files']['allocated_bytes_per_vp']:,.0f} | {row['create_ms_per_vp']:.2f} | "
                       f"{row['housekeeping_s']:.2f} |")
    return out


def main() -> None:
    print("| file | repeat | side | load before (1/5/15 min) | VPs | RSS B/VP | heap B/VP (traced VPs) | objects/VP "
          "| fds/VP | files/VP / allocated B/VP | create ms/VP | housekeeping pass s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name in sys.argv[1:]:
        print("\n".join(rows(Path(name))))


if __name__ == "__main__":
    main()
