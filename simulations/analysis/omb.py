"""OpenMessaging-Benchmark-shaped results of the runtime runs: ``omb/<mode>-c<NNN>.json``.

One JSON document per runtime configuration (mode, consumers; ``-t<NNN>`` is added to the name
when topics is not 1, and ``-l<NNN>`` for a lane run, with its lane count as ``mafka4Lanes``) with the keys of OMB's ``TestResult`` (``io.openmessaging.benchmark``), in
OMB's units: latencies in milliseconds, rates in messages per second per reporting period.
Written from the drained runs only (``simulations.analysis.runs``), *pooled* over the configuration's
repetitions:

* ``workload``: the experiment id(s); ``driver``: the mode ("mafka3" or "mafka4");
  ``messageSize``: ``message_bytes`` from the ``settings.json`` the scaling experiment writes
  beside its logs (null when absent or when the files disagree); ``topics``; ``partitions``: the
  physical partitions; ``producersPerTopic``: the ``producers`` of that ``settings.json`` if it
  records them, else 1 (the scaling experiment runs one producer); ``consumersPerTopic``:
  consumers / topics;
* ``publishRate`` / ``consumeRate`` (msgs/s) and ``backlog`` (messages sent and not yet
  consumed at the period's end), one value per full period of ``period_ms`` (OMB: 10 s) from the
  run's first send, counting messages by their ``produce_time_ms`` and their first
  ``consume_time_ms`` (duplicates are not counted again); each value is the mean over the
  repetitions, and only periods every repetition completed are listed (the run spans from its
  first send to its last send, acknowledgement or consumption);
* ``publishLatency{Avg,50pct,75pct,95pct,99pct,999pct,9999pct,99999pct,Max}`` and
  ``endToEndLatency...``: per period, over the messages of all repetitions acknowledged
  (consumed) in that period, as OMB records a latency when it is observed;
* ``aggregatedPublishLatency...`` and ``aggregatedEndToEndLatency...``: over every message of
  every repetition. Percentiles are exact nearest-rank (``simulations.analysis.percentiles``), where OMB
  reads them from an HdrHistogram (the same definition, to the histogram's precision).

Extra keys, prefixed ``mafka4``: the repetitions pooled, experiment ids, seeds, consumers, virtual
partitions, messages, the period and a sentence on the pooling. OMB's keys left out: the
publish-delay latencies and error rate (the experiment has no schedule to be late against), and
the quantile maps.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Sequence

from simulations.analysis.percentiles import at_rank, sorted_values
from simulations.analysis.runs import CONFIG_KEYS, RUN_KEYS
from simulations.schema import ANALYSIS_MARKER

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

# OMB key suffix -> percent.
OMB_PERCENTILES = {"50pct": "50", "75pct": "75", "95pct": "95", "99pct": "99", "999pct": "99.9", "9999pct": "99.99",
                   "99999pct": "99.999"}
# Latency column -> (OMB key stem, the time that places a message in a period).
OMB_LATENCIES = {"produce_latency_ms": ("publishLatency", "ack_time_ms"),
                 "end_to_end_latency_ms": ("endToEndLatency", "consume_time_ms")}
SETTINGS_FILE = "settings.json"  # written by the scaling experiment beside its event logs
SETTINGS_KEYS = ("message_bytes", "producers")  # what the OMB files take from it
PRODUCERS_PER_TOPIC_DEFAULT = 1
PROFILE_DEFAULT = "full"  # of a settings.json that records no profile
POOLING = ("pooled over the drained repetitions: rates and backlog are the mean over repetitions per period; "
           "latencies are over the messages of all repetitions")


def _latency_aggregates() -> list:
    from pyspark.sql import functions as F

    aggregates = []
    for latency in OMB_LATENCIES:
        aggregates += [sorted_values(latency).alias(f"{latency}_sorted"), F.avg(latency).alias(f"{latency}_avg")]
    return aggregates


def _latency_columns(stems: dict[str, str]) -> list:
    """OMB's Avg, percentiles and Max of each ``{column}_sorted`` / ``{column}_avg``, named ``stem + suffix``."""
    from pyspark.sql import functions as F

    columns = []
    for column, stem in stems.items():
        sorted_column = f"{column}_sorted"
        columns.append(F.col(f"{column}_avg").alias(f"{stem}Avg"))
        columns += [at_rank(sorted_column, percent).alias(f"{stem}{suffix}") for suffix, percent in OMB_PERCENTILES.items()]
        columns.append(F.expr(f"if(size({sorted_column}) = 0, null, element_at({sorted_column}, -1))").alias(f"{stem}Max"))
    return columns


