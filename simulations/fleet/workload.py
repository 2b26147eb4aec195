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
* lanes (README "Lanes"): ``lane_topics_share`` of the topics, drawn uniformly (exactly
  ``round(share * topics)`` of them), carry ``lanes_per_topic`` test lanes each. A lane carries
  ``lane_traffic_share`` of its topic's rate (test traffic is small: 0.01 by default), on top of
  the topic's own (trunk) traffic, with the topic's message size. Each of the topic's consumer
  groups has ``lane_consumers`` members of its own in the lane (1 by default: a test chain runs
  one instance of every service in its swimlane), so a lane is read by as many groups as its
  topic. How a design carries a lane is the model's (``loads``): Mafka3 makes it a topic of its
  own (``mafka3_topics``), Mafka4 VPs on the read side of the same topic.

Rates, sizes, consumers and groups are drawn independently. ``generate`` is deterministic
for a fixed (config, seed): one ``numpy.random.Generator(PCG64(seed))``, draws in a fixed
order; a larger fleet with the same seed does not extend a smaller one. The lane topics are
drawn last, and only when there are lanes: a fleet with lanes is the fleet without them plus
its lanes, and which topics carry lanes does not hang on ``lanes_per_topic``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace

import numpy as np

from mafka4.errors import InvalidConfig
from mafka4.limits import LANES_MAX
from simulations.fleet.config import LANE_CONSUMERS_DEFAULT, LANE_TRAFFIC_SHARE_DEFAULT

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
    # Lanes (module doc); 0 and 0: no lanes, the fleet of every result before lanes.
    lane_topics_share: float = 0.0  # of the topics, 0..1
    lanes_per_topic: int = 0  # on each such topic, at most a topic's LANES_MAX
    lane_traffic_share: float = LANE_TRAFFIC_SHARE_DEFAULT  # of its topic's rate, per lane
    lane_consumers: int = LANE_CONSUMERS_DEFAULT  # members of each of the topic's groups in the lane

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
        _at_least(self, "lane_topics_share", 0.0, 1.0)
        _at_least(self, "lanes_per_topic", 0, LANES_MAX)
        _at_least(self, "lane_traffic_share", 1e-6, 1.0)
        _at_least(self, "lane_consumers", 1, 100_000)
        for name in ("topics", "message_bytes_min", "message_bytes_max", "consumers_max", "groups_max",
                     "replication_factor", "read_replicas", "lanes_per_topic", "lane_consumers"):
            if not isinstance(getattr(self, name), int):
                raise InvalidConfig(f"workload {name}={getattr(self, name)!r} must be an integer")
        if self.topics + self.lane_topics * self.lanes_per_topic > TOPICS_MAX:
            raise InvalidConfig(f"workload of {self.topics} topics with {self.lanes_per_topic} lanes on "
                                f"{self.lane_topics} of them is more than {TOPICS_MAX} Mafka3 topics; "
                                f"lower lanes_per_topic or lane_topics_share")

    @property
    def lane_topics(self) -> int:
        """Topics that carry lanes (none without lanes)."""
        return round(self.lane_topics_share * self.topics) if self.lanes_per_topic else 0


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
    consumers: np.ndarray  # int64, members of each consumer group of the topic (its trunk)
    groups: np.ndarray  # int64, consumer groups reading the topic
    lanes: np.ndarray  # int64, test lanes of the topic: 0 or lanes_per_topic

    @property
    def topics(self) -> int:
        return self.config.topics

    @property
    def lanes_total(self) -> int:
        return int(self.lanes.sum())

    @property
    def lane_msgs_per_s(self) -> np.ndarray:
        """Per topic, what all its lanes carry together (msgs/s)."""
        return self.lanes * self.config.lane_traffic_share * self.rate_msgs_per_s

    @property
    def consumers_total(self) -> int:
        """Consumers of the whole fleet: every group's members, its lanes' included, summed over topics."""
        lane_members = int((self.lanes * self.groups).sum()) * self.config.lane_consumers
        return int((self.consumers * self.groups).sum()) + lane_members

    @property
    def msgs_per_s_total(self) -> float:
        """Messages of the whole fleet, its lanes' included."""
        return float(self.rate_msgs_per_s.sum()) + float(self.lane_msgs_per_s.sum())


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
    lanes = np.zeros(count, dtype=np.int64)
    if config.lane_topics:
        lanes[rng.choice(count, size=config.lane_topics, replace=False)] = config.lanes_per_topic
    for array in (rate, size, consumers, groups, lanes):
        array.setflags(write=False)
    return Workload(config, seed, rate, size, consumers, groups, lanes)


def mafka3_topics(workload: Workload) -> Workload:
    """The fleet as Mafka3 creates it: every topic, then one topic per lane (lane ``L`` of topic
    ``T`` is topic ``T.L``, with ``T``'s config: its size and its groups, each of
    ``lane_consumers`` members, reading ``lane_traffic_share`` of ``T``'s rate). Without lanes,
    the workload itself."""
    if not workload.lanes_total:
        return workload
    config = workload.config
    owner = np.repeat(np.arange(workload.topics), workload.lanes)
    lane_rate = config.lane_traffic_share * workload.rate_msgs_per_s[owner]
    arrays = (np.concatenate((workload.rate_msgs_per_s, lane_rate)),
              np.concatenate((workload.message_bytes, workload.message_bytes[owner])),
              np.concatenate((workload.consumers, np.full(owner.size, config.lane_consumers, dtype=np.int64))),
              np.concatenate((workload.groups, workload.groups[owner])),
              np.zeros(workload.topics + owner.size, dtype=np.int64))
    for array in arrays:
        array.setflags(write=False)
    topics = replace(config, topics=workload.topics + owner.size, lane_topics_share=0.0, lanes_per_topic=0)
    return Workload(topics, workload.seed, *arrays)
