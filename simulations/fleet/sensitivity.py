"""``fleet sensitivity``: how far the fleet model's answer moves when one calibrated parameter moves.

For every calibrated parameter (``calibrated_parameters``: each ``CalibrationParams`` field but
``service_scv``, assumed, and ``reference_message_bytes``, a unit) and every consumer scale,
both designs are sized (``capacity.model_design``, on the same seeded workload ``fleet model``
draws: ``WorkloadConfig`` at ``topics`` topics and that scale) with that parameter alone changed:

* ``x0.8`` and ``x1.2``: 20 % down and up, how much the answer hangs on the parameter's size;
* ``-1sigma`` and ``+1sigma``: by the parameter's measurement error (``measurement_error`` of
  the calibration, ``fit``), what the measurement itself leaves open. Skipped when sigma is 0
  (not measured, measured exactly, or a calibration without errors: format 1), and said so.

A value pushed below 0 becomes 0 (costs and latencies are >= 0), noted in the row; a value
``CalibrationParams`` refuses (a per-message cost or a replica's memory must be > 0) is skipped,
with the reason. A change that leaves the parameters as they were (x0.8 of 0) reuses the
baseline's result: the model is deterministic for its seed. A change with which a design cannot
be sized (``FleetTargetUnreachable``) gives a row without that design's figures, and the reason.

Each row: nodes of both designs, the node ratio Mafka3 / Mafka4, and the produce and end-to-end
tp99 and tp999 of both designs; one ``baseline`` row per consumer scale. ``sensitivity.json`` is
the list of rows; ``sensitivity.md`` has, per consumer scale, the parameters sorted by how far
the node ratio moves (the widest of their changes) with the widest latency move beside it, then
both sides of every +/-1 sigma change: the node ratio and every latency figure of both designs,
each as baseline -> changed, so a change that favours one design in nodes is read with what it
does to latencies; then every row.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Callable, TextIO

from mafka4.errors import FleetTargetUnreachable, InvalidConfig
from simulations.fleet.capacity import model_design
from simulations.fleet.config import CONSUMER_SCALES_DEFAULT, SENSITIVITY_TOPICS_DEFAULT, ModelConfig, NodeSpec
from simulations.fleet.loads import Design
from simulations.fleet.params import CalibrationParams
from simulations.fleet.workload import Workload, WorkloadConfig, generate

ASSUMED = ("service_scv", "reference_message_bytes")
FACTORS = {"x0.8": 0.8, "x1.2": 1.2}
SIGMAS = {"-1sigma": -1.0, "+1sigma": 1.0}
CHANGES = (*FACTORS, *SIGMAS)
BASELINE = "baseline"
LATENCY_METRICS = tuple(f"{path}_{tail}_{design.value}" for path in ("produce", "end_to_end")
                        for tail in ("tp99", "tp999") for design in Design)
METRICS = ("nodes_mafka3", "nodes_mafka4", "node_ratio", *LATENCY_METRICS)
METRIC_TITLES = {"nodes_mafka3": "nodes Mafka3", "nodes_mafka4": "nodes Mafka4", "node_ratio": "ratio",
                 **{name: name.replace("end_to_end", "e2e").replace("_mafka", " Mafka").replace("_tp", " tp")
                    for name in LATENCY_METRICS}}


def calibrated_parameters() -> tuple[str, ...]:
    return tuple(f.name for f in fields(CalibrationParams) if f.name not in ASSUMED)


@dataclass(frozen=True, slots=True)
class SensitivitySettings:
    topics: int = SENSITIVITY_TOPICS_DEFAULT
    consumer_scales: tuple[float, ...] = CONSUMER_SCALES_DEFAULT
    seed: int = 7
    parameters: tuple[str, ...] = ()  # () = every calibrated parameter
    workload: WorkloadConfig = field(default_factory=WorkloadConfig)
    node: NodeSpec = field(default_factory=NodeSpec)
    model: ModelConfig = field(default_factory=ModelConfig)

    def __post_init__(self) -> None:
        if not self.consumer_scales:
            raise InvalidConfig("a sensitivity table needs at least one consumer scale")
        for scale in self.consumer_scales:
            replace(self.workload, topics=self.topics, consumers_scale=scale)  # validates both
        unknown = sorted(set(self.parameters) - set(calibrated_parameters()))
        if unknown:
            raise InvalidConfig(f"no calibrated parameter {', '.join(unknown)}; known: {', '.join(calibrated_parameters())}")

    @property
    def chosen_parameters(self) -> tuple[str, ...]:
        return self.parameters or calibrated_parameters()


def changed_value(value: float, sigma: float, change: str) -> tuple[float | None, str]:
    """The parameter's value under ``change`` and a note; None when the change is skipped."""
    if change in FACTORS:
        return value * FACTORS[change], ""
    if sigma <= 0:
        return None, "skipped: sigma is 0"
    moved = value + SIGMAS[change] * sigma
    if moved < 0:
        return 0.0, f"{value:g} {change[0]} {sigma:g} is below 0: set to 0"
    return moved, ""