def _with_periods(events: DataFrame, period_ms: float) -> tuple[DataFrame, DataFrame]:
    """Rows with their run's start, and per configuration the full periods every run completed."""
    from pyspark.sql import functions as F

    spans = events.groupBy(*RUN_KEYS).agg(
        F.min("produce_time_ms").alias("run_start_ms"),
        F.greatest(F.max("produce_time_ms"), F.max("ack_time_ms"), F.max("consume_time_ms")).alias("run_end_ms"))
    periods = spans.groupBy(*CONFIG_KEYS).agg(
        F.min(F.floor((F.col("run_end_ms") - F.col("run_start_ms")) / F.lit(period_ms))).cast("int").alias("periods"))
    rows = events.join(F.broadcast(spans.select(*RUN_KEYS, "run_start_ms")), on=list(RUN_KEYS))
    return rows, periods


def _period(time_column: str, period_ms: float):
    from pyspark.sql import functions as F

    return F.floor((F.col(time_column) - F.col("run_start_ms")) / F.lit(period_ms)).cast("int")


def omb_results(events: DataFrame, period_ms: float) -> list[dict[str, Any]]:
    """One OMB-shaped document per configuration of ``events`` (drained runtime rows); see the module doc.

    ``messageSize`` and ``producersPerTopic`` are filled in by ``write_omb_results``.
    """
    from pyspark.sql import functions as F

    assert period_ms > 0, period_ms
    rows, periods = _with_periods(events, period_ms)
    aggregated = events.groupBy(*CONFIG_KEYS).agg(
        F.count(F.lit(1)).alias("messages"),
        F.countDistinct("experiment_id", "seed", "repetition").alias("repetitions"),
        F.array_sort(F.collect_set("experiment_id")).alias("experiment_ids"),
        F.array_sort(F.collect_set("seed")).alias("seeds"),
        F.max("physical_partitions").alias("physical_partitions"),
        F.max("virtual_partitions").alias("virtual_partitions"),
        *_latency_aggregates())
    stems = {latency: f"aggregated{stem[0].upper()}{stem[1:]}" for latency, (stem, _) in OMB_LATENCIES.items()}
    documents = {tuple(row[key] for key in CONFIG_KEYS): row.asDict() for row in aggregated.select(
        *CONFIG_KEYS, "messages", "repetitions", "experiment_ids", "seeds", "physical_partitions", "virtual_partitions",
        *_latency_columns(stems)).collect()}
    limits = {tuple(row[key] for key in CONFIG_KEYS): row["periods"] for row in periods.collect()}
    counts = _period_counts(rows, period_ms)
    per_period = _period_latencies(rows, periods, period_ms)
    return [_document(key, values, limits[key], counts.get(key, {}), per_period.get(key, {}), period_ms)
            for key, values in sorted(documents.items())]


