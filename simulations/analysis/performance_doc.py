"""``docs/performance.md``: today's figures, rendered from the raw files in ``reports/``.

    python3 -m simulations.analysis.performance_doc           # writes docs/performance.md
    python3 -m simulations.analysis.performance_doc --check   # exits 1, naming the fix, when the file differs

The document is generated whole; nobody edits it by hand. Every figure in it sits in a block
``<!-- figures: DIR KIND -->`` ... ``<!-- /figures -->`` that names the report directory it was
rendered from and what it shows (``render_block``), so that ``tests/unit/test_figures_cited.py``
can render each block again from DIR and compare, and can reject any measured quantity outside a
block. The prose between blocks says what was measured, never how much.

What each section shows:

* **compare**: the newest report directory holding ``mafka4 analyze``'s tables
  (``latency_by_config.csv``; the runs without lanes, ``readme_figures.without_lanes``) of the full profile, not of ``--quick`` (its ``settings.json``'s
  ``profile``): a quick one rests on one run each, a first look, not the headline. Its setup and what differs between the modes
  (``simulations.analysis.report.setup_section``), both tables of the README's block
  (``simulations.analysis.readme_figures``), the goals of issue 37 against what it measured, the
  stages, and the fleet sensitivity with both of its sides (the node ratio, and every tp99 and
  tp999 of both designs the rows hold).
* **one section per bench** of ``simulations.analysis.bench_figures.KINDS``: the newest report directory
  holding JSON that bench wrote (``mafka4 bench NAME --output FILE``; any file name), every such
  file of that directory, and its ``run.json`` when there is one. A bench without such a directory
  gets a sentence saying so, and its section renders as soon as one is committed.
* **even-drains**: the newest report directory holding reports of both ``bench consume`` and
  ``bench redis-streams``: their drains that ran on the same terms, side by side
  (``bench_figures.even_drains``). Reports of two directories are never set side by side.

Report directories are ``reports/<date>-<topic>/``; "newest" is the last name in sorted order.
A directory's ``run.json`` says how its files were made, with any of the keys ``date``,
``command`` (a string, or a mapping from file name to command), ``commit``, ``machine`` and
``load_average_1m``; the README.md beside it says the rest.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path
from typing import Mapping, Sequence

from simulations.analysis import bench_figures, readme_figures
from simulations.analysis.report import QUICK_PROFILE, setup_section
from simulations.fleet.sensitivity import BASELINE, CHANGES, LATENCY_METRICS, METRIC_TITLES, SIGMAS, moves_at

DOCUMENT = Path("docs/performance.md")
REPORTS = Path("reports")
RUN_FILE = "run.json"
COMPARE_TABLE = "latency_by_config.csv"

# The goals of issue 37 (issue 13's, Mafka3 vs Mafka4 as the original system reported them, with
# the end-to-end ratio raised from 2x to 4x), reported as measured whatever they are: (what, the figure's key in _goal_figures, comparison, threshold).
GOALS = (
    ("produce p99.9 Mafka3 / Mafka4 at the most consumers", "produce_ratio", ">=", 10.0),
    ("Mafka4 produce p99.9 at the most consumers / at the fewest", "mafka4_produce_growth", "<=", 1.5),
    ("end-to-end p99.9 Mafka3 / Mafka4 at the most consumers", "end_to_end_ratio", ">=", 4.0),
    ("fleet model, consumer scale x1, most topics: nodes Mafka3 / Mafka4", "fleet_nodes_ratio_x1", ">=", 2.0),
)
# The section setting drains of bench consume and bench redis-streams side by side, and what a block of it is called.
EVEN_DRAINS = "even-drains"
EVEN_DRAINS_BENCHES = ("consume", "redis-streams")

# Each bench's section: its title and what it measures (no figures: those are in its block).
BENCH_SECTIONS = {
    "produce": ("The Producer (`mafka4 bench produce`)",
                "Saturated runs of the public Producer (a callback per message, none, and `send_many`), the "
                "same batches sent pre-encoded to the leaders, and to an actor that only returns (over its "
                "stream and as Ray calls); then a paced run's produce latency. The Producer's rate is divided "
                "by each bare run's of the same run, over the stream (the transport it uses) and as Ray calls: "
                "a ratio above one says that bare run is no ceiling."),
    "consume": ("Consumers draining a backlog (`mafka4 bench consume`)",
                "One group of consumer processes drains a written backlog, per read mode, acknowledgement "
                "cadence (a commit after each poll, an auto-commit every N ms, or none) and consumer count; "
                "a member's part ends when its last commit returned. Every drain waits for a quiet machine "
                "first and records the load at its start."),
    "stream": ("A fetch answer over a stream (`mafka4 bench stream`)",
               "The CPU a stream call carrying a consumer's fetch answer costs the caller and the server, "
               "per MiB; no cluster."),
    "vp-join": ("A member joining a Mafka4 group (`mafka4 bench vp-join`)",
                "How long the members stop when one joins and a VP is split, beside Mafka3's eager rebalance "
                "in the same run."),
    "vp-density": ("What an idle VP costs (`mafka4 bench vp-density`)",
                   "The read nodes' memory and idle CPU per hosted VP, beside one bare idle Ray actor."),
    "feed-lag": ("Feeding behind a saturated producer (`mafka4 bench feed-lag`)",
                 "How far the read nodes' feeding trails the high watermark while one producer sends as fast "
                 "as it can, per VP count, and how long the lag takes to drain."),
    "redis-streams": ("Redis Streams on the same machine (`mafka4 bench redis-streams`)",
                      "Redis Streams measured as the benches above measure mafka4. Pipelined XADD by two "
                      "clients, at Redis' usual pipeline depth and at one matched to the bytes mafka4's "
                      "Producer keeps in flight. One group of consumer processes draining the same backlog "
                      "as `mafka4 bench consume`, at the same acknowledgement cadences (XACK after each read, "
                      "XACK every N ms, or XREADGROUP NOACK), with Redis' usual read COUNT and with one matched "
                      "to the bytes of one mafka4 fetch; a member's part ends when its last XACK returned. "
                      "Where a cell ran on mafka4's terms it stands beside mafka4's drain in the next "
                      "section; no figure of this section is divided by one of another."),
}
assert set(BENCH_SECTIONS) == set(bench_figures.KINDS)
EVEN_DRAINS_SECTION = (
    "Draining one backlog: mafka4 beside Redis Streams",
    "The drains of `mafka4 bench consume` and `mafka4 bench redis-streams` that ran on the same terms: reports "
    "of one directory with equal backlogs, the same acknowledgement cadence and consumer count, and Redis reading "
    "the COUNT matched to one mafka4 fetch. Each side's every run and settings are shown; neither is divided by "
    "the other, as they are two runs.")

HEADER = """\
# Performance

