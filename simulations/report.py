"""Plots and ``report.md`` of ``mafka4 analyze``, drawn from the (small) result tables.

No Spark here: the inputs are the rows of ``latency_by_config`` and ``mode_ratios`` (plain dicts,
column names as in ``simulations.analysis``) plus per-run facts. Every file is written to a
hidden temp file and renamed. A plot whose rows are absent is skipped, and the report says why.

Plots (PNG, matplotlib's Agg canvas; no display needed):

* ``latency_vs_consumers.png``: tp999 of produce and end-to-end latency against consumers, one
  line per mode, from ``source="runtime"`` rows;
* ``fleet_nodes_vs_topics.png``: nodes (write + read) against fleet size (topics), one line per
  mode, from ``source="fleet_model"`` rows;
* ``fleet_latency_vs_topics.png``: tp999 of produce and end-to-end latency against fleet size,
  from ``source="fleet_model"`` rows.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from simulations.schema import ANALYSIS_MARKER

MODES = ("mafka3", "mafka4")
MODE_LABELS = {"mafka3": "Mafka3", "mafka4": "Mafka4"}
LATENCY_COLUMNS = (
    "source", "mode", "consumers", "topics", "runs", "rows",
    "produce_latency_ms_tp50", "produce_latency_ms_tp99", "produce_latency_ms_tp999",
    "end_to_end_latency_ms_tp50", "end_to_end_latency_ms_tp99", "end_to_end_latency_ms_tp999",
    "write_nodes", "read_nodes", "actors", "physical_partitions", "virtual_partitions",
)
RATIO_COLUMNS = (
    "source", "consumers", "topics", "produce_latency_ms_tp999_ratio", "end_to_end_latency_ms_tp999_ratio",
    "nodes_ratio", "write_nodes_ratio", "actors_ratio", "physical_partitions_ratio",
)
CALIBRATION_FILE = "calibration.json"
EXPERIMENTS_LISTED_MAX = 20  # the report names at most this many experiment ids; the tables name all


@dataclass(frozen=True, slots=True)
class RenderedReport:
    report_path: Path
    plot_paths: dict[str, Path]
    skipped_plots: dict[str, str]


def write_report(*, out_dir: Path, events_dir: Path, file_count: int, facts: Sequence[Mapping[str, Any]],
                 latency_rows: Sequence[Mapping[str, Any]], ratio_rows: Sequence[Mapping[str, Any]],
                 table_paths: Mapping[str, tuple[Path, Path]], percentiles: Mapping[str, str]) -> RenderedReport:
    """Draw the plots and write ``out_dir/report.md``; returns what was written and what skipped."""
    runtime = [row for row in latency_rows if row["source"] == "runtime"]
    fleet = [row for row in latency_rows if row["source"] == "fleet_model"]
    plots: dict[str, Path] = {}
    skipped: dict[str, str] = {}
    plan = [
        ("latency_vs_consumers", runtime, "no runtime rows (run the consumer-scaling experiment)",
         lambda path: _plot_latency(runtime, "consumers", "consumers", path)),
        ("fleet_nodes_vs_topics", fleet, "no fleet_model rows (run the fleet model)",
         lambda path: _plot_nodes(fleet, path)),
        ("fleet_latency_vs_topics", fleet, "no fleet_model rows (run the fleet model)",
         lambda path: _plot_latency(fleet, "topics", "fleet size (topics)", path)),
    ]
    for name, rows, reason, draw in plan:
        if rows:
            plots[name] = _atomic_write(out_dir / f"{name}.png", draw)
        else:
            skipped[name] = reason
            (out_dir / f"{name}.png").unlink(missing_ok=True)  # a plot of an earlier run would mislead
    text = render_markdown(events_dir=events_dir, file_count=file_count, facts=facts, latency_rows=latency_rows,
                           ratio_rows=ratio_rows, table_paths=table_paths, percentiles=percentiles,
                           calibrations=load_calibrations(events_dir), plots=plots, skipped=skipped, out_dir=out_dir)
    report_path = _atomic_write(out_dir / "report.md", lambda path: path.write_text(text))
    return RenderedReport(report_path=report_path, plot_paths=plots, skipped_plots=skipped)


def _atomic_write(path: Path, write: Callable[[Path], Any]) -> Path:
    temp = path.with_name(f".{path.name}.tmp")
    try:
        write(temp)
        os.replace(temp, path)
    finally:
        temp.unlink(missing_ok=True)
    return path


# --- plots ---------------------------------------------------------------------------------


def _series(rows: Iterable[Mapping[str, Any]], x_key: str, y_key: str) -> dict[str, tuple[list, list]]:
    """Mode label -> (xs, ys) sorted by x; rows without a y value are left out."""
    series: dict[str, tuple[list, list]] = {}
    for mode in MODES:
        points = sorted((row[x_key], row[y_key]) for row in rows if row["mode"] == mode and row[y_key] is not None)
        if points:
            series[MODE_LABELS[mode]] = ([x for x, _ in points], [y for _, y in points])
    return series


def _axes_lines(axes, series: Mapping[str, tuple[list, list]], x_label: str, y_label: str, title: str) -> None:
    for label, (xs, ys) in series.items():
        axes.plot(xs, ys, marker="o", label=label)
    xs_all = [x for xs, _ in series.values() for x in xs]
    if xs_all and min(xs_all) > 0 and max(xs_all) / min(xs_all) >= 8:
        axes.set_xscale("log", base=2 if x_label == "consumers" else 10)
    if 0 < len(set(xs_all)) <= 12:
        axes.set_xticks(sorted(set(xs_all)), [str(x) for x in sorted(set(xs_all))])
    axes.set_xlabel(x_label)
    axes.set_ylabel(y_label)
    axes.set_title(title)
    axes.grid(True, alpha=0.3)
    if series:
        axes.legend()
    else:
        axes.text(0.5, 0.5, "no values", ha="center", va="center", transform=axes.transAxes)


def _plot_latency(rows: Sequence[Mapping[str, Any]], x_key: str, x_label: str, path: Path) -> None:
    from matplotlib.figure import Figure

    figure = Figure(figsize=(10, 4), layout="constrained")
    produce_axes, end_to_end_axes = figure.subplots(1, 2)
    _axes_lines(produce_axes, _series(rows, x_key, "produce_latency_ms_tp999"), x_label, "tp999 (ms)",
                "produce latency tp999")
    _axes_lines(end_to_end_axes, _series(rows, x_key, "end_to_end_latency_ms_tp999"), x_label, "tp999 (ms)",
                "end-to-end latency tp999")
    figure.savefig(path, format="png", dpi=100)


def _plot_nodes(rows: Sequence[Mapping[str, Any]], path: Path) -> None:
    from matplotlib.figure import Figure

    figure = Figure(figsize=(6, 4), layout="constrained")
    axes = figure.subplots()
    _axes_lines(axes, _series(rows, "topics", "nodes"), "fleet size (topics)", "nodes (write + read)",
                "nodes needed by the fleet")
    figure.savefig(path, format="png", dpi=100)


# --- report -------------------------------------------------------------------------------


def load_calibrations(events_dir: Path) -> list[tuple[str, dict[str, Any] | str]]:
    """(relative path, flattened contents or the parse error) of each ``calibration.json`` below the dir."""
    found = []
    for path in sorted(events_dir.rglob(CALIBRATION_FILE)):
        if (path.parent / ANALYSIS_MARKER).exists():
            continue
        try:
            found.append((str(path.relative_to(events_dir)), _flatten(json.loads(path.read_text()))))
        except (OSError, ValueError) as error:
            found.append((str(path.relative_to(events_dir)), f"could not be read: {error}"))
    return found


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        flat: dict[str, Any] = {}
        for key, item in value.items():
            flat.update(_flatten(item, f"{prefix}.{key}" if prefix else str(key)))
        return flat
    return {prefix or "value": value}


def _cell(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.3f}"
    if isinstance(value, (list, dict)):
        return json.dumps(value)
    return str(value).replace("|", "\\|")


def markdown_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> str:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_cell(row.get(column)) for column in columns) + " |" for row in rows]
    return "\n".join(lines)


def headline(ratio_rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The tp999 ratio at the largest consumer count (per source) and the node ratio at the largest fleet."""
    lines = []
    for source in ("runtime", "fleet_model"):
        rows = [row for row in ratio_rows if row["source"] == source]
        if not rows:
            lines.append(f"* {source}: no consumer count has rows of both modes, so no tp999 ratio.")
            continue
        row = max(rows, key=lambda row: (row["consumers"], row["topics"]))
        lines.append(
            f"* {source}, largest consumer count (consumers={row['consumers']}, topics={row['topics']}): tp999 "
            f"Mafka3 / Mafka4 = {_ratio(row, 'produce_latency_ms_tp999')} for produce latency and "
            f"{_ratio(row, 'end_to_end_latency_ms_tp999')} for end-to-end latency.")
    fleet = [row for row in ratio_rows if row["source"] == "fleet_model"]
    if fleet:
        row = max(fleet, key=lambda row: (row["topics"], row["consumers"]))
        lines.append(f"* fleet_model, largest fleet (topics={row['topics']}, consumers={row['consumers']}): nodes "
                     f"Mafka3 / Mafka4 = {_ratio(row, 'nodes')}.")
    else:
        lines.append("* fleet_model: no fleet size has rows of both modes, so no node ratio.")
    return lines