def _period_counts(rows: DataFrame, period_ms: float) -> dict[tuple, dict[tuple, dict[int, tuple[int, int]]]]:
    """config -> run -> period -> (messages sent, messages first consumed) in that period."""
    from pyspark.sql import functions as F

    events = rows.select(*RUN_KEYS, F.explode(F.array(
        F.struct(F.lit("sent").alias("kind"), _period("produce_time_ms", period_ms).alias("period")),
        F.struct(F.lit("consumed").alias("kind"), _period("consume_time_ms", period_ms).alias("period")))).alias("event"))
    grouped = (events.filter(F.col("event.period").isNotNull())
               .groupBy(*RUN_KEYS, "event.period").pivot("event.kind", ["sent", "consumed"]).count()
               .fillna(0, subset=["sent", "consumed"]))
    counts: dict[tuple, dict[tuple, dict[int, tuple[int, int]]]] = {}
    for row in grouped.collect():
        config = tuple(row[key] for key in CONFIG_KEYS)
        run = tuple(row[key] for key in RUN_KEYS)
        counts.setdefault(config, {}).setdefault(run, {})[row["period"]] = (row["sent"], row["consumed"])
    return counts


def _period_latencies(rows: DataFrame, periods: DataFrame, period_ms: float) -> dict[tuple, dict[str, dict[int, Any]]]:
    """config -> OMB per-period key -> period -> value, for the periods every run completed."""
    from pyspark.sql import functions as F

    placed = rows.select(*CONFIG_KEYS, F.explode(F.array(*[
        F.struct(F.lit(stem).alias("stem"), _period(time_column, period_ms).alias("period"), F.col(latency).alias("value"))
        for latency, (stem, time_column) in OMB_LATENCIES.items()])).alias("latency"))
    placed = (placed.select(*CONFIG_KEYS, "latency.*").filter(F.col("value").isNotNull())
              .join(F.broadcast(periods), on=list(CONFIG_KEYS)).filter(F.col("period") < F.col("periods")))
    grouped = placed.groupBy(*CONFIG_KEYS, "stem", "period").agg(sorted_values("value").alias("value_sorted"),
                                                                 F.avg("value").alias("value_avg"))
    found: dict[tuple, dict[str, dict[int, Any]]] = {}
    for row in grouped.select(*CONFIG_KEYS, "stem", "period", *_latency_columns({"value": ""})).collect():
        values = row.asDict()
        config = tuple(values.pop(key) for key in CONFIG_KEYS)
        stem, period = values.pop("stem"), values.pop("period")
        for suffix, value in values.items():
            found.setdefault(config, {}).setdefault(f"{stem}{suffix}", {})[period] = value
    return found


def _document(config: tuple, values: dict[str, Any], periods: int, counts: dict[tuple, dict[int, tuple[int, int]]],
              per_period: dict[str, dict[int, Any]], period_ms: float) -> dict[str, Any]:
    source, mode, consumers, topics, lanes = config
    runs = list(counts.values())
    seconds = period_ms / 1000.0
    publish_rate, consume_rate, backlog = [], [], []
    for period in range(periods):
        sent = [sum(run.get(k, (0, 0))[0] for k in range(period + 1)) for run in runs]
        consumed = [sum(run.get(k, (0, 0))[1] for k in range(period + 1)) for run in runs]
        publish_rate.append(sum(run.get(period, (0, 0))[0] for run in runs) / len(runs) / seconds)
        consume_rate.append(sum(run.get(period, (0, 0))[1] for run in runs) / len(runs) / seconds)
        backlog.append(round(sum(s - c for s, c in zip(sent, consumed)) / len(runs)))
    document: dict[str, Any] = {
        "workload": "+".join(values["experiment_ids"]), "driver": mode, "messageSize": None, "topics": topics,
        "partitions": values["physical_partitions"], "producersPerTopic": PRODUCERS_PER_TOPIC_DEFAULT,
        "consumersPerTopic": consumers // topics,
        "publishRate": publish_rate, "consumeRate": consume_rate, "backlog": backlog,
    }
    for latency, (stem, _) in OMB_LATENCIES.items():
        for suffix in ("Avg", *OMB_PERCENTILES, "Max"):
            by_period = per_period.get(f"{stem}{suffix}", {})
            document[f"{stem}{suffix}"] = [by_period.get(period) for period in range(periods)]
        aggregated = f"aggregated{stem[0].upper()}{stem[1:]}"
        for suffix in ("Avg", *OMB_PERCENTILES, "Max"):
            document[f"{aggregated}{suffix}"] = values[f"{aggregated}{suffix}"]
    document.update({
        "mafka4Source": source, "mafka4Consumers": consumers, "mafka4Repetitions": values["repetitions"],
        "mafka4ExperimentIds": values["experiment_ids"], "mafka4Seeds": values["seeds"],
        "mafka4VirtualPartitions": values["virtual_partitions"], "mafka4Messages": values["messages"],
        "mafka4PeriodMs": period_ms, "mafka4Pooling": POOLING,
    })
    if lanes:  # a document of a run without lanes stays what it was before lanes existed
        document["mafka4Lanes"] = lanes
    return document


