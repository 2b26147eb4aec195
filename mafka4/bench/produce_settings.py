"""What ``mafka4 bench produce`` is asked to measure (``ProduceBenchSettings``).

Kept apart from ``bench.produce`` (the driver, which imports Ray) so that the CLI reads the
defaults without importing Ray. A field with a ``help`` in its metadata is an option of the
command (``mafka4.cli.bench``); the others are fixed for the bench. Validated on construction, so
that a bad value is refused before anything connects.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mafka4.bench.payloads import JSON_MESSAGE_BYTES_MIN, PAYLOAD_KINDS
from mafka4.compression import Codec
from mafka4.errors import InvalidConfig
from mafka4.limits import Acks, MiB, ProducerConfig, TopicConfig, default_compression


@dataclass(frozen=True, slots=True)
class ProduceBenchSettings:
    messages: int = field(default=300_000, metadata={"help": "messages sent by each throughput run"})
    message_bytes: int = field(default=1024, metadata={"help": "bytes of each message's value"})
    payload: str = field(default="random", metadata={
        "help": "message values: random bytes, which no codec shrinks, or json: JSON events (orders, clicks, "
                f"searches) of about --message-bytes ({JSON_MESSAGE_BYTES_MIN} or more)", "choices": PAYLOAD_KINDS})
    # None: the Producer's own default, read when the run starts (limits.default_compression).
    compression: tuple[str, ...] | None = field(default=None, metadata={
        "help": "batch codecs to measure in turn in this run: none, lz4, zstd; ratios are to the first (default: "
                "the Producer's, $MAFKA4_COMPRESSION if set, else none)"})
    partitions: int = field(default=2, metadata={"help": "physical partitions of the topic"})
    replication_factor: int = field(default=2, metadata={"help": "replicas per partition"})
    segment_bytes_max: int = field(default=TopicConfig().segment_bytes_max, metadata={
        "help": "segment size of the topic; a small one (e.g. 8388608) rolls every few seconds in the paced run, "
                "whose latency then shows what a roll costs"})
    acks: str = field(default=ProducerConfig().acks.value,
                      metadata={"help": "acks of every produce", "choices": tuple(a.value for a in Acks)})
    linger_ms: int = field(default=ProducerConfig().linger_ms, metadata={"help": "the producer's linger_ms"})
    batch_bytes_max: int = field(default=ProducerConfig().batch_bytes_max,
                                 metadata={"help": "the producer's batch_bytes_max"})
    in_flight_batches_max: int = 5
    paced_msgs_per_s: int = field(default=10_000, metadata={"help": "rate of the latency run"})
    paced_seconds: int = 10
    gc_freeze: bool = field(default=False, metadata={
        "help": "freeze what the bench's start left out of its garbage collector's full collections "
                "(gc.freeze, as the README advises applications): the producer runs measure without those pauses"})
    stalled_producer: bool = field(default=True, metadata={"help": "skip the stalled-producer memory measurement",
                                                           "switch": "--skip-memory"})
    stalled_seconds: int = 20
    stalled_buffer_bytes_max: int = 64 * MiB
    # Seeds the values (bench.payloads): the same seed, the same traffic.
    payload_seed: int = 0

    def __post_init__(self) -> None:
        if self.message_bytes < 1:
            raise InvalidConfig(f"message_bytes={self.message_bytes} is out of range: use 1 or more")
        if self.payload not in PAYLOAD_KINDS:
            raise InvalidConfig(f"payload={self.payload!r} is not valid: use one of {', '.join(PAYLOAD_KINDS)}")
        if self.payload == "json" and self.message_bytes < JSON_MESSAGE_BYTES_MIN:
            raise InvalidConfig(f"message_bytes={self.message_bytes} is too small for payload=json: a JSON event "
                                f"needs {JSON_MESSAGE_BYTES_MIN} bytes or more")
        TopicConfig(segment_bytes_max=self.segment_bytes_max)  # raises InvalidConfig naming the bounds
        if self.compression is not None:
            codecs = tuple(str(Codec.parse(name)) for name in self.compression)
            if not codecs or len(set(codecs)) != len(codecs):
                raise InvalidConfig(f"compression={','.join(self.compression)}: give one or more codecs, each once, "
                                    f"e.g. none,zstd")
            object.__setattr__(self, "compression", codecs)

    def codecs(self) -> tuple[Codec, ...]:
        """The codecs to measure, in order: ``compression``, or the Producer's default codec."""
        if self.compression is None:
            return (default_compression(),)
        return tuple(Codec.parse(name) for name in self.compression)
