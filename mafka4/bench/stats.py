"""Exact latency percentiles, the same definition everywhere (nearest rank).

tpXX is the smallest sample that at least XX % of samples do not exceed: with sorted
samples ``s`` of size ``n``, ``s[ceil(XX / 100 * n) - 1]``. The rank is computed with
exact fractions, because in floating point 99.9 / 100 * 1000 is not 999.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Iterable, Sequence


PERCENTILES = {"p50": "50", "p99": "99", "p99.9": "99.9"}


def nearest_rank_index(percentile: str, count: int) -> int:
    """0-based index of the nearest-rank percentile in ``count`` sorted samples."""
    assert count > 0
    return max(math.ceil(Fraction(percentile) * count / 100), 1) - 1


def nearest_rank_value(values: Sequence[float], percentile: str) -> float:
    """The nearest-rank ``percentile`` (e.g. "99") of ``values``, in their own unit."""
    ordered = sorted(values)
    return ordered[nearest_rank_index(percentile, len(ordered))]


def percentiles_ms(samples_ns: Iterable[int] | "np.ndarray") -> dict[str, float]:
    import numpy as np  # here, not at the top: every mafka4 command imports this module (bench settings)

    values = np.sort(np.asarray(samples_ns, dtype=np.int64))
    if values.size == 0:
        return {name: float("nan") for name in PERCENTILES}
    return {name: round(float(values[nearest_rank_index(p, values.size)]) / 1e6, 3) for name, p in PERCENTILES.items()}
