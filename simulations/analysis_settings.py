"""How ``mafka4 analyze`` runs Spark (``AnalysisSettings``).

Kept apart from ``simulations.analysis`` (the job, which imports pyarrow and, to run, pyspark)
so that ``mafka4`` registers ``analyze`` (``simulations.analysis_command``) without the
analysis extra: only running it needs them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class AnalysisSettings:
    """How the Spark job runs. The defaults suit one small machine; everything binds to loopback."""

    master: str = "local[*]"
    # Result groups are few; Spark's default of 200 shuffle partitions only adds scheduling.
    shuffle_partitions: int = 8
    driver_memory: str = "1g"
    # Keep the Spark log quiet: the report is the output.
    log_level: str = "WARN"


