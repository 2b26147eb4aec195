"""Within-mode scaling ratios: a mode's median tp99 and tp999 at its most consumers over its fewest.

The Mafka3 / Mafka4 intervals (``simulations.analysis.intervals``) compare the modes at one
consumer count; a goal such as "Mafka4's produce p99.9 at 32 consumers at most 1.5x its value at
1" compares one mode with itself. Per runtime (source, mode, topics, lanes) whose drained runs cover
two consumer counts or more (a lane count is compared only with itself), per latency and bootstrapped percentile (``INTERVAL_PERCENTILES``):

* ``consumers_low`` / ``consumers_high``: the smallest and the largest consumer count with a
  drained repetition; counts in between are not compared (the tables hold their values);
* ``ratio``: the point estimate, ``median_at_high / median_at_low``, the medians over repetitions
  of ``latency_by_config``; null when either is null or ``median_at_low`` is 0;
* ``ratio_low`` / ``ratio_high``: the 95 % interval by the block bootstrap of the Mafka3 / Mafka4
  ratios, on the very same replicates (``intervals.config_statistics``): in replicate ``r`` each
  configuration's statistic is the median over its runs of their weighted percentiles, and the
  replicate ratio is the high count's statistic over the low count's. The two counts' runs draw
  independent weights (a run's blocks hash its own keys), as independent measurements should. The
  bounds are the nearest-rank ``INTERVAL_BOUNDS`` of the non-null replicate ratios (a replicate
  whose low statistic is 0 or null gives none), as ``intervals.ratio_interval`` takes them
  (numpy: ``np.percentile(ratios, [2.5, 97.5], method="inverted_cdf")``);
* ``replicates``, ``replicates_used`` (the non-null replicate ratios), ``scans_full`` (summed over
  both counts' replicates), ``block_ms``, ``bootstrap_seed``: as in ``ratio_intervals``.

Pure: plain rows in, plain rows out. The Spark job collects the runtime's replicate statistics
(configurations x 4 x replicates rows: tens of thousands at most) and writes the rows as ``scale_ratios``.
The method is that of the one-off ``reports/2026-12-03-scaling-1-32-r3/scaling_ratio.py``, with the
analysis's own seeded draws instead of numpy's generator.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

from mafka4.bench.stats import nearest_rank_index
from simulations.analysis.intervals import INTERVAL_BOUNDS, INTERVAL_PERCENTILES
from simulations.analysis.runs import LATENCIES

SPAN_KEYS = ("source", "mode", "topics", "lanes")
TABLE_KEYS = (*SPAN_KEYS, "latency", "percentile")
COLUMNS = (*TABLE_KEYS, "consumers_low", "consumers_high", "ratio", "ratio_low", "ratio_high", "median_at_low",
           "median_at_high", "replicates", "replicates_used", "scans_full", "block_ms", "bootstrap_seed")


def consumer_spans(latency_rows: Iterable[Mapping[str, Any]]) -> dict[tuple, tuple[int, int]]:
    """(source, mode, topics, lanes) -> (fewest, most) consumers over its runtime configurations with a
    drained repetition; only those with two counts or more."""
    counts: dict[tuple, set[int]] = {}
    for row in latency_rows:
        if row["source"] == "runtime" and row["repetitions"]:
            counts.setdefault(tuple(row[key] for key in SPAN_KEYS), set()).add(row["consumers"])
    return {span: (min(found), max(found)) for span, found in counts.items() if len(found) > 1}


def quotient(high: float | None, low: float | None) -> float | None:
    """``high / low``; None when either is None or ``low`` is 0 (Spark's ``try_divide``)."""
    if high is None or low is None or low == 0:
        return None
    return high / low


def nearest_rank_bounds(ratios: Sequence[float]) -> tuple[float | None, float | None]:
    """The nearest-rank ``INTERVAL_BOUNDS`` of ``ratios``; (None, None) when there are none."""
    if not ratios:
        return None, None
    ordered = sorted(ratios)
    low, high = INTERVAL_BOUNDS
    return ordered[nearest_rank_index(low, len(ordered))], ordered[nearest_rank_index(high, len(ordered))]


def replicate_ratios(at_low: Mapping[int, float | None], at_high: Mapping[int, float | None]) -> list[float]:
    """Per replicate present at both counts: its statistic at the high count over the low; the
    replicates without a ratio left out."""
    ratios = (quotient(at_high[replicate], at_low[replicate]) for replicate in sorted(at_low.keys() & at_high.keys()))
    return [ratio for ratio in ratios if ratio is not None]


def scale_ratios(latency_rows: Sequence[Mapping[str, Any]], statistic_rows: Iterable[Mapping[str, Any]], *,
                 replicates: int, block_ms: float, seed: int) -> list[dict[str, Any]]:
    """The rows of ``scale_ratios`` (module doc), in ``COLUMNS`` order.

    ``latency_rows``: ``latency_by_config``; ``statistic_rows``: ``config_statistics`` (source,
    mode, consumers, topics, lanes, latency, percentile, replicate, statistic, scans_full).
    """
    spans = consumer_spans(latency_rows)
    wanted = {(*span, consumers) for span, pair in spans.items() for consumers in pair}
    statistics: dict[tuple, dict[int, float | None]] = {}
    scans_full: dict[tuple, int] = {}
    for row in statistic_rows:
        config = (*(row[key] for key in SPAN_KEYS), row["consumers"])
        if config in wanted:
            key = (*config, row["latency"], row["percentile"])
            statistics.setdefault(key, {})[row["replicate"]] = row["statistic"]
            scans_full[key] = scans_full.get(key, 0) + row["scans_full"]
    medians = {(*(row[key] for key in SPAN_KEYS), row["consumers"]): row for row in latency_rows}
    rows = []
    for span, (low, high) in sorted(spans.items()):
        for latency in LATENCIES:
            for name in INTERVAL_PERCENTILES:
                at_low, at_high = (statistics.get((*span, consumers, latency, name), {}) for consumers in (low, high))
                ratios = replicate_ratios(at_low, at_high)
                bound_low, bound_high = nearest_rank_bounds(ratios)
                median_low = medians[(*span, low)][f"{latency}_{name}"]
                median_high = medians[(*span, high)][f"{latency}_{name}"]
                rows.append(dict(zip(COLUMNS, (
                    *span, latency, name, low, high, quotient(median_high, median_low), bound_low, bound_high,
                    median_low, median_high, replicates, len(ratios),
                    sum(scans_full.get((*span, consumers, latency, name), 0) for consumers in (low, high)),
                    float(block_ms), seed))))
    return rows
