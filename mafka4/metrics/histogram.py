"""``LatencyHistogram``: counts of observed durations in fixed buckets, for Prometheus.

A process observes each duration once (``observe``) on its own thread; the histogram keeps one
count per bucket, the count of all observations and their sum, so its size is fixed by the
buckets, whatever the traffic (no sample is kept). ``snapshot`` hands a copy to whoever exposes
it (``metrics.families.histogram_family``).

Buckets are upper bounds in seconds, strictly increasing; an observation counts in the first
bucket whose bound is at or above it, and past the last bound in the implicit ``+Inf`` bucket.
Counts are per bucket (not cumulative) here; Prometheus's cumulative ``le`` buckets are made from
them when exposed.

Invariants: the counts only grow; ``count`` is the sum of the bucket counts (the ``+Inf`` one
included). Pure: no clock (the caller measures), no I/O.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Sequence


class LatencyHistogram:
    """Counts of durations (seconds) in the buckets ``bounds_s``; see the module docstring."""

    __slots__ = ("bounds_s", "_counts", "sum_s")

    def __init__(self, bounds_s: Sequence[float]):
        bounds_s = tuple(float(bound) for bound in bounds_s)
        assert bounds_s and all(a < b for a, b in zip(bounds_s, bounds_s[1:])), \
            f"bucket bounds must be given and strictly increasing: {bounds_s}"
        self.bounds_s = bounds_s
        self._counts = [0] * (len(bounds_s) + 1)  # the last: above every bound (+Inf)
        self.sum_s = 0.0

    def observe(self, duration_s: float) -> None:
        assert duration_s >= 0, f"a duration is never negative: {duration_s}"
        self._counts[bisect_left(self.bounds_s, duration_s)] += 1
        self.sum_s += duration_s

    @property
    def count(self) -> int:
        return sum(self._counts)

    def snapshot(self) -> dict:
        """A plain copy: ``bounds_s``, per-bucket ``counts`` (one more than the bounds: +Inf last),
        ``sum_s`` and ``count``."""
        return {"bounds_s": list(self.bounds_s), "counts": list(self._counts), "sum_s": self.sum_s,
                "count": self.count}
