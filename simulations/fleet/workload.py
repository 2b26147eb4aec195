"""A seeded fleet workload: ``topics`` topics, each with a produce rate, a message size, a
consumer-group size and a number of consumer groups.

Distributions (every parameter is a field of ``WorkloadConfig``):

* produce rate per topic (msgs/s): lognormal, median ``rate_msgs_per_s_median``, log-sd
  ``rate_sigma``, clipped to [``rate_msgs_per_s_min``, ``rate_msgs_per_s_max``]. With the
  defaults (20 msgs/s, sigma 2) the mean is ~150 msgs/s, 1 % of topics exceed ~2,100 msgs/s
  and those carry about a third of the traffic.
* mean message size per topic (bytes): lognormal, median ``message_bytes_median``, log-sd
  ``message_bytes_sigma``, clipped to [``message_bytes_min``, ``message_bytes_max``].
* consumers per group (the group's parallelism, which decides Mafka3's partition count):
  truncated Zipf on 1..``consumers_max``, P(c) ~ c ** -``consumers_zipf_exponent``, then
  multiplied by ``consumers_scale`` (rounded up, at least 1): the knob the consumer sweeps turn.
  With the defaults (exponent 1.5, up to 64) 42 % of groups have one member, 71 % at most
  four, 11 % sixteen or more; the mean is 6.2.
* consumer groups per topic (read fan-out: each group reads every message once): truncated
  geometric on 1..``groups_max`` with success probability ``groups_geometric_p``; all
  groups of a topic have the same size.
* every topic: ``replication_factor`` write replicas per physical partition and
  ``read_replicas`` replicas per virtual partition.

Rates, sizes, consumers and groups are drawn independently. ``generate`` is deterministic
for a fixed (config, seed): one ``numpy.random.Generator(PCG64(seed))``, draws in a fixed
order; a larger fleet with the same seed does not extend a smaller one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import numpy as np

from mafka4.errors import InvalidConfig

TOPICS_MAX = 10_000_000


@dataclass(frozen=True, slots=True)
class WorkloadConfig:
    topics: int = 40_000
    rate_msgs_per_s_median: float = 20.0
    rate_sigma: float = 2.0
    rate_msgs_per_s_min: float = 0.1
    rate_msgs_per_s_max: float = 200_000.0
    message_bytes_median: float = 1024.0
    message_bytes_sigma: float = 0.7
    message_bytes_min: int = 64
    message_bytes_max: int = 1024 * 1024
    consumers_max: int = 64
    consumers_zipf_exponent: float = 1.5
    consumers_scale: float = 1.0
    groups_max: int = 4
    groups_geometric_p: float = 0.6
    replication_factor: int = 3
    read_replicas: int = 2

    def __post_init__(self) -> None:
        for field in fields(self):
            value = getattr(self, field.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise InvalidConfig(f"workload {field.name}={value!r} must be a finite number")
        _at_least(self, "topics", 1, TOPICS_MAX)
        _at_least(self, "rate_msgs_per_s_min", 1e-6)
        _at_least(self, "rate_msgs_per_s_median", self.rate_msgs_per_s_min, self.rate_msgs_per_s_max)
        _at_least(self, "rate_sigma", 0.0, 5.0)
        _at_least(self, "message_bytes_min", 1)
        _at_least(self, "message_bytes_median", self.message_bytes_min, self.message_bytes_max)
        _at_least(self, "message_bytes_sigma", 0.0, 5.0)
        _at_least(self, "consumers_max", 1, 100_000)
        _at_least(self, "consumers_zipf_exponent", 0.0, 10.0)
        _at_least(self, "consumers_scale", 1e-3, 1000.0)
        _at_least(self, "groups_max", 1, 100)
        _at_least(self, "groups_geometric_p", 1e-3, 1.0)
        _at_least(self, "replication_factor", 1, 7)
        _at_least(self, "read_replicas", 1, 7)
        for name in ("topics", "message_bytes_min", "message_bytes_max", "consumers_max", "groups_max",
                     "replication_factor", "read_replicas"):
            if not isinstance(getattr(self, name), int):
                raise InvalidConfig(f"workload {name}={getattr(self, name)!r} must be an integer")


def _at_least(config: object, name: str, low: float, high: float | None = None) -> None:
    value = getattr(config, name)
    if value < low or (high is not None and value > high):
        upper = "" if high is None else f" and at most {high}"
        raise InvalidConfig(f"workload {name}={value} must be at least {low}{upper}")


@dataclass(frozen=True, slots=True)
class Workload:
    """One drawn fleet: arrays of length ``config.topics`` (read-only)."""

    config: WorkloadConfig
    seed: int
    rate_msgs_per_s: np.ndarray  # float64
    message_bytes: np.ndarray  # float64, mean message size of the topic
    consumers: np.ndarray  # int64, members of each consumer group of the topic
    groups: np.ndarray  # int64, consumer groups reading the topic

    @property
    def topics(self) -> int:
        return self.config.topics

    @property
    def consumers_total(self) -> int:
        """Consumers of the whole fleet: every group's members, summed over topics."""
        return int((self.consumers * self.groups).sum())

    @property
    def msgs_per_s_total(self) -> float:
        return float(self.rate_msgs_per_s.sum())


def _truncated_zipf(rng: np.random.Generator, count: int, high: int, exponent: float) -> np.ndarray:
    values = np.arange(1, high + 1, dtype=np.float64)
    weights = values ** -exponent
    return rng.choice(np.arange(1, high + 1), size=count, p=weights / weights.sum())


def _truncated_geometric(rng: np.random.Generator, count: int, high: int, p: float) -> np.ndarray:
    values = np.arange(1, high + 1)
    weights = (1.0 - p) ** (values - 1) * p
    return rng.choice(values, size=count, p=weights / weights.sum())


def generate(config: WorkloadConfig, seed: int) -> Workload:
    """Draw the fleet (see the module doc for the distributions)."""
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise InvalidConfig(f"seed={seed!r} must be a non-negative integer")
    rng = np.random.Generator(np.random.PCG64(seed))
    count = config.topics
    rate = np.clip(rng.lognormal(math.log(config.rate_msgs_per_s_median), config.rate_sigma, count),
                   config.rate_msgs_per_s_min, config.rate_msgs_per_s_max)
    size = np.clip(rng.lognormal(math.log(config.message_bytes_median), config.message_bytes_sigma, count),
                   config.message_bytes_min, config.message_bytes_max)
    consumers = _truncated_zipf(rng, count, config.consumers_max, config.consumers_zipf_exponent)
    consumers = np.maximum(np.ceil(consumers * config.consumers_scale - 1e-9), 1).astype(np.int64)
    groups = _truncated_geometric(rng, count, config.groups_max, config.groups_geometric_p).astype(np.int64)
    for array in (rate, size, consumers, groups):
        array.setflags(write=False)
    return Workload(config, seed, rate, size, consumers, groups)
