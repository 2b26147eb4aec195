"""The runtime's costs that the fleet model scales up: ``CalibrationParams``, and their JSON form.

Every field is a cost of the real mafka4 runtime, measured by ``calibrate`` on a local cluster
(CPU time per request and per message of each actor role, idle CPU and unique memory of each
actor, base latencies), except ``service_scv``, which is assumed (see its comment). CPU costs
are CPU time of the actor processes, which a busy machine inflates far less than it inflates
latencies; the latencies are the least certain figures.

Per-message costs are for a message of ``reference_message_bytes``; a message of ``b`` bytes
costs ``msg_cpu_us + (b - reference_message_bytes) * byte_cpu_ns / 1000``.

``DEFAULT_CALIBRATION`` is one calibration run, copied here so the model runs without a cluster
(where and when it was measured is in ``DEFAULT_CALIBRATION_SOURCE``).
"""

from __future__ import annotations

import json
import math
from dataclasses import MISSING, asdict, dataclass, fields
from pathlib import Path

import numpy as np

from mafka4.errors import InvalidConfig

REFERENCE_MESSAGE_BYTES = 1024


@dataclass(frozen=True, slots=True)
class CalibrationParams:
    """Costs of the runtime's actors. CPU in µs (or ns per byte) of one core; memory in MB."""

    # A physical leader appending a produce request (validate CRC, stamp offsets, append).
    produce_request_cpu_us: float
    produce_msg_cpu_us: float
    produce_byte_cpu_ns: float
    # Replicating to ONE follower: the leader serving its fetch plus the follower appending.
    replication_request_cpu_us: float
    replication_msg_cpu_us: float
    replication_byte_cpu_ns: float
    # A replica serving a reader's fetch (a consumer, or a feeder): per fetch and per message.
    read_request_cpu_us: float
    read_msg_cpu_us: float
    read_byte_cpu_ns: float
    # Feeding VPs, per VP call and per message: the feeder (fetch, split, call) and the VP
    # leader (append, track progress). Which VPs a round calls: ``ModelConfig.feeder_calls_every_vp``.
    feeder_call_cpu_us: float
    feeder_msg_cpu_us: float
    vp_feed_call_cpu_us: float
    vp_feed_msg_cpu_us: float
    # CPU an actor burns with no traffic (long-poll loops, lease refresh, housekeeping), in cores.
    idle_replica_cpu_cores: float
    idle_vp_replica_cpu_cores: float
    idle_feeder_cpu_cores: float
    # Extra idle CPU of a whole partition with two or more followers, measured at RF=3. It was
    # 0.79 core while each follower's fetch woke every parked long poll (two followers woke
    # each other in a loop); since leaders wake long polls only when the HW or ISR moved it is
    # within the noise of the idle figures.
    idle_wakeup_cpu_cores_per_partition: float
    # Unique memory (USS) of one actor process.
    replica_memory_mb: float
    vp_replica_memory_mb: float
    feeder_memory_mb: float
    # Produce latency (acks=all, send to ack, the producer's default 5 ms linger included) at a
    # low rate on a node with few replicas: the p50 of the public Producer.
    produce_base_latency_ms: float
    # From the acknowledgement until a waiting consumer's fetch returns the message:
    # read from the physical leader (mafka3), or from a VP after feeding (mafka4).
    physical_read_base_latency_ms: float
    virtual_read_base_latency_ms: float
    # Extra produce latency per replica hosted on a node (more actors to schedule), measured by
    # adding idle unreplicated partitions (whose small idle CPU the model also counts in a node's
    # utilisation); 0 when the difference is within the run-to-run noise. Kafka's published
    # figure is about 0.02 ms per partition (1,000 partitions add ~20 ms).
    pass_ms_per_replica: float
    # Squared coefficient of variation of a request's CPU time (1.0: exponential). Assumed,
    # not measured: the runtime exposes no per-request CPU times.
    service_scv: float = 1.0
    reference_message_bytes: int = REFERENCE_MESSAGE_BYTES

    def __post_init__(self) -> None:
        for field in fields(self):
            value = getattr(self, field.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise InvalidConfig(f"calibration {field.name}={value!r} must be a finite number")
            if value < 0:
                raise InvalidConfig(f"calibration {field.name}={value} is negative; costs and latencies are >= 0 "
                                    f"(re-run 'fleet calibrate' or fix the calibration file)")
        # feeder_memory_mb may be 0: read nodes feed in process, so no feeder process exists.
        for name in ("produce_msg_cpu_us", "replication_msg_cpu_us", "read_msg_cpu_us", "feeder_msg_cpu_us",
                     "replica_memory_mb", "vp_replica_memory_mb"):
            if getattr(self, name) <= 0:
                raise InvalidConfig(f"calibration {name}={getattr(self, name)} must be > 0: every message and every "
                                    f"actor costs something")
        if self.reference_message_bytes < 1:
            raise InvalidConfig(f"calibration reference_message_bytes={self.reference_message_bytes} must be >= 1")

    def message_cpu_us(self, role: str, message_bytes):
        """CPU µs per message of ``role`` (produce, replication, read) at ``message_bytes`` (a number
        or an array); never below 10 % of the reference cost, so a tiny message is not free."""
        msg_us = getattr(self, f"{role}_msg_cpu_us")
        byte_ns = getattr(self, f"{role}_byte_cpu_ns")
        return np.maximum(0.1 * msg_us, msg_us + (np.asarray(message_bytes) - self.reference_message_bytes) * byte_ns / 1000)

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, values: dict) -> "CalibrationParams":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise InvalidConfig(f"calibration has unknown field(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        missing = sorted(f.name for f in fields(cls) if f.name not in values and f.default is MISSING)
        if missing:
            raise InvalidConfig(f"calibration lacks field(s) {', '.join(missing)}; re-run 'fleet calibrate'")
        return cls(**values)


def load_calibration(path: str | Path) -> CalibrationParams:
    """The ``derived`` parameters of a ``calibration.json`` written by ``fleet calibrate``."""
    try:
        document = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise InvalidConfig(f"cannot read calibration {str(path)!r}: {error}; write one with 'fleet calibrate'") from None
    if not isinstance(document, dict) or not isinstance(document.get("derived"), dict):
        raise InvalidConfig(f"calibration {str(path)!r} has no 'derived' object; write it with 'fleet calibrate'")
    return CalibrationParams.from_json(document["derived"])


# DEFAULT_CALIBRATION below is the "derived" object of this file, the whole document of one
# calibration run (raw figures, command, date, commit), which ``sweep`` copies next to event logs.
DEFAULT_CALIBRATION_PATH = Path(__file__).with_name("calibration_default.json")
DEFAULT_CALIBRATION_SOURCE = (
    "one 'fleet calibrate' run on 2026-11-23 03:44 UTC at commit 13012ecc91f6: a 3 write + 1 read node local "
    "cluster on a quiet 2-core machine (load average 2 to 4 during the run), 102 s; CPU and memory figures are "
    "firm, latencies noisy (see calibration_default.json)"
)

DEFAULT_CALIBRATION = CalibrationParams(
    produce_request_cpu_us=1030.7873,
    produce_msg_cpu_us=8.4527,
    produce_byte_cpu_ns=6.2132,
    replication_request_cpu_us=1147.7703,
    replication_msg_cpu_us=11.6697,
    replication_byte_cpu_ns=4.0559,
    read_request_cpu_us=1122.1195,
    read_msg_cpu_us=4.0305,
    read_byte_cpu_ns=4.0322,
    feeder_call_cpu_us=1287.8348,
    feeder_msg_cpu_us=20.9809,
    vp_feed_call_cpu_us=1834.4661,
    vp_feed_msg_cpu_us=18.818,
    idle_replica_cpu_cores=0.01875,
    idle_vp_replica_cpu_cores=0.015,
    idle_feeder_cpu_cores=0.02,
    idle_wakeup_cpu_cores_per_partition=0.00875,
    replica_memory_mb=65.5,
    vp_replica_memory_mb=66.0,
    feeder_memory_mb=67.6,
    produce_base_latency_ms=11.148,
    physical_read_base_latency_ms=0.309,
    virtual_read_base_latency_ms=6.759,
    pass_ms_per_replica=0.0,
)