<!-- Generated by `python3 -m simulations.analysis.performance_doc` from reports/: do not edit by hand. -->

This page gives today's measured figures of mafka4. How to read it, and the rule it keeps:

- **Every figure traces to a file in [`reports/`](../reports/README.md).** A figure appears only
  inside a block that begins `<!-- figures: DIR KIND -->` and names the report directory it was
  rendered from. `tests/unit/test_figures_cited.py` renders every block of this page and of the
  README again from its directory and fails on any difference; outside the blocks it fails on any
  measured quantity (a rate, a latency, a CPU cost, a ratio, a load average) unless its paragraph
  links to a report file that holds it. The prose here says what was measured, never how much.
- **This page is generated.** `python3 -m simulations.analysis.performance_doc` writes it from the newest
  report directory of each kind; the same test fails when this file differs from what it renders.
  To change a figure, commit a new report directory; to change the wording, change the generator.
- **How figures are quoted:** every run, repetition and drain of a report, never only the best;
  medians with the min–max of their repetitions; ratios only between figures of one run. Figures
  of two sections come from different runs and are not divided by each other.
- Earlier measurements whose raw JSON was not kept stay in `reports/`, each with its command,
  commit, machine, load and every run as recorded; their index is
  [`reports/README.md`](../reports/README.md). They are not quoted here.
