"""Tables of one benchmark's raw JSON reports, as ``docs/performance.md`` quotes them (pure).

Each ``mafka4 bench NAME --output FILE`` writes one JSON report (``mafka4/bench/``). This module
knows, for the benches the performance document shows, how to tell a report's bench from its keys
(``bench_kind``; the file's name is free) and how to turn one or more reports of that bench into
markdown tables (``render``). It reads only the dicts it is given and imports nothing of the
benches, so it renders a report long after the code that wrote it has changed.

How figures are quoted (the design's rules for evidence):

* **every row**: every run, repetition, trial and drain of a report gets its own cell or row,
  never only the best or a mean;
* **medians with their min-max**: where a report holds repetitions, the median comes with the
  smallest and largest value (``a (b–c)``);
* **ratios measured in one run**: a ratio divides two figures of the same report and run, never
  figures of two reports.

Invariant: a smoke-sized report (``settings.smoke``) is not a result and is refused
(``NotAResult``), as is a report of a kind it was not asked to render.
"""

from __future__ import annotations

import statistics
from typing import Callable, Mapping, Sequence

KINDS = ("produce", "consume", "stream", "vp-join", "vp-density", "feed-lag", "redis-streams")
PERCENTILES = ("p50", "p99", "p99.9")
MiB = 1024 * 1024


class NotAResult(ValueError):
    """A report that cannot stand as a measured figure (a smoke run, another bench's report)."""


def bench_kind(report: Mapping) -> str | None:
    """The bench (one of ``KINDS``) that wrote ``report``, from the keys its driver writes; None for
    any other JSON (a ``run.json``, another tool's output)."""
    if not isinstance(report, Mapping):
        return None
    rows = report.get("rows")
    if "redis_server" in report:
        return "redis-streams"
    if "mafka4_trials" in report:
        return "vp-join"
    if "backlogs" in report and rows is not None:
        return "consume"
    if "raw_leaders" in report and "bare_actor" in report:
        return "produce"
    if "windows" in report and "nodes" in report:
        return "vp-density"
    if "lag_ms_resolution_ms" in report:
        return "feed-lag"
    if rows and "caller_cpu_ms_per_mib" in rows[0]:
        return "stream"
    return None


def render(kind: str, reports: Sequence[tuple[str, Mapping]]) -> str:
    """Markdown tables of ``reports`` (each ``(file name, report)``, every one of bench ``kind``)."""
    assert reports, "at least one report to render"
    for name, report in reports:
        if bench_kind(report) != kind:
            raise NotAResult(f"{name} is a report of {bench_kind(report) or 'no bench'}, not of bench {kind}")
        if report.get("settings", {}).get("smoke"):
            raise NotAResult(f"{name} is a smoke-sized run of bench {kind}: not a result; run the bench at its "
                             f"full size")
    return RENDERERS[kind](reports)


# --- formatting ---------------------------------------------------------------------------------


def _number(value: float | None, spec: str = ",.0f") -> str:
    return "–" if value is None else format(value, spec)


def _fixed(places: int) -> Callable[[float | None], str]:
    """A formatter of ``places`` decimals, with thousands separators."""
    return lambda value: _number(value, f",.{places}f")


def _thousands(value: float | None) -> str:
    """msgs/s in thousands, one decimal: 686.7."""
    return "–" if value is None else f"{value / 1000:,.1f}"


def _median_range(values: Sequence[float | None], shown: Callable[[float | None], str]) -> str:
    """The median of the values present, with their min-max when there is more than one."""
    present = [value for value in values if value is not None]
    if not present:
        return "–"
    if len(present) == 1:
        return shown(present[0])
    return f"{shown(statistics.median(present))} ({shown(min(present))}–{shown(max(present))})"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _load(load: Sequence[float] | None) -> str:
    return "–" if not load else " / ".join(f"{value:.2f}" for value in load)


