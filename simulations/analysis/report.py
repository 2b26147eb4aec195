"""``report.md`` of ``mafka4 analyze`` and the plan of its plots, from the (small) result tables.

No Spark here: the inputs are the rows of the tables of ``simulations.analysis.job`` (plain dicts,
column names as there) plus per-run facts. Every file is written to a hidden temp file and
renamed. A plot whose rows are absent is skipped (and an old PNG of that name removed), and the
report says why. The plots themselves are drawn by ``simulations.analysis.report_plots``.

A report of runs of the quick profile (``mafka4 compare --quick``: one repetition of each
configuration) says so on its first line, before the title: its tails rest on few samples.

The report leads with the result: every runtime consumer count with its Mafka3 / Mafka4 ratios
and their bootstrap intervals, and every fleet consumer scale; then what could make it wrong
(runs left out as not drained, duplicates, messages never acknowledged, tp999s resting on few
samples), how the two modes' runtime setups differ (``setup_section``: partitions, node
roles, read path, CPU pinning, group protocol, with the experiment's recorded settings), the
method, the tables, each runtime mode's ratio of its most consumers over its fewest
(``simulations.analysis.scale_ratios``), the stage breakdown and the OpenMessaging-Benchmark files.

Lanes: every section above shows the runs without lanes (``lanes = 0``) only, so a result set
without lane runs renders as it did before lanes existed, and its text never names lanes. Runtime
runs with lanes get a section of their own, "Lanes: queue merging" (``lanes_section``): each lane
configuration's counts and tp999s, the Mafka3 / Mafka4 ratios per (consumers, lanes), and the
Mafka3 lane counts the experiment did not run (``mafka3_lanes_not_run``, from ``settings.json``).
The integrity section lists every run, with a lanes column when there are lane runs.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from simulations.analysis import report_plots
from simulations.analysis.consumer_scales import scale_label
from simulations.schema import ANALYSIS_MARKER

MODES = report_plots.MODES
MODE_LABELS = report_plots.MODE_LABELS
LATENCIES = tuple(report_plots.LATENCY_TITLES)
PERCENTILE_NAMES = ("tp50", "tp99", "tp999")
BOOTSTRAPPED = ("tp99", "tp999")
CALIBRATION_FILE = "calibration.json"
EXPERIMENTS_LISTED_MAX = 20  # the report names at most this many experiment ids; the tables name all
TAIL_SAMPLES_MIN_TEXT = "fewer than 50 samples above the tp999 rank in a repetition (n < 50,000)"
# The scaling experiment's settings (its settings.json) the setup section names.
SETUP_KEYS = ("nodes", "physical_partitions", "replication_factor", "read_replicas", "pin_cpus", "client_layout",
              "run_order")
# What the lanes section takes from settings.json: the consumer counts and lane counts asked for, and the most
# lanes Mafka3 was run with (more would not fit the machine's actors). Older settings.json lack the lane keys.
LANE_SETTING_KEYS = ("consumers", "lanes", "mafka3_lanes_max")
# How runs without a recorded ``client_layout`` ran (the 2026-11-26 headline among them): consumers as threads
# of the driver, no client or service pinned. Their reports keep this wording, word for word.
LEGACY_CLIENTS = ("threads of the experiment's driver",
                  "The driver (producer and consumers), the controller and etcd are not pinned in either mode")
# A client_layout's values (``simulations.scaling.experiment.ScalingSettings.client_layout``), worded.
CONSUMER_PROCESS_MODELS = {"processes": "each a process of its own"}
CPU_SETS = {"write set": "on the write set", "read set": "on the read set", "unpinned": "unpinned"}
# The clusters of a run by its recorded ``run_order`` (``simulations.scaling.run_plan``); runs that recorded
# none (before 2026-12-04, the 2026-11-26 headline among them) ran all of one mode before the other.
CLUSTERS_BY_RUN_ORDER = {
    "repetition-major": "every repetition of each mode runs on a fresh cluster of its own, and the modes take turns "
                        "by repetition (repetition 0 of each mode, then repetition 1, ...), so a drift of the machine "
                        "over the run falls on both; every run has a topic and a group of its own",
}
LEGACY_CLUSTERS = "each mode runs on a fresh cluster of its own, one mode's runs after the other's"
QUICK_PROFILE = "quick"


@dataclass(frozen=True, slots=True)
class RenderedReport:
    report_path: Path
    plot_paths: dict[str, Path]
    skipped_plots: dict[str, str]


def write_report(*, out_dir: Path, events_dir: Path, file_count: int, facts: Sequence[Mapping[str, Any]],
                 tables: Mapping[str, Sequence[Mapping[str, Any]]], table_paths: Mapping[str, tuple[Path, Path]],
                 omb_paths: Mapping[str, Path], settings: Any, experiment: Mapping[str, Any],
                 profiles: frozenset[str]) -> RenderedReport:
    """Draw the plots and write ``out_dir/report.md``; returns what was written and what skipped.

    ``tables``: table name -> rows; ``settings``: the ``AnalysisSettings`` of the run (bootstrap);
    ``experiment``: the scaling experiment's settings that every ``settings.json`` agrees on (``SETUP_KEYS``,
    ``LANE_SETTING_KEYS``);
    ``profiles``: the profile of each ``settings.json`` (``omb.recorded_profiles``).
    """
    latency_rows = tables["latency_by_config"]
    runtime = [row for row in without_lanes(latency_rows) if row["source"] == "runtime"]
    fleet = [row for row in latency_rows if row["source"] == "fleet_model"]
    stages = [row for row in tables["stage_latency"] if row["duration_ms_mean"] is not None]
    no_runtime, no_fleet = "no runtime rows (run the consumer-scaling experiment)", "no fleet_model rows (run the fleet model)"
    plan = [
        ("latency_vs_consumers", runtime, no_runtime, lambda path: report_plots.plot_runtime_latency(runtime, path)),
        ("fleet_nodes_vs_topics", fleet, no_fleet, lambda path: report_plots.plot_fleet_nodes(fleet, path)),
        ("fleet_latency_vs_topics", fleet, no_fleet, lambda path: report_plots.plot_fleet_latency(fleet, path)),
        ("stage_breakdown", stages, "no runtime rows with stage stamps",
         lambda path: report_plots.plot_stage_breakdown(stages, path)),
    ]
    plots: dict[str, Path] = {}
    skipped: dict[str, str] = {}
    for name, rows, reason, draw in plan:
        if rows:
            plots[name] = _atomic_write(out_dir / f"{name}.png", draw)
        else:
            skipped[name] = reason
            (out_dir / f"{name}.png").unlink(missing_ok=True)  # a plot of an earlier run would mislead
    text = render_markdown(events_dir=events_dir, file_count=file_count, facts=facts, tables=tables,
                           table_paths=table_paths, omb_paths=omb_paths, settings=settings, experiment=experiment,
                           profiles=profiles, calibrations=load_calibrations(events_dir), plots=plots, skipped=skipped, out_dir=out_dir)
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


# --- cells and tables ------------------------------------------------------------------------


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


def _count(count: int, one: str, many: str) -> str:
    return f"{count} {one if count == 1 else many}"


def _spread(row: Mapping[str, Any], column: str) -> str:
    """``median (min–max)`` of a per-repetition statistic; only the median when min = max."""
    median, low, high = row.get(column), row.get(f"{column}_min"), row.get(f"{column}_max")
    if median is None:
        return "–"
    return _cell(median) if low == high else f"{_cell(median)} ({_cell(low)}–{_cell(high)})"


def _interval(row: Mapping[str, Any], column: str) -> str:
    """``ratio [low, high]`` of ``{column}_ratio`` with the bootstrap interval when there is one."""
    return _bounded(row.get(f"{column}_ratio"), row.get(f"{column}_ratio_low"), row.get(f"{column}_ratio_high"))


def _bounded(ratio: float | None, low: float | None, high: float | None) -> str:
    return _cell(ratio) if low is None or high is None else f"{_cell(ratio)} [{_cell(low)}, {_cell(high)}]"


def _table_links(table_paths: Mapping[str, tuple[Path, Path]], name: str, out_dir: Path) -> str:
    parquet_path, csv_path = table_paths[name]
    links = [f"[{path.name}]({path.relative_to(out_dir)})" for path in (parquet_path, csv_path)]
    return f"Full table: {', '.join(links)}."


# --- headline ------------------------------------------------------------------------------


def headline(latency_rows: Sequence[Mapping[str, Any]], ratio_rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """One line per runtime consumer count and per fleet consumer scale, never only the largest."""
    lines = []
    runtime = [row for row in latency_rows if row["source"] == "runtime"]
    runtime_ratios = {(row["consumers"], row["topics"]): row for row in ratio_rows if row["source"] == "runtime"}
    if not runtime:
        lines.append("* runtime: no rows (run the consumer-scaling experiment).")
    for consumers, topics in sorted({(row["consumers"], row["topics"]) for row in runtime}):
        ratio = runtime_ratios.get((consumers, topics))
        prefix = f"* runtime, consumers={consumers}" + ("" if topics == 1 else f", topics={topics}")
        if ratio is None:
            modes = sorted(row["mode"] for row in runtime if (row["consumers"], row["topics"]) == (consumers, topics))
            lines.append(f"{prefix}: only {', '.join(modes)} rows (or no drained repetition of one mode), no ratio.")
            continue
        few = [row["mode"] for row in runtime
               if (row["consumers"], row["topics"]) == (consumers, topics) and row["few_tp999_samples"]]
        note = f" Note: the tp999 of {', '.join(few)} rests on few samples." if few else ""
        lines.append(
            f"{prefix}: Mafka3 / Mafka4 tp999 = {_interval(ratio, 'produce_latency_ms_tp999')} produce, "
            f"{_interval(ratio, 'end_to_end_latency_ms_tp999')} end-to-end; tp99 = "
            f"{_interval(ratio, 'produce_latency_ms_tp99')} produce, {_interval(ratio, 'end_to_end_latency_ms_tp99')} "
            f"end-to-end.{note}")
    lines += _fleet_headline(latency_rows, ratio_rows)
    return lines


def _fleet_headline(latency_rows: Sequence[Mapping[str, Any]], ratio_rows: Sequence[Mapping[str, Any]]) -> list[str]:
    fleet = [row for row in latency_rows if row["source"] == "fleet_model"]
    if not fleet:
        return ["* fleet_model: no rows (run the fleet model)."]
    labels = {(row["consumers"], row["topics"]): scale_label(row) for row in fleet}
    by_scale: dict[str, list[Mapping[str, Any]]] = {}
    for row in ratio_rows:
        if row["source"] == "fleet_model":
            by_scale.setdefault(labels[(row["consumers"], row["topics"])], []).append(row)
    lines = []
    for label in dict.fromkeys(scale_label(row) for row in sorted(fleet, key=lambda row: row["consumers_scale_rank"])):
        rows = sorted(by_scale.get(label, []), key=lambda row: row["topics"])
        if not rows:
            lines.append(f"* fleet_model, consumer scale {label}: no fleet size has rows of both modes, so no ratio.")
            continue
        largest = rows[-1]
        node_ratios = [row["nodes_ratio"] for row in rows if row["nodes_ratio"] is not None]
        span = (f", {_cell(min(node_ratios))} to {_cell(max(node_ratios))} over {len(rows)} fleet sizes"
                if len(rows) > 1 and node_ratios else "")
        lines.append(
            f"* fleet_model, consumer scale {label}: nodes Mafka3 / Mafka4 = {_cell(largest['nodes_ratio'])} "
            f"({_cell(largest['nodes_mafka3'])} / {_cell(largest['nodes_mafka4'])}) at the largest fleet "
            f"(topics={largest['topics']}, consumers={largest['consumers']}){span}; tp999 there "
            f"{_cell(largest['produce_latency_ms_tp999_ratio'])} produce, "
            f"{_cell(largest['end_to_end_latency_ms_tp999_ratio'])} end-to-end.")
    return lines


# --- sections ------------------------------------------------------------------------------


def _integrity_section(by_repetition: Sequence[Mapping[str, Any]], latency_rows: Sequence[Mapping[str, Any]]) -> str:
    excluded = [row for row in by_repetition if not row["drained"]]
    parts = []
    lanes = ("lanes",) if _has_lanes(latency_rows) else ()
    if excluded:
        parts.append(f"**{_count(len(excluded), 'run was', 'runs were')} not drained** (acknowledged messages never "
                     "delivered) and left out of every percentile, ratio, interval, stage breakdown and OMB file:")
        parts.append(markdown_table(excluded, ("source", "mode", "consumers", *lanes, "repetition", "seed",
                                               "experiment_id", "acknowledged", "undelivered")))
    else:
        parts.append("Every run that counts deliveries drained: each acknowledged message was delivered at least once.")
    uncounted = sorted({row["source"] for row in by_repetition if row["deliveries_counted"] == 0})
    if uncounted:
        parts.append(f"Runs of {', '.join(uncounted)} do not count deliveries; the drain check does not apply to them.")
    columns = ("source", "mode", "consumers", "topics", *lanes, "runs", "repetitions", "runs_excluded", "acknowledged",
               "never_acknowledged", "undelivered", "duplicates", "produce n (min)", "end-to-end n (min)", "tp999 samples")
    rows = []
    for row in latency_rows:
        rows.append({**row, "produce n (min)": f"{row['produce_latency_ms_count']} ({row['produce_latency_ms_count_min']})",
                     "end-to-end n (min)": f"{row['end_to_end_latency_ms_count']} ({row['end_to_end_latency_ms_count_min']})",
                     "tp999 samples": "FEW" if row["few_tp999_samples"] else "ok"})
    parts.append("Per configuration: runs, repetitions used (drained), runs excluded; over all runs, messages "
                 "acknowledged, never acknowledged, acknowledged but undelivered, and duplicates (the sum of "
                 "deliveries - 1 over messages delivered more than once; – where deliveries are not counted); the "
                 "samples of each latency summed over the repetitions used, with the smallest repetition's in "
                 "parentheses.")
    parts.append(markdown_table(rows, columns))
    few = [row for row in latency_rows if row["few_tp999_samples"]]
    if few:
        listed = "; ".join(f"{row['source']} {row['mode']} consumers={row['consumers']} topics={row['topics']}"
                           + (f" lanes={row['lanes']}" if row["lanes"] else "") for row in few)
        parts.append(f"**Note: the tp999 of {_count(len(few), 'configuration rests', 'configurations rest')} on few "
                     f"samples** ({TAIL_SAMPLES_MIN_TEXT}): "
                     f"{listed}. A handful of messages decides each of them.")
    return "\n\n".join(parts)


def clients_wording(layout: Mapping[str, str] | None) -> tuple[str, str]:
    """(how the consumers ran, where the clients and the cluster's services ran) in the words of the setup
    section, from a run's recorded ``client_layout``; None (not recorded): ``LEGACY_CLIENTS``."""
    if layout is None:
        return LEGACY_CLIENTS

    def cpus(key: str) -> str:
        return CPU_SETS.get(layout.get(key), f"on `{layout.get(key)}`")

    consumers = layout.get("consumers")
    return (CONSUMER_PROCESS_MODELS.get(consumers, f"run as `{consumers}`"),
            "The clients had the same layout in both modes: the producer (the experiment's driver) ran "
            f"{cpus('producer_cpus')}, every consumer's process (with the driver's thread that collects what they "
            f"polled) {cpus('consumer_cpus')}, and the cluster's shared services (the daemon, Ray's head with the "
            f"controller, etcd) {cpus('service_cpus')}")


def setup_section(experiment: Mapping[str, Any]) -> str:
    """How the two modes' runtime runs differ, by design (``simulations.scaling.experiment``), with the recorded
    settings; a setting no ``settings.json`` agrees on is named instead of its value."""

    def setting(key: str) -> str:
        return f"{experiment[key]}" if key in experiment else f"`{key}`"

    nodes = experiment.get("nodes")
    half = f"{nodes // 2}" if nodes is not None else "`nodes` / 2"
    pinning = {True: "the", False: "off in these runs (`--no-pin`): every node ran on every core. With it on, the"
               }.get(experiment.get("pin_cpus"), "unless the runs were made with `--no-pin` (no settings.json says), the")
    consumers, clients = clients_wording(experiment.get("client_layout"))
    return "\n\n".join([
        "The runtime rows compare two deployments on one machine, each as its design would be deployed. The same in "
        "both: one producer (keyed messages, the same keys and seed, acks=all, linger_ms 1, the same rate and "
        f"duration), N consumers of one group ({consumers}, the same `Consumer` code and defaults), replication "
        f"factor and min_insync_replicas {setting('replication_factor')}, "
        f"{setting('nodes')} simulated machines. Nothing is slowed down on purpose. What differs:",
        "\n".join([
            f"* **partitions**: Mafka3 has N physical partitions, one per consumer (N x RF replica actors; the "
            f"producer spreads the same messages over N partitions, in smaller batches as N grows); Mafka4 has "
            f"{setting('physical_partitions')} physical partitions for every N and N virtual partitions with "
            f"{setting('read_replicas')} replica(s) each;",
            f"* **node roles**: in Mafka3 all {setting('nodes')} nodes are brokers, which host the replicas and serve "
            f"the fetches from the partition leaders; in Mafka4 {half} write nodes host the replicas and {half} read "
            "nodes host the VPs and serve the fetches, so Mafka4's replicas share half as many nodes;",
            "* **read path**: a Mafka4 message becomes readable after a feeding hop (physical partition to read node) "
            "and the VP's high watermark; a Mafka3 message below the partition's high watermark, at its leader;",
            f"* **CPU pinning**: {pinning} usable CPUs are split into a write set (first half) and a read set; Mafka4's "
            "write nodes run on the write set and its read nodes on the read set (writing gets half the cores, reading "
            f"the other half); Mafka3's first {half} brokers run on the write set and the others on the read set, so "
            f"its replicas and the fetches they serve use all the cores. {clients};",
            "* **group protocol**: Mafka3 members rebalance eagerly over partitions, Mafka4 members own VPs; either "
            "group has settled before the producer starts, and none changes during a measurement;",
            f"* **clusters**: {CLUSTERS_BY_RUN_ORDER.get(experiment.get('run_order'), LEGACY_CLUSTERS)}.",
        ]),
        "The node, actor and partition counts of each configuration are in the tables below.",
    ])


def _method_section(settings: Any) -> str:
    return "\n\n".join([
        "**Percentiles.** tp50, tp99 and tp999 are exact nearest-rank percentiles: with the n non-null latencies of a "
        "run sorted ascending, tpXX is the value at 1-based rank ceil(XX/100 * n), as in `mafka4/bench/stats.py`. They "
        "are computed per repetition (one run: experiment, seed, repetition), then each configuration reports the "
        "median over its repetitions (the midpoint of the two middle values for an even count) with the smallest and "
        "largest repetition as (min–max). Messages never acknowledged (consumed) have no produce (end-to-end) latency. "
        "All latencies are in milliseconds.",
        "**Intervals.** Each runtime ratio of tp99 and tp999 carries a 95 % Poisson block-bootstrap interval, "
        f"[low, high]: {settings.bootstrap_replicates} replicates; each run's messages are cut into blocks of "
        f"{settings.bootstrap_block_ms:g} ms of produce time (a pause delays a whole burst, so single messages are not "
        "independent) and each replicate weighs every (run, block) by a Poisson(1) draw fixed by the bootstrap seed "
        f"({settings.bootstrap_seed}); the replicate's statistic is the median over repetitions of the weighted "
        "nearest-rank percentile, its ratio Mafka3 / Mafka4, and the interval the 2.5th and 97.5th nearest-rank "
        "percentiles of the replicate ratios (the percentile bootstrap interval). The ratio before the interval is the "
        "point estimate, from the medians. tp50 ratios have no interval: their bootstrap would scan half of every run "
        "per replicate, tens of times the rows the tp99 and tp999 scans need. See `simulations/analysis/intervals.py`.",
        "**Fleet consumer scales.** The fleet model runs each fleet size at several consumer scales; its plots draw one "
        "line per (mode, scale), the scale read from `fleet_summary.json` (`x4`), or, without it, numbered by "
        "consumers within each fleet size (`scale #2`).",
    ])


def _latency_section(latency_rows: Sequence[Mapping[str, Any]], lane_note: str = "") -> str:
    columns = ["source", "mode", "consumers", "topics", "consumers_scale", "repetitions"]
    rows = []
    for row in latency_rows:
        cells = dict(row)
        for latency in LATENCIES:
            for name in PERCENTILE_NAMES:
                cells[f"{latency}_{name}"] = _spread(row, f"{latency}_{name}")
        cells["nodes"] = f"{row['nodes']} ({row['write_nodes']} + {row['read_nodes']})"
        rows.append(cells)
    columns += [f"{latency}_{name}" for latency in LATENCIES for name in PERCENTILE_NAMES] + [
        "nodes", "actors", "physical_partitions", "virtual_partitions"]
    return ("Median over repetitions (min–max). nodes = write + read nodes." + lane_note + "\n\n"
            + markdown_table(rows, columns))


def _ratio_section(ratio_rows: Sequence[Mapping[str, Any]], lane_note: str = "") -> str:
    if not ratio_rows:
        return "No configuration has rows of both modes." + lane_note
    columns = ["source", "consumers", "topics"]
    columns += [f"{latency}_{name}" for latency in LATENCIES for name in PERCENTILE_NAMES]
    columns += ["nodes", "actors", "physical_partitions"]
    rows = []
    for row in ratio_rows:
        cells = {key: row[key] for key in ("source", "consumers", "topics")}
        for column in columns[3:]:
            cells[column] = _interval(row, column)
        rows.append(cells)
    return ("Mafka3 value / Mafka4 value for the same source, consumers and topics (above 1: Mafka4 is lower), from "
            "the medians over repetitions; [low, high] is the 95 % bootstrap interval (runtime tp99 and tp999). Empty "
            "when a Mafka4 value is 0." + lane_note + "\n\n" + markdown_table(rows, columns))


def _scale_section(scale_rows: Sequence[Mapping[str, Any]], latency_rows: Sequence[Mapping[str, Any]]) -> str:
    """Each runtime mode's median at its most consumers over its fewest, with the bootstrap interval."""
    if not scale_rows:
        counts = sorted({row["consumers"] for row in latency_rows if row["source"] == "runtime" and row["repetitions"]})
        found = f"consumers {', '.join(str(count) for count in counts)}" if counts else "none"
        return ("No runtime mode has drained runs at two consumer counts or more (counts with a drained run: "
                f"{found}), so no scaling ratio.")
    columns = [f"{latency}_{name}" for name in reversed(BOOTSTRAPPED) for latency in LATENCIES]
    table: dict[tuple, dict[str, Any]] = {}
    for row in scale_rows:
        consumers = f"{row['consumers_high']} / {row['consumers_low']}"
        cells = table.setdefault((row["source"], row["mode"], row["topics"]),
                                 {"mode": row["mode"], "topics": row["topics"], "consumers": consumers})
        ratio = _bounded(row["ratio"], row["ratio_low"], row["ratio_high"])
        cells[f"{row['latency']}_{row['percentile']}"] = (
            f"{ratio} ({_cell(row['median_at_high'])} / {_cell(row['median_at_low'])})")
    return ("Within each mode, the median over repetitions at its most consumers over that at its fewest (above 1: "
            "the latency grew with the consumers), with the 95 % interval of the same block bootstrap as the Mafka3 / "
            "Mafka4 ratios in brackets and the two medians (ms) in parentheses; counts in between are in the tables "
            "above.\n\n" + markdown_table([table[key] for key in sorted(table)], ["mode", "topics", "consumers", *columns]))


def _stage_section(stage_rows: Sequence[Mapping[str, Any]]) -> str:
    if not any(row["duration_ms_mean"] is not None for row in stage_rows):
        return "No runtime rows carry stage stamps."
    parts = ["Each stage's duration is its later stamp minus its earlier one (`simulations/schema.py`). Percentiles of "
             "stages do not add up to the percentile of the latency (the slowest messages of one stage are not those "
             "of another); means do, over the same messages. So the tables give, per stage, the median over repetitions "
             "of its tp99, its mean over every complete message (all stamps of the path present) and its *tail mean*: "
             "the mean over the messages whose latency is at or above their run's tp99 of that latency, which says where "
             "the milliseconds of the tail go. `total` is the latency itself."]
    for path, title in (("produce", "Produce path"), ("end_to_end", "End-to-end path")):
        rows = [row for row in stage_rows if row["path"] == path]
        stages = [stage for stage in stage_order(rows) if stage != "total"] + ["total"]
        configurations = sorted({(row["mode"], row["consumers"], row["topics"]) for row in rows})
        table = []
        for mode, consumers, topics in configurations:
            cells = {"mode": mode, "consumers": consumers}
            for row in rows:
                if (row["mode"], row["consumers"], row["topics"]) == (mode, consumers, topics):
                    cells[row["stage"]] = (f"{_cell(row['duration_ms_tp99'])} / {_cell(row['duration_ms_mean'])} / "
                                           f"{_cell(row['duration_ms_tail_mean'])}")
            table.append(cells)
        parts.append(f"**{title}**: tp99 / mean / tail mean (ms) per stage.\n\n"
                     + markdown_table(table, ["mode", "consumers", *stages]))
    return "\n\n".join(parts)


def without_lanes(rows: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The rows of runs without lanes (``lanes = 0``): what every section from before lanes shows."""
    return [row for row in rows if row["lanes"] == 0]


def _has_lanes(latency_rows: Sequence[Mapping[str, Any]]) -> bool:
    return any(row["lanes"] > 0 for row in latency_rows)


LANE_RUN = ("A lane run: the producer sends round robin over `lanes` named lanes of the topic, at the same total rate "
            "as a run without lanes. In Mafka4 a lane is a set of VPs over the topic's physical partitions, and the "
            "group's N members are trunk readers that read every lane by fallback; in Mafka3, which has no fallback, "
            "lane L of topic T is a topic of its own, T.L, with T's partitions (one per consumer), and each member "
            "reads the trunk topic and every lane topic (a Consumer per topic in its process). Stage stamps are not "
            "taken in lane runs, so the stage breakdown leaves them out.")


def mafka3_lanes_not_run(experiment: Mapping[str, Any], ran: frozenset[tuple[int, int]]) -> list[dict[str, Any]]:
    """The Mafka3 lane configurations the experiment asked for and did not run, with what they would take.

    ``experiment``: the recorded settings (``LANE_SETTING_KEYS``, ``replication_factor``); a lane count of
    ``lanes`` above ``mafka3_lanes_max`` was not run in Mafka3 (its actors would not fit the machine), at any
    consumer count of ``consumers``. ``ran``: the (consumers, lanes) that Mafka3 rows exist for anyway (an older
    run beside this one), left out. Each row: consumers, lanes, ``physical_partitions`` = (lanes + 1) x
    consumers (the trunk topic and a topic per lane, each with one partition per consumer) and
    ``replica_actors`` = that x replication factor (None when it is not recorded). No rows when a setting is
    not recorded (settings written before lanes).
    """
    lanes, lanes_max, consumers = (experiment.get(key) for key in ("lanes", "mafka3_lanes_max", "consumers"))
    if not (_counts(lanes) and _counts(consumers) and _count_value(lanes_max)):
        return []
    replication = experiment.get("replication_factor")
    replication = replication if _count_value(replication) else None
    rows = []
    for lane_count in sorted(set(lanes)):
        for members in sorted(set(consumers)):
            if lane_count <= lanes_max or (members, lane_count) in ran:
                continue
            partitions = (lane_count + 1) * members
            rows.append({"consumers": members, "lanes": lane_count, "physical_partitions": partitions,
                         "replica_actors": None if replication is None else partitions * replication})
    return rows


def _count_value(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _counts(values: Any) -> bool:
    return isinstance(values, list) and all(_count_value(value) for value in values)


def lanes_section(latency_rows: Sequence[Mapping[str, Any]], ratio_rows: Sequence[Mapping[str, Any]],
                  experiment: Mapping[str, Any]) -> str:
    """The section "Lanes: queue merging"; empty when no runtime row has lanes."""
    lane_rows = sorted((row for row in latency_rows if row["source"] == "runtime" and row["lanes"] > 0),
                       key=lambda row: (row["mode"], row["consumers"], row["topics"], row["lanes"]))
    if not lane_rows:
        return ""
    topics = ("topics",) if any(row["topics"] != 1 for row in lane_rows) else ()
    rows = [{**row, "runs used": row["repetitions"],
             "produce tp999": _spread(row, "produce_latency_ms_tp999"),
             "end-to-end tp999": _spread(row, "end_to_end_latency_ms_tp999")} for row in lane_rows]
    parts = [LANE_RUN,
             "Per lane configuration: partitions and actors, the drained repetitions used, and the tp999s (ms), the "
             "median over repetitions (min–max).",
             markdown_table(rows, ("mode", "consumers", *topics, "lanes", "physical_partitions", "virtual_partitions",
                                   "actors", "runs used", "produce tp999", "end-to-end tp999"))]
    ratios = sorted((row for row in ratio_rows if row["source"] == "runtime" and row["lanes"] > 0),
                    key=lambda row: (row["consumers"], row["topics"], row["lanes"]))
    if ratios:
        columns = {"produce tp999": "produce_latency_ms_tp999", "end-to-end tp999": "end_to_end_latency_ms_tp999",
                   "physical_partitions": "physical_partitions", "actors": "actors"}
        cells = [{**row, **{name: _interval(row, column) for name, column in columns.items()}} for row in ratios]
        parts += ["Mafka3 / Mafka4 per consumers and lanes where both modes ran (above 1: Mafka4 is lower), from the "
                  "medians over repetitions; [low, high] is the 95 % bootstrap interval.",
                  markdown_table(cells, ("consumers", *topics, "lanes", *columns))]
    else:
        parts.append("No lane configuration ran in both modes, so no Mafka3 / Mafka4 ratio.")
    ran = frozenset((row["consumers"], row["lanes"]) for row in lane_rows if row["mode"] == "mafka3")
    not_run = mafka3_lanes_not_run(experiment, ran)
    if not_run:
        parts += [f"Mafka3 was not run with more than {experiment['mafka3_lanes_max']} lanes: its actors do not fit "
                  "the machine. What it would take: physical partitions = (lanes + 1) x consumers (the trunk topic "
                  "and a topic per lane, each with one partition per consumer), replica actors = that x the "
                  "replication factor.",
                  markdown_table([{**row, "Mafka3": "not run"} for row in not_run],
                                 ("consumers", "lanes", "Mafka3", "physical_partitions", "replica_actors"))]
    return "\n\n".join(parts)


def stage_order(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Stage names by their latest position on any path: the longest path's order (Mafka4's)."""
    positions: dict[str, int] = {}
    for row in rows:
        positions[row["stage"]] = max(positions.get(row["stage"], 0), row["position"])
    return sorted(positions, key=lambda stage: positions[stage])


def _omb_section(omb_paths: Mapping[str, Path], out_dir: Path) -> str:
    if not omb_paths:
        return "No drained runtime configuration, so no OpenMessaging-Benchmark-shaped file."
    links = ", ".join(f"[{name}]({path.relative_to(out_dir)})" for name, path in sorted(omb_paths.items()))
    return ("One JSON file per runtime configuration with the keys of OpenMessaging Benchmark's `TestResult` (latencies "
            "in ms, rates in msgs/s per 10-s period), pooled over the drained repetitions; see "
            "`simulations/analysis/omb.py`: " + links + ".")


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


# A calibration's per-trial figures (``raw``) run to hundreds of values: the report points to them.
CALIBRATION_RAW_KEY = "raw"


def load_calibrations(events_dir: Path) -> list[tuple[str, dict[str, Any] | str]]:
    """(relative path, flattened contents or the parse error) of each ``calibration.json`` below the dir.

    The per-trial figures are left in the file: the contents name where they are instead.
    """
    found = []
    for path in sorted(events_dir.rglob(CALIBRATION_FILE)):
        if (path.parent / ANALYSIS_MARKER).exists():
            continue
        try:
            document = json.loads(path.read_text())
            if isinstance(document, dict) and CALIBRATION_RAW_KEY in document:
                document = {**document, CALIBRATION_RAW_KEY: f"per-trial figures: the '{CALIBRATION_RAW_KEY}' "
                                                             f"object of {path.name}"}
            found.append((str(path.relative_to(events_dir)), _flatten(document)))
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


def profile_warning(profiles: frozenset[str]) -> list[str]:
    """The report's first line when runs of the quick profile are among its inputs; else nothing."""
    if QUICK_PROFILE not in profiles:
        return []
    runs = "These runs are" if profiles == {QUICK_PROFILE} else "Some of these runs are"
    return [f"**{runs} of the quick profile (`--quick`): one repetition of each configuration, so every tail "
            "percentile (tp99, tp999) rests on few samples, those of one run, and has no spread over repetitions; "
            "quote a report of the full profile, not this one.**"]


def render_markdown(*, events_dir: Path, file_count: int, facts, tables, table_paths, omb_paths, settings, experiment,
                    profiles: frozenset[str], calibrations, plots: Mapping[str, Path], skipped: Mapping[str, str],
                    out_dir: Path) -> str:
    """The text of ``report.md``."""
    latency_rows, ratio_rows = tables["latency_by_config"], tables["mode_ratios"]
    total_rows = sum(row["rows"] for row in latency_rows)
    # The sections from before lanes show the runs without lanes; lane runs have a section of their own.
    trunk_latency, trunk_ratios = without_lanes(latency_rows), without_lanes(ratio_rows)
    lane_note = (" Runs without lanes only; the lane runs are under \"Lanes: queue merging\"."
                 if _has_lanes(latency_rows) else "")
    lanes = lanes_section(latency_rows, ratio_rows, experiment)
    sections = [
        *profile_warning(profiles),
        "# Mafka3 vs Mafka4: consumer scaling",
        f"Event logs: `{events_dir}` ({file_count} Parquet files, {total_rows} rows). Written by `mafka4 analyze`.",
        "## Result",
        "Mafka3 / Mafka4 of the median tp999 and tp99 (above 1: Mafka4 is lower), with the 95 % block-bootstrap "
        "interval in brackets:\n\n" + "\n".join(headline(trunk_latency, trunk_ratios)),
        "## Integrity",
        _integrity_section(tables["latency_by_repetition"], latency_rows),
        "## Runs",
        "\n".join(_runs_section(facts, latency_rows)),
        "## Setup: what differs between the modes",
        setup_section(experiment),
        "## Calibration",
        _calibration_section(calibrations),
        "## Method",
        _method_section(settings),
        "## Latency and nodes per configuration",
        _latency_section(trunk_latency, lane_note),
        _table_links(table_paths, "latency_by_config", out_dir) + " Per repetition: "
        + _table_links(table_paths, "latency_by_repetition", out_dir).removeprefix("Full table: "),
        "## Mafka3 / Mafka4",
        _ratio_section(trunk_ratios, lane_note),
        _table_links(table_paths, "mode_ratios", out_dir) + " Intervals in long form, with the replicates used: "
        + _table_links(table_paths, "ratio_intervals", out_dir).removeprefix("Full table: "),
        "## Scaling within a mode",
        _scale_section(without_lanes(tables["scale_ratios"]), trunk_latency),
        _table_links(table_paths, "scale_ratios", out_dir),
        *(["## Lanes: queue merging", lanes] if lanes else []),
        "## Where the latency goes: stages",
        _stage_section(tables["stage_latency"]),
        _table_links(table_paths, "stage_latency", out_dir),
        "## OpenMessaging Benchmark format",
        _omb_section(omb_paths, out_dir),
        "## Plots",
        "\n\n".join([f"![{name}]({path.relative_to(out_dir)})" for name, path in plots.items()]
                    + [f"* {name}: skipped, {reason}." for name, reason in skipped.items()]),
    ]
    return "\n\n".join(sections) + "\n"
