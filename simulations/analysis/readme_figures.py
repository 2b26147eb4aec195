"""The README's result tables, rendered from one shipped report, so the two cannot drift apart.

    python3 -m simulations.analysis.readme_figures reports/2026-11-26-compare   # prints the block

The README holds the block between ``<!-- figures: DIR -->`` and ``<!-- /figures -->``, where
DIR is the report's directory, relative to the repository (the CSV tables ``mafka4 analyze`` wrote).
``tests/unit/test_readme_figures.py`` renders the block again from DIR and compares: a README
figure that is not the report's fails the test. Every runtime consumer count and every fleet
consumer scale and size is shown, never only the largest. A report with ``scale_ratios.csv``
(``mafka4 analyze`` writes it since ``369ce1a``) also gets each mode's scaling within itself: its
p99 and p99.9 at the most consumers over the fewest; older reports render as they always did.
The tables show the runs without lanes (``without_lanes``): a report of lane runs gives those in
its ``report.md``; a report from before the ``lanes`` column had none.

A block may also name what it shows after DIR (``<!-- figures: DIR KIND -->``): the blocks of
``docs/performance.md`` do (``simulations.analysis.performance_doc``); the README's names none.
"""

from __future__ import annotations

import csv
import re
import sys
from pathlib import Path

BLOCK = re.compile(r"<!-- figures: (?P<dir>\S+)(?: (?P<kind>[\w-]+))? -->\n(?P<body>.*?)<!-- /figures -->", re.DOTALL)


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as source:
        return list(csv.DictReader(source))


def without_lanes(rows: list[dict[str, str]]) -> list[dict[str, str]]:
    """The CSV rows of runs without lanes; a table written before the ``lanes`` column holds only those."""
    return [row for row in rows if row.get("lanes", "0") == "0"]


def _ms(value: str) -> str:
    return "–" if value == "" else f"{float(value):,.1f}"


def ratio_cell(row: dict[str, str], column: str) -> str:
    value, low, high = row[column], row.get(f"{column}_low", ""), row.get(f"{column}_high", "")
    if value == "":
        return "–"
    interval = f" [{float(low):.2f}, {float(high):.2f}]" if low != "" and high != "" else ""
    return f"{float(value):.2f}{interval}"


def _percentiles(row: dict[str, str], latency: str) -> str:
    """p50 / p99 / p99.9, the medians over repetitions; the p99.9's min-max after it."""
    tp999 = f"{_ms(row[f'{latency}_tp999'])} ({_ms(row[f'{latency}_tp999_min'])}–{_ms(row[f'{latency}_tp999_max'])})"
    return f"{_ms(row[f'{latency}_tp50'])} / {_ms(row[f'{latency}_tp99'])} / {tp999}"


def runtime_table(report_dir: Path) -> str:
    """Every runtime consumer count: both modes' percentiles and the p99.9 ratios."""
    latency = [row for row in without_lanes(_rows(report_dir / "latency_by_config.csv")) if row["source"] == "runtime"]
    ratios = {row["consumers"]: row for row in without_lanes(_rows(report_dir / "mode_ratios.csv"))
              if row["source"] == "runtime"}
    by_mode = {(row["mode"], row["consumers"]): row for row in latency}
    lines = ["| consumers | Mafka3 produce | Mafka4 produce | Mafka3 end-to-end | Mafka4 end-to-end "
             "| produce p99.9 M3/M4 | end-to-end p99.9 M3/M4 |", "|---|---|---|---|---|---|---|"]
    for consumers in sorted({row["consumers"] for row in latency}, key=int):
        mafka3, mafka4 = by_mode.get(("mafka3", consumers)), by_mode.get(("mafka4", consumers))
        ratio = ratios.get(consumers)
        cells = [consumers]
        for latency_name in ("produce_latency_ms", "end_to_end_latency_ms"):
            cells += [_percentiles(row, latency_name) if row else "–" for row in (mafka3, mafka4)]
        for latency_name in ("produce_latency_ms", "end_to_end_latency_ms"):
            cells.append(ratio_cell(ratio, f"{latency_name}_tp999_ratio") if ratio else "–")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def fleet_table(report_dir: Path) -> str:
    """Every fleet consumer scale and size: nodes, their ratio and the p99.9s."""
    latency = [row for row in without_lanes(_rows(report_dir / "latency_by_config.csv")) if row["source"] == "fleet_model"]
    by_key = {(row["mode"], row["topics"], row["consumers_scale"]): row for row in latency}
    keys = sorted({(row["consumers_scale"], row["topics"]) for row in latency}, key=lambda k: (float(k[0] or 0), int(k[1])))
    lines = ["| consumer scale | topics | nodes M3 / M4 (ratio) | produce p99.9 M3 / M4 | end-to-end p99.9 M3 / M4 |",
             "|---|---|---|---|---|"]
    for scale, topics in keys:
        mafka3, mafka4 = by_key.get(("mafka3", topics, scale)), by_key.get(("mafka4", topics, scale))
        if mafka3 is None or mafka4 is None:
            continue
        nodes3, nodes4 = int(mafka3["nodes"]), int(mafka4["nodes"])
        lines.append(f"| x{float(scale):g} | {int(topics):,} | {nodes3:,} / {nodes4:,} ({nodes3 / nodes4:.2f}) "
                     f"| {_ms(mafka3['produce_latency_ms_tp999'])} / {_ms(mafka4['produce_latency_ms_tp999'])} "
                     f"| {_ms(mafka3['end_to_end_latency_ms_tp999'])} / {_ms(mafka4['end_to_end_latency_ms_tp999'])} |")
    return "\n".join(lines)