def _cpu_per_message(runs: Sequence[Mapping]) -> tuple[str, str]:
    """The median (min-max) of the drains' CPU per message: the members', the machine's (``bench.cpu_cost``)."""
    return tuple(_median_range([run.get(figure) for run in runs], _fixed(2))
                 for figure in ("member_cpu_us_per_message", "machine_cpu_us_per_message"))


def _yes(value: bool | None) -> str:
    return "–" if value is None else ("yes" if value else "no")


def _settings(report: Mapping, names: Sequence[str]) -> str:
    settings = report.get("settings", {})
    return ", ".join(f"`{name}` {_setting(settings[name])}" for name in names if name in settings)


def _setting(value) -> str:
    if value is None:
        return "default"
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value))
    return str(value)


def _settings_of_all(reports: Sequence[tuple[str, Mapping]], names: Sequence[str]) -> str:
    """The settings ``names`` of every report: once if they are the same for all, else per report."""
    shown = [(name, _settings(report, names)) for name, report in reports]
    if len({settings for _, settings in shown}) == 1:
        return f"Settings: {shown[0][1]}."
    return "Settings: " + "; ".join(f"of `{name}`: {settings}" for name, settings in shown) + "."


def _alike(reports: Sequence[tuple[str, Mapping]]) -> bool:
    """True when every report ran with the same settings: only then are their runs repetitions of one
    measurement, whose median may be taken."""
    return len({repr(sorted(report.get("settings", {}).items())) for _, report in reports}) == 1


# The settings each bench's tables state, from the report's "settings".
PRODUCE_SETTINGS = ("messages", "message_bytes", "payload", "partitions", "replication_factor", "acks", "linger_ms",
                    "batch_bytes_max", "paced_msgs_per_s", "gc_freeze")
CONSUME_SETTINGS = ("messages", "message_bytes", "partitions", "replication_factor", "repetitions", "check_crcs",
                    "gc_freeze")
STREAM_SETTINGS = ("calls", "answer_bytes", "message_bytes", "decode")
VP_JOIN_SETTINGS = ("partitions", "consumers", "virtual_partitions", "rate_msgs_per_s", "read_replicas", "trials")
FEED_LAG_SETTINGS = ("partitions", "replication_factor", "read_replicas", "duration_s", "message_bytes")
REDIS_SETTINGS = ("backlog_messages", "messages", "message_bytes", "pipeline_messages", "read_count", "repetitions")


# --- produce ------------------------------------------------------------------------------------


def _ratio(numerator: float | None, denominator: float | None) -> str:
    return "–" if not numerator or not denominator else f"{numerator / denominator:.2f}"


def _produce(reports: Sequence[tuple[str, Mapping]]) -> str:
    """One row per report (a run of ``bench produce``): each Producer run and the transport's, in msgs/s,
    with its ratio to the bare stream of the same run; the paced run's latency."""
    header = ("run", "Producer, a callback per message", "without callbacks", "`send_many`", "raw leaders",
              "bare stream", "bare actor", "paced p50 / p99 / p99.9 ms", "gc frozen")
    rows, columns = [], {name: [] for name in ("producer", "producer_no_callbacks", "producer_send_many",
                                               "raw_leaders", "bare_stream", "bare_actor")}
    for name, report in reports:
        rates = {run: report[run]["msgs_per_s"] for run in columns}
        for run, rate in rates.items():
            columns[run].append(rate)
        bare_stream = rates["bare_stream"]
        latency = report["paced"]["latency_ms"] or {}
        rows.append((f"`{name}`", *(f"{_number(rates[run])} ({_ratio(rates[run], bare_stream)})"
                                     for run in ("producer", "producer_no_callbacks", "producer_send_many",
                                                 "raw_leaders")),
                     _number(bare_stream), _number(rates["bare_actor"]),
                     " / ".join(_number(latency.get(p), ".1f") for p in PERCENTILES),
                     _yes(report["summary"].get("driver_gc_frozen"))))
    if len(reports) > 1 and _alike(reports):
        rows.append(("median (min–max)", *(_median_range(columns[run], _number) for run in columns), "", ""))
    text = [f"{_settings_of_all(reports, PRODUCE_SETTINGS)} In msgs/s; in brackets the ratio to the bare stream of "
            f"the same run (the same actor that only returns, reached over the stream the Producer uses). The bare "
            f"actor (Ray calls) is shown, not divided by: it is a reference, not a ceiling.", "",
            markdown_table(header, rows)]
    for name, report in reports:
        comparison = report["summary"].get("compression_comparison", {})
        if len(comparison.get("codecs", {})) > 1:
            text += ["", f"Codecs of `{name}` (ratios to `{comparison['baseline']}`, the first codec, in the same "
                         f"run):", "", _codecs(comparison)]
    return "\n".join(text)


