"""Exact nearest-rank percentiles as Spark SQL expressions, and the median over repetitions.

One definition everywhere (that of ``mafka4.bench.stats``): with the ``n`` non-null values of a
group sorted ascending, the ``p`` % percentile is the value at 1-based rank ``ceil(p/100 * n)``
(numpy: ``np.percentile(values, p, method="inverted_cdf")`` where numpy's floating-point rank is
exact). The rank is computed in integer arithmetic, ``(k * n + d - 1) div d`` for ``p/100 = k/d``,
because in floating point ``0.999 * 1000`` is not 999; percents are therefore given as strings.

A group's values are gathered into one ascending array (``sorted_values``) and the percentile
is the array element at the rank (``at_rank``): one aggregation per group instead of a window
sort per column. Groups are runs of at most a few hundred thousand rows, which fit in memory.

Statistics over repetitions (``median_min_max``): the median is Spark's exact ``percentile(x,
0.5)``, the midpoint of the two middle values for an even count (``numpy.median``); nulls are
left out.
"""

from __future__ import annotations

from fractions import Fraction
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column

# Percentile name -> percent, as strings so the rank fraction is exact.
PERCENTILES = {"tp50": "50", "tp99": "99", "tp999": "99.9"}


def rank_fraction(percent: str) -> tuple[int, int]:
    """``percent / 100`` as (numerator, denominator), asserted to lie in (0, 1]."""
    fraction = Fraction(percent) / 100
    assert 0 < fraction <= 1, percent
    return fraction.numerator, fraction.denominator


def rank_sql(percent: str, count_sql: str) -> str:
    """SQL of the 1-based nearest rank ``ceil(percent / 100 * n)``; ``count_sql`` is ``n``."""
    numerator, denominator = rank_fraction(percent)
    # bigint: 99999 * n overflows an int (what size() returns) above n = 21,475.
    return f"(({numerator} * cast({count_sql} as bigint) + {denominator - 1}) div {denominator})"


def rank_expression(percent: str, count_column: str) -> Column:
    """1-based nearest rank ``ceil(percent / 100 * n)`` as an exact integer Spark expression."""
    from pyspark.sql import functions as F

    return F.expr(rank_sql(percent, count_column))


def sorted_values(column: str) -> Column:
    """Aggregate: the non-null values of ``column`` in the group, ascending."""
    from pyspark.sql import functions as F

    # sort_array sorts a primitive array with Arrays.sort; array_sort compares boxed values.
    return F.sort_array(F.collect_list(column))


def at_rank_sql(sorted_sql: str, percent: str) -> str:
    """SQL of the nearest-rank percentile of an ascending array; null when the array is empty."""
    return f"if(size({sorted_sql}) = 0, null, element_at({sorted_sql}, cast({rank_sql(percent, f'size({sorted_sql})')} as int)))"


def at_rank(sorted_column: str, percent: str) -> Column:
    """The nearest-rank ``percent`` of the ascending array column ``sorted_column``."""
    from pyspark.sql import functions as F

    return F.expr(at_rank_sql(sorted_column, percent))


def beyond_rank(sorted_column: str, percent: str) -> Column:
    """How many values lie above the percentile's rank: ``n - ceil(percent / 100 * n)``."""
    from pyspark.sql import functions as F

    return F.expr(f"size({sorted_column}) - {rank_sql(percent, f'size({sorted_column})')}")


def median_min_max(column: str) -> list[Column]:
    """Aggregates ``column`` (the median over repetitions), ``column_min`` and ``column_max``."""
    from pyspark.sql import functions as F

    return [F.expr(f"percentile({column}, 0.5)").alias(column), F.min(column).alias(f"{column}_min"),
            F.max(column).alias(f"{column}_max")]
