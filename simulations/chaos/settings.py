"""What a chaos run is asked to do (``ChaosSettings``, the fault kinds and their timing).

Kept apart from ``simulations.chaos.run`` (the driver, which needs Ray and the client) so that
the command line (``simulations.chaos.command``) can be built without importing them.
"""

from __future__ import annotations

from dataclasses import dataclass

from mafka4 import planted_bugs
from mafka4.client.retry_policy import RetryMode, RetryPolicy
from mafka4.errors import InvalidConfig
from mafka4.limits import DELAY_MS_MIN

FAULT_KINDS = ("kill-replica", "kill-read-node", "restart-etcd", "kill-member", "pause-replica",
               "sigstop-replica", "sigstop-read-node", "sigstop-controller", "sigstop-etcd", "kill-controller",
               "partition", "power-loss-write-node", "power-loss-read-node", "disk-full", "kill-etcd-member")
ETCD_MEMBER_CHOICES = (1, 3)
# A chaos run's lanes: a few, so that each has traffic (each lane is a VP on top of virtual_partitions).
LANES_MAX = 8
# A chaos run's delayed messages and retries come within its drain (``drain_timeout_s``, 120 s by
# default): a delay of at most this, and a poison message's back-offs summing to at most this.
DELAY_MS_MAX = 60_000
RETRY_SPAN_MS_MAX = 60_000
# The group's retries (issue 41): short back-offs, so that a run of a minute sees many of each
# step, and a poison message is dead-lettered on its third delivery, about a second after its first.
RETRY_POLICY = RetryPolicy(backoff_ms=(300, 600), backoff_ms_max=1000, deliveries_max=3)


@dataclass(frozen=True, slots=True)
class FaultTiming:
    """How long faults last and the pauses between them, in seconds (drawn uniformly)."""

    gap_s: tuple[float, float] = (1.0, 3.0)
    pause_s: tuple[float, float] = (1.0, 5.0)
    etcd_down_s: tuple[float, float] = (2.0, 6.0)
    # A SIGSTOPped process: past every lease TTL (5 s) now and then, so that the cluster also
    # meets a frozen leader, read node or controller it already replaced, waking up.
    stop_s: tuple[float, float] = (1.0, 8.0)
    partition_s: tuple[float, float] = (2.0, 8.0)
    partition_delay_ms: tuple[int, int] = (20, 500)  # of a partition that delays rather than drops
    lost_call_ms: int = 2000  # a call a partition dropped fails after this (``mafka4.partition_gate``)
    # A node whose disk is full (log_dir_bytes_max=0): past replica_lag_ms_max (3 s) now and then,
    # so that its replicas also leave the ISR / RISR and return.
    disk_full_s: tuple[float, float] = (1.0, 6.0)


