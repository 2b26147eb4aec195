"""Bootstrap 95 % intervals of the runtime's Mafka3 / Mafka4 latency ratios, computed in Spark.

The per-configuration replicate statistics (``config_statistics``) also give the intervals of the
within-mode scaling ratios (``simulations.analysis.scale_ratios``), by the same method.

**What is resampled.** The messages of one run are autocorrelated: a pause (a GC, a slow
append, a rebalance) delays a whole burst. Resampling single messages would treat a burst as
many independent samples and give intervals that are too narrow, so this is a Poisson *block*
bootstrap: each run's messages are cut into blocks of ``block_ms`` of ``produce_time_ms`` (block
``floor((produce_time_ms - first produce_time_ms of the run) / block_ms)``), and replicate ``b``
gives every (run, block) an integer weight drawn from Poisson(1); a message weighs what its block
weighs. The draw is the Poisson inverse CDF of a uniform made from a hash of (bootstrap seed,
run, block, replicate) (``uniform_sql``), so it is the same for a given seed however Spark
partitions the work, and independent between runs, blocks and replicates. The weight is
capped at ``POISSON_WEIGHT_MAX`` (the uniform's 53 bits cannot resolve a larger draw anyway).

**The statistic.** Per run, latency and percentile q, the weighted nearest-rank percentile: the
smallest value whose cumulative weight, values ascending, reaches ``ceil(q * W)`` with ``W`` the
run's total weight (q an exact fraction, as in ``simulations.analysis.percentiles``; null when ``W`` is
0). With all weights 1 it is the run's ordinary percentile. Per configuration and replicate,
the statistic is the median over the configuration's runs (as the point estimate is); the
replicate ratio is Mafka3's statistic / Mafka4's at the same (consumers, topics, lanes); the interval
is the 2.5th and 97.5th *nearest-rank* percentiles of the replicate ratios (numpy:
``np.percentile(ratios, [2.5, 97.5], method="inverted_cdf")``), null ratios (a Mafka4 statistic
of 0) left out. Only drained runtime runs take part (``simulations.analysis.runs``); only tp99 and tp999
are bootstrapped (``INTERVAL_PERCENTILES``): see below why tp50 is not.

**How it stays cheap, exactly.** Scanning a run's values from the largest down, the weighted
percentile is the first value at which the weight scanned exceeds ``W - ceil(q * W)`` (the
weight that may lie above it); ``W`` itself comes from the per-block counts. For tp99 and tp999
that is near the top, so the scan first covers only the top ``1.25 * (1 - q) * n`` values of
the run, and only when those carry too little weight (their blocks drew small weights) the
top 3, 10 and 40 times ``(1 - q) * n``, then all ``n`` (``TAIL_MULTIPLES``). So the restriction
never changes a result, only the cost: the weight above the percentile is about
``(1 - q) * W``, which the first level's rows carry when their blocks drew about average
weights; a tail packed into a few blocks (a pause) that drew small weights needs a deeper
level, each about three times the rows of the one before (the whole run last), so a replicate
scans a few times the rows its answer needs, rarely more. The statistics that needed every row are counted
(``scans_full``). tp50 would need half of every run per replicate, about 40 times the rows of
the tp99 and tp999 first levels together, so it is not bootstrapped.

The scans run as Spark SQL higher-order functions over one array per run (values descending,
with their block), one ``aggregate`` per replicate: per run the work is ``replicates x kept
rows``, with no shuffle of replicated rows.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import TYPE_CHECKING, Sequence

from simulations.analysis.percentiles import at_rank, rank_fraction, rank_sql
from simulations.analysis.runs import CONFIG_KEYS, LATENCIES, RATIO_KEYS, RUN_KEYS

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

INTERVAL_PERCENTILES = {"tp99": "99", "tp999": "99.9"}
# The interval's bounds, as nearest-rank percentiles of the replicate ratios.
INTERVAL_BOUNDS = ("2.5", "97.5")
# Rows scanned per level, in multiples of the run's expected rows above the percentile: a ladder,
# so that a replicate costs at most a few times the rows its answer needs (see the module doc).
TAIL_MULTIPLES = (Fraction(5, 4), Fraction(3), Fraction(10), Fraction(40))
# P(Poisson(1) > 17) is about 6e-17, below the resolution of a 53-bit uniform (1.1e-16).
POISSON_WEIGHT_MAX = 18
UNIFORM_BITS = 53


def poisson_cdf() -> list[float]:
    """``P(X <= k)`` for X ~ Poisson(1), k = 0 .. ``POISSON_WEIGHT_MAX - 1``."""
    terms = [math.exp(-1.0) / math.factorial(k) for k in range(POISSON_WEIGHT_MAX)]
    return [math.fsum(terms[:k + 1]) for k in range(POISSON_WEIGHT_MAX)]


def poisson_weight_sql(uniform: str) -> str:
    """SQL of the Poisson(1) draw for the uniform ``uniform`` in [0, 1): the inverse CDF."""
    cases = " ".join(f"WHEN {uniform} < {threshold!r}D THEN {k}" for k, threshold in enumerate(poisson_cdf()))
    return f"(CASE {cases} ELSE {POISSON_WEIGHT_MAX} END)"


def uniform_sql(seed: int, *parts: str) -> str:
    """SQL of a uniform in [0, 1) from the top 53 bits of a hash of the seed and ``parts``."""
    return (f"(shiftrightunsigned(xxhash64({int(seed)}L, {', '.join(parts)}), {64 - UNIFORM_BITS}) "
            f"/ {float(2 ** UNIFORM_BITS)!r}D)")


def threshold_sql(total: str, percent: str) -> str:
    """SQL of the weight that may lie above the weighted percentile: ``W - ceil(q * W)``."""
    return f"({total} - {rank_sql(percent, total)})"


def kept_rows_sql(count: str, percent: str, multiple: Fraction) -> str:
    """SQL of ``min(n, ceil(multiple * (1 - q) * n))``: the rows a scan level covers."""
    numerator, denominator = rank_fraction(percent)
    share = Fraction(multiple) * Fraction(denominator - numerator, denominator)
    assert share > 0, (percent, multiple)
    return (f"cast(least({count}, ({share.numerator} * cast({count} as bigint) + {share.denominator - 1}) "
            f"div {share.denominator}) as int)")


def weighted_percentile_sql(prefixes: Sequence[str], weights: str, threshold: str) -> str:
    """SQL of the weighted nearest-rank percentile as ``struct(value, level)``, null if no weight.

    ``prefixes``: SQL of arrays of ``struct(value, block)`` sorted by value descending, each a
    prefix of the next, the last the whole run; ``weights``: SQL of the weight array indexed by
    block (0-based ``block``); ``threshold``: ``threshold_sql`` of the run's total weight.
    ``level`` is the 1-based index of the prefix that held the answer.
    """
    scans = []
    for level, prefix in enumerate(prefixes, start=1):
        weight_after = f"acc.weight + element_at({weights}, x.block + 1)"
        scans.append(
            f"aggregate({prefix}, named_struct('weight', 0L, 'value', cast(null as double)), "
            f"(acc, x) -> if(acc.value is not null, acc, if({weight_after} > {threshold}, "
            f"named_struct('weight', acc.weight, 'value', x.value), "
            f"named_struct('weight', {weight_after}, 'value', cast(null as double)))), "
            f"acc -> if(acc.value is null, null, named_struct('value', acc.value, 'level', {level})))")
    return f"coalesce({', '.join(scans)})"


def run_arrays(events: DataFrame, block_ms: float) -> DataFrame:
    """Per run: ``blocks``, and per latency its (value, block) array descending and block counts.

    ``{latency}_desc``: array of ``struct(value, block)``; ``{latency}_block_counts``: how many of
    the run's non-null values of that latency each block ``0 .. blocks - 1`` holds.
    """
    from pyspark.sql import functions as F

    assert block_ms > 0, block_ms
    starts = events.groupBy(*RUN_KEYS).agg(F.min("produce_time_ms").alias("run_start_ms"))
    blocked = events.join(F.broadcast(starts), on=list(RUN_KEYS)).withColumn(
        "block", F.floor((F.col("produce_time_ms") - F.col("run_start_ms")) / F.lit(float(block_ms))).cast("int"))
    counts = blocked.groupBy(*RUN_KEYS, "block").agg(*[F.count(latency).alias(latency) for latency in LATENCIES])
    per_run = counts.groupBy(*RUN_KEYS).agg(
        (F.max("block") + 1).alias("blocks"),
        *[F.map_from_entries(F.collect_list(F.struct("block", latency))).alias(f"{latency}_count_map")
          for latency in LATENCIES])
    for latency in LATENCIES:
        per_run = per_run.withColumn(f"{latency}_block_counts", F.expr(
            f"transform(sequence(0, blocks - 1), b -> coalesce(element_at({latency}_count_map, b), 0L))"))
    arrays = blocked.groupBy(*RUN_KEYS).agg(*[
        F.sort_array(F.collect_list(F.when(F.col(latency).isNotNull(),
                                           F.struct(F.col(latency).alias("value"), F.col("block")))), asc=False)
        .alias(f"{latency}_desc") for latency in LATENCIES])
    return per_run.select(*RUN_KEYS, "blocks", *[f"{latency}_block_counts" for latency in LATENCIES]).join(
        arrays, on=list(RUN_KEYS))


def with_block_weights(runs: DataFrame, replicates: int, seed: int) -> DataFrame:
    """``runs`` with ``weights``: per replicate ``r`` (0-based), the Poisson(1) weight of each block."""
    from pyspark.sql import functions as F

    assert replicates >= 1, replicates
    parts = ("experiment_id", "mode", "consumers", "topics", "seed", "repetition", "b", "r")
    # A run without lanes draws what it drew before lanes existed; a lane run hashes its lane count too, so
    # that runs of two lane counts that share every other key draw independent weights.
    uniform = f"if(lanes = 0, {uniform_sql(seed, *parts)}, {uniform_sql(seed, *parts, 'lanes')})"
    # The uniform is drawn once per block and replicate, then mapped through the inverse CDF.
    return runs.withColumn("weights", F.expr(
        f"transform(sequence(0, {replicates - 1}), r -> transform(transform(sequence(0, blocks - 1), b -> "
        f"{uniform}), u -> {poisson_weight_sql('u')}))"))


def replicate_statistics(runs: DataFrame, replicates: int, seed: int,
                         tail_multiples: Sequence[Fraction] = TAIL_MULTIPLES) -> DataFrame:
    """Per run, latency, percentile and replicate: the weighted percentile (``value``) and ``level``.

    ``runs`` is ``run_arrays``. Rows: ``RUN_KEYS``, latency, percentile (name), replicate
    (0-based), value (null when the run's weight is 0), level (1 .. len(tail_multiples) + 1).
    """
    from pyspark.sql import functions as F

    frame = with_block_weights(runs, replicates, seed)
    statistics = []
    for latency in LATENCIES:
        frame = frame.withColumn(f"{latency}_totals", F.expr(
            f"transform(weights, ws -> aggregate(zip_with(ws, {latency}_block_counts, (w, c) -> w * c), 0L, "
            "(s, x) -> s + x))"))
        for name, percent in INTERVAL_PERCENTILES.items():
            prefixes = []
            for level, multiple in enumerate(tail_multiples, start=1):
                column = f"{latency}_{name}_level{level}"
                frame = frame.withColumn(column, F.expr(
                    f"slice({latency}_desc, 1, {kept_rows_sql(f'size({latency}_desc)', percent, multiple)})"))
                prefixes.append(column)
            prefixes.append(f"{latency}_desc")
            statistic = f"{latency}_{name}"
            frame = frame.withColumn(statistic, F.expr(
                f"zip_with(weights, transform({latency}_totals, total -> {threshold_sql('total', percent)}), "
                f"(ws, threshold) -> {weighted_percentile_sql(prefixes, 'ws', 'threshold')})"))
            statistics.append((latency, name, statistic))
    zipped = frame.select(*RUN_KEYS, F.posexplode(F.arrays_zip(*[column for _, _, column in statistics]))
                          .alias("replicate", "statistics"))
    stacked = ", ".join(f"'{latency}', '{name}', statistics.`{column}`.value, statistics.`{column}`.level"
                        for latency, name, column in statistics)
    return zipped.select(*RUN_KEYS, "replicate", F.expr(
        f"stack({len(statistics)}, {stacked}) as (latency, percentile, value, level)"))


def ratio_interval(frame: DataFrame, keys: Sequence[str], column: str = "ratio") -> DataFrame:
    """Per ``keys``: ``ratio_low`` and ``ratio_high``, the nearest-rank ``INTERVAL_BOUNDS`` of the
    non-null values of ``column``, and ``replicates_used`` (their count)."""
    from pyspark.sql import functions as F

    low, high = INTERVAL_BOUNDS
    grouped = frame.groupBy(*keys).agg(F.array_sort(F.collect_list(column)).alias("sorted_ratios"))
    return grouped.select(*keys, at_rank("sorted_ratios", low).alias("ratio_low"),
                          at_rank("sorted_ratios", high).alias("ratio_high"),
                          F.size("sorted_ratios").alias("replicates_used"))


def config_statistics(events: DataFrame, replicates: int, block_ms: float, seed: int) -> DataFrame:
    """Per configuration, latency, percentile and replicate: the replicate's ``statistic``.

    ``events``: the drained runtime runs' rows. ``statistic`` is the median over the
    configuration's runs of their weighted percentiles (null when no run has weight);
    ``scans_full`` counts the run statistics that needed every row. Checkpointed: both the
    Mafka3 / Mafka4 intervals (``ratio_intervals``) and the within-mode scaling intervals
    (``simulations.analysis.scale_ratios``) read it, and the bootstrap runs once.
    """
    from pyspark.sql import functions as F

    statistics = replicate_statistics(run_arrays(events, block_ms), replicates, seed)
    return (statistics.groupBy(*CONFIG_KEYS, "latency", "percentile", "replicate")
            .agg(F.expr("percentile(value, 0.5)").alias("statistic"),
                 F.count(F.when(F.col("level") == len(TAIL_MULTIPLES) + 1, 1)).alias("scans_full"))
            .localCheckpoint())


def ratio_intervals(per_config: DataFrame, latency_table: DataFrame, replicates: int, block_ms: float,
                    seed: int) -> DataFrame:
    """The table ``ratio_intervals``: one row per (source, consumers, topics, lanes, latency, percentile).

    ``per_config``: ``config_statistics`` of the drained runtime runs; ``latency_table``:
    ``latency_by_config`` (its medians give the point ratio). Columns: the keys, ``ratio`` (point,
    from the medians), ``ratio_low``, ``ratio_high``, ``replicates``, ``replicates_used``,
    ``scans_full`` (run statistics that needed every row), ``block_ms``, ``bootstrap_seed``.
    """
    from pyspark.sql import functions as F

    keys = [*RATIO_KEYS, "latency", "percentile"]

    def side(mode: str) -> DataFrame:
        return per_config.filter(F.col("mode") == mode).select(
            *keys, "replicate", F.col("statistic").alias(mode), F.col("scans_full").alias(f"scans_full_{mode}"))

    joined = side("mafka3").join(side("mafka4"), on=[*keys, "replicate"])
    replicate_ratios = joined.select(*keys, F.try_divide("mafka3", "mafka4").alias("ratio"),
                                     (F.col("scans_full_mafka3") + F.col("scans_full_mafka4")).alias("scans_full"))
    bounds = ratio_interval(replicate_ratios, keys).join(
        replicate_ratios.groupBy(*keys).agg(F.sum("scans_full").alias("scans_full")), on=keys)
    return (point_ratios(latency_table).join(bounds, on=keys)
            .withColumn("replicates", F.lit(replicates)).withColumn("block_ms", F.lit(float(block_ms)))
            .withColumn("bootstrap_seed", F.lit(seed))
            .select(*keys, "ratio", "ratio_low", "ratio_high", "mafka3", "mafka4", "replicates", "replicates_used",
                    "scans_full", "block_ms", "bootstrap_seed"))


def point_ratios(latency_table: DataFrame) -> DataFrame:
    """Per (source, consumers, topics, lanes, latency, percentile): the medians of both modes and their ratio."""
    from pyspark.sql import functions as F

    rows = []
    for latency in LATENCIES:
        for name in INTERVAL_PERCENTILES:
            rows.append(latency_table.select(*CONFIG_KEYS, F.lit(latency).alias("latency"), F.lit(name).alias("percentile"),
                                             F.col(f"{latency}_{name}").alias("median")))
    long = rows[0]
    for frame in rows[1:]:
        long = long.unionByName(frame)
    keys = [*RATIO_KEYS, "latency", "percentile"]
    sides = [long.filter(F.col("mode") == mode).select(*keys, F.col("median").alias(mode)) for mode in ("mafka3", "mafka4")]
    joined = sides[0].join(sides[1], on=keys)
    return joined.withColumn("ratio", F.try_divide("mafka3", "mafka4"))