def model_metrics(workload: Workload, params: CalibrationParams, settings: SensitivitySettings) -> tuple[dict, str]:
    """Nodes and tails of both designs for one workload and calibration, and a note if one could not be sized."""
    metrics, notes = {name: None for name in METRICS}, []
    for design in Design:
        try:
            result = model_design(design, workload, params, settings.node, settings.model).result
        except FleetTargetUnreachable as error:
            notes.append(f"{design.value}: {error.message}")
            continue
        metrics[f"nodes_{design.value}"] = result.nodes
        for tail in ("tp99", "tp999"):
            metrics[f"produce_{tail}_{design.value}"] = result.produce_latency_ms[tail]
            metrics[f"end_to_end_{tail}_{design.value}"] = result.end_to_end_latency_ms[tail]
    if metrics["nodes_mafka3"] is not None and metrics["nodes_mafka4"] is not None:
        metrics["node_ratio"] = round(metrics["nodes_mafka3"] / metrics["nodes_mafka4"], 4)
    return metrics, "; ".join(notes)


def _row(parameter: str, change: str, value, scale: float, topics: int, metrics: dict, note: str) -> dict:
    return {"parameter": parameter, "change": change, "value": value, "consumers_scale": scale, "topics": topics,
            **metrics, "note": note}


def sensitivity_rows(params: CalibrationParams, errors: dict[str, float], settings: SensitivitySettings,
                     progress: Callable[[str], None] = lambda _: None) -> tuple[list[dict], list[str]]:
    """Every row of the table, and what was skipped (parameter, change, scale and why)."""
    rows, skipped = [], []
    for scale in settings.consumer_scales:
        workload = generate(replace(settings.workload, topics=settings.topics, consumers_scale=scale), settings.seed)
        results: dict[CalibrationParams, tuple[dict, str]] = {params: model_metrics(workload, params, settings)}
        rows.append(_row(BASELINE, BASELINE, None, scale, settings.topics, *results[params]))
        for name in settings.chosen_parameters:
            started = time.perf_counter()
            for change in CHANGES:
                value, note = changed_value(getattr(params, name), errors.get(name, 0.0), change)
                if value is None:
                    skipped.append(f"{name} {change} at x{scale:g}: {note}")
                    continue
                try:
                    changed = replace(params, **{name: value})
                except InvalidConfig as error:
                    skipped.append(f"{name} {change} at x{scale:g}: {error.message}")
                    continue
                if changed not in results:
                    results[changed] = model_metrics(workload, changed, settings)
                metrics, failure = results[changed]
                rows.append(_row(name, change, value, scale, settings.topics, metrics,
                                 "; ".join(n for n in (note, failure) if n)))
            progress(f"x{scale:g} {name}: {time.perf_counter() - started:.1f} s")
    return rows, skipped


