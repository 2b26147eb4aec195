"""The runtime's costs that the fleet model scales up: ``CalibrationParams``, and their JSON form.

Every field is a cost of the real mafka4 runtime, measured by ``calibrate`` on a local cluster
(CPU time per request and per message of each actor role, idle CPU and unique memory of each
actor, base latencies), except ``service_scv``, which is assumed (see its comment). CPU costs
are CPU time of the actor processes, which a busy machine inflates far less than it inflates
latencies; the latencies are the least certain figures.

Per-message costs are for a message of ``reference_message_bytes``; a message of ``b`` bytes
costs ``msg_cpu_us + (b - reference_message_bytes) * byte_cpu_ns / 1000``.

**The calibration document** (``calibration.json``, written by ``calibrate``) holds, besides
``derived`` (these parameters): ``raw`` (the measured figures; ``raw.format`` is
``CALIBRATION_FORMAT``, the shape ``fit`` reads, and a ``raw`` without it is format 1),
``measurement_error`` (the same keys, absolute 1-sigma errors, see ``fit``), ``notes``,
``command``, ``date``, ``git_commit``, ``cluster``, ``settings``, ``elapsed_s`` and ``machine``
(CPU count, load averages before, after and during the run, ``quiet``).

**Quiet** means the machine's background load was at most ``QUIET_LOAD_PER_CORE_MAX`` per core:
every 1-minute load average read while the calibration itself left the machine idle (before the
run, and at the idle windows' start and end) stayed at or under it. Above that, runnable threads
waited for a core, which slows the runs and lengthens every latency measured. The cost and
latency trials saturate the cores on purpose, so the readings after them measure the
calibration itself; they are recorded and quoted, but do not decide ``quiet``.

``DEFAULT_CALIBRATION`` is the ``derived`` object of the shipped run,
``calibration_default.json``, read at import so that the model runs without a cluster; where
and when it was measured is ``DEFAULT_CALIBRATION_SOURCE``, generated from that document
(``calibration_source``), never written by hand.
"""

from __future__ import annotations

import json
import math
from dataclasses import MISSING, asdict, dataclass, fields
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from mafka4.errors import InvalidConfig

REFERENCE_MESSAGE_BYTES = 1024
CALIBRATION_FORMAT = 2  # the shape of "raw" that fit.derive_params reads
QUIET_LOAD_PER_CORE_MAX = 1.0


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
    # A read node feeds in process, so its whole CPU is measured as the feeder's and vp_feed_*
    # (separate VP processes) come out at their floors.
    feeder_call_cpu_us: float
    feeder_msg_cpu_us: float
    vp_feed_call_cpu_us: float
    vp_feed_msg_cpu_us: float
    # CPU an actor burns with no traffic (long-poll loops, lease refresh, housekeeping), in cores.
    # A VP replica is a log inside a read node: its figure is the node's growth per hosted VP
    # replica. No feeder process exists (read nodes feed in process): idle_feeder_cpu_cores is 0.
    idle_replica_cpu_cores: float
    idle_vp_replica_cpu_cores: float
    idle_feeder_cpu_cores: float
    # Extra idle CPU of a whole partition with two or more followers, measured at RF=3. It was
    # 0.79 core while each follower's fetch woke every parked long poll (two followers woke
    # each other in a loop); since leaders wake long polls only when the HW or ISR moved it is
    # within the noise of the idle figures.
    idle_wakeup_cpu_cores_per_partition: float
    # Memory: a replica's is the unique memory (USS) of its actor process; a VP replica's the
    # read node's RSS growth per hosted VP replica; a feeder's 0 (no feeder process).
    replica_memory_mb: float
    vp_replica_memory_mb: float
    feeder_memory_mb: float
    # Produce latency (acks=all, send to ack, the producer's default 5 ms linger included) at a
    # low rate on a node with few replicas: the p50 of the public Producer.
    produce_base_latency_ms: float
    # From the acknowledgement until a waiting consumer's fetch returns the message, over the
    # client port of the physical leader (mafka3), or of a VP's read node after feeding (mafka4).
    physical_read_base_latency_ms: float
    virtual_read_base_latency_ms: float
    # Extra produce latency per replica hosted on a node (more actors to schedule), measured by
    # adding idle unreplicated partitions (whose small idle CPU the model also counts in a node's
    # utilisation); 0 unless a Welch t-test tells it from the run-to-run noise (``fit``). Kafka's published
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


def load_document(path: str | Path) -> dict:
    """A ``calibration.json`` written by ``fleet calibrate``: a JSON object with a ``derived`` object."""
    try:
        document = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise InvalidConfig(f"cannot read calibration {str(path)!r}: {error}; write one with 'fleet calibrate'") from None
    if not isinstance(document, dict) or not isinstance(document.get("derived"), dict):
        raise InvalidConfig(f"calibration {str(path)!r} has no 'derived' object; write it with 'fleet calibrate'")
    return document


