"""Feed lag: how far the read nodes' feed streams trail a topic's committed data (pure).

``benchmarks.feed_lag`` samples, per physical partition, the leader's high watermark (HW) and the
smallest ``next_offset`` of that partition's feed streams over the read nodes running one (the
stream furthest behind, the *fed offset*). Per partition and sample:

* **lag in records** = HW - fed offset, 0 when the streams fed all that is committed;
* **lag in ms** = how long the oldest committed record not yet fed (the one at the fed offset)
  has been committed: the time since the first sample whose HW exceeded the fed offset. The
  record became committed within the sampling interval before that sample, so the figure
  falls short of the truth by less than one interval (the report states the interval).

A sample's lag is the worst partition's (records and ms each). A stream that is resuming has no
``next_offset`` yet: its partition is left out of that sample, and a sample without any known
partition is no sample.

The lag is **bounded** when its p99 in records over the second half of the samples taken while
producing is at most ``BOUNDED_GROWTH_MAX`` times its p99 over the first half, and it reached 0
on every partition within ``BOUNDED_DRAIN_S_MAX`` after the producer stopped. Fewer than two
samples prove nothing: not bounded.

Invariants: the HW history of a partition never decreases (a new leader reporting a lower HW
for a moment is taken at the highest HW seen) and holds at most ``samples_max`` entries; a lag is
never negative.

The bench's settings live here too, validated on construction, so that the CLI reads them
without importing Ray.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from mafka4.bench.stats import nearest_rank_value
from mafka4.errors import InvalidConfig
from mafka4.limits import ProducerConfig

BOUNDED_GROWTH_MAX = 2.0
BOUNDED_DRAIN_S_MAX = 10.0
NS_PER_MS = 1_000_000


@dataclass(frozen=True, slots=True)
class FeedLagBenchSettings:
    """A field with a ``help`` in its metadata is an option of ``mafka4 bench feed-lag`` (``mafka4.cli.bench``)."""

    virtual_partitions: tuple[int, ...] = field(default=(8, 256), metadata={"help": "VP counts, one topic each"})
    partitions: int = field(default=2, metadata={"help": "physical partitions"})
    replication_factor: int = 2
    read_replicas: int = 2
    duration_s: float = field(default=20.0, metadata={"help": "seconds of producing per VP count"})
    sample_interval_s: float = 0.5
    message_bytes: int = 1024
    linger_ms: int = ProducerConfig().linger_ms
    # After duration_s the producer sends what it buffered; it must be acknowledged within this long.
    flush_s_max: float = 120.0
    # The run waits this long for the lag to reach 0 after the last acknowledgement.
    drain_s_max: float = 60.0
    # Creating a topic and starting a feed stream of each of its partitions must take at most this long.
    ready_s_max: float = 120.0
    # Before each VP count, wait at most this long for the 1-minute load average to fall to the quiet
    # bound (the previous count's producer saturated the machine); 0 starts at once.
    quiet_wait_s_max: float = 180.0
    # A test-sized run (the report says so).
    smoke: bool = False

    def __post_init__(self) -> None:
        if not self.virtual_partitions or min(self.virtual_partitions) < 1:
            raise InvalidConfig(f"virtual_partitions={list(self.virtual_partitions)}: give one or more VP counts of "
                                f"at least 1, e.g. 8,256")
        if min(self.duration_s, self.sample_interval_s, self.flush_s_max, self.drain_s_max, self.ready_s_max) <= 0:
            raise InvalidConfig(f"duration_s={self.duration_s}, sample_interval_s={self.sample_interval_s}, "
                                f"flush_s_max, drain_s_max and ready_s_max must be positive")
        if self.quiet_wait_s_max < 0:
            raise InvalidConfig(f"quiet_wait_s_max={self.quiet_wait_s_max} must be 0 (no wait) or more seconds")

    @classmethod
    def smoke_sized(cls, **changes) -> "FeedLagBenchSettings":
        """A run of seconds for tests: 8 VPs, 3 s of producing."""
        return cls(**{"virtual_partitions": (8,), "duration_s": 3.0, "quiet_wait_s_max": 0.0, "smoke": True,
                      **changes})

    @property
    def samples_max(self) -> int:
        """The most samples one VP count can take: one per interval while producing, flushing and draining."""
        return math.ceil((self.duration_s + self.flush_s_max + self.drain_s_max) / self.sample_interval_s) + 3


@dataclass(frozen=True, slots=True)
class LagSample:
    """The worst partition's feed lag at one moment (monotonic ns)."""

    at_ns: int
    records: int
    ms: float


