"""What ``mafka4 bench kafka-clients`` is asked to measure (``KafkaClientsBenchSettings``), and its pure figures.

Kept apart from ``benchmarks.kafka_clients`` (the driver, which imports the clients) so that the CLI
reads the defaults without importing them. A field with a ``help`` in its metadata is an option of
the command (``mafka4.cli.bench``); the others are fixed for the bench.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from mafka4.bench.stats import nearest_rank_value
from mafka4.errors import InvalidConfig

CLIENTS = ("mafka4", "kafka")  # mafka4's own Producer/Consumer; confluent-kafka (produce) and kcat (consume)


@dataclass(frozen=True, slots=True)
class KafkaClientsBenchSettings:
    repetitions: int = field(default=2, metadata={"help": "pairs of runs, the two clients alternating (A B A B)"})
    messages: int = field(default=20_000, metadata={"help": "messages of the throughput phase, sent as fast as acked"})
    rate_msgs_s: int = field(default=1_000, metadata={"help": "the latency phase's paced rate"})
    latency_s: float = field(default=10.0, metadata={"help": "the latency phase's length"})
    message_bytes: int = 100
    keys: int = 100
    partitions: int = 2
    virtual_partitions: int = 4
    # Both producers batch alike: the same linger, acks=all.
    linger_ms: int = 5
    # A run waits this long for its last acknowledgement or its last message read, then fails.
    drain_s_max: float = 120.0

    def __post_init__(self) -> None:
        for name in ("repetitions", "messages", "rate_msgs_s", "message_bytes", "keys", "partitions",
                     "virtual_partitions"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidConfig(f"{name}={value!r}: give a whole number of at least 1")
        if not 0 < self.latency_s <= 3600:
            raise InvalidConfig(f"latency_s={self.latency_s!r}: give a number of seconds above 0, at most 3600")


def latency_figures(latencies_ms: Sequence[float]) -> dict:
    return {"count": len(latencies_ms),
            **{f"p{label}_ms": round(nearest_rank_value(latencies_ms, q), 3) if latencies_ms else None
               for label, q in (("50", "50"), ("99", "99"), ("99_9", "99.9"))}}


def ratios(runs: Sequence[dict]) -> dict:
    """Per repetition, Kafka client over mafka4 client: throughput and produce p99.9 of the pair."""
    by_repetition: dict[int, dict[str, dict]] = {}
    for run in runs:
        by_repetition.setdefault(run["repetition"], {})[run["client"]] = run
    out = []
    for repetition, pair in sorted(by_repetition.items()):
        if set(pair) != set(CLIENTS):
            continue
        kafka, mafka4 = pair["kafka"], pair["mafka4"]
        out.append({"repetition": repetition,
                    "produce_msgs_s": _ratio(kafka["produce_msgs_s"], mafka4["produce_msgs_s"]),
                    "produce_p99_9_ms": _ratio(kafka["latency"]["p99_9_ms"], mafka4["latency"]["p99_9_ms"]),
                    "consume_msgs_s": _ratio(kafka["consume_msgs_s"], mafka4["consume_msgs_s"])})
    return {"kafka_over_mafka4": out}


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else round(a / b, 3)

