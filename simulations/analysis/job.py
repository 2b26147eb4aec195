"""``mafka4 analyze``: the PySpark job that turns event logs into result tables, plots and a report.

It reads every event-log file below a directory (the layout of ``simulations.schema``) and writes,
under the output directory (default ``DIR/analysis``), each table as ``.parquet`` and ``.csv``:

* ``latency_by_repetition``: one row per run (``simulations.analysis.runs.RUN_KEYS``: source, mode,
  consumers, topics, lanes, experiment_id, seed, repetition) with its rows, the integrity counts
  (acknowledged, never_acknowledged, deliveries_counted, undelivered, duplicates, drained), and
  per latency (``produce_latency_ms``, ``end_to_end_latency_ms``) its sample count
  ``{latency}_count``, exact ``{latency}_tp50/_tp99/_tp999`` and ``{latency}_tp999_beyond`` (samples
  above the tp999 rank);
* ``latency_by_config``: one row per configuration (source, mode, consumers, topics, lanes): ``runs``,
  ``repetitions`` (the drained runs used), ``runs_excluded`` (not drained); the integrity counts
  summed over all runs; per latency ``{latency}_count`` (summed over the repetitions used) and
  ``{latency}_count_min`` (the smallest repetition), ``{latency}_{tp}`` = the median over the
  repetitions of the per-repetition percentile with ``{latency}_{tp}_min`` / ``_max``,
  ``{latency}_tp999_beyond_min`` and ``few_tp999_samples`` (a repetition has fewer than
  ``runs.TAIL_SAMPLES_MIN`` samples above its tp999 rank); node, actor and partition counts;
  the seeds and experiment ids;
* ``mode_ratios``: one row per (source, consumers, topics, lanes) with both modes: Mafka3 / Mafka4 of
  each median percentile (``{latency}_{tp}_ratio``) and of the node, actor and partition counts,
  and for the runtime the bootstrap interval ``{latency}_{tp}_ratio_low`` / ``_high`` (tp99, tp999);
* ``ratio_intervals``: the bootstrap intervals in long form (``simulations.analysis.intervals``);
* ``scale_ratios``: within each runtime mode and lane count, the median tp99 and tp999 at the most
  consumers over those at the fewest, with their bootstrap interval (``simulations.analysis.scale_ratios``);
* ``stage_latency``: the per-stage latency breakdown of the runs without lanes (``simulations.analysis.stages``);
* ``omb/<mode>-c<consumers>.json`` (``-l<lanes>`` added for lane runs): OpenMessaging-Benchmark-shaped results
  (``simulations.analysis.omb``);
* PNG plots and ``report.md`` (``simulations.analysis.report``), and the ``_MAFKA4_ANALYSIS`` marker that
  keeps a later run from reading the result tables as event logs.

Percentiles are exact nearest-rank percentiles (``simulations.analysis.percentiles``), computed per run
over its non-null values, then summarised per configuration by the median over the runs (and
min, max). Runs that are not drained (``simulations.analysis.runs``) are left out of every latency
statistic. When ``sample_rate`` < 1 the percentiles are exact over the sampled rows, and
``messages_estimated`` sums ``1 / sample_rate``. Node counts are per-run constants; a
configuration reports the largest count of its runs with ``node_counts_vary`` set when its runs
disagree.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from mafka4.errors import MissingDependency, RunInTwoEventLogs
from simulations.analysis import consumer_scales, omb, report as report_module, scale_ratios
from simulations.analysis.intervals import INTERVAL_PERCENTILES, config_statistics, ratio_intervals
from simulations.analysis.percentiles import (PERCENTILES, at_rank, beyond_rank, median_min_max, rank_expression,
                                              sorted_values)
from simulations.analysis.runs import (CONFIG_KEYS, LATENCIES, RATIO_KEYS, RUN_KEYS, TAIL_SAMPLES_MIN, drained_column,
                                       drained_runtime_events, integrity_aggregates, runs_in_more_than_one_file)
from simulations.analysis.settings import AnalysisSettings
from simulations.analysis.stages import stage_latency
from simulations.extras import INSTALL_ANALYSIS
from simulations.schema import ANALYSIS_MARKER, EVENT_SCHEMA, added_since, check_event_file, event_log_files

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["AnalysisResult", "AnalysisSettings", "PERCENTILES", "analyze", "latency_by_config", "latency_by_repetition",
           "mode_ratios", "rank_expression", "read_event_frame", "spark_session"]

COUNT_COLUMNS = ("write_nodes", "read_nodes", "nodes", "actors", "physical_partitions", "virtual_partitions")
INTEGRITY_COLUMNS = ("acknowledged", "never_acknowledged", "deliveries_counted", "undelivered", "duplicates")
COUNT_RATIO_COLUMNS = ("nodes", "write_nodes", "actors", "physical_partitions")
# Table name -> the columns its rows are sorted by.
TABLE_KEYS = {
    "latency_by_repetition": RUN_KEYS,
    "latency_by_config": CONFIG_KEYS,
    "ratio_intervals": (*RATIO_KEYS, "latency", "percentile"),
    "mode_ratios": RATIO_KEYS,
    "scale_ratios": scale_ratios.TABLE_KEYS,
    "stage_latency": (*CONFIG_KEYS, "path", "position"),
}


@dataclass(frozen=True, slots=True)
class AnalysisResult:
    """Where one analysis run wrote its outputs."""

    out_dir: Path
    report_path: Path
    table_paths: dict[str, tuple[Path, Path]]  # table name -> (parquet, csv)
    plot_paths: dict[str, Path]  # plot name -> PNG that was written
    skipped_plots: dict[str, str]  # plot name -> why it was not drawn
    omb_paths: dict[str, Path]  # "<mode>-c<consumers>" (omb.document_name) -> OMB-shaped JSON result


def spark_session(settings: AnalysisSettings = AnalysisSettings()) -> SparkSession:
    """A Spark session on loopback only, without UI; the caller stops it."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise MissingDependency(f"`mafka4 analyze` needs pyspark (and Java 17): {INSTALL_ANALYSIS}") from None

    spark = (
        SparkSession.builder.master(settings.master)
        .appName("mafka4-analyze")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.memory", settings.driver_memory)
        .config("spark.sql.shuffle.partitions", str(settings.shuffle_partitions))
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel(settings.log_level)
    return spark


def spark_event_schema():
    """``EVENT_SCHEMA`` as a Spark ``StructType``."""
    from pyspark.sql import types as T

    spark_types = {pa.string(): T.StringType(), pa.int32(): T.IntegerType(), pa.int64(): T.LongType(),
                   pa.float64(): T.DoubleType()}
    return T.StructType([T.StructField(field.name, spark_types[field.type], True) for field in EVENT_SCHEMA])


def refuse_runs_in_two_files(events: DataFrame) -> None:
    """Raise RunInTwoEventLogs, naming the run and its files, if a run's rows are in two files."""
    shared = runs_in_more_than_one_file(events)
    if shared:
        keys, paths = shared[0]
        run = ", ".join(f"{key}={value}" for key, value in keys.items())
        raise RunInTwoEventLogs(f"{len(shared)} run(s) have rows in more than one event log, first {run}: "
                                f"{', '.join(paths)}; move all but one file of each run out of the directory analysed")


def read_event_frame(spark: SparkSession, files: list[Path]) -> DataFrame:
    """The event logs in ``files`` (see ``schema.event_log_files``), each file's schema checked first.

    A file of an older schema version still read (``schema.READABLE_SCHEMAS``) lacks the columns added
    since; Spark reads them as null, and they take the value such a file reads as (``lanes = 0``).
    """
    from pyspark.sql import functions as F

    versions = {check_event_file(file) for file in files}
    frame = spark.read.schema(spark_event_schema()).parquet(*[str(file) for file in files])
    for version in sorted(versions):
        for name, value in added_since(version).items():
            frame = frame.withColumn(name, F.coalesce(F.col(name), F.lit(value)))
    return frame


def latency_by_repetition(events: DataFrame) -> DataFrame:
    """One row per run: integrity counts, ``drained``, exact percentiles per latency (module doc)."""
    from pyspark.sql import functions as F

    aggregates = [
        F.count(F.lit(1)).alias("rows"),
        F.sum(1.0 / F.col("sample_rate")).alias("messages_estimated"),
        F.min("sample_rate").alias("sample_rate"),
        *integrity_aggregates(),
        *[F.max(column).alias(column) for column in COUNT_COLUMNS],
        *[sorted_values(latency).alias(f"{latency}_sorted") for latency in LATENCIES],
    ]
    runs = events.withColumn("nodes", F.col("write_nodes") + F.col("read_nodes")).groupBy(*RUN_KEYS).agg(*aggregates)
    columns = [*RUN_KEYS, "rows", "messages_estimated", "sample_rate", *INTEGRITY_COLUMNS,
               drained_column().alias("drained")]
    for latency in LATENCIES:
        columns.append(F.size(f"{latency}_sorted").alias(f"{latency}_count"))
        columns += [at_rank(f"{latency}_sorted", percent).alias(f"{latency}_{name}") for name, percent in PERCENTILES.items()]
        columns.append(beyond_rank(f"{latency}_sorted", PERCENTILES["tp999"]).alias(f"{latency}_tp999_beyond"))
    return runs.select(*columns, *COUNT_COLUMNS)


def latency_by_config(by_repetition: DataFrame) -> DataFrame:
    """One row per configuration from ``latency_by_repetition`` (module doc): medians over drained runs."""
    from pyspark.sql import functions as F

    every_run = by_repetition.groupBy(*CONFIG_KEYS).agg(
        F.count(F.lit(1)).alias("runs"),
        F.count(F.when(~F.col("drained"), 1)).alias("runs_excluded"),
        F.sum("rows").alias("rows"),
        F.sum("messages_estimated").alias("messages_estimated"),
        F.min("sample_rate").alias("sample_rate_min"),
        *[F.sum(column).alias(column) for column in INTEGRITY_COLUMNS],
        *[F.max(column).alias(column) for column in COUNT_COLUMNS],
        _any([F.max(column) != F.min(column) for column in COUNT_COLUMNS]).alias("node_counts_vary"),
        F.array_join(F.array_sort(F.collect_set("seed")).cast("array<string>"), ",").alias("seeds"),
        F.array_join(F.array_sort(F.collect_set("experiment_id")), ",").alias("experiment_ids"),
    )
    used = [F.count(F.lit(1)).alias("repetitions")]
    for latency in LATENCIES:
        used += [F.sum(f"{latency}_count").alias(f"{latency}_count"), F.min(f"{latency}_count").alias(f"{latency}_count_min")]
        for name in PERCENTILES:
            used += median_min_max(f"{latency}_{name}")
        used.append(F.min(f"{latency}_tp999_beyond").alias(f"{latency}_tp999_beyond_min"))
    drained = by_repetition.filter(F.col("drained")).groupBy(*CONFIG_KEYS).agg(*used)
    joined = every_run.join(drained, on=list(CONFIG_KEYS), how="left").fillna(0, subset=["repetitions"])
    few = _any([F.coalesce(F.col(f"{latency}_tp999_beyond_min"), F.lit(0)) < TAIL_SAMPLES_MIN for latency in LATENCIES])
    ordered = ["runs", "repetitions", "runs_excluded", "rows", "messages_estimated", "sample_rate_min", *INTEGRITY_COLUMNS]
    for latency in LATENCIES:
        ordered += [f"{latency}_count", f"{latency}_count_min"]
        ordered += [f"{latency}_{name}{suffix}" for name in PERCENTILES for suffix in ("", "_min", "_max")]
        ordered.append(f"{latency}_tp999_beyond_min")
    return joined.select(*CONFIG_KEYS, *ordered, few.alias("few_tp999_samples"), *COUNT_COLUMNS, "node_counts_vary",
                         "seeds", "experiment_ids")


def _any(conditions: list) -> Any:
    result = conditions[0]
    for condition in conditions[1:]:
        result = result | condition
    return result


def mode_ratios(latency_table: DataFrame, intervals: DataFrame | None = None) -> DataFrame:
    """Mafka3 / Mafka4 per (source, consumers, topics, lanes) present in both modes; null when Mafka4's is 0.

    The bootstrap bounds of the tp99 and tp999 ratios join from ``intervals`` (``ratio_intervals``)
    as ``{column}_ratio_low`` and ``_high``; null where no interval was computed (the fleet model).
    """
    from pyspark.sql import functions as F

    columns = [f"{latency}_{name}" for latency in LATENCIES for name in PERCENTILES] + list(COUNT_RATIO_COLUMNS)
    with_bounds = [f"{latency}_{name}" for latency in LATENCIES for name in INTERVAL_PERCENTILES]

    def side(mode: str) -> DataFrame:
        return latency_table.filter(F.col("mode") == mode).select(
            *RATIO_KEYS, *[F.col(column).alias(f"{column}_{mode}") for column in columns])

    table = side("mafka3").join(side("mafka4"), on=list(RATIO_KEYS), how="inner")
    for column in columns:
        table = table.withColumn(f"{column}_ratio", F.try_divide(F.col(f"{column}_mafka3").cast("double"),
                                                                 F.col(f"{column}_mafka4").cast("double")))
    if intervals is None:
        for column in with_bounds:
            table = table.withColumn(f"{column}_ratio_low", F.lit(None).cast("double"))
            table = table.withColumn(f"{column}_ratio_high", F.lit(None).cast("double"))
    else:
        bounds = intervals.groupBy(*RATIO_KEYS).agg(*[
            F.max(F.when((F.col("latency") == latency) & (F.col("percentile") == name), F.col(bound)))
            .alias(f"{latency}_{name}_{bound}")
            for latency in LATENCIES for name in INTERVAL_PERCENTILES for bound in ("ratio_low", "ratio_high")])
        table = table.join(bounds, on=list(RATIO_KEYS), how="left")
    order = list(RATIO_KEYS)
    for column in columns:
        order += [f"{column}_ratio"] + ([f"{column}_ratio_low", f"{column}_ratio_high"] if column in with_bounds else [])
    order += [f"{column}_{mode}" for column in columns for mode in ("mafka3", "mafka4")]
    return table.select(*order)


def run_facts(events: DataFrame) -> list[dict[str, Any]]:
    """One dict per distinct (experiment, source, mode, seed, commit, sample rate): for the report."""
    columns = ("experiment_id", "source", "mode", "seed", "git_commit", "sample_rate")
    facts = [row.asDict() for row in events.select(*columns).distinct().collect()]
    return sorted(facts, key=lambda fact: tuple(fact[column] for column in columns))


def write_table(table: pa.Table, out_dir: Path, name: str) -> tuple[Path, Path]:
    """``name.parquet`` and ``name.csv`` under ``out_dir``, each written to a temp file then renamed."""
    parquet_path, csv_path = out_dir / f"{name}.parquet", out_dir / f"{name}.csv"
    temp_parquet, temp_csv = out_dir / f".{name}.parquet.tmp", out_dir / f".{name}.csv.tmp"
    pq.write_table(table, temp_parquet)
    pacsv.write_csv(table, temp_csv)
    os.replace(temp_parquet, parquet_path)
    os.replace(temp_csv, csv_path)
    return parquet_path, csv_path


# Column types of ``scale_ratios`` (its rows are made in Python, and may be none).
SCALE_RATIO_TYPES = {"source": pa.string(), "mode": pa.string(), "topics": pa.int32(), "lanes": pa.int32(),
                     "latency": pa.string(),
                     "percentile": pa.string(), "consumers_low": pa.int32(), "consumers_high": pa.int32(),
                     "ratio": pa.float64(), "ratio_low": pa.float64(), "ratio_high": pa.float64(),
                     "median_at_low": pa.float64(), "median_at_high": pa.float64(), "replicates": pa.int32(),
                     "replicates_used": pa.int32(), "scans_full": pa.int64(), "block_ms": pa.float64(),
                     "bootstrap_seed": pa.int64()}


def scale_ratio_table(latency: pa.Table, per_config: pa.Table, settings: AnalysisSettings) -> pa.Table:
    """``scale_ratios`` (``simulations.analysis.scale_ratios``) from ``latency_by_config`` and the
    runtime's ``config_statistics``."""
    assert tuple(SCALE_RATIO_TYPES) == scale_ratios.COLUMNS
    rows = scale_ratios.scale_ratios(latency.to_pylist(), per_config.to_pylist(),
                                     replicates=settings.bootstrap_replicates, block_ms=settings.bootstrap_block_ms,
                                     seed=settings.bootstrap_seed)
    return pa.Table.from_pylist(rows, schema=pa.schema(list(SCALE_RATIO_TYPES.items())))


def compute_tables(session: SparkSession, files: list[Path], settings: AnalysisSettings) -> tuple[dict, list, list]:
    """Every result table (as Arrow), the run facts and the OMB documents, all from Spark."""
    events = read_event_frame(session, files)
    refuse_runs_in_two_files(events)
    by_repetition = latency_by_repetition(events).cache()
    latency = latency_by_config(by_repetition).cache()
    drained = drained_runtime_events(events, by_repetition)
    per_config = config_statistics(drained, settings.bootstrap_replicates, settings.bootstrap_block_ms,
                                   settings.bootstrap_seed)
    intervals = ratio_intervals(per_config, latency, settings.bootstrap_replicates, settings.bootstrap_block_ms,
                                settings.bootstrap_seed).cache()
    try:
        tables = {
            "latency_by_repetition": by_repetition.toArrow(),
            "latency_by_config": latency.toArrow(),
            "ratio_intervals": intervals.toArrow(),
            "mode_ratios": mode_ratios(latency, intervals).toArrow(),
            "stage_latency": stage_latency(drained, by_repetition).toArrow(),
        }
        tables["scale_ratios"] = scale_ratio_table(tables["latency_by_config"], per_config.toArrow(), settings)
        documents = omb.omb_results(drained, settings.omb_period_ms)
        facts = run_facts(events)
    finally:
        for frame in (intervals, per_config, latency, by_repetition):
            frame.unpersist()
    tables = {name: table.sort_by([(key, "ascending") for key in TABLE_KEYS[name]]) for name, table in tables.items()}
    return tables, facts, documents


def analyze(events_dir: str | os.PathLike[str], out_dir: str | os.PathLike[str] | None = None,
            settings: AnalysisSettings = AnalysisSettings(), spark: SparkSession | None = None) -> AnalysisResult:
    """Run the whole analysis; uses ``spark`` if given (and leaves it running), else its own session."""
    events_path = Path(events_dir)
    out = Path(out_dir) if out_dir is not None else events_path / "analysis"
    files = event_log_files(events_path)  # fails fast, before Spark starts, on a missing or empty dir
    own_session = spark is None
    session = spark_session(settings) if own_session else spark
    try:
        tables, facts, documents = compute_tables(session, files, settings)
    finally:
        if own_session:
            session.stop()
    tables["latency_by_config"] = consumer_scales.with_scales(tables["latency_by_config"], events_path)
    out.mkdir(parents=True, exist_ok=True)
    (out / ANALYSIS_MARKER).write_text("result tables of `mafka4 analyze`; not event logs\n")
    table_paths = {name: write_table(table, out, name) for name, table in tables.items()}
    experiment = omb.experiment_settings(events_path, (*omb.SETTINGS_KEYS, *report_module.SETUP_KEYS,
                                                       *report_module.LANE_SETTING_KEYS))
    omb_paths = omb.write_omb_results(documents, out / "omb", experiment)
    rendered = report_module.write_report(
        out_dir=out, events_dir=events_path, file_count=len(files), facts=facts,
        tables={name: table.to_pylist() for name, table in tables.items()}, table_paths=table_paths,
        omb_paths=omb_paths, settings=settings, experiment=experiment, profiles=omb.recorded_profiles(events_path))
    return AnalysisResult(out_dir=out, report_path=rendered.report_path, table_paths=table_paths,
                          plot_paths=rendered.plot_paths, skipped_plots=rendered.skipped_plots, omb_paths=omb_paths)