def _codecs(comparison: Mapping) -> str:
    header = ("codec", "msgs/s (ratio)", "paced p99.9 ms (ratio)", "bytes written per message, saturated / paced",
              "written / payload")
    two, one = _fixed(2), _fixed(1)
    rows = [(codec, f"{_number(f['producer_msgs_per_s'])} ({two(f['producer_msgs_per_s_vs_baseline_ratio'])})",
             f"{one(f['paced_latency_ms'].get('p99.9'))} ({two(f['paced_p99_9_ms_vs_baseline_ratio'])})",
             f"{one(f['bytes_written_per_message'])} / {one(f['paced_bytes_written_per_message'])}",
             _fixed(3)(f["written_vs_payload_ratio"]))
            for codec, f in comparison["codecs"].items()]
    return markdown_table(header, rows)


# --- consume ------------------------------------------------------------------------------------


def _drain(row: Mapping) -> str:
    """A drain's msgs/s in thousands, its load at the start, and * when it did not start quiet."""
    return f"{_thousands(row['msgs_per_s'])} [{row['load_average_1m'][0]:.2f}{'' if row['quiet'] else '*'}]"


def _consume(reports: Sequence[tuple[str, Mapping]]) -> str:
    """Per report, one row per read mode and consumer count: the median drain with its min-max, every
    drain, the CPU per message, the fetch tail, and what was missing or duplicated."""
    header = ("read mode", "consumers", "working", "msgs/s, median (min–max)", "every drain, k msgs/s [load]",
              "members µs/msg", "machine µs/msg", "fetch p99.9 ms", "missing", "duplicated")
    text = []
    for name, report in reports:
        groups: dict[tuple[str, int], list[Mapping]] = {}
        for row in report["rows"]:
            groups.setdefault((row["read_mode"], row["consumers"]), []).append(row)
        rows = [(mode, str(consumers), "/".join(str(r["consumers_with_work"]) for r in runs),
                 _median_range([r["msgs_per_s"] for r in runs], _number),
                 ", ".join(_drain(r) for r in runs),
                 *_cpu_per_message(runs),
                 _median_range([(r["fetch_latency_ms"] or {}).get("p99.9") for r in runs], _fixed(1)),
                 str(sum(r["missing"] for r in runs)),
                 str(sum(r["duplicates"] + r["duplicates_across_members"] for r in runs)))
                for (mode, consumers), runs in groups.items()]
        vps = ", ".join(f"{b['read_mode']} {b['virtual_partitions']} VPs" for b in report["backlogs"]
                        if b["virtual_partitions"])
        text += [f"`{name}`: {_settings(report, CONSUME_SETTINGS)}{'; ' + vps if vps else ''}; 1-minute load "
                 f"average {_load(report.get('load_average_1m'))} at "
                 f"the run's start / end. A drain marked * did not start quiet.", "", markdown_table(header, rows), ""]
    return "\n".join(text).rstrip("\n")


# --- stream -------------------------------------------------------------------------------------


