"""``mafka4 analyze``: the PySpark job that turns event logs into result tables, plots and a report.

It reads every event-log file below a directory (the layout of ``simulations.schema``) and writes,
under the output directory (default ``DIR/analysis``):

* ``latency_by_config.parquet`` / ``.csv``: one row per (source, mode, consumers, topics) with
  the row counts, tp50/tp99/tp999 of ``produce_latency_ms`` and ``end_to_end_latency_ms``, the
  node, actor and partition counts, and the seeds and experiment ids pooled in the row;
* ``mode_ratios.parquet`` / ``.csv``: one row per (source, consumers, topics) that has both modes,
  with Mafka3 / Mafka4 ratios of the tp999 latencies and of the node, actor and partition counts;
* PNG plots and ``report.md`` (``simulations.report``), and the ``_MAFKA4_ANALYSIS`` marker that
  keeps a later run from reading the result tables as event logs.

Percentiles are exact, by nearest rank, the definition of ``mafka4.bench.stats``: with the ``n``
non-null values of a group sorted ascending, tpXX is the value at 1-based rank ``ceil(XX/100 * n)``
(numpy: ``np.percentile(values, XX, method="inverted_cdf")``). The rank is computed in integer
arithmetic (``(k * n + d - 1) div d`` for ``XX/100 = k/d``) because in floating point
``0.999 * 1000`` is not 999. Rows stand for messages; when ``sample_rate`` < 1 the percentiles are
exact over the sampled rows, and ``messages_estimated`` sums ``1 / sample_rate``.

Node counts are per-run constants; a group pools runs (seeds), and reports the largest count of
its runs with ``node_counts_vary`` set when its runs disagree.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from mafka4.errors import MissingDependency
from simulations import report as report_module
from simulations.analysis_settings import AnalysisSettings
from simulations.extras import INSTALL_ANALYSIS
from simulations.schema import ANALYSIS_MARKER, EVENT_SCHEMA, check_event_file, event_log_files

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

GROUP_KEYS = ("source", "mode", "consumers", "topics")
RATIO_KEYS = ("source", "consumers", "topics")
LATENCIES = ("produce_latency_ms", "end_to_end_latency_ms")
# Percentile name -> percent, as strings so the rank fraction is exact (mafka4.bench.stats does the same).
PERCENTILES = {"tp50": "50", "tp99": "99", "tp999": "99.9"}
COUNT_COLUMNS = ("write_nodes", "read_nodes", "nodes", "actors", "physical_partitions", "virtual_partitions")
RATIO_COLUMNS = ("produce_latency_ms_tp999", "end_to_end_latency_ms_tp999", "nodes", "write_nodes", "actors",
                 "physical_partitions")
TABLE_NAMES = ("latency_by_config", "mode_ratios")


@dataclass(frozen=True, slots=True)
class AnalysisResult:
    """Where one analysis run wrote its outputs."""

    out_dir: Path
    report_path: Path
    table_paths: dict[str, tuple[Path, Path]]  # table name -> (parquet, csv)
    plot_paths: dict[str, Path]  # plot name -> PNG that was written
    skipped_plots: dict[str, str]  # plot name -> why it was not drawn


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


def read_event_frame(spark: SparkSession, files: list[Path]) -> DataFrame:
    """The event logs in ``files`` (see ``schema.event_log_files``), each file's schema checked first."""
    for file in files:
        check_event_file(file)
    return spark.read.schema(spark_event_schema()).parquet(*[str(file) for file in files])


def rank_expression(percent: str, count_column: str):
    """1-based nearest rank ``ceil(percent / 100 * n)`` as an exact integer Spark expression."""
    from pyspark.sql import functions as F

    fraction = Fraction(percent) / 100
    assert 0 < fraction <= 1, percent
    numerator, denominator = fraction.numerator, fraction.denominator
    return F.expr(f"({numerator} * {count_column} + {denominator - 1}) div {denominator}")


