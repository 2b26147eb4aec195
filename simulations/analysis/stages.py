"""The per-stage latency breakdown of the runtime runs: the table ``stage_latency``.

A message's *path* runs from ``produce_time_ms`` to the acknowledgement (``produce``) or to the
consumer's poll (``end_to_end``) through the stage stamps of ``simulations.schema``; its stages
are the links of ``schema.PRODUCE_STAGES`` and ``schema.READ_STAGES[mode]`` on that path, in
time order (``stage_path``): produce = accumulator, request_queue, append, isr_wait, ack_return;
end-to-end = accumulator, request_queue, append, isr_wait, then mafka3 fetch or mafka4 feeding,
vp_hw_wait, fetch. A stage's duration is its later stamp minus its earlier one.

Per run (drained runtime runs without lanes only, ``simulations.analysis.runs``: a lane run takes no
stage stamps, so it is left out), per path and stage, and for the path's whole latency (stage ``total``):

* ``count`` and exact nearest-rank tp50 / tp99 / tp999 of the duration over the rows where both
  of its stamps are present;
* ``mean``: the mean duration over the path's *complete* rows (every stamp of the path and its
  latency present), so that the stage means of a path add up to the ``total`` mean;
* ``tail_mean``: the same mean over the complete rows whose path latency is at or above the
  run's tp99 of that latency (over all its rows): where the milliseconds of the tail go.

Per configuration (source, mode, consumers, topics, lanes = 0): the percentiles are the median over the
runs with min and max (as in ``latency_by_config``); ``mean`` and ``tail_mean`` are the mean over
the runs of the per-run means, which keeps them additive. Percentiles of stages do not add up to
a percentile of the path (the slowest messages of one stage are not those of another); means do.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from simulations.analysis.percentiles import PERCENTILES, at_rank_sql, median_min_max
from simulations.analysis.runs import CONFIG_KEYS, RUN_KEYS
from simulations.schema import MODES, PRODUCE_STAGES, READ_STAGES

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

# Path -> (its last stamp, its latency column).
PATHS = {"produce": ("ack_time_ms", "produce_latency_ms"), "end_to_end": ("consume_time_ms", "end_to_end_latency_ms")}
TOTAL = "total"
TAIL_PERCENTILE = "tp99"
START_STAMP = "produce_time_ms"


def stage_path(mode: str, end_stamp: str) -> list[tuple[str, str, str]]:
    """(stage, later stamp, earlier stamp) from ``produce_time_ms`` to ``end_stamp``, in time order."""
    by_later = {later: (name, later, earlier) for name, (later, earlier) in {**PRODUCE_STAGES, **READ_STAGES[mode]}.items()}
    path, stamp = [], end_stamp
    while stamp != START_STAMP:
        assert stamp in by_later and len(path) < len(by_later), f"no stage path to {end_stamp} in {mode}"
        path.append(by_later[stamp])
        stamp = by_later[stamp][2]
    return path[::-1]


def _column(path: str, stage: str) -> str:
    return f"{path}__{stage}"


def _per_run(events: DataFrame, by_repetition: DataFrame, mode: str) -> DataFrame:
    """One row per run of ``mode``: the stage statistics, stacked into one row per (path, stage)."""
    from pyspark.sql import functions as F

    rows = events.filter(F.col("mode") == mode)
    stages = {name: (later, earlier) for end, _ in PATHS.values() for name, later, earlier in stage_path(mode, end)}
    for name, (later, earlier) in stages.items():
        rows = rows.withColumn(f"stage__{name}", F.col(later) - F.col(earlier))
    thresholds = by_repetition.select(*RUN_KEYS, *[
        F.col(f"{latency}_{TAIL_PERCENTILE}").alias(f"{path}__threshold") for path, (_, latency) in PATHS.items()])
    rows = rows.join(F.broadcast(thresholds), on=list(RUN_KEYS))
    aggregates, stacked = [], []
    for path, (end, latency) in PATHS.items():
        links = stage_path(mode, end)
        stamps = [START_STAMP] + [later for _, later, _ in links]
        complete = F.col(latency).isNotNull()
        for stamp in stamps:
            complete = complete & F.col(stamp).isNotNull()
        tail = complete & (F.col(latency) >= F.col(f"{path}__threshold"))
        aggregates += [F.count(F.when(complete, 1)).alias(f"{path}__complete"),
                       F.count(F.when(F.col(latency) >= F.col(f"{path}__threshold"), 1)).alias(f"{path}__tail"),
                       F.count(F.when(tail, 1)).alias(f"{path}__tail_complete")]
        for position, (stage, later, earlier) in enumerate([*links, (TOTAL, end, START_STAMP)]):
            duration = F.col(latency) if stage == TOTAL else F.col(f"stage__{stage}")
            column = _column(path, stage)
            aggregates += [F.array_sort(F.collect_list(duration)).alias(f"{column}__sorted"),
                           F.avg(F.when(complete, duration)).alias(f"{column}__mean"),
                           F.avg(F.when(tail, duration)).alias(f"{column}__tail_mean")]
            percentiles = ", ".join(at_rank_sql(f"`{column}__sorted`", percent) for percent in PERCENTILES.values())
            stacked.append(f"'{path}', {position}, '{stage}', '{later}', '{earlier}', size(`{column}__sorted`), "
                           f"{percentiles}, `{column}__mean`, `{column}__tail_mean`, `{path}__complete`, `{path}__tail`, "
                           f"`{path}__tail_complete`")
    names = ", ".join(["path", "position", "stage", "later_stamp", "earlier_stamp", "count",
                       *[f"duration_ms_{name}" for name in PERCENTILES], "duration_ms_mean", "duration_ms_tail_mean",
                       "complete_rows", "tail_rows", "tail_complete_rows"])
    per_run = rows.groupBy(*RUN_KEYS).agg(*aggregates)
    return per_run.select(*RUN_KEYS, F.expr(f"stack({len(stacked)}, {', '.join(stacked)}) as ({names})"))


def stage_latency(events: DataFrame, by_repetition: DataFrame) -> DataFrame:
    """The ``stage_latency`` table from the drained runtime runs' rows ``events`` (module doc); lane runs
    are left out.

    ``by_repetition`` (``latency_by_repetition``) gives each run's tp99 of its latencies, the
    threshold of the tail.
    """
    from pyspark.sql import functions as F

    events = events.filter(F.col("lanes") == 0)
    per_run = _per_run(events, by_repetition, MODES[0])
    for mode in MODES[1:]:
        per_run = per_run.unionByName(_per_run(events, by_repetition, mode))
    keys = [*CONFIG_KEYS, "path", "position", "stage", "later_stamp", "earlier_stamp"]
    aggregates = [F.count(F.lit(1)).alias("repetitions"), F.sum("count").alias("count"), F.min("count").alias("count_min")]
    for name in PERCENTILES:
        aggregates += median_min_max(f"duration_ms_{name}")
    aggregates += [F.avg("duration_ms_mean").alias("duration_ms_mean"),
                   F.avg("duration_ms_tail_mean").alias("duration_ms_tail_mean"),
                   *[F.sum(column).alias(column) for column in ("complete_rows", "tail_rows", "tail_complete_rows")]]
    return per_run.groupBy(*keys).agg(*aggregates)