LATENCY_NAMES = {"produce_latency_ms": "produce", "end_to_end_latency_ms": "end-to-end"}
MODE_NAMES = {"mafka3": "Mafka3", "mafka4": "Mafka4"}


def scaling_table(report_dir: Path) -> str:
    """Each runtime mode, latency and percentile: the medians at the fewest and the most consumers
    and their ratio with its interval (``scale_ratios.csv``)."""
    rows = [row for row in without_lanes(_rows(report_dir / "scale_ratios.csv")) if row["source"] == "runtime"]
    order = {name: index for index, name in enumerate(LATENCY_NAMES)}
    rows.sort(key=lambda row: (row["mode"], order.get(row["latency"], len(order)), row["percentile"]))
    lines = ["| mode | latency | percentile | fewest / most consumers | ms at fewest / at most | most / fewest |",
             "|---|---|---|---|---|---|"]
    for row in rows:
        percentile = "p99.9" if row["percentile"] == "tp999" else "p99"
        lines.append(f"| {MODE_NAMES.get(row['mode'], row['mode'])} | {LATENCY_NAMES.get(row['latency'], row['latency'])} "
                     f"| {percentile} | {row['consumers_low']} / {row['consumers_high']} "
                     f"| {_ms(row['median_at_low'])} / {_ms(row['median_at_high'])} | {ratio_cell(row, 'ratio')} |")
    return "\n".join(lines)


def render(report_dir: Path, root: Path = Path(".")) -> str:
    """The block's body for the report at ``root / report_dir``: its tables (runtime, fleet, and the
    scaling within each mode where the report has it), each introduced by the file it comes from
    (named as ``report_dir``, as the README names it)."""
    tables = root / report_dir
    scaling = ""
    if (tables / "scale_ratios.csv").exists():
        scaling = (f"\nScaling within each mode (same report, `scale_ratios.csv`): the medians over repetitions at "
                   f"the fewest and the most consumers, and their ratio with its 95 % block-bootstrap interval.\n\n"
                   f"{scaling_table(tables)}\n")
    return (f"Runtime (`{report_dir}/latency_by_config.csv`, `mode_ratios.csv`): latencies in ms, p50 / p99 / p99.9 "
            f"as the median of the repetitions, the p99.9's min–max in brackets; the ratios with their 95 % "
            f"block-bootstrap interval.\n\n{runtime_table(tables)}\n\n"
            f"Fleet model (same report, `source = fleet_model`):\n\n{fleet_table(tables)}\n{scaling}")


def readme_block(readme_text: str) -> tuple[Path, str]:
    """The report directory a README's figures block names, and the block's body."""
    match = BLOCK.search(readme_text)
    if match is None:
        raise ValueError("README has no '<!-- figures: DIR -->' ... '<!-- /figures -->' block")
    return Path(match["dir"]), match["body"]


if __name__ == "__main__":
    print(render(Path(sys.argv[1])), end="")
