"""The PNG plots of ``mafka4 analyze``, drawn from the rows of the (small) result tables.

No Spark here; matplotlib's Agg canvas, no display needed. Each function draws one figure to a
path. Lines and error bars (column names as in ``simulations.analysis.job``):

* ``latency_vs_consumers``: runtime; per mode, the median over repetitions of tp999 against
  consumers, error bars from the smallest to the largest repetition; produce and end-to-end;
* ``fleet_nodes_vs_topics`` and ``fleet_latency_vs_topics``: fleet model; one line per (mode,
  consumer scale) (``simulations.analysis.consumer_scales``) against fleet size, a color per mode and a
  line style per scale;
* ``stage_breakdown``: runtime; per consumer count one bar per mode, stacked by stage: left the
  mean of each produce stage over all complete messages, right the tail composition of
  end-to-end latency (the mean of each stage over the messages at or above the run's end-to-end
  tp99). Means stack: they add up to the mean latency of the same messages.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from simulations.analysis.consumer_scales import scale_label

MODES = ("mafka3", "mafka4")
MODE_LABELS = {"mafka3": "Mafka3", "mafka4": "Mafka4"}
LATENCY_TITLES = {"produce_latency_ms": "produce latency", "end_to_end_latency_ms": "end-to-end latency"}
MARKERS = {"mafka3": "o", "mafka4": "s"}
COLORS = {"mafka3": "C0", "mafka4": "C1"}
LINE_STYLES = ("-", "--", ":", "-.")


def _figure(size: tuple[float, float], panels: int):
    from matplotlib.figure import Figure

    figure = Figure(figsize=size, layout="constrained")
    return figure, figure.subplots(1, panels) if panels > 1 else [figure.subplots()]


def _x_axis(axes, xs: Sequence[float], label: str, base: int) -> None:
    if xs and min(xs) > 0 and max(xs) / min(xs) >= 8:
        axes.set_xscale("log", base=base)
    if 0 < len(set(xs)) <= 12:
        axes.set_xticks(sorted(set(xs)), [str(x) for x in sorted(set(xs))])
    axes.set_xlabel(label)
    axes.grid(True, alpha=0.3)


def _finish(axes, drew: bool) -> None:
    if drew:
        axes.legend()
    else:
        axes.text(0.5, 0.5, "no values", ha="center", va="center", transform=axes.transAxes)


def plot_runtime_latency(rows: Sequence[Mapping[str, Any]], path: Path) -> None:
    """Median tp999 with min-max error bars against consumers, one line per mode."""
    figure, panels = _figure((10, 4), 2)
    for axes, (latency, title) in zip(panels, LATENCY_TITLES.items()):
        column = f"{latency}_tp999"
        xs_all, drew = [], False
        for mode in MODES:
            points = sorted((row["consumers"], row[column], row[f"{column}_min"], row[f"{column}_max"])
                            for row in rows if row["mode"] == mode and row[column] is not None)
            if not points:
                continue
            xs = [x for x, *_ in points]
            ys = [y for _, y, _, _ in points]
            errors = [[y - low for _, y, low, _ in points], [high - y for _, y, _, high in points]]
            axes.errorbar(xs, ys, yerr=errors, marker=MARKERS[mode], color=COLORS[mode], capsize=3,
                          label=MODE_LABELS[mode])
            xs_all += xs
            drew = True
        _x_axis(axes, xs_all, "consumers", 2)
        axes.set_ylabel("tp999 (ms): median, bars min-max over repetitions")
        axes.set_title(f"{title} tp999")
        _finish(axes, drew)
    figure.savefig(path, format="png", dpi=100)


def _fleet_series(rows: Sequence[Mapping[str, Any]], column: str) -> dict[str, tuple[str, list, list]]:
    """Line label -> (mode, fleet sizes, values), one line per (mode, consumer scale)."""
    series: dict[str, tuple[str, list, list]] = {}
    for mode in MODES:
        ordered = sorted((row for row in rows if row["mode"] == mode),
                         key=lambda row: (row["consumers_scale"] is None, row["consumers_scale"] or 0.0,
                                          row["consumers_scale_rank"]))
        labels = list(dict.fromkeys(scale_label(row) for row in ordered))
        for label in labels:
            points = sorted((row["topics"], row[column]) for row in rows
                            if row["mode"] == mode and scale_label(row) == label and row[column] is not None)
            if points:
                series[f"{MODE_LABELS[mode]}, consumers {label}"] = (mode, [x for x, _ in points], [y for _, y in points])
    return series


def _fleet_axes(axes, rows: Sequence[Mapping[str, Any]], column: str, y_label: str, title: str) -> None:
    series = _fleet_series(rows, column)
    styles: dict[str, int] = {}
    for label, (mode, xs, ys) in series.items():
        style = LINE_STYLES[styles.setdefault(mode, 0) % len(LINE_STYLES)]
        styles[mode] += 1
        axes.plot(xs, ys, marker=MARKERS[mode], color=COLORS[mode], linestyle=style, label=label)
    _x_axis(axes, [x for _, xs, _ in series.values() for x in xs], "fleet size (topics)", 10)
    axes.set_ylabel(y_label)
    axes.set_title(title)
    _finish(axes, bool(series))


def plot_fleet_nodes(rows: Sequence[Mapping[str, Any]], path: Path) -> None:
    figure, (axes,) = _figure((7, 4.5), 1)
    _fleet_axes(axes, rows, "nodes", "nodes (write + read)", "nodes needed by the fleet, per consumer scale")
    figure.savefig(path, format="png", dpi=100)


def plot_fleet_latency(rows: Sequence[Mapping[str, Any]], path: Path) -> None:
    figure, panels = _figure((11, 4.5), 2)
    for axes, (latency, title) in zip(panels, LATENCY_TITLES.items()):
        _fleet_axes(axes, rows, f"{latency}_tp999", "tp999 (ms)", f"{title} tp999, per consumer scale")
    figure.savefig(path, format="png", dpi=100)


def plot_stage_breakdown(rows: Sequence[Mapping[str, Any]], path: Path) -> None:
    """Stacked stage means per (consumers, mode): produce means (left), end-to-end tail composition (right)."""
    from matplotlib import colormaps

    figure, panels = _figure((12, 4.8), 2)
    panels_plan = (("produce", "duration_ms_mean", "produce latency: mean per stage, all messages"),
                   ("end_to_end", "duration_ms_tail_mean", "end-to-end tail: mean per stage, messages >= tp99"))
    positions: dict[str, int] = {}
    for row in rows:
        if row["stage"] != "total":
            positions[row["stage"]] = max(positions.get(row["stage"], 0), row["position"])
    stages = sorted(positions, key=lambda stage: positions[stage])
    colors = {stage: colormaps["tab10"](index % 10) for index, stage in enumerate(stages)}
    consumers = sorted({row["consumers"] for row in rows})
    for axes, (path_name, column, title) in zip(panels, panels_plan):
        drew = set()
        for group, count in enumerate(consumers):
            for offset, mode in enumerate(MODES):
                bars = sorted((row for row in rows if row["path"] == path_name and row["consumers"] == count
                               and row["mode"] == mode and row["stage"] != "total" and row[column] is not None),
                              key=lambda row: row["position"])
                bottom = 0.0
                for row in bars:
                    label = row["stage"] if row["stage"] not in drew else None
                    axes.bar(group + (offset - 0.5) * 0.38, row[column], width=0.36, bottom=bottom,
                             color=colors[row["stage"]], edgecolor="black", linewidth=0.4, label=label,
                             hatch="//" if mode == "mafka4" else None)
                    drew.add(row["stage"])
                    bottom += row[column]
        axes.set_xticks(range(len(consumers)), [f"{count}\nM3 | M4" for count in consumers])
        axes.set_xlabel("consumers (left bar Mafka3, right bar Mafka4, hatched)")
        axes.set_ylabel("ms")
        axes.set_title(title)
        axes.grid(True, axis="y", alpha=0.3)
        _finish(axes, bool(drew))
    figure.savefig(path, format="png", dpi=100)
