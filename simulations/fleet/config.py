"""The model's assumptions that are not measured: the machine (``NodeSpec``) and the sizing
rules (``ModelConfig``). Both are frozen and validated on construction (``InvalidConfig``
naming the field, its value and the allowed range).
"""

from __future__ import annotations

from dataclasses import dataclass

from mafka4.errors import InvalidConfig

# What ``fleet model`` sweeps by default: fleet sizes in topics, multipliers of every group's
# consumers, and the modelled messages written per event log.
TOPICS_DEFAULT = (1000, 5000, 10_000, 20_000, 40_000)
CONSUMER_SCALES_DEFAULT = (1.0, 4.0)
ROWS_DEFAULT = 20_000
# The fleet size of ``fleet sensitivity``: the largest ``fleet model`` sweeps. One model run of
# both designs takes 5 to 7 s there on a 2-core machine, so the table at two consumer scales
# (up to 4 changes of 24 parameters) takes about 10 min without measurement errors, 20 with them.
SENSITIVITY_TOPICS_DEFAULT = 40_000
# A test lane's traffic, as a share of its topic's rate, and its members in each of the topic's
# groups (``WorkloadConfig``): test traffic is small, and a test chain runs one instance of a service.
LANE_TRAFFIC_SHARE_DEFAULT = 0.01
LANE_CONSUMERS_DEFAULT = 1


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """One machine (assumed, not measured); write and read nodes alike, in both designs."""

    cores: int = 32
    memory_mb: int = 128 * 1024
    memory_usable_fraction: float = 0.8  # the rest: OS, page cache
    cpu_utilisation_max: float = 0.7  # planned mean utilisation of a node
    cpu_utilisation_hottest_max: float = 0.9  # the hottest node of the placement check
    actors_per_node_max: int = 4000  # partition actors per node (Kafka's guidance: ~4,000 partitions a broker)

    def __post_init__(self) -> None:
        _check(self, "cores", 1, 4096)
        _check(self, "memory_mb", 256, 1 << 30)
        _check(self, "memory_usable_fraction", 0.01, 1.0)
        _check(self, "cpu_utilisation_max", 0.01, 0.99)
        _check(self, "cpu_utilisation_hottest_max", self.cpu_utilisation_max, 0.99)
        _check(self, "actors_per_node_max", 1, 1_000_000)


@dataclass(frozen=True, slots=True)
class ModelConfig:
    produce_tp999_ms_target: float = 50.0
    racks: int = 6
    linger_ms: float = 5.0  # the producers' linger (ProducerConfig default)
    partition_utilisation_max: float = 0.5  # of one core, for one partition leader or feeder actor
    latency_samples: int = 200_000
    sample_replicas_max: int = 12_000
    nodes_max: int = 1_000_000
    placement_growth: float = 1.05
    placement_rounds_max: int = 20
    # False: a feeder round calls only the VPs its messages hash to, as the runtime does (idle
    # VPs hear of its progress once per report interval, a negligible cost); True: every VP of
    # the topic, as the runtime did before that (a what-if, ``--feeder-calls-every-vp``).
    feeder_calls_every_vp: bool = False

    def __post_init__(self) -> None:
        _check(self, "produce_tp999_ms_target", 0.001, 1e7)
        _check(self, "racks", 1, 10_000)
        _check(self, "linger_ms", 0.0, 60_000)
        _check(self, "partition_utilisation_max", 0.01, 0.99)
        _check(self, "latency_samples", 1000, 10_000_000)
        _check(self, "sample_replicas_max", 10, 1_000_000)
        _check(self, "nodes_max", 1, 100_000_000)
        _check(self, "placement_growth", 1.001, 2.0)
        _check(self, "placement_rounds_max", 1, 1000)
        if not isinstance(self.feeder_calls_every_vp, bool):
            raise InvalidConfig(f"ModelConfig.feeder_calls_every_vp={self.feeder_calls_every_vp!r} must be true or false")


def _check(config: object, name: str, low: float, high: float) -> None:
    value = getattr(config, name)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise InvalidConfig(f"{type(config).__name__}.{name}={value!r} must be a number in [{low}, {high}]")