def _ratio_move(row: dict, baseline: dict) -> float:
    if row["node_ratio"] is None or baseline["node_ratio"] is None:
        return float("inf")  # a design that could not be sized moved the answer more than any ratio
    return abs(row["node_ratio"] - baseline["node_ratio"])


def _latency_move(row: dict, baseline: dict) -> tuple[float, str]:
    """The largest move of a latency figure of ``row`` from the baseline (ms, with its sign) and which figure it is."""
    moves = [(row[name] - baseline[name], name) for name in LATENCY_METRICS
             if row[name] is not None and baseline[name] is not None]
    return max(moves, key=lambda move: abs(move[0]), default=(0.0, "-"))


@dataclass(frozen=True, slots=True)
class Moves:
    """How far one parameter's changes moved the answer at one consumer scale, on both sides."""

    parameter: str
    rows: tuple[dict, ...]  # its changed rows, in CHANGES order
    ratio: float  # the widest move of the node ratio (inf: a design could not be sized)
    latency_ms: float  # the widest move of any latency figure of either design, with its sign
    latency_figure: str  # which figure that is (a LATENCY_METRICS name; "-": none known)

    @property
    def latency_text(self) -> str:
        """The widest latency move as the tables print it: ``+240 e2e tp999 Mafka4``, or ``0``."""
        return f"{self.latency_ms:+.3g} {METRIC_TITLES[self.latency_figure]}" if self.latency_ms else "0"


def moves_at(rows: list[dict], scale: float) -> tuple[dict, list[Moves]]:
    """The baseline row at consumer scale ``scale``, and each parameter's moves from it, the widest ratio move first."""
    own = [row for row in rows if row["consumers_scale"] == scale]
    baseline = next(row for row in own if row["change"] == BASELINE)
    by_parameter: dict[str, list[dict]] = {}
    for row in own:
        if row["change"] != BASELINE:
            by_parameter.setdefault(row["parameter"], []).append(row)
    moves = [Moves(name, tuple(changed), max(_ratio_move(row, baseline) for row in changed),
                   *max((_latency_move(row, baseline) for row in changed), key=lambda move: abs(move[0])))
             for name, changed in by_parameter.items()]
    return baseline, sorted(moves, key=lambda move: (-move.ratio, move.parameter))


def _cell(value) -> str:
    return "-" if value is None else f"{value:g}"


def _from_baseline(baseline: dict, row: dict, name: str) -> str:
    """``baseline -> changed`` of one figure, or the one value when it did not move."""
    before, after = _cell(baseline[name]), _cell(row[name])
    return after if before == after else f"{before} -> {after}"


def _rows_table(rows: list[dict], cell: Callable[[dict, str], str], note: bool) -> list[str]:
    titles = " | ".join(METRIC_TITLES[m] for m in METRICS)
    lines = [f"| parameter | change | value | {titles} |" + (" note |" if note else ""),
             "|---|---|---:|" + "---:|" * len(METRICS) + ("---|" if note else "")]
    return lines + [f"| {row['parameter']} | {row['change']} | {_cell(row['value'])} | "
                    + " | ".join(cell(row, m) for m in METRICS) + (f" | {row['note']} |" if note else " |")
                    for row in rows]