def document_name(document: dict[str, Any]) -> str:
    """``<mode>-c<NNN>`` (``-t<NNN>`` added when topics is not 1, ``-l<NNN>`` for a lane run)."""
    name = f"{document['driver']}-c{document['mafka4Consumers']:03d}"
    if document["topics"] != 1:
        name = f"{name}-t{document['topics']:03d}"
    lanes = document.get("mafka4Lanes", 0)
    return name if not lanes else f"{name}-l{lanes:03d}"


def _settings_documents(events_dir: Path) -> Iterator[dict[str, Any]]:
    """Every readable ``settings.json`` below ``events_dir``, outside the analysis's own output."""
    for path in sorted(events_dir.rglob(SETTINGS_FILE)):
        if any((directory / ANALYSIS_MARKER).exists() for directory in path.parents):
            continue
        try:
            document = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(document, dict):
            yield document


def experiment_settings(events_dir: Path, keys: Sequence[str] = SETTINGS_KEYS) -> dict[str, Any]:
    """The ``keys`` (integers, flags, words such as ``run_order``, lists such as ``lanes`` or objects such as
    ``client_layout``; default those the OMB files need) agreed on by every ``settings.json`` below ``events_dir``.

    A key the files disagree on, or that none records, is left out.
    """
    found: dict[str, set[str]] = {}  # key -> each value recorded, as canonical JSON (an object is not hashable)
    for document in _settings_documents(events_dir):
        for key in keys:
            if isinstance(document.get(key), (int, str, list, dict)):
                found.setdefault(key, set()).add(json.dumps(document[key], sort_keys=True))
    return {key: json.loads(next(iter(values))) for key, values in found.items() if len(values) == 1}


def recorded_profiles(events_dir: Path) -> frozenset[str]:
    """The profiles (``full``, ``quick``) of the runs below ``events_dir``; a ``settings.json`` written
    before profiles existed is of a full run."""
    return frozenset(str(document.get("profile", PROFILE_DEFAULT)) for document in _settings_documents(events_dir))


def write_omb_results(documents: Sequence[dict[str, Any]], directory: Path, settings: dict[str, Any]) -> dict[str, Path]:
    """Write each document to ``directory/<name>.json`` (temp file, then rename); name -> path.

    ``settings`` (``experiment_settings``) fills ``messageSize`` and ``producersPerTopic``. Files of
    an earlier run that this one did not write are removed, so the directory matches the tables.
    """
    directory.mkdir(parents=True, exist_ok=True)
    written = {}
    for document in documents:
        document = {**document, "messageSize": settings.get("message_bytes"),
                    "producersPerTopic": settings.get("producers", PRODUCERS_PER_TOPIC_DEFAULT)}
        name = document_name(document)
        path, temp = directory / f"{name}.json", directory / f".{name}.json.tmp"
        temp.write_text(json.dumps(document, indent=2, allow_nan=False) + "\n")
        os.replace(temp, path)
        written[name] = path
    for stale in directory.glob("*.json"):
        if stale.stem not in written:
            stale.unlink()
    return written