"""


def _read_json(path: Path):
    with path.open() as source:
        return json.load(source)


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as source:
        return list(csv.DictReader(source))


def report_dirs(root: Path) -> list[Path]:
    """Every report directory, as relative paths (``reports/<date>-<topic>``), oldest first."""
    return sorted(path.relative_to(root) for path in (root / REPORTS).iterdir() if path.is_dir())


def bench_reports(directory: Path) -> dict[str, list[tuple[str, dict]]]:
    """The bench reports of ``directory`` (its top-level JSON files), per bench, in file-name order."""
    found: dict[str, list[tuple[str, dict]]] = {}
    for path in sorted(directory.glob("*.json")):
        report = _read_json(path)
        kind = bench_figures.bench_kind(report)
        if kind is not None:
            found.setdefault(kind, []).append((path.name, report))
    return found


def newest_dir(root: Path, kind: str) -> Path | None:
    """The newest report directory holding what a section of ``kind`` renders, or None."""
    holding = [directory for directory in report_dirs(root) if _holds(root / directory, kind)]
    return holding[-1] if holding else None


def _holds(directory: Path, kind: str) -> bool:
    if kind == "compare":
        return (directory / COMPARE_TABLE).exists() and not _quick_profile(directory)
    return set(_benches(kind)) <= set(bench_reports(directory))


def _quick_profile(directory: Path) -> bool:
    """Whether the comparison in ``directory`` ran the quick profile (``mafka4 compare --quick``)."""
    settings = directory / "settings.json"
    return settings.exists() and json.loads(settings.read_text()).get("profile") == QUICK_PROFILE


def _benches(kind: str) -> tuple[str, ...]:
    """The benches whose reports a section of ``kind`` renders."""
    return EVEN_DRAINS_BENCHES if kind == EVEN_DRAINS else (kind,)


# --- blocks -------------------------------------------------------------------------------------


def render_block(kind: str | None, report_dir: Path, root: Path) -> str:
    """The body of the block ``<!-- figures: report_dir kind -->``: the README's headline (no kind),
    a comparison report (``compare``) or one bench's reports."""
    if kind is None:
        return readme_figures.render(report_dir, root)
    if kind == "compare":
        return _compare(report_dir, root / report_dir)
    if kind not in (*bench_figures.KINDS, EVEN_DRAINS):
        raise ValueError(f"a figures block of kind {kind!r}: use compare, {EVEN_DRAINS} or one of "
                         f"{', '.join(bench_figures.KINDS)}")
    found = bench_reports(root / report_dir)
    benches = _benches(kind)
    for bench in benches:
        if not found.get(bench):
            raise ValueError(f"{report_dir} holds no JSON report of bench {bench}")
    names = [name for bench in benches for name, _ in found[bench]]
    files = ", ".join(f"`{name}`" for name in names)
    tables = (bench_figures.even_drains(*(found[bench] for bench in benches)) if kind == EVEN_DRAINS
              else bench_figures.render(kind, found[kind]))
    return f"From `{report_dir}/` ({files}). {_provenance(root / report_dir, names)}\n\n{tables}\n"


def _provenance(directory: Path, names: Sequence[str]) -> str:
    """How the files ``names`` of the directory were made: from its ``run.json`` (of a mapping of commands,
    those whose key names one of them), else a pointer to its README.md."""
    run_path = directory / RUN_FILE
    if not run_path.exists():
        return f"How it was run (command, commit, load): `{directory.name}/README.md`."
    run = _read_json(run_path)
    parts = [f"{key}: {run[key]}" for key in ("date", "commit", "machine") if key in run]
    command = run.get("command")
    if isinstance(command, str):
        parts.append(f"command: `{command}`")
    elif isinstance(command, Mapping):
        parts += [f"`{files}`: `{line}`" for files, line in command.items() if any(name in files for name in names)]
    if "load_average_1m" in run:
        parts.append(f"1-minute load average: {run['load_average_1m']}")
    return f"From its `{RUN_FILE}`: " + "; ".join(parts) + "." if parts else ""