def _ratio(row: Mapping[str, Any], column: str) -> str:
    return f"{_cell(row[f'{column}_ratio'])} ({_cell(row[f'{column}_mafka3'])} / {_cell(row[f'{column}_mafka4'])})"


def _runs_section(facts: Sequence[Mapping[str, Any]], latency_rows: Sequence[Mapping[str, Any]]) -> list[str]:
    seeds = sorted({fact["seed"] for fact in facts})
    commits = sorted({fact["git_commit"] for fact in facts})
    experiments = sorted({fact["experiment_id"] for fact in facts})
    listed = ", ".join(experiments[:EXPERIMENTS_LISTED_MAX])
    if len(experiments) > EXPERIMENTS_LISTED_MAX:
        listed += f", and {len(experiments) - EXPERIMENTS_LISTED_MAX} more"
    lines = [
        f"* experiments: {len(experiments)} ({listed})",
        f"* seeds: {', '.join(str(seed) for seed in seeds)}",
        f"* git commits: {', '.join(commits)}",
    ]
    if any(commit.endswith("-dirty") or commit == "unknown" for commit in commits):
        lines.append("* note: some runs came from uncommitted or unknown code; they cannot be reproduced from a commit.")
    if len(commits) > 1:
        lines.append("* note: the runs come from more than one commit.")
    varying = [row for row in latency_rows if row["node_counts_vary"]]
    if varying:
        lines.append(f"* note: in {len(varying)} configurations the runs used different node, actor or partition "
                     "counts; the tables show the largest.")
    sampled = sorted({fact["sample_rate"] for fact in facts if fact["sample_rate"] < 1.0})
    if sampled:
        lines.append(f"* sampled runs (sample_rate {', '.join(f'{rate:g}' for rate in sampled)}): their percentiles "
                     "are exact over the sampled rows, not over every message.")
    return lines