@dataclass(frozen=True, slots=True)
class ChaosSettings:
    seed: int = 1
    duration_s: float = 60.0  # of the fault phase
    rate_msgs_per_s: int = 500
    faults: tuple[str, ...] = FAULT_KINDS
    members: int = 3
    partitions: int = 2
    replication_factor: int = 3
    min_insync_replicas: int = 2
    virtual_partitions: int = 4
    read_replicas: int = 2
    keys: int = 16
    # Lanes beside the trunk (issue 40): the producer sends round robin over the trunk and these,
    # opened before the faults (fallback trunk), and the members, trunk readers, read them by fallback.
    lanes: int = 2
    # Delayed and nacked traffic (issue 41; ``simulations.chaos.traffic``). The producer sends this
    # share of its messages with a delay from DELAY_MS_MIN (1 s) to delay_ms_max, drawn from the seed.
    delayed_share: float = 0.05
    delay_ms_max: int = 4000
    # The members nack this share of the values on their first delivery (they come again from the
    # group's retry topic), and this share on every delivery (poison: they end dead-lettered);
    # both chosen by a hash of the value. The group retries by retry_policy (unordered only).
    nack_share: float = 0.05
    poison_share: float = 0.01
    retry_policy: RetryPolicy = RETRY_POLICY
    # Replicas leave the ISR / RISR after this much lag, so a paused replica of a few seconds does.
    replica_lag_ms_max: int = 3000
    member_lease_ttl_s: int = 6
    auto_commit_interval_ms: int = 1000
    warmup_s: float = 3.0
    settle_s: float = 5.0  # production after the cluster healed, before it stops
    heal_timeout_s: float = 120.0
    drain_timeout_s: float = 120.0
    delivery_timeout_ms: int = 120_000
    # Members of the throwaway cluster's etcd; kill-etcd-member needs 3 (with 1 it is skipped).
    etcd_members: int = 1
    # How often the run's processes and etcd are sampled for the report's "resources" section
    # (``resource_sampler``); a sweep costs a pass over /proc and two etcd calls.
    resource_sample_s: float = 10.0
    # A bug of ``mafka4.planted_bugs`` (its name) that the throwaway cluster's processes run with;
    # None: none. A run with one is expected to fail its verdict on an anomaly.
    planted_bug: str | None = None
    timing: FaultTiming = FaultTiming()

    def __post_init__(self) -> None:
        unknown = sorted(set(self.faults) - set(FAULT_KINDS))
        if unknown or not self.faults:
            raise InvalidConfig(f"faults {','.join(unknown) or '(none)'} unknown: choose from {','.join(FAULT_KINDS)}")
        if not 1 <= self.members <= self.virtual_partitions:
            # More members than VPs would make the group split VPs: a reshard is not a fault under test here.
            raise InvalidConfig(f"members={self.members} must be from 1 to virtual_partitions={self.virtual_partitions}")
        if not 0 <= self.lanes <= LANES_MAX:
            raise InvalidConfig(f"lanes={self.lanes} must be from 0 (the trunk only) to {LANES_MAX}")
        self._check_delays_and_retries()
        if self.etcd_members not in ETCD_MEMBER_CHOICES:
            raise InvalidConfig(f"etcd_members={self.etcd_members} must be one of {ETCD_MEMBER_CHOICES}")
        if self.planted_bug is not None and self.planted_bug not in {bug.value for bug in planted_bugs.PlantedBug}:
            raise InvalidConfig(f"planted_bug={self.planted_bug!r} names no planted bug: use one of "
                                f"{planted_bugs.names()}, or none")
        if self.duration_s <= 0 or self.rate_msgs_per_s <= 0:
            raise InvalidConfig(f"duration_s={self.duration_s} and rate_msgs_per_s={self.rate_msgs_per_s} must be positive")
        if not self.resource_sample_s > 0:
            raise InvalidConfig(f"resource_sample_s={self.resource_sample_s} must be positive")

    def _check_delays_and_retries(self) -> None:
        for name in ("delayed_share", "nack_share", "poison_share"):
            share = getattr(self, name)
            if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 <= share <= 1:
                raise InvalidConfig(f"{name}={share!r} must be a fraction from 0 to 1")
        if isinstance(self.delay_ms_max, bool) or not isinstance(self.delay_ms_max, int) or \
                not DELAY_MS_MIN <= self.delay_ms_max <= DELAY_MS_MAX:
            raise InvalidConfig(f"delay_ms_max={self.delay_ms_max!r} must be from {DELAY_MS_MIN} (the shortest delay "
                                f"a message takes) to {DELAY_MS_MAX} ms, so that delayed messages come within the drain")
        policy = self.retry_policy
        if not isinstance(policy, RetryPolicy):
            raise InvalidConfig(f"retry_policy={policy!r} must be a RetryPolicy")
        if policy.mode is not RetryMode.UNORDERED:
            raise InvalidConfig(f"retry_policy mode {policy.mode.value!r}: a chaos run retries unordered (from the "
                                f"group's retry topic); an ordered retry holds its VP, which the judge does not expect")
        span_ms = sum(policy.delay_ms_after(delivery) for delivery in range(1, policy.deliveries_max))
        if span_ms > RETRY_SPAN_MS_MAX:
            raise InvalidConfig(f"retry_policy waits {span_ms} ms in all before a poison message is dead-lettered; "
                                f"at most {RETRY_SPAN_MS_MAX} ms, so that it is within the drain: shorten backoff_ms "
                                f"or lower deliveries_max")