def _scale_section(rows: list[dict], scale: float, params: CalibrationParams, errors: dict[str, float]) -> list[str]:
    baseline, moves = moves_at(rows, scale)
    lines = [f"## Consumer scale x{scale:g}", "",
             f"Baseline: Mafka3 {_cell(baseline['nodes_mafka3'])} nodes, Mafka4 {_cell(baseline['nodes_mafka4'])} "
             f"nodes, ratio {_cell(baseline['node_ratio'])}; produce tp999 {_cell(baseline['produce_tp999_mafka3'])} / "
             f"{_cell(baseline['produce_tp999_mafka4'])} ms, end-to-end tp999 "
             f"{_cell(baseline['end_to_end_tp999_mafka3'])} / {_cell(baseline['end_to_end_tp999_mafka4'])} ms "
             f"(Mafka3 / Mafka4).", "",
             "| parameter | value | 1 sigma | " + " | ".join(f"ratio {c}" for c in CHANGES)
             + " | widest ratio move | widest latency move (ms) |",
             "|---|---:|---:|" + "---:|" * (len(CHANGES) + 1) + "---|"]
    for move in moves:
        ratio = {row["change"]: _cell(row["node_ratio"]) for row in move.rows}
        sigma = errors.get(move.parameter, 0.0)
        lines.append(f"| {move.parameter} | {getattr(params, move.parameter):g} | {sigma:g} | "
                     + " | ".join(ratio.get(c, "skipped") for c in CHANGES) + f" | {move.ratio:.4f} | "
                     f"{move.latency_text} |")
    sigma_rows = [row for move in moves for row in move.rows if row["change"] in SIGMAS]
    if sigma_rows:
        lines += ["", "Both sides of each +/-1 sigma change (baseline -> changed; one value: it did not move):", "",
                  *_rows_table(sigma_rows, lambda row, name: _from_baseline(baseline, row, name), note=False)]
    lines += ["", "Every row (same order):", "",
              *_rows_table([baseline, *(row for move in moves for row in move.rows)],
                           lambda row, name: _cell(row[name]), note=True)]
    return lines + [""]


def markdown(rows: list[dict], skipped: list[str], params: CalibrationParams, errors: dict[str, float],
             settings: SensitivitySettings, source: str) -> str:
    lines = ["# Fleet model sensitivity", "",
             f"Calibration: {source}.", "",
             f"Workload: WorkloadConfig at {settings.topics} topics (seed {settings.seed}), consumer scales "
             f"{', '.join(f'x{s:g}' for s in settings.consumer_scales)}; node and model settings as `fleet model`. "
             f"Each parameter is moved alone: x0.8 and x1.2, and by -1 and +1 sigma of its measurement error. "
             f"Ratio = nodes Mafka3 / nodes Mafka4; latencies in ms. Parameters are sorted by the widest move "
             f"of the ratio: the ratio hangs most on the first. A change can favour one design in nodes and the "
             f"other in latency: each +/-1 sigma change is given with both, for both designs.", ""]
    no_sigma = [name for name in settings.chosen_parameters if errors.get(name, 0.0) <= 0]
    if no_sigma:
        lines += [f"No measurement error (sigma 0), so no +/-1 sigma rows: {', '.join(no_sigma)}.", ""]
    for scale in settings.consumer_scales:
        lines += _scale_section(rows, scale, params, errors)
    other = [s for s in skipped if not s.endswith("skipped: sigma is 0")]
    if other:
        lines += ["Skipped changes:", "", *(f"* {s}" for s in other), ""]
    return "\n".join(lines)


def run_sensitivity(out: str | Path, settings: SensitivitySettings, params: CalibrationParams,
                    errors: dict[str, float], source: str, progress: TextIO | None = sys.stderr) -> list[dict]:
    """Write ``sensitivity.json`` and ``sensitivity.md`` to ``out``; returns the rows."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    report = (lambda line: print(f"fleet sensitivity: {line}", file=progress, flush=True)) if progress else (lambda _: None)
    rows, skipped = sensitivity_rows(params, errors, settings, report)
    (out / "sensitivity.json").write_text(json.dumps(rows, indent=2) + "\n")
    (out / "sensitivity.md").write_text(markdown(rows, skipped, params, errors, settings, source))
    (out / "sensitivity_settings.json").write_text(json.dumps(
        {"calibration": source, "calibration_used": params.to_json(), "measurement_error": errors,
         "settings": asdict(settings), "skipped": skipped}, indent=2) + "\n")
    return rows