def _stream(reports: Sequence[tuple[str, Mapping]]) -> str:
    """One row per repetition (a fresh server each), then the median with its min-max."""
    figures = ("caller_cpu_ms_per_mib", "server_cpu_ms_per_mib", "wall_ms_per_mib", "mib_per_s",
               "caller_cpu_us_per_message")
    header = ("run", "repetition", "caller CPU ms/MiB", "server CPU ms/MiB", "wall ms/MiB", "MiB/s",
              "caller decoding µs/msg", "load start / end")
    rows, columns = [], {figure: [] for figure in figures}
    for name, report in reports:
        for number, row in enumerate(report["rows"]):
            for figure in figures:
                columns[figure].append(row[figure])
            rows.append((f"`{name}`", str(number), *(_fixed(2)(row[f]) for f in figures),
                         _load(row["load_average_1m"])))
    if _alike(reports):
        rows.append(("median (min–max)", "", *(_median_range(columns[f], _fixed(2)) for f in figures), ""))
    return _settings_of_all(reports, STREAM_SETTINGS) + "\n\n" + markdown_table(header, rows)


# --- vp-join ------------------------------------------------------------------------------------


def _vp_join(reports: Sequence[tuple[str, Mapping]]) -> str:
    """One row per trial: the Mafka4 join's stalls and waits, beside the Mafka3 trial run after it."""
    header = ("run", "trial", "other members' stall ms", "split member's stall ms", "gap before the join ms",
              "joiner's first message ms", "split stored ms", "Mafka3: stall ms", "Mafka3: first message ms")
    rows, columns = [], {name: [] for name in header[2:]}
    for name, report in reports:
        mafka3 = report.get("mafka3_trials") or []
        for number, trial in enumerate(report["mafka4_trials"]):
            eager = mafka3[number] if number < len(mafka3) else {}
            values = (trial["other_member_stall_ms"], trial["split_member_stall_ms"],
                      max(trial["baseline_gap_ms"].values(), default=None), trial["new_member_first_message_ms"],
                      trial.get("split_stored_ms"), eager.get("max_member_stall_ms"),
                      eager.get("new_member_first_message_ms"))
            for column, value in zip(columns, values):
                columns[column].append(value)
            rows.append((f"`{name}`", str(number), *(_fixed(1)(value) for value in values)))
    if _alike(reports):
        rows.append(("median (min–max)", "", *(_median_range(values, _fixed(1)) for values in columns.values())))
    loads = "; ".join(f"`{name}` {report['load_average_1m']['before']:.2f} / {report['load_average_1m']['after']:.2f}"
                      for name, report in reports)
    return (f"{_settings_of_all(reports, VP_JOIN_SETTINGS)} 1-minute load average before / after: {loads}.\n\n"
            + markdown_table(header, rows))


# --- vp-density ---------------------------------------------------------------------------------


def _vp_density(reports: Sequence[tuple[str, Mapping]]) -> str:
    """One row per run: what one idle VP costs its read nodes, and one bare idle actor beside it."""
    header = ("run", "VPs x read replicas", "RSS per VP, KiB", "idle cores per VP", "bare actor RSS / USS, MiB",
              "bare actor idle cores", "bare actor / VP: RSS, USS, cores", "create s / RISR complete s",
              "quiet", "load start / end")
    rows = []
    for name, report in reports:
        summary, settings = report["summary"], report["settings"]
        ratios = ", ".join(_number(summary[key], ",.0f") for key in (
            "bare_actor_vs_vp_rss_ratio", "bare_actor_uss_vs_vp_rss_ratio", "bare_actor_vs_vp_cores_ratio"))
        rows.append((f"`{name}`", f"{settings['virtual_partitions']} x {settings['read_replicas']}",
                     _fixed(1)(summary["rss_bytes_per_vp"] / 1024), _number(summary["idle_cores_per_vp"], ".2e"),
                     f"{summary['bare_actor_rss_bytes'] / MiB:,.1f} / {summary['bare_actor_uss_bytes'] / MiB:,.1f}",
                     _number(summary["bare_actor_idle_cores"], ".4f"), ratios,
                     f"{summary['create_topic_s']:.1f} / {summary['risr_complete_s']:.1f}", _yes(summary["quiet"]),
                     _load(report.get("load_average_1m"))))
    return markdown_table(header, rows)


