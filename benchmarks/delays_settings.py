"""What ``mafka4 bench delays`` is asked to measure (``DelaysBenchSettings``), and its pure figures.

Kept apart from ``benchmarks.delays`` (the driver) so that the CLI reads the defaults without
importing a client. A field with a ``help`` in its metadata is an option of the command
(``mafka4.cli.bench``); the others are fixed for the bench.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from mafka4.bench.stats import nearest_rank_value
from mafka4.errors import InvalidConfig


PHASES = ("produce", "control", "precision", "retries")


@dataclass(frozen=True, slots=True)
class DelaysBenchSettings:
    precision_messages: int = field(default=100_000, metadata={
        "help": "delayed messages of the precision phase, sent first and due evenly over precision_window_s"})
    precision_window_s: float = field(default=600.0, metadata={"help": "the span their due times cover"})
    scheduled_messages: int = field(default=1_000_000, metadata={
        "help": "messages scheduled an hour ahead for the produce-tail, memory and recovery phases"})
    background_rate_msgs_s: int = field(default=200, metadata={
        "help": "messages without delay sent meanwhile (the normal traffic), paced"})
    produce_s: float = field(default=60.0, metadata={"help": "each produce-tail run: normal traffic at produce_rate_msgs_s"})
    produce_rate_msgs_s: int = field(default=500, metadata={"help": "the produce-tail runs' paced rate"})
    retry_messages: int = field(default=50_000, metadata={"help": "messages each retry-throughput run handles"})
    retry_repetitions: int = field(default=2, metadata={"help": "retry runs of each handler, alternating (A B A B)"})
    failing_share: float = field(default=0.1, metadata={"help": "the share of messages the failing handler fails once"})
    phases: tuple[str, ...] = field(default=("produce", "precision", "retries"), metadata={
        "help": "which phases run: produce (the produce tails with and without the scheduled million, its memory "
                "and recovery), control (the produce tail after a million plain messages were written), precision, "
                "retries"})
    settle_load: float = field(default=1.5, metadata={
        "help": "before each produce-tail and the precision run, wait until the 1-minute load average is at most this"})
    partitions: int = 2
    replication_factor: int = 1
    message_bytes: int = 100
    keys: int = 100
    linger_ms: int = 1
    # Ahead of their due times the precision messages are all sent (so none is due before it is scheduled).
    precision_lead_s: float = 30.0
    scheduled_delay_ms: int = 3_600_000
    drain_s_max: float = 300.0
    settle_s_max: float = 300.0

    def __post_init__(self) -> None:
        for name in ("precision_messages", "scheduled_messages", "background_rate_msgs_s", "produce_rate_msgs_s",
                     "retry_messages", "retry_repetitions", "partitions", "replication_factor", "message_bytes", "keys"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidConfig(f"{name}={value!r}: give a whole number of at least 1")
        for name in ("precision_window_s", "produce_s"):
            if not 0 < getattr(self, name) <= 3600:
                raise InvalidConfig(f"{name}={getattr(self, name)!r}: give a number of seconds above 0, at most 3600")
        if not 0 < self.failing_share < 1:
            raise InvalidConfig(f"failing_share={self.failing_share!r}: give a share between 0 and 1")
        unknown = set(self.phases) - set(PHASES)
        if unknown or not self.phases:
            raise InvalidConfig(f"phases={','.join(self.phases)}: name some of {', '.join(PHASES)}")


def latency_figures(values_ms: Sequence[float]) -> dict:
    return {"count": len(values_ms),
            **{f"p{label}_ms": round(nearest_rank_value(values_ms, q), 3) if values_ms else None
               for label, q in (("50", "50"), ("99", "99"), ("99_9", "99.9"), ("100", "100"))}}


def summary(report: dict) -> dict:
    """The figures the report quotes: produce p99.9 with the million scheduled over without (each
    run without), the due-time error, memory per scheduled message, recovery, and each retry
    run's rate over the mean of the never-failing runs'."""
    produce = report.get("produce", [])
    with_runs = [run["latency"]["p99_9_ms"] for run in produce if run["scheduled"] == "with"]
    out: dict = {"produce_p99_9_ms": [(run["scheduled"], run["latency"]["p99_9_ms"]) for run in produce]}
    if with_runs:
        out["produce_p99_9_with_over_without"] = [round(with_runs[0] / run["latency"]["p99_9_ms"], 3)
                                                  for run in produce if run["scheduled"] == "without"]
    if "precision" in report:
        out["due_time_error_ms"] = report["precision"]["due_time_error"]
        out["early"] = report["precision"]["early"]
    if "schedule" in report:
        out["bytes_per_scheduled_message"] = report["schedule"]["bytes_per_scheduled_message"]
    if "recovery" in report:
        out["recovered_after_ms"] = report["recovery"]["recovered_after_ms"]
    retries = report.get("retries", [])
    base = [run["messages_per_s"] for run in retries if run["handler"] == "never fails"]
    if base:
        mean = sum(base) / len(base)
        out["retry_rates_over_never_failing_mean"] = [
            (run["handler"], run["repetition"], round(run["messages_per_s"] / mean, 4),
             round(run["first_pass_messages_per_s"] / mean, 4) if run["first_pass_messages_per_s"] else None)
            for run in retries]
    return out
