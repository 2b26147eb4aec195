"""What ``mafka4 bench failover`` is asked to measure (``FailoverBenchSettings``).

Kept apart from ``benchmarks.failover`` (the driver, which imports Ray) so that the CLI reads the
defaults without importing Ray. A field with a ``help`` in its metadata is an option of the
command (``mafka4.cli.bench``); the others are fixed for the bench.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class FailoverBenchSettings:
    repetitions: int = field(default=5, metadata={"help": "leader kills"})
    replication_factor: int = field(default=3, metadata={"help": "replicas of the partition"})
    min_insync_replicas: int = field(default=2, metadata={"help": "in-sync replicas an acks=all produce needs"})
    message_bytes: int = 100
    # Producing before each kill, so the partition is busy when its leader dies.
    warmup_s: float = 2.0
    # A repetition that does not recover within this long fails the bench.
    recovery_s_max: float = 120.0