# --- feed-lag -----------------------------------------------------------------------------------


def _feed_lag(reports: Sequence[tuple[str, Mapping]]) -> str:
    """One row per VP count of each run: the saturated producer's rate, the lag while it ran, the drain."""
    header = ("run", "VPs", "producer msgs/s", "lag records p50 / p99 / max", "lag ms p99 / max",
              "lag p99 records, first / second half", "drained after s", "bounded", "load at start", "quiet")
    rows = []
    for name, report in reports:
        for run in report["runs"]:
            lag = run["lag"]
            records, ms = lag["records"] or {}, lag["ms"] or {}
            halves = run["lag_p99_records_halves"]
            rows.append((f"`{name}`", str(run["virtual_partitions"]), _number(run["producer"]["msgs_per_s"]),
                         " / ".join(_number(records.get(p)) for p in ("p50", "p99", "max")),
                         " / ".join(_number(ms.get(p)) for p in ("p99", "max")),
                         "–" if halves is None else f"{halves[0]:,} / {halves[1]:,}",
                         _number(run["drain_s"], ".1f"), _yes(run["bounded"]), f"{run['load_average_1m'][0]:.2f}",
                         _yes(run["quiet"])))
    resolution = reports[0][1]["lag_ms_resolution_ms"]
    return (f"{_settings_of_all(reports, FEED_LAG_SETTINGS)} A lag in ms is known to within {resolution:g} ms "
            f"(the sampling interval).\n\n"
            + markdown_table(header, rows))


# --- redis-streams ------------------------------------------------------------------------------


def _redis_streams(reports: Sequence[tuple[str, Mapping]]) -> str:
    """Per report, one row per workload: produce per client, consume per acknowledgement and consumer
    count; the median with its min-max, every run, and the CPU per message of the drains."""
    header = ("workload", "client / ack", "consumers", "msgs/s, median (min–max)", "every run, k msgs/s",
              "members µs/msg", "machine µs/msg", "exactly once", "quiet")
    text = []
    for name, report in reports:
        groups: dict[tuple, list[Mapping]] = {}
        for row in report["rows"]:
            key = (("produce", row["client"], "–") if row["workload"] == "produce"
                   else ("consume", row["ack"], str(row["consumers"])))
            groups.setdefault(key, []).append(row)
        rows = [(*key, _median_range([r["msgs_per_s"] for r in runs], _number),
                 ", ".join(_thousands(r["msgs_per_s"]) for r in runs),
                 *_cpu_per_message(runs), "/".join(_yes(r.get("exactly_once")) for r in runs),
                 "/".join(_yes(r.get("quiet")) for r in runs))
                for key, runs in groups.items()]
        version = report["redis_server"]["version"].split(" sha=")[0]
        text += [f"`{name}`: {version}, redis-py {report['redis_py_version']}; "
                 f"{_settings(report, REDIS_SETTINGS)}; "
                 f"1-minute load average {_load(report.get('load_average_1m'))} at the run's start / end.", "",
                 markdown_table(header, rows), ""]
    return "\n".join(text).rstrip("\n")


RENDERERS: dict[str, Callable[[Sequence[tuple[str, Mapping]]], str]] = {
    "produce": _produce, "consume": _consume, "stream": _stream, "vp-join": _vp_join, "vp-density": _vp_density,
    "feed-lag": _feed_lag, "redis-streams": _redis_streams,
}
assert set(RENDERERS) == set(KINDS)
