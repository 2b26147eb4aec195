"""Tables of one benchmark's raw JSON reports, as ``docs/performance.md`` quotes them (pure).

Each ``mafka4 bench NAME --output FILE`` writes one JSON report (``mafka4/bench/``,
``benchmarks/``). This module knows, for the benches the performance document shows, how to tell
a report's bench from its keys (``bench_kind``; the file's name is free) and how to turn one or
more reports of that bench into markdown tables (``render``); and how to set the drains of
``bench consume`` and ``bench redis-streams`` side by side where their terms are the same
(``even_drains``). It reads only the dicts it is given and imports nothing of the benches, so it
renders a report long after the code that wrote it has changed.

How figures are quoted (the design's rules for evidence):

* **every cell, every row**: every cell of a bench's sweep (consume: read mode x acknowledgement
  cadence x consumer count; redis-streams: client x pipeline depth, and cadence x read COUNT x
  consumer count) gets its own row, and every repetition, trial and drain of it its own value,
  never only the best or a mean;
* **medians with their min-max**, only over runs of the same settings: the repetitions of one
  cell of one report, or whole reports whose settings are all equal (``_alike``);
* **ratios measured in one run**: a ratio divides two figures of the same report and run (the
  Producer's over each bare run of the same ``bench produce``), never figures of two reports;
* **side by side, never divided**: a Redis Streams drain and a mafka4 drain stand in one table
  only when they drained equal backlogs at the same acknowledgement cadence with the same read
  size (``even_drains``); even then neither is divided by the other, as they are two runs.

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
    return RENDERERS[kind](_results(kind, reports))


def _results(kind: str, reports: Sequence[tuple[str, Mapping]]) -> Sequence[tuple[str, Mapping]]:
    """``reports``, once each is known to be a result of bench ``kind``; ``NotAResult`` naming the first that is
    not."""
    assert reports, "at least one report to render"
    for name, report in reports:
        if bench_kind(report) != kind:
            raise NotAResult(f"{name} is a report of {bench_kind(report) or 'no bench'}, not of bench {kind}")
        if report.get("settings", {}).get("smoke"):
            raise NotAResult(f"{name} is a smoke-sized run of bench {kind}: not a result; run the bench at its "
                             f"full size")
    return reports


# --- formatting ---------------------------------------------------------------------------------


def number(value: float | None, spec: str = ",.0f") -> str:
    """``value`` formatted by ``spec``; a figure the report does not hold is a dash."""
    return "–" if value is None else format(value, spec)


def _fixed(places: int) -> Callable[[float | None], str]:
    """A formatter of ``places`` decimals, with thousands separators."""
    return lambda value: number(value, f",.{places}f")


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


def _settings_of_all(reports: Sequence[tuple[str, Mapping]], names: Sequence[str], label: str = "Settings") -> str:
    """The settings ``names`` of every report: once if they are the same for all, else per report."""
    shown = [(name, _settings(report, names)) for name, report in reports]
    if len({settings for _, settings in shown}) == 1:
        return f"{label}: {shown[0][1]}."
    return f"{label}: " + "; ".join(f"of `{name}`: {settings}" for name, settings in shown) + "."


def _alike(reports: Sequence[tuple[str, Mapping]]) -> bool:
    """True when every report ran with the same settings: only then are their runs repetitions of one
    measurement, whose median may be taken."""
    return len({repr(sorted(report.get("settings", {}).items())) for _, report in reports}) == 1


# The settings each bench's tables state, from the report's "settings".
PRODUCE_SETTINGS = ("messages", "message_bytes", "payload", "compression", "partitions", "replication_factor", "acks",
                    "linger_ms", "batch_bytes_max", "in_flight_batches_max", "paced_msgs_per_s", "gc_freeze")
CONSUME_SETTINGS = ("messages", "message_bytes", "partitions", "virtual_partitions", "replication_factor",
                    "read_replicas", "ack_cadences", "repetitions", "check_crcs", "gc_freeze")
STREAM_SETTINGS = ("calls", "answer_bytes", "message_bytes", "decode")
VP_JOIN_SETTINGS = ("partitions", "consumers", "virtual_partitions", "rate_msgs_per_s", "read_replicas", "trials")
FEED_LAG_SETTINGS = ("partitions", "replication_factor", "read_replicas", "duration_s", "message_bytes")
REDIS_SETTINGS = ("messages", "produce_messages", "message_bytes", "consumers", "repetitions", "pipeline_messages",
                  "read_count", "ack_cadences")


def _cells(rows: Sequence[Mapping], keys: Sequence[str]) -> dict[tuple, list[Mapping]]:
    """The rows of each cell of a sweep (the values of ``keys``), in the order the cells first appear."""
    cells: dict[tuple, list[Mapping]] = {}
    for row in rows:
        cells.setdefault(tuple(row[key] for key in keys), []).append(row)
    return cells


# --- produce ------------------------------------------------------------------------------------

# Each saturated run of a report, in the order of the table's columns.
PRODUCE_RUNS = ("producer", "producer_no_callbacks", "producer_send_many", "raw_leaders", "bare_stream", "bare_actor")


def _produce(reports: Sequence[tuple[str, Mapping]]) -> str:
    """One row per report (a run of ``bench produce``): each Producer run and the transport's, in msgs/s; the
    Producer's ratio to each bare run of the same run, as the report gives it, and whether either bare run was a
    ceiling; the paced run's latency."""
    header = ("run", "Producer, a callback per message", "÷ bare stream", "÷ bare actor", "bare runs are ceilings",
              "without callbacks", "`send_many`", "raw leaders", "bare stream", "bare actor",
              "paced p50 / p99 / p99.9 ms", "gc frozen")
    rows, columns = [], {run: [] for run in PRODUCE_RUNS}
    for name, report in reports:
        summary = report["summary"]
        for run in PRODUCE_RUNS:
            columns[run].append(report[run]["msgs_per_s"])
        latency = report["paced"]["latency_ms"] or {}
        rows.append((f"`{name}`", number(report["producer"]["msgs_per_s"]),
                     _fixed(3)(summary["producer_vs_bare_stream_ratio"]), _fixed(3)(summary["producer_vs_bare_ratio"]),
                     _yes(summary.get("bare_runs_are_ceilings")),
                     *(number(report[run]["msgs_per_s"]) for run in PRODUCE_RUNS[1:]),
                     " / ".join(number(latency.get(p), ".1f") for p in PERCENTILES),
                     _yes(summary.get("driver_gc_frozen"))))
    if len(reports) > 1 and _alike(reports):
        rows.append(("median (min–max)", _median_range(columns["producer"], number), "", "", "",
                     *(_median_range(columns[run], number) for run in PRODUCE_RUNS[1:]), "", ""))
    text = [f"{_settings_of_all(reports, PRODUCE_SETTINGS)} In msgs/s. ÷ bare stream and ÷ bare actor: the "
            f"Producer's rate over that bare run's in the same run (the report's `producer_vs_bare_stream_ratio` and "
            f"`producer_vs_bare_ratio`). The bare stream sends the same batches to an actor that only returns, over "
            f"the stream the Producer uses, so its ratio is the comparable one; the bare actor sends them as Ray "
            f"calls. A ratio above 1 means the Producer outran that bare run: it is then no ceiling, only another "
            f"way of sending the same batches (`bare_runs_are_ceilings`: both ratios at most 1).", "",
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
    rows = [(codec, f"{number(f['producer_msgs_per_s'])} ({two(f['producer_msgs_per_s_vs_baseline_ratio'])})",
             f"{one(f['paced_latency_ms'].get('p99.9'))} ({two(f['paced_p99_9_ms_vs_baseline_ratio'])})",
             f"{one(f['bytes_written_per_message'])} / {one(f['paced_bytes_written_per_message'])}",
             _fixed(3)(f["written_vs_payload_ratio"]))
            for codec, f in comparison["codecs"].items()]
    return markdown_table(header, rows)


# --- the drains of a backlog: consume and redis-streams -----------------------------------------


def _drain(row: Mapping) -> str:
    """A run's msgs/s in thousands, its load at the start, and * when it did not start quiet."""
    return f"{_thousands(row['msgs_per_s'])} [{row['load_average_1m'][0]:.2f}{'' if row['quiet'] else '*'}]"


def _rates(runs: Sequence[Mapping]) -> tuple[str, str]:
    """The median msgs/s of a cell's runs with its min-max, and every run's (``_drain``)."""
    return _median_range([r["msgs_per_s"] for r in runs], number), ", ".join(_drain(r) for r in runs)


def _duplicated(row: Mapping) -> int:
    """Messages given more than once in a drain, within a member or across members (a consume row counts the
    two apart, a redis-streams row together)."""
    return row["duplicates"] + row.get("duplicates_across_members", 0)


def _delivery(runs: Sequence[Mapping]) -> tuple[str, str]:
    """What a cell's drains missed and duplicated, summed over its runs."""
    return str(sum(r["missing"] for r in runs)), str(sum(_duplicated(r) for r in runs))


def _consume(reports: Sequence[tuple[str, Mapping]]) -> str:
    """Per report, one row per cell (read mode, acknowledgement cadence, consumer count): the median drain with its
    min-max, every drain, the CPU per message, the fetch tail, and what failed, was missing or duplicated."""
    header = ("read mode", "ack", "consumers", "working", "msgs/s, median (min–max)", "every drain, k msgs/s [load]",
              "members µs/msg", "machine µs/msg", "fetch p99.9 ms", "commit errors", "missing", "duplicated")
    text = []
    for name, report in reports:
        rows = [(mode, ack, str(consumers), "/".join(str(r["consumers_with_work"]) for r in runs), *_rates(runs),
                 *_cpu_per_message(runs),
                 _median_range([(r["fetch_latency_ms"] or {}).get("p99.9") for r in runs], _fixed(1)),
                 str(sum(r["commit_errors"] for r in runs)), *_delivery(runs))
                for (mode, ack, consumers), runs in _cells(report["rows"], ("read_mode", "ack", "consumers")).items()]
        vps = ", ".join(f"{b['read_mode']} {b['virtual_partitions']} VPs" for b in report["backlogs"]
                        if b["virtual_partitions"])
        text += [f"`{name}`: {_settings(report, CONSUME_SETTINGS)}{'; ' + vps if vps else ''}; 1-minute load "
                 f"average {_load(report.get('load_average_1m'))} at the run's start / end. A drain runs from the "
                 f"members' first poll to the end of the last one's part: its last commit's return (ack per-read or "
                 f"every-<N>ms), or its last message (ack none). A drain marked * did not start quiet.", "",
                 markdown_table(header, rows), ""]
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
    # The gaps in the second after the join (``join_gap_ms``) are "–" in reports older than the figure.
    header = ("run", "trial", "other members' stall ms", "split member's stall ms", "gap before the join ms",
              "other members' gap after the join ms", "split member's gap after the join ms",
              "joiner's first message ms", "split stored ms", "Mafka3: stall ms", "Mafka3: gap after the join ms",
              "Mafka3: first message ms")
    rows, columns = [], {name: [] for name in header[2:]}
    for name, report in reports:
        mafka3 = report.get("mafka3_trials") or []
        for number, trial in enumerate(report["mafka4_trials"]):
            eager = mafka3[number] if number < len(mafka3) else {}
            values = (trial["other_member_stall_ms"], trial["split_member_stall_ms"],
                      max(trial["baseline_gap_ms"].values(), default=None), trial.get("other_member_join_gap_ms"),
                      trial.get("split_member_join_gap_ms"), trial["new_member_first_message_ms"],
                      trial.get("split_stored_ms"), eager.get("max_member_stall_ms"),
                      eager.get("max_member_join_gap_ms"), eager.get("new_member_first_message_ms"))
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
        ratios = ", ".join(number(summary[key], ",.0f") for key in (
            "bare_actor_vs_vp_rss_ratio", "bare_actor_uss_vs_vp_rss_ratio", "bare_actor_vs_vp_cores_ratio"))
        topics = settings.get("topics", 1)  # reports older than the option made one topic
        shape = f"{settings['virtual_partitions']} x {settings['read_replicas']}"
        rows.append((f"`{name}`", shape if topics == 1 else f"{topics} topics x {shape}",
                     _fixed(1)(summary["rss_bytes_per_vp"] / 1024), number(summary["idle_cores_per_vp"], ".2e"),
                     f"{summary['bare_actor_rss_bytes'] / MiB:,.1f} / {summary['bare_actor_uss_bytes'] / MiB:,.1f}",
                     number(summary["bare_actor_idle_cores"], ".4f"), ratios,
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
            rows.append((f"`{name}`", str(run["virtual_partitions"]), number(run["producer"]["msgs_per_s"]),
                         " / ".join(number(records.get(p)) for p in ("p50", "p99", "max")),
                         " / ".join(number(ms.get(p)) for p in ("p99", "max")),
                         "–" if halves is None else f"{halves[0]:,} / {halves[1]:,}",
                         number(run["drain_s"], ".1f"), _yes(run["bounded"]), f"{run['load_average_1m'][0]:.2f}",
                         _yes(run["quiet"])))
    resolution = reports[0][1]["lag_ms_resolution_ms"]
    return (f"{_settings_of_all(reports, FEED_LAG_SETTINGS)} A lag in ms is known to within {resolution:g} ms "
            f"(the sampling interval).\n\n"
            + markdown_table(header, rows))


# --- redis-streams ------------------------------------------------------------------------------

# A pipeline depth or read COUNT that ``bench redis-streams`` derived from mafka4's settings (its own word): a
# read COUNT ``matched`` holds the bytes of one mafka4 fetch.
MATCHED = "matched"


def _depth(choice: str, count: int) -> str:
    """A pipeline depth or read COUNT as the sweep gave it: ``1,000``, or ``matched: 4,096``."""
    return f"{MATCHED}: {count:,}" if choice == MATCHED else f"{count:,}"


def _forks(runs: Sequence[Mapping]) -> str:
    return "/".join(str(r["server_forks"]) for r in runs)


def _redis_streams(reports: Sequence[tuple[str, Mapping]]) -> str:
    """Per report, one row per produce cell (client, pipeline depth) and one per drain cell (acknowledgement cadence,
    read COUNT, consumer count): the median with its min-max, every run, and what the drains cost and delivered."""
    produce_header = ("client", "XADDs per pipeline", "msgs/s, median (min–max)", "every run, k msgs/s [load]",
                      "server forks")
    consume_header = ("ack", "XREADGROUP COUNT", "consumers", "working", "msgs/s, median (min–max)",
                      "every run, k msgs/s [load]", "members µs/msg", "machine µs/msg", "missing", "duplicated",
                      "pending after", "server forks")
    text = []
    for name, report in reports:
        produce = _cells([r for r in report["rows"] if r["workload"] == "produce"], ("client", "pipeline_choice"))
        consume = _cells([r for r in report["rows"] if r["workload"] == "consume"],
                         ("ack", "read_count_choice", "consumers"))
        produce_rows = [(client, _depth(choice, runs[0]["pipeline_messages"]), *_rates(runs), _forks(runs))
                        for (client, choice), runs in produce.items()]
        consume_rows = [(ack, _depth(choice, runs[0]["read_count"]), str(consumers),
                         "/".join(str(r["consumers_with_work"]) for r in runs), *_rates(runs), *_cpu_per_message(runs),
                         *_delivery(runs), "/".join(str(r["pending_after"]) for r in runs), _forks(runs))
                        for (ack, choice, consumers), runs in consume.items()]
        version = report["redis_server"]["version"].split(" sha=")[0]
        clients = "; ".join(f"`{client}`: {what}" for client, what in report["clients"].items())
        text += [f"`{name}`: {version}, redis-py {report['redis_py_version']}, hiredis {report['hiredis_version']}; "
                 f"{_settings(report, REDIS_SETTINGS)}; {report['matched']}; 1-minute load average "
                 f"{_load(report.get('load_average_1m'))} at the run's start / end. Clients: {clients}. A drain runs "
                 f"from the members' first XREADGROUP to the end of the last one's part: its last XACK (ack per-read "
                 f"or every-<N>ms), or its last message (ack none: XREADGROUP NOACK). A run marked * did not start "
                 f"quiet; server forks: redis-server's forks during the run (an append-only file rewrite).", "",
                 markdown_table(produce_header, produce_rows), "", markdown_table(consume_header, consume_rows), ""]
    return "\n".join(text).rstrip("\n")


# --- the even comparison of drains --------------------------------------------------------------


def even_drains(consume: Sequence[tuple[str, Mapping]], redis: Sequence[tuple[str, Mapping]]) -> str:
    """The drains of ``bench consume`` and ``bench redis-streams`` reports that ran on the same terms, side by
    side: per backlog both drained, per acknowledgement cadence and consumer count both measured, every Redis
    drain that read the ``matched`` COUNT (one mafka4 fetch's bytes) beside every mafka4 drain of each read
    mode, each side's runs from all of its reports of that backlog. Nothing is divided: the two sides are runs
    of two benches."""
    _results("consume", consume)
    _results("redis-streams", redis)
    backlogs = sorted({_backlog(report) for _, report in consume} & {_backlog(report) for _, report in redis})
    if not backlogs:
        return ("The consume and redis-streams reports here drained no backlog of the same size: none is set side "
                "by side.")
    return "\n\n".join(_even_backlog(backlog, [(n, r) for n, r in consume if _backlog(r) == backlog],
                                     [(n, r) for n, r in redis if _backlog(r) == backlog]) for backlog in backlogs)


def _backlog(report: Mapping) -> tuple[int, int]:
    return report["settings"]["messages"], report["settings"]["message_bytes"]


def _even_backlog(backlog: tuple[int, int], consume: Sequence[tuple[str, Mapping]],
                  redis: Sequence[tuple[str, Mapping]]) -> str:
    messages, message_bytes = backlog
    redis_cells = _cells([row for _, report in redis for row in report["rows"]
                          if row["workload"] == "consume" and row["read_count_choice"] == MATCHED], ("ack", "consumers"))
    mafka4_cells = _cells([row for _, report in consume for row in report["rows"]], ("ack", "consumers", "read_mode"))
    rows = []
    for (ack, consumers), runs in redis_cells.items():
        modes = [(mode, own) for (own_ack, own_consumers, mode), own in mafka4_cells.items()
                 if (own_ack, own_consumers) == (ack, consumers)]
        if modes:
            rows.append(_even_row(ack, consumers, f"Redis Streams, COUNT {runs[0]['read_count']:,}", runs))
            rows += [_even_row(ack, consumers, f"mafka4, {mode} read mode", own) for mode, own in modes]
    names = ", ".join(f"`{name}`" for name, _ in (*redis, *consume))
    if not rows:
        return (f"{names} share no cell: none at the same acknowledgement cadence and consumer count with Redis "
                f"reading the {MATCHED} COUNT. Not set side by side.")
    loads = "; ".join(f"`{name}` {_load(report.get('load_average_1m'))}" for name, report in (*redis, *consume))
    header = ("ack", "consumers", "drained by", "msgs/s, median (min–max)", "every run, k msgs/s [load]",
              "members µs/msg", "machine µs/msg", "missing", "duplicated")
    return (f"{names} drained the same backlog, {messages:,} messages of {message_bytes} bytes, at the same "
            f"acknowledgement cadences; Redis read the {MATCHED} COUNT ({redis[0][1]['matched']}), a mafka4 consumer "
            f"one fetch per partition or VP. Ack per-read: XACK after each read, commit() after each poll; "
            f"every-<N>ms: XACK of what was read since the last, auto-commit; none: XREADGROUP NOACK (at most once), "
            f"no commit until the drain ended. Each side's runs come from all of its reports here. "
            f"{_settings_of_all(redis, REDIS_SETTINGS, 'Redis settings')} "
            f"{_settings_of_all(consume, CONSUME_SETTINGS, 'mafka4 settings')} 1-minute load "
            f"average at each report's start / end: {loads}. The two sides are runs of two benches: neither is "
            f"divided by the other.\n\n" + markdown_table(header, rows))


def _even_row(ack: str, consumers: int, drained_by: str, runs: Sequence[Mapping]) -> tuple[str, ...]:
    return (ack, str(consumers), drained_by, *_rates(runs), *_cpu_per_message(runs), *_delivery(runs))


RENDERERS: dict[str, Callable[[Sequence[tuple[str, Mapping]]], str]] = {
    "produce": _produce, "consume": _consume, "stream": _stream, "vp-join": _vp_join, "vp-density": _vp_density,
    "feed-lag": _feed_lag, "redis-streams": _redis_streams,
}
assert set(RENDERERS) == set(KINDS)