def _compare(report_dir: Path, tables: Path) -> str:
    return "\n\n".join((
        _setup(tables),
        setup_section(_read_json(tables / "settings.json")),
        f"Runtime (`{report_dir}/latency_by_config.csv`, `mode_ratios.csv`): latencies in ms, p50 / p99 / p99.9 "
        f"as the median of the repetitions, the p99.9's min–max in brackets; the ratios with their 95 % "
        f"block-bootstrap interval.",
        readme_figures.runtime_table(tables),
        "Fleet model (`source = fleet_model`):",
        readme_figures.fleet_table(tables),
        "Against the goals of issue 37:",
        _goals(tables),
        "Where the milliseconds go (`stage_latency.csv`): per stage, p50 / p99.9 in ms, the medians of the "
        "repetitions; produce path, then end to end.",
        _stages(tables, "produce"),
        _stages(tables, "end_to_end"),
        "What the fleet model's node ratio hangs on (`sensitivity.json`): each calibrated parameter moved alone; "
        "per change the node ratio Mafka3 / Mafka4 and, in brackets, both end-to-end p99.9s (Mafka3 / Mafka4, "
        "ms), so that both sides of each move show. Sorted by the widest move of the ratio; after each scale's "
        "table, every tail latency of both designs at each +/-1 sigma change.",
        _sensitivity(tables),
    )) + "\n"


def _setup(tables: Path) -> str:
    settings = _read_json(tables / "settings.json")
    runs = [json.loads(line) for line in (tables / "runs.jsonl").read_text().splitlines() if line.strip()]
    seeds = [settings["seed"] + repetition for repetition in range(settings["repetitions"])]
    loads = []
    for mode in settings["modes"]:
        before = [run["load_average_before"][0] for run in runs if run["mode"] == mode]
        busy = [run["busy_cores_before"] for run in runs if run["mode"] == mode and "busy_cores_before" in run]
        if before:
            loads.append(f"{mode} {min(before):g}–{max(before):g}"
                         + (f" (busy CPUs {min(busy):g}–{max(busy):g})" if busy else ""))
    calibration = _read_json(tables / "calibration.json")
    return (f"Setup (`settings.json`): consumers {', '.join(map(str, settings['consumers']))}; modes "
            f"{', '.join(settings['modes'])}; Mafka4's physical partitions {settings['physical_partitions']} "
            f"(Mafka3: one per consumer); replication factor {settings['replication_factor']}, read replicas "
            f"{settings['read_replicas']}; {settings['nodes']} simulated machines per mode, CPU sets pinned: "
            f"{'yes' if settings['pin_cpus'] else 'no'}; {settings['rate_msgs_per_s']:,} msgs/s of "
            f"{settings['message_bytes']}-byte keyed messages for {settings['duration_s']:g} s per run; "
            f"{settings['repetitions']} repetitions, seeds {', '.join(map(str, seeds))}. 1-minute load average "
            f"before each run (`runs.jsonl`): {'; '.join(loads)}. Fleet model calibration (`calibration.json`): "
            f"{calibration['date']}, commit `{calibration['git_commit'][:7]}`, quiet: "
            f"{'yes' if calibration['machine']['quiet'] else 'no'}.")


