"""Configurations, runs, and which runs count: the integrity checks of ``mafka4 analyze``.

A *configuration* is one (source, mode, consumers, topics, lanes) (``CONFIG_KEYS``); a *run* is one
repetition of it (``RUN_KEYS``: the configuration plus experiment_id, seed and repetition).
Percentiles are computed per run, then summarised over the runs of a configuration. The two modes
are compared per (source, consumers, topics, lanes) (``RATIO_KEYS``), so a lane run is only ever
set beside a lane run of the same lane count; the report's sections from before lanes show the
runs without lanes (``lanes = 0``), and a section of their own the others.

Per run (``integrity_aggregates``):

* ``acknowledged``: rows with a produce latency (the runtime derives it from ``ack_time_ms``;
  the fleet model gives it without times), ``never_acknowledged``: the other rows;
* ``deliveries_counted``: rows whose ``deliveries`` is not null. A run where it is 0 does not
  count deliveries (the fleet model) and the delivery checks do not apply to it;
* ``undelivered``: acknowledged rows delivered 0 times, or not counted, in a run that counts
  deliveries; ``duplicates``: the sum of ``deliveries - 1`` over rows delivered more than once
  (null when deliveries are not counted);
* ``drained``: every acknowledged message was delivered (``undelivered = 0``), or the run does
  not count deliveries. A run that is not drained ended before its consumers had read what was
  acknowledged, so its end-to-end latencies miss the slowest messages: it is left out of every
  latency statistic and listed in the report.

A run's rows come from one event-log file: ``runs_in_more_than_one_file`` finds the runs that do
not (a repetition measured again next to its first file), which the analysis refuses.

``TAIL_SAMPLES_MIN``: a tp999 resting on fewer samples above its rank is flagged in the report.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

CONFIG_KEYS = ("source", "mode", "consumers", "topics", "lanes")
RUN_KEYS = (*CONFIG_KEYS, "experiment_id", "seed", "repetition")
RATIO_KEYS = ("source", "consumers", "topics", "lanes")
LATENCIES = ("produce_latency_ms", "end_to_end_latency_ms")
# Fewer than 50 samples above the tp999 rank, n - ceil(0.999 n) = floor(n / 1000), means fewer than
# 50,000 samples in a run: the tp999 is then decided by a handful of messages and moves with each.
TAIL_SAMPLES_MIN = 50


def integrity_aggregates() -> list[Column]:
    """Aggregates over the rows of one run (group by ``RUN_KEYS``); see the module doc."""
    from pyspark.sql import functions as F

    acknowledged = F.col("produce_latency_ms").isNotNull()
    counted = F.count("deliveries") > 0
    return [
        F.count(F.when(acknowledged, 1)).alias("acknowledged"),
        F.count(F.when(~acknowledged, 1)).alias("never_acknowledged"),
        F.count("deliveries").alias("deliveries_counted"),
        F.when(counted, F.count(F.when(acknowledged & F.coalesce(F.col("deliveries") == 0, F.lit(True)), 1)))
        .alias("undelivered"),
        F.when(counted, F.coalesce(F.sum(F.when(F.col("deliveries") > 1, F.col("deliveries") - 1)), F.lit(0)))
        .cast("long").alias("duplicates"),
    ]


def drained_column() -> Column:
    """``drained`` from the columns of ``integrity_aggregates``."""
    from pyspark.sql import functions as F

    return (F.col("deliveries_counted") == 0) | (F.col("undelivered") == 0)


def drained_runtime_events(events, runs):
    """Rows of ``events`` from drained runtime runs; ``runs`` has ``RUN_KEYS`` and ``drained``."""
    from pyspark.sql import functions as F

    kept = runs.filter((F.col("source") == "runtime") & F.col("drained")).select(*RUN_KEYS)
    return events.filter(F.col("source") == "runtime").join(F.broadcast(kept), on=list(RUN_KEYS), how="left_semi")


def runs_in_more_than_one_file(events: DataFrame) -> list[tuple[dict, list[str]]]:
    """(run keys, file paths) of every run whose rows come from more than one file of ``events``
    (a frame read straight from Parquet, so that it has the ``_metadata`` column)."""
    from pyspark.sql import functions as F

    files = F.array_sort(F.collect_set(F.col("_metadata.file_path"))).alias("files")
    shared = events.groupBy(*RUN_KEYS).agg(files).where(F.size("files") > 1).collect()
    return [({key: row[key] for key in RUN_KEYS}, list(row["files"])) for row in shared]