def latency_by_config(events: DataFrame) -> DataFrame:
    """Exact percentiles, counts and node counts per (source, mode, consumers, topics)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    group = Window.partitionBy(*GROUP_KEYS)
    ranked = events.withColumn("nodes", F.col("write_nodes") + F.col("read_nodes"))
    for latency in LATENCIES:
        # Nulls sort last, so ranks 1..n are exactly the n non-null values in ascending order.
        ranked = ranked.withColumn(f"{latency}_rank", F.row_number().over(group.orderBy(F.col(latency).asc_nulls_last())))
        ranked = ranked.withColumn(f"{latency}_count", F.count(latency).over(group))
    aggregates = [
        F.countDistinct("experiment_id").alias("runs"),
        F.count(F.lit(1)).alias("rows"),
        F.sum(1.0 / F.col("sample_rate")).alias("messages_estimated"),
        F.min("sample_rate").alias("sample_rate_min"),
    ]
    for latency in LATENCIES:
        aggregates.append(F.first(f"{latency}_count").alias(f"{latency}_count"))
        for name, percent in PERCENTILES.items():
            at_rank = F.col(f"{latency}_rank") == rank_expression(percent, f"{latency}_count")
            aggregates.append(F.max(F.when(at_rank, F.col(latency))).alias(f"{latency}_{name}"))
    aggregates += [F.max(column).alias(column) for column in COUNT_COLUMNS]
    vary = [F.max(column) != F.min(column) for column in COUNT_COLUMNS]
    aggregates.append(_any(vary).alias("node_counts_vary"))
    aggregates.append(F.array_join(F.array_sort(F.collect_set("seed")).cast("array<string>"), ",").alias("seeds"))
    aggregates.append(F.array_join(F.array_sort(F.collect_set("experiment_id")), ",").alias("experiment_ids"))
    return ranked.groupBy(*GROUP_KEYS).agg(*aggregates).orderBy(*GROUP_KEYS)


def _any(conditions: list) -> Any:
    result = conditions[0]
    for condition in conditions[1:]:
        result = result | condition
    return result


def mode_ratios(latency_table: DataFrame) -> DataFrame:
    """Mafka3 / Mafka4 per (source, consumers, topics) present in both modes; null when Mafka4's is 0."""
    from pyspark.sql import functions as F

    def side(mode: str) -> DataFrame:
        return latency_table.filter(F.col("mode") == mode).select(
            *RATIO_KEYS, *[F.col(column).alias(f"{column}_{mode}") for column in RATIO_COLUMNS])

    joined = side("mafka3").join(side("mafka4"), on=list(RATIO_KEYS), how="inner")
    ratios = [F.try_divide(F.col(f"{column}_mafka3").cast("double"), F.col(f"{column}_mafka4").cast("double"))
              .alias(f"{column}_ratio") for column in RATIO_COLUMNS]
    return joined.select(*RATIO_KEYS, *ratios, *[c for c in joined.columns if c not in RATIO_KEYS]).orderBy(*RATIO_KEYS)


def run_facts(events: DataFrame) -> list[dict[str, Any]]:
    """One dict per distinct (experiment, source, mode, seed, commit, sample rate): for the report."""
    columns = ("experiment_id", "source", "mode", "seed", "git_commit", "sample_rate")
    return [row.asDict() for row in events.select(*columns).distinct().orderBy(*columns).collect()]


def write_table(table: pa.Table, out_dir: Path, name: str) -> tuple[Path, Path]:
    """``name.parquet`` and ``name.csv`` under ``out_dir``, each written to a temp file then renamed."""
    parquet_path, csv_path = out_dir / f"{name}.parquet", out_dir / f"{name}.csv"
    temp_parquet, temp_csv = out_dir / f".{name}.parquet.tmp", out_dir / f".{name}.csv.tmp"
    pq.write_table(table, temp_parquet)
    pacsv.write_csv(table, temp_csv)
    os.replace(temp_parquet, parquet_path)
    os.replace(temp_csv, csv_path)
    return parquet_path, csv_path


def analyze(events_dir: str | os.PathLike[str], out_dir: str | os.PathLike[str] | None = None,
            settings: AnalysisSettings = AnalysisSettings(), spark: SparkSession | None = None) -> AnalysisResult:
    """Run the whole analysis; uses ``spark`` if given (and leaves it running), else its own session."""
    events_path = Path(events_dir)
    out = Path(out_dir) if out_dir is not None else events_path / "analysis"
    files = event_log_files(events_path)  # fails fast, before Spark starts, on a missing or empty dir
    own_session = spark is None
    session = spark_session(settings) if own_session else spark
    try:
        events = read_event_frame(session, files)
        latency = latency_by_config(events).cache()
        tables = {"latency_by_config": latency.toArrow(), "mode_ratios": mode_ratios(latency).toArrow()}
        facts = run_facts(events)
        latency.unpersist()
    finally:
        if own_session:
            session.stop()
    out.mkdir(parents=True, exist_ok=True)
    (out / ANALYSIS_MARKER).write_text("result tables of `mafka4 analyze`; not event logs\n")
    table_paths = {name: write_table(table, out, name) for name, table in tables.items()}
    rendered = report_module.write_report(
        out_dir=out, events_dir=events_path, file_count=len(files), facts=facts,
        latency_rows=tables["latency_by_config"].to_pylist(), ratio_rows=tables["mode_ratios"].to_pylist(),
        table_paths=table_paths, percentiles=PERCENTILES)
    return AnalysisResult(out_dir=out, report_path=rendered.report_path, table_paths=table_paths,
                          plot_paths=rendered.plot_paths, skipped_plots=rendered.skipped_plots)
