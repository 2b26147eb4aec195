"""How ``mafka4 analyze`` runs Spark and its bootstrap (``AnalysisSettings``).

Kept apart from ``simulations.analysis.job`` (the job, which imports pyarrow and, to run, pyspark)
so that ``mafka4`` registers ``analyze`` (``simulations.analysis.command``) without the
analysis extra: only running it needs them.
"""

from __future__ import annotations

from dataclasses import dataclass

from mafka4.errors import InvalidConfig


@dataclass(frozen=True, slots=True)
class AnalysisSettings:
    """How the Spark job runs. The defaults suit one small machine; everything binds to loopback."""

    master: str = "local[*]"
    # Result groups are few; Spark's default of 200 shuffle partitions only adds scheduling.
    shuffle_partitions: int = 8
    driver_memory: str = "1g"
    # Keep the Spark log quiet: the report is the output.
    log_level: str = "WARN"
    # The block bootstrap of the ratios (simulations.analysis.intervals). 400 replicates put the 2.5 % and
    # 97.5 % bounds at ranks 10 and 390: enough replicates beyond each bound to keep it steady.
    bootstrap_replicates: int = 400
    # A pause delays the messages sent in the next few hundred ms; a block must hold such a burst.
    bootstrap_block_ms: float = 1000.0
    bootstrap_seed: int = 20240601
    # OpenMessaging Benchmark reports its rates per 10-s period (simulations.analysis.omb).
    omb_period_ms: float = 10_000.0

    def __post_init__(self) -> None:
        if not 1 <= self.bootstrap_replicates <= 100_000:
            raise InvalidConfig(f"bootstrap_replicates={self.bootstrap_replicates} must be in [1, 100000]")
        if not 0 < self.bootstrap_block_ms <= 3_600_000:
            raise InvalidConfig(f"bootstrap_block_ms={self.bootstrap_block_ms} must be in (0, 3600000]")
        if not 0 < self.omb_period_ms <= 3_600_000:
            raise InvalidConfig(f"omb_period_ms={self.omb_period_ms} must be in (0, 3600000]")
        if not -2**63 <= self.bootstrap_seed < 2**63:
            raise InvalidConfig(f"bootstrap_seed={self.bootstrap_seed} must be an int64")
