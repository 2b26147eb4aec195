"""What ``mafka4 bench produce`` is asked to measure (``ProduceBenchSettings``).

Kept apart from ``bench.produce`` (the driver, which imports Ray) so that the CLI reads the
defaults without importing Ray. A field with a ``help`` in its metadata is an option of the
command (``mafka4.cli.bench``); the others are fixed for the bench.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mafka4.limits import Acks, MiB, ProducerConfig


@dataclass(frozen=True, slots=True)
class ProduceBenchSettings:
    messages: int = field(default=300_000, metadata={"help": "messages sent by each throughput run"})
    message_bytes: int = field(default=1024, metadata={"help": "bytes of each message's value"})
    partitions: int = field(default=2, metadata={"help": "physical partitions of the topic"})
    replication_factor: int = field(default=2, metadata={"help": "replicas per partition"})
    acks: str = field(default=ProducerConfig().acks.value,
                      metadata={"help": "acks of every produce", "choices": tuple(a.value for a in Acks)})
    linger_ms: int = field(default=ProducerConfig().linger_ms, metadata={"help": "the producer's linger_ms"})
    batch_bytes_max: int = field(default=ProducerConfig().batch_bytes_max,
                                 metadata={"help": "the producer's batch_bytes_max"})
    in_flight_batches_max: int = 5
    paced_msgs_per_s: int = field(default=10_000, metadata={"help": "rate of the latency run"})
    paced_seconds: int = 10
    stalled_producer: bool = field(default=True, metadata={"help": "skip the stalled-producer memory measurement",
                                                           "switch": "--skip-memory"})
    stalled_seconds: int = 20
    stalled_buffer_bytes_max: int = 64 * MiB