def render_markdown(*, events_dir: Path, file_count: int, facts, latency_rows, ratio_rows, table_paths, percentiles,
                    calibrations, plots: Mapping[str, Path], skipped: Mapping[str, str], out_dir: Path) -> str:
    """The text of ``report.md``."""
    total_rows = sum(row["rows"] for row in latency_rows)
    sections = [
        "# Mafka3 vs Mafka4: consumer scaling",
        f"Event logs: `{events_dir}` ({file_count} Parquet files, {total_rows} rows). Written by `mafka4 analyze`.",
        "## Result",
        "\n".join(headline(ratio_rows)),
        "## Runs",
        "\n".join(_runs_section(facts, latency_rows)),
        "## Calibration",
        _calibration_section(calibrations),
        "## Percentiles",
        (f"{', '.join(percentiles)} are exact nearest-rank percentiles ({', '.join(f'{p} %' for p in percentiles.values())}):"
         " with the n non-null latencies of a configuration sorted ascending, tpXX is the value at 1-based rank "
         "ceil(XX/100 * n), as in `mafka4/bench/stats.py`. Messages never acknowledged (or never consumed) have no "
         "produce (end-to-end) latency and are not counted in that column's n. All latencies are in milliseconds."),
        "## Latency and nodes per configuration",
        markdown_table(latency_rows, LATENCY_COLUMNS),
        _table_links(table_paths, "latency_by_config", out_dir),
        "## Mafka3 / Mafka4",
        ("Each ratio is the Mafka3 value divided by the Mafka4 value for the same source, consumers and topics "
         "(above 1: Mafka4 is lower). Empty when a Mafka4 value is 0."),
        markdown_table(ratio_rows, RATIO_COLUMNS) if ratio_rows else "No configuration has rows of both modes.",
        _table_links(table_paths, "mode_ratios", out_dir),
        "## Plots",
        "\n\n".join([f"![{name}]({path.relative_to(out_dir)})" for name, path in plots.items()]
                    + [f"* {name}: skipped, {reason}." for name, reason in skipped.items()]),
    ]
    return "\n\n".join(sections) + "\n"


def _calibration_section(calibrations: Sequence[tuple[str, dict[str, Any] | str]]) -> str:
    if not calibrations:
        return f"No `{CALIBRATION_FILE}` in the event-log directory: the fleet model's calibration is not recorded here."
    parts = []
    for name, contents in calibrations:
        if isinstance(contents, str):
            parts.append(f"`{name}` {contents}")
        else:
            # Calibrated values are shown as recorded, not rounded like the result tables.
            rows = [{"parameter": key, "value": value if isinstance(value, str) else json.dumps(value)}
                    for key, value in contents.items()]
            parts.append(f"From `{name}`:\n\n" + markdown_table(rows, ("parameter", "value")))
    return "\n\n".join(parts)


def _table_links(table_paths: Mapping[str, tuple[Path, Path]], name: str, out_dir: Path) -> str:
    parquet_path, csv_path = table_paths[name]
    links = [f"[{path.name}]({path.relative_to(out_dir)})" for path in (parquet_path, csv_path)]
    return f"Full table: {', '.join(links)}."
