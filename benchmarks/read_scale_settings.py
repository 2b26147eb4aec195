"""What ``mafka4 bench read-scale`` is asked to measure (``ReadScaleBenchSettings``).

Kept apart from ``benchmarks.read_scale`` (the driver, which imports Ray) so that the CLI reads
the defaults without importing Ray. A field with a ``help`` in its metadata is an option of the
command (``mafka4.cli.bench``); the others are fixed for the bench.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mafka4.errors import InvalidConfig


@dataclass(frozen=True, slots=True)
class ReadScaleBenchSettings:
    pairs: int = field(default=2, metadata={
        "help": "pairs of runs, each a run with read-node scaling and one without, alternated (A B A B)"})
    consumers_at_start: int = field(default=2, metadata={"help": "group members before the group grows"})
    consumers_at_most: int = field(default=8, metadata={"help": "group members after it grew"})
    rate_msgs_per_s: int = field(default=500, metadata={"help": "messages per second produced for the whole run"})
    window_s: float = field(default=60.0, metadata={
        "help": "seconds measured after the trigger: the added read node and its moves must fit in it"})
    settle_s: float = field(default=30.0, metadata={
        "help": "seconds the grown group consumes before the trigger, so that its splits are over"})
    cluster_yaml: str = field(default="ray_cluster.yaml", metadata={
        "help": "the cluster config the fake Ray cluster is derived from"})
    # VPs of the topic created as the trigger: its replicas take the read nodes over their bound
    # (``vp_replicas_bound``).
    ballast_vps: int = 4
    physical_partitions: int = 2
    replication_factor: int = 2
    read_replicas: int = 2
    # Members consume this long before the growth: the measured window starts from a steady group.
    warmup_s: float = 10.0
    upkeep_interval_ms: int = 500
    # No release inside a run: the group does not shrink, and the bench ends the cluster itself.
    idle_release_delay_ms: int = 3_600_000
    # Each run waits at most this long for the load average to fall below the quiet bound first.
    quiet_wait_s_max: float = 180.0
    # After the window, the members consume the rest within this long (then what is missing is counted).
    drain_s_max: float = 60.0
    # How often the sampler looks at etcd (the scaling decision, registrations, moves) and Ray.
    sample_interval_s: float = 0.1
    # ... and describes the added read node, until it served its first records (an actor call).
    describe_interval_s: float = 0.5

    def __post_init__(self) -> None:
        if self.pairs < 1:
            raise InvalidConfig(f"pairs={self.pairs}: run at least one pair (a run with scaling and one without)")
        if not 1 <= self.consumers_at_start < self.consumers_at_most:
            raise InvalidConfig(f"consumers_at_start={self.consumers_at_start}, consumers_at_most="
                                f"{self.consumers_at_most}: start with at least one member and grow to more")
        if self.rate_msgs_per_s < 1 or self.window_s <= 0 or self.settle_s < 0:
            raise InvalidConfig(f"rate_msgs_per_s={self.rate_msgs_per_s}, window_s={self.window_s}, settle_s="
                                f"{self.settle_s}: produce at least 1 message/s, measure a window > 0 s, settle >= 0 s")

    def vp_replicas_bound(self, read_nodes: int) -> int:
        """The controller's ``read_node_vp_replicas_max`` for ``read_nodes`` read nodes at the start:
        the grown group's open VP replicas (one VP a member) fit within it with one to spare, and
        with the trigger's topic's they do not (``read_nodes_max`` is ``read_nodes`` + 1, so exactly
        one node is added). The yaml starts two read nodes; Ray's fake autoscaler sometimes a third."""
        grown = self.consumers_at_most * self.read_replicas
        bound = -(-grown // read_nodes) + 1
        if read_nodes * bound >= grown + self.ballast_vps * self.read_replicas:
            raise ValueError(f"{self.ballast_vps} ballast VPs cannot take {read_nodes} read nodes over a bound that "
                             f"{grown} replicas fit within: create more")
        return bound