def _goal_figures(tables: Path) -> dict[str, tuple[float, str]]:
    """Each goal's measured figure, and how it is shown (with its interval or its parts)."""
    latency = readme_figures.without_lanes(_rows(tables / COMPARE_TABLE))
    runtime = {(row["mode"], int(row["consumers"])): row for row in latency if row["source"] == "runtime"}
    counts = sorted({consumers for _, consumers in runtime})
    most, fewest = counts[-1], counts[0]
    ratios = {int(row["consumers"]): row for row in readme_figures.without_lanes(_rows(tables / "mode_ratios.csv"))
              if row["source"] == "runtime"}

    def interval(column: str) -> tuple[float, str]:
        row = ratios[most]
        return float(row[column]), f"{readme_figures.ratio_cell(row, column)} at {most} consumers"

    growth_high = float(runtime[("mafka4", most)]["produce_latency_ms_tp999"])
    growth_low = float(runtime[("mafka4", fewest)]["produce_latency_ms_tp999"])
    fleet = [row for row in latency if row["source"] == "fleet_model" and float(row["consumers_scale"] or 0) == 1]
    topics = max(int(row["topics"]) for row in fleet)
    nodes = {row["mode"]: int(row["nodes"]) for row in fleet if int(row["topics"]) == topics}
    return {
        "produce_ratio": interval("produce_latency_ms_tp999_ratio"),
        "mafka4_produce_growth": (growth_high / growth_low, f"{growth_high:,.1f} / {growth_low:,.1f} ms = "
                                                           f"{growth_high / growth_low:.1f} ({most} / {fewest})"),
        "end_to_end_ratio": interval("end_to_end_latency_ms_tp999_ratio"),
        "fleet_nodes_ratio_x1": (nodes["mafka3"] / nodes["mafka4"],
                                 f"{nodes['mafka3'] / nodes['mafka4']:.2f} ({nodes['mafka3']:,} / "
                                 f"{nodes['mafka4']:,} at {topics:,} topics)"),
    }


def _goals(tables: Path) -> str:
    figures = _goal_figures(tables)
    rows = []
    for what, key, comparison, threshold in GOALS:
        value, shown = figures[key]
        met = value >= threshold if comparison == ">=" else value <= threshold
        rows.append((what, f"{comparison} {threshold:g}", shown, "met" if met else "not met"))
    return bench_figures.markdown_table(("goal", "wanted", "measured", ""), rows)


def _stages(tables: Path, path: str) -> str:
    rows = [row for row in readme_figures.without_lanes(_rows(tables / "stage_latency.csv"))
            if row["source"] == "runtime" and row["path"] == path]
    # Each mode's stages in path order; the columns follow the mode with the most, then any other's.
    by_mode: dict[str, list[str]] = {}
    for row in sorted(rows, key=lambda row: int(row["position"])):
        if row["stage"] not in by_mode.setdefault(row["mode"], []):
            by_mode[row["mode"]].append(row["stage"])
    longest = max(by_mode.values(), key=len)
    stages = list(dict.fromkeys(longest + [stage for stages in by_mode.values() for stage in stages]))
    cells = {(row["mode"], int(row["consumers"]), row["stage"]):
             f"{float(row['duration_ms_tp50']):,.1f} / {float(row['duration_ms_tp999']):,.1f}" for row in rows}
    configurations = sorted({(row["mode"], int(row["consumers"])) for row in rows})
    table_rows = [(mode, str(consumers), *(cells.get((mode, consumers, stage), "–") for stage in stages))
                  for mode, consumers in configurations]
    return bench_figures.markdown_table((f"{path.replace('_', '-')}: mode", "consumers", *stages), table_rows)