class FeedLagTracker:
    """Turns samples of HWs and fed offsets into lags, remembering when each HW was first seen."""

    def __init__(self, partitions: int, samples_max: int):
        assert partitions >= 1 and samples_max >= 1, (partitions, samples_max)
        self._samples_max = samples_max
        self._times_ns: list[int] = []
        self._high_watermarks: list[list[int]] = [[] for _ in range(partitions)]

    def observe(self, at_ns: int, high_watermarks: Sequence[int],
                fed_offsets: Sequence[int | None]) -> LagSample | None:
        """Record one sample; its worst lag, or None if no partition's fed offset is known."""
        assert len(high_watermarks) == len(fed_offsets) == len(self._high_watermarks), (high_watermarks, fed_offsets)
        assert not self._times_ns or at_ns >= self._times_ns[-1], "samples arrive in time order"
        assert len(self._times_ns) < self._samples_max, f"more than {self._samples_max} samples"
        self._times_ns.append(at_ns)
        for history, high_watermark in zip(self._high_watermarks, high_watermarks):
            history.append(max(high_watermark, history[-1]) if history else high_watermark)
        lags = [self._lag(partition, fed) for partition, fed in enumerate(fed_offsets) if fed is not None]
        if not lags:
            return None
        return LagSample(at_ns, max(records for records, _ in lags), max(ms for _, ms in lags))

    def _lag(self, partition: int, fed_offset: int) -> tuple[int, float]:
        history = self._high_watermarks[partition]
        if history[-1] <= fed_offset:
            return 0, 0.0
        # The first sample whose HW exceeded the fed offset: the record there was committed by then.
        first = bisect.bisect_right(history, fed_offset)
        return history[-1] - fed_offset, (self._times_ns[-1] - self._times_ns[first]) / NS_PER_MS


def fed_offset(next_offsets: Iterable[int | None]) -> int | None:
    """A partition's fed offset: the smallest ``next_offset`` of its streams that are not resuming."""
    return min((offset for offset in next_offsets if offset is not None), default=None)


def drained(high_watermarks: Sequence[int], fed_offsets: Sequence[int | None]) -> bool:
    """True when every partition's feed streams have fed all that is committed."""
    assert len(high_watermarks) == len(fed_offsets), (high_watermarks, fed_offsets)
    return all(fed is not None and fed >= high_watermark for high_watermark, fed in zip(high_watermarks, fed_offsets))


def lag_figures(samples: Sequence[LagSample]) -> dict:
    """Max, p50, p99 and final (the last sample's) lag, in records and in ms; None without samples."""
    figures: dict = {"samples": len(samples)}
    for unit in ("records", "ms"):
        values = [getattr(sample, unit) for sample in samples]
        figures[unit] = None if not values else {
            "max": max(values), "p50": nearest_rank_value(values, "50"), "p99": nearest_rank_value(values, "99"),
            "final": values[-1]}
    return figures


def halves_p99_records(samples: Sequence[LagSample]) -> tuple[int, int] | None:
    """The p99 lag in records over the first and the second half of ``samples``; None under two samples."""
    if len(samples) < 2:
        return None
    middle = len(samples) // 2
    return (nearest_rank_value([s.records for s in samples[:middle]], "99"),
            nearest_rank_value([s.records for s in samples[middle:]], "99"))


def is_bounded(samples: Sequence[LagSample], drain_s: float | None) -> bool:
    """The lag did not grow over the run (see the module docstring) and drained in time."""
    halves = halves_p99_records(samples)
    if halves is None or drain_s is None:
        return False
    first, second = halves
    return second <= BOUNDED_GROWTH_MAX * first and drain_s <= BOUNDED_DRAIN_S_MAX