def load_calibration(path: str | Path) -> CalibrationParams:
    """The ``derived`` parameters of a ``calibration.json`` written by ``fleet calibrate``."""
    return CalibrationParams.from_json(load_document(path)["derived"])


def measurement_error_of(document: dict) -> dict[str, float]:
    """The document's 1-sigma errors by parameter; {} if it has none (format 1)."""
    errors = document.get("measurement_error") or {}
    known = {f.name for f in fields(CalibrationParams)}
    for name, value in errors.items():
        if name not in known:
            raise InvalidConfig(f"calibration measurement_error names {name!r}, not a parameter; known: "
                                f"{', '.join(sorted(known))}")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise InvalidConfig(f"calibration measurement_error {name}={value!r} must be a finite number >= 0")
    return dict(errors)


# The phases of a run in which the calibration leaves the machine idle (``calibrate._LoadRecord``).
BACKGROUND_PHASES = frozenset({"idle before", "idle after"})


def recorded_loads_1m(machine: dict) -> list[float]:
    """Every 1-minute load average a calibration recorded: before, during (format 2) and after."""
    loads = [machine[key][0] for key in ("load_average_before", "load_average_after") if machine.get(key)]
    return loads + [sample["load_average_1m"] for sample in machine.get("load_average_1m_samples", [])]


def background_loads_1m(machine: dict) -> list[float]:
    """The 1-minute load averages read while the calibration left the machine idle.

    Format 1 recorded no phases: there, before and after are all there is.
    """
    samples = machine.get("load_average_1m_samples")
    if samples is None:
        return recorded_loads_1m(machine)
    before = [machine["load_average_before"][0]] if machine.get("load_average_before") else []
    return before + [sample["load_average_1m"] for sample in samples if sample["phase"] in BACKGROUND_PHASES]


def is_quiet(loads_1m: list[float], cpu_count: int) -> bool:
    """True if every given 1-minute load average is at most ``QUIET_LOAD_PER_CORE_MAX`` per core."""
    assert loads_1m and cpu_count >= 1, (loads_1m, cpu_count)
    return max(loads_1m) <= QUIET_LOAD_PER_CORE_MAX * cpu_count


def calibration_source(document: dict) -> str:
    """Where and when a calibration was measured, in one sentence, from its document alone."""
    machine = document.get("machine", {})
    cpu_count, loads, background = machine.get("cpu_count"), recorded_loads_1m(machine), background_loads_1m(machine)
    when = (datetime.fromisoformat(document["date"]).astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
            if document.get("date") else "an unknown date")
    cluster = document.get("cluster")
    shape = f"a {cluster['write_nodes']} write + {cluster['read_nodes']} read node local cluster on " if cluster else ""
    if cpu_count and loads:
        quiet = "quiet" if is_quiet(background, cpu_count) else "NOT quiet"
        load = (f"{quiet}: background 1-minute load average {min(background):g} to {max(background):g} "
                f"(before the run and in its idle windows), {min(loads):g} to {max(loads):g} over all "
                f"{len(loads)} readings (its own trials load the cores); 1/5/15-minute "
                f"{machine.get('load_average_before')} before, {machine.get('load_average_after')} after; "
                f"quiet means a background load average <= {QUIET_LOAD_PER_CORE_MAX:g} per core")
    else:
        load = "no load average recorded, so not known to be quiet"
    text = (f"one 'fleet calibrate' run on {when} at commit {str(document.get('git_commit'))[:12]}: {shape}a "
            f"{cpu_count}-core machine, {load}; {document.get('elapsed_s')} s")
    format_ = document.get("raw", {}).get("format", 1)
    if format_ != CALIBRATION_FORMAT:
        text += (f"; its raw figures are in calibration format {format_}, not {CALIBRATION_FORMAT}: 'derived' is what "
                 f"that run's fit wrote and cannot be re-derived; re-run 'fleet calibrate'")
    return text


# The whole document of the shipped run (raw figures, command, date, commit) is what ``sweep``
# copies next to event logs; DEFAULT_CALIBRATION is its "derived" object.
DEFAULT_CALIBRATION_PATH = Path(__file__).with_name("calibration_default.json")
DEFAULT_CALIBRATION_DOCUMENT = load_document(DEFAULT_CALIBRATION_PATH)
DEFAULT_CALIBRATION = CalibrationParams.from_json(DEFAULT_CALIBRATION_DOCUMENT["derived"])
DEFAULT_CALIBRATION_SOURCE = calibration_source(DEFAULT_CALIBRATION_DOCUMENT)