def _sensitivity(tables: Path) -> str:
    """Per consumer scale: each parameter's changes, the widest move of the node ratio first
    (``fleet.sensitivity.moves_at``), then both sides of each +/-1 sigma change."""
    # A report written before the rows held every tail lacks some: a figure it does not hold is none.
    rows = [{**dict.fromkeys(LATENCY_METRICS), **row} for row in _read_json(tables / "sensitivity.json")]
    text = []
    for scale in sorted({row["consumers_scale"] for row in rows}):
        baseline, moves = moves_at(rows, scale)
        changed = {move.parameter: {row["change"]: row for row in move.rows} for move in moves}
        table_rows = [(move.parameter, *(_sensitivity_cell(changed[move.parameter].get(change)) for change in CHANGES))
                      for move in moves]
        tails = [name for name in LATENCY_METRICS if baseline[name] is not None]
        sigma_rows = [(BASELINE, "", *_both_sides(baseline, tails))] + [
            (move.parameter, row["change"], *_both_sides(row, tails))
            for move in moves for row in move.rows if row["change"] in SIGMAS]
        text += [f"Consumer scale x{scale:g}, {baseline['topics']:,} topics. Baseline: "
                 f"{_sensitivity_cell(baseline)}.",
                 bench_figures.markdown_table(("parameter", *CHANGES), table_rows),
                 f"Both sides of each +/-1 sigma change at consumer scale x{scale:g}: the node ratio and every tail "
                 f"latency of both designs (ms), the baseline first.",
                 bench_figures.markdown_table(("parameter", "change", "node ratio",
                                               *(METRIC_TITLES[name] for name in tails)), sigma_rows)]
    return "\n\n".join(text)


def _sensitivity_cell(row: Mapping | None) -> str:
    if row is None:
        return "not moved (sigma 0, or a value the model refuses)"
    return (f"{_ratio_of(row)} ({bench_figures.number(row['end_to_end_tp999_mafka3'], ',.1f')} / "
            f"{bench_figures.number(row['end_to_end_tp999_mafka4'], ',.1f')})")


def _ratio_of(row: Mapping) -> str:
    """A row's node ratio; a design the model could not size (the row's note says why) has none."""
    return "not sized" if row["node_ratio"] is None else f"{row['node_ratio']:.2f}"


def _both_sides(row: Mapping, tails: Sequence[str]) -> tuple[str, ...]:
    return (_ratio_of(row), *(bench_figures.number(row[name], ",.1f") for name in tails))


# --- the document -------------------------------------------------------------------------------


def _block(kind: str, report_dir: Path, root: Path) -> str:
    return f"<!-- figures: {report_dir} {kind} -->\n{render_block(kind, report_dir, root)}<!-- /figures -->"


def render_document(root: Path = Path(".")) -> str:
    """The whole of ``docs/performance.md`` from the report directories under ``root``."""
    sections = [HEADER.rstrip("\n")]
    compare_dir = newest_dir(root, "compare")
    sections.append("## Mafka3 vs Mafka4 as consumers scale (`mafka4 compare`)\n\n"
                    "The consumer-scaling experiment on the real runtime, the fleet-scale model calibrated from "
                    "it, and the Spark analysis of both. Both designs run the same code on the same machine, each "
                    "deployed as its design would be; what differs between them is listed under the setup.\n\n"
                    + (_block("compare", compare_dir, root) if compare_dir else "No comparison report yet."))
    for kind, (title, what) in (*BENCH_SECTIONS.items(), (EVEN_DRAINS, EVEN_DRAINS_SECTION)):
        directory = newest_dir(root, kind)
        json_of = "JSON of both benches" if kind == EVEN_DRAINS else "this bench's JSON"
        body = (_block(kind, directory, root) if directory else
                f"No report directory holds {json_of} yet. "
                f"It renders here once one does (its command, commit and load in the directory's `run.json` or "
                f"`README.md`). Earlier runs whose JSON was not kept are listed in "
                f"[`reports/README.md`](../reports/README.md).")
        sections.append(f"## {title}\n\n{what}\n\n{body}")
    return "\n\n".join(sections) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m simulations.analysis.performance_doc", description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="compare instead of writing: exit 1 if the file differs")
    parser.add_argument("--root", type=Path, default=Path("."), help="the repository (default: the current directory)")
    args = parser.parse_args(argv)
    text = render_document(args.root)
    target = args.root / DOCUMENT
    if args.check:
        if not target.exists() or target.read_text() != text:
            print(f"{target} is not what reports/ renders: run python3 -m simulations.analysis.performance_doc", file=sys.stderr)
            return 1
        return 0
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
