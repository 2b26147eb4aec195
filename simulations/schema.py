"""The event-log schema: the one Parquet layout that every experiment writes and the analysis reads.

This docstring is the single place where the columns are documented. The consumer-scaling
experiment on the real runtime (``source="runtime"``) and the fleet-scale model
(``source="fleet_model"``) both write it through :func:`write_events`; the Spark job in
``simulations.analysis.job`` reads it. One row is one message, or one sampled request when
``sample_rate`` < 1 (each row then stands for ``1 / sample_rate`` messages).

Per-run columns (the same value on every row of a file; set them on :class:`RunInfo`):

===================== ======= ========================================================================
column                type    meaning (unit)
===================== ======= ========================================================================
experiment_id         string  name of the experiment run, e.g. ``"scaling-2024-06-01-seed7"``; never
                              empty. Rows of one run may be spread over several files.
source                string  ``"runtime"`` (measured on the real runtime) or ``"fleet_model"``
                              (computed by the fleet-scale model in ``simulations/fleet/``).
mode                  string  ``"mafka3"`` (consumers read physical partitions, one partition per
                              consumer) or ``"mafka4"`` (consumers read virtual partitions).
consumers             int32   consumers in the group reading the topic(s), >= 1.
topics                int32   topics in the run, >= 1: 1 for the runtime experiment, the fleet size for
                              the fleet model.
lanes                 int32   lanes (named sub-streams of a topic) the run's messages were spread over,
                              round robin, >= 0; 0 = no lanes, every message on the trunk (every run
                              before lanes existed). A Mafka4 lane is a set of VPs over the topic's
                              physical partitions; a Mafka3 lane ``L`` of topic ``T`` is a topic of its
                              own, ``T.L``, counted here and in ``physical_partitions`` and ``actors``,
                              not in ``topics``. The fleet model records 0 (its lanes, on a share of its
                              topics, are in ``fleet_summary.json`` and its logs' names).
physical_partitions   int32   physical partitions, summed over all topics of the run, >= 1.
virtual_partitions    int32   virtual partitions, summed over all topics of the run; 0 in mafka3 mode,
                              >= 1 in mafka4 mode.
write_nodes           int32   nodes that host physical-partition replicas (write side), >= 1.
read_nodes            int32   nodes that host virtual-partition replicas (read side), >= 0; 0 when the
                              run has no separate read nodes (mafka3 mode reads from write nodes).
actors                int32   Ray actors the run used (physical partition replicas + one read node actor
                              per read node hosting the topic's VPs), >= 0; for the fleet model, the
                              actors the design would need.
sample_rate           float64 fraction of messages that have a row, in (0, 1]; 1.0 = every message.
seed                  int64   the seed of the run (every experiment prints and records it).
repetition            int32   which repetition of its configuration the run is, >= 0 (0 when the
                              configuration runs once); repetitions of one configuration differ in
                              ``seed``, and the analysis computes percentiles per repetition first.
git_commit            string  ``git rev-parse HEAD`` of the code that produced the run, with
                              ``-dirty`` appended when tracked files had uncommitted changes, or
                              ``"unknown"`` outside a git checkout (see :func:`git_commit`).
===================== ======= ========================================================================

Per-row columns (one value per message; pass them to :func:`write_events` in ``columns``):

===================== ======= ========================================================================
column                type    meaning (unit)
===================== ======= ========================================================================
partition             int32   physical partition the message was written to, as an index over all
                              physical partitions of the run: ``0 <= partition < physical_partitions``.
                              Required, never null.
virtual_partition     int32   virtual partition the message was split to, ``0 <= virtual_partition <
                              virtual_partitions``; null in mafka3 mode, and null in mafka4 mode when
                              the message was never split (e.g. not committed before the run ended).
produce_time_ms       float64 wall clock (epoch milliseconds, ``time.time() * 1000``) when the producer
                              called ``send``. Required, never null.
ack_time_ms           float64 wall clock (epoch ms) when the producer saw the acknowledgement; null if
                              the message was never acknowledged.
consume_time_ms       float64 wall clock (epoch ms) when a consumer's ``poll`` returned the message;
                              null if it was never consumed.
produce_latency_ms    float64 ``ack_time_ms - produce_time_ms`` (ms), >= 0; null if never acknowledged.
end_to_end_latency_ms float64 ``consume_time_ms - produce_time_ms`` (ms), >= 0; null if never consumed.
deliveries            int32   how many times consumers received the message: 0 never, 1 once, more
                              for duplicates (at-least-once redelivery); null when not counted (the
                              fleet model).
===================== ======= ========================================================================

Stage stamps (per row, nullable float64, wall clock in epoch ms like the times above; null when
the stage was not observed, e.g. the fleet model, a message never acknowledged, or a mafka3 run,
which has no VP). They split a message's path into the stages of ``STAGES``; every stamp is
taken on this machine's one wall clock, by the process named:

======================== ==========================================================================
column                   the moment (process)
======================== ==========================================================================
sent_time_ms             the producer's sender took the message's batch out of the accumulator and
                         called the leader (client); first attempt
leader_received_time_ms  the physical leader's ``produce`` began handling the batch (leader actor)
leader_appended_time_ms  the batch was in the leader's log (appended to the page cache; the log
                         flushes on its own schedule, ``flush_interval_ms``, not per request)
committed_time_ms        the high watermark passed the batch (every ISR member has it) and the
                         leader answered (leader actor)
vp_appended_time_ms      mafka4: the read node appended the message to its VP leader's log
                         (read node actor, after fetching committed data and splitting it)
vp_committed_time_ms     mafka4: the VP high watermark passed the message (every RISR member has
                         it): consumers may read it from then on (read node actor)
======================== ==========================================================================

The stages (``STAGES``: name -> (later stamp, earlier stamp)) are, for produce latency:
``accumulator`` (send -> sent), ``request_queue`` (sent -> leader_received: Ray's transport and
the actor's queue), ``append`` (leader_received -> leader_appended: ordering of in-flight batches
and the append), ``isr_wait`` (leader_appended -> committed: waiting for the followers) and
``ack_return`` (committed -> ack: the answer's way back and the callback); for end-to-end
latency after ``committed``: mafka3 ``fetch`` (committed -> consume), mafka4 ``feeding``
(committed -> vp_appended), ``vp_hw_wait`` (vp_appended -> vp_committed) and ``fetch``
(vp_committed -> consume: the consumer's long poll waking, the transfer, decoding).

``partition`` and ``produce_time_ms`` are required. The other per-row columns may be left out:
they are then null, except that a latency left out is derived from its two times. When a latency
and both its times are given they must agree (to ``LATENCY_TOLERANCE_MS``). NaN in a nullable
float column is stored as null. The fleet model may give latencies without ack/consume times.
A latency derived from epoch-ms times has float64 resolution of about 0.00025 ms.

Files are written atomically (a hidden temp file in the same directory, fsynced, then renamed),
so a crash never leaves a half-written ``*.parquet`` file; readers skip hidden (``.``) and
underscore-prefixed files and directories holding an ``_MAFKA4_ANALYSIS`` marker (the
analysis output). The schema carries the metadata key ``mafka4.event_schema_version``;
bump :data:`SCHEMA_VERSION` on any incompatible change. Version 3 added ``lanes``; files of
version 2 (``READABLE_SCHEMAS``: the same columns without it) are still read, as ``lanes = 0``.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from mafka4.durable_files import replace_file
from mafka4.errors import InvalidEventLog, NoEventLogs
from mafka4.limits import ReadMode

SCHEMA_VERSION = "3"
SOURCES = ("runtime", "fleet_model")
# A run's mode is the read mode of its topics, stored as its string.
MODES = (ReadMode.MAFKA3.value, ReadMode.MAFKA4.value)
# Epoch milliseconds near 1.7e12 carry about 2.4e-4 ms of float64 resolution.
LATENCY_TOLERANCE_MS = 1e-3
INT32_MAX = 2**31 - 1
# A directory holding this file is analysis output (``simulations.analysis.job``), not event logs.
ANALYSIS_MARKER = "_MAFKA4_ANALYSIS"

EVENT_SCHEMA = pa.schema(
    [
        pa.field("experiment_id", pa.string(), nullable=False),
        pa.field("source", pa.string(), nullable=False),
        pa.field("mode", pa.string(), nullable=False),
        pa.field("consumers", pa.int32(), nullable=False),
        pa.field("topics", pa.int32(), nullable=False),
        pa.field("lanes", pa.int32(), nullable=False),
        pa.field("physical_partitions", pa.int32(), nullable=False),
        pa.field("virtual_partitions", pa.int32(), nullable=False),
        pa.field("write_nodes", pa.int32(), nullable=False),
        pa.field("read_nodes", pa.int32(), nullable=False),
        pa.field("actors", pa.int32(), nullable=False),
        pa.field("partition", pa.int32(), nullable=False),
        pa.field("virtual_partition", pa.int32(), nullable=True),
        pa.field("produce_time_ms", pa.float64(), nullable=False),
        pa.field("ack_time_ms", pa.float64(), nullable=True),
        pa.field("consume_time_ms", pa.float64(), nullable=True),
        pa.field("produce_latency_ms", pa.float64(), nullable=True),
        pa.field("end_to_end_latency_ms", pa.float64(), nullable=True),
        pa.field("sample_rate", pa.float64(), nullable=False),
        pa.field("seed", pa.int64(), nullable=False),
        pa.field("git_commit", pa.string(), nullable=False),
        pa.field("repetition", pa.int32(), nullable=False),
        pa.field("deliveries", pa.int32(), nullable=True),
        *[pa.field(name, pa.float64(), nullable=True) for name in (
            "sent_time_ms", "leader_received_time_ms", "leader_appended_time_ms", "committed_time_ms",
            "vp_appended_time_ms", "vp_committed_time_ms")],
    ],
    metadata={"mafka4.event_schema_version": SCHEMA_VERSION},
)
# Columns a version added, with the value a file of an older version reads as: version -> column -> value.
ADDED_COLUMNS = {"3": {"lanes": 0}}
# Every schema version still read -> its layout; a file of an older one reads with ADDED_COLUMNS filled in.
READABLE_SCHEMAS = {
    SCHEMA_VERSION: EVENT_SCHEMA,
    "2": pa.schema([field for field in EVENT_SCHEMA if field.name not in ADDED_COLUMNS["3"]],
                   metadata={"mafka4.event_schema_version": "2"}),
}

ROW_COLUMNS = (
    "partition",
    "virtual_partition",
    "produce_time_ms",
    "ack_time_ms",
    "consume_time_ms",
    "produce_latency_ms",
    "end_to_end_latency_ms",
    "deliveries",
    "sent_time_ms",
    "leader_received_time_ms",
    "leader_appended_time_ms",
    "committed_time_ms",
    "vp_appended_time_ms",
    "vp_committed_time_ms",
)
STAMP_COLUMNS = ROW_COLUMNS[-6:]
# Stage name -> (later stamp, earlier stamp); see the module doc. Produce stages sum to the
# produce latency; a mode's end-to-end stages after ``committed_time_ms`` sum, with the produce
# stages up to it, to the end-to-end latency.
PRODUCE_STAGES = {
    "accumulator": ("sent_time_ms", "produce_time_ms"),
    "request_queue": ("leader_received_time_ms", "sent_time_ms"),
    "append": ("leader_appended_time_ms", "leader_received_time_ms"),
    "isr_wait": ("committed_time_ms", "leader_appended_time_ms"),
    "ack_return": ("ack_time_ms", "committed_time_ms"),
}
READ_STAGES = {
    "mafka3": {"fetch": ("consume_time_ms", "committed_time_ms")},
    "mafka4": {
        "feeding": ("vp_appended_time_ms", "committed_time_ms"),
        "vp_hw_wait": ("vp_committed_time_ms", "vp_appended_time_ms"),
        "fetch": ("consume_time_ms", "vp_committed_time_ms"),
    },
}
REQUIRED_ROW_COLUMNS = ("partition", "produce_time_ms")
RUN_COLUMNS = tuple(name for name in EVENT_SCHEMA.names if name not in ROW_COLUMNS)
# latency column -> (later time, earlier time)
LATENCY_TIMES = {
    "produce_latency_ms": ("ack_time_ms", "produce_time_ms"),
    "end_to_end_latency_ms": ("consume_time_ms", "produce_time_ms"),
}


@dataclass(frozen=True, slots=True)
class RunInfo:
    """The per-run columns of an event log, validated on construction (see the module doc)."""

    experiment_id: str
    source: str
    mode: str
    consumers: int
    topics: int
    physical_partitions: int
    virtual_partitions: int
    write_nodes: int
    read_nodes: int
    actors: int
    seed: int
    git_commit: str
    sample_rate: float = 1.0
    repetition: int = 0
    lanes: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.experiment_id, str) or not self.experiment_id:
            raise InvalidEventLog("RunInfo.experiment_id must be a non-empty string")
        if self.source not in SOURCES:
            raise InvalidEventLog(f"RunInfo.source is {self.source!r}; use one of {SOURCES}")
        if self.mode not in MODES:
            raise InvalidEventLog(f"RunInfo.mode is {self.mode!r}; use one of {MODES}")
        minimums = {"consumers": 1, "topics": 1, "lanes": 0, "physical_partitions": 1, "virtual_partitions": 0,
                    "write_nodes": 1, "read_nodes": 0, "actors": 0, "repetition": 0}
        for name, minimum in minimums.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= INT32_MAX:
                raise InvalidEventLog(f"RunInfo.{name} is {value!r}; it must be an int in [{minimum}, {INT32_MAX}]")
        if self.mode == ReadMode.MAFKA3 and self.virtual_partitions != 0:
            raise InvalidEventLog(
                f"RunInfo.virtual_partitions is {self.virtual_partitions} in mafka3 mode; mafka3 has no "
                "virtual partitions, record 0")
        if self.mode == ReadMode.MAFKA4 and self.virtual_partitions < 1:
            raise InvalidEventLog("RunInfo.virtual_partitions is 0 in mafka4 mode; record the virtual partitions used")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not -2**63 <= self.seed < 2**63:
            raise InvalidEventLog(f"RunInfo.seed is {self.seed!r}; it must be an int64")
        if not isinstance(self.git_commit, str) or not self.git_commit:
            raise InvalidEventLog("RunInfo.git_commit must be a non-empty string; use schema.git_commit()")
        if not (isinstance(self.sample_rate, (int, float)) and 0.0 < self.sample_rate <= 1.0):
            raise InvalidEventLog(f"RunInfo.sample_rate is {self.sample_rate!r}; it must be in (0, 1]")


def write_events(path: str | os.PathLike[str], run: RunInfo, columns: Mapping[str, Sequence[Any]]) -> Path:
    """Validate one run's rows and write them atomically to ``path`` (a ``*.parquet`` file).

    ``columns`` maps per-row column names to equally long sequences (lists, numpy arrays or
    pyarrow arrays). Raises :class:`InvalidEventLog` naming the first bad column. Returns the path.
    """
    target = Path(path)
    if target.suffix != ".parquet" or target.name.startswith((".", "_")):
        raise InvalidEventLog(
            f"event log path {str(target)!r} must end in '.parquet' and not start with '.' or '_', "
            "or the analysis will not find it")
    table = events_table(run, columns)
    return replace_file(target, lambda sink: pq.write_table(table, sink, compression="zstd"), 0o644)


def events_table(run: RunInfo, columns: Mapping[str, Sequence[Any]]) -> pa.Table:
    """The validated event table for one run (what :func:`write_events` writes)."""
    for name in columns:
        if name in RUN_COLUMNS:
            raise InvalidEventLog(f"column {name!r} is the same for the whole run; set it on RunInfo, not in columns")
        if name not in ROW_COLUMNS:
            raise InvalidEventLog(f"unknown column {name!r}; the per-row columns are {ROW_COLUMNS}")
    for name in REQUIRED_ROW_COLUMNS:
        if name not in columns:
            raise InvalidEventLog(f"column {name!r} is missing; it is required on every row")
    arrays = {name: _to_array(name, values) for name, values in columns.items()}
    row_count = len(arrays["produce_time_ms"])
    for name, array in arrays.items():
        if len(array) != row_count:
            raise InvalidEventLog(
                f"column {name!r} has {len(array)} values, but 'produce_time_ms' has {row_count}; "
                "every column needs one value per row")
    for name in ROW_COLUMNS:
        if name not in arrays and name not in LATENCY_TIMES:
            arrays[name] = pa.nulls(row_count, EVENT_SCHEMA.field(name).type)
    for name, (later, earlier) in LATENCY_TIMES.items():
        arrays[name] = _latency(name, arrays.get(name), arrays[later], arrays[earlier])
    _check_ranges(run, arrays)
    run_values = asdict(run)
    full = {
        name: arrays[name] if name in ROW_COLUMNS
        else pa.repeat(pa.scalar(run_values[name], EVENT_SCHEMA.field(name).type), row_count)
        for name in EVENT_SCHEMA.names
    }
    return pa.Table.from_arrays([full[name] for name in EVENT_SCHEMA.names], schema=EVENT_SCHEMA)


def _to_array(name: str, values: Any) -> pa.Array:
    field = EVENT_SCHEMA.field(name)
    try:
        if isinstance(values, pa.ChunkedArray):
            values = values.combine_chunks()
        given = values if isinstance(values, pa.Array) else pa.array(values, from_pandas=True)
        kinds = (pa.types.is_integer, pa.types.is_null)
        if pa.types.is_floating(field.type):
            kinds += (pa.types.is_floating,)
        elif pa.types.is_string(field.type):
            kinds = (pa.types.is_string, pa.types.is_large_string, pa.types.is_null)
        if not any(kind(given.type) for kind in kinds):
            raise TypeError(f"values of type {given.type} would be converted or truncated")
        array = given.cast(field.type, safe=True)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError, ValueError, OverflowError) as error:
        raise InvalidEventLog(f"column {name!r} cannot be stored as {field.type}: {error}") from None
    if pa.types.is_floating(field.type):
        array = pc.if_else(pc.is_nan(array), pa.scalar(None, field.type), array)
        if pc.any(pc.is_inf(array)).as_py():
            raise InvalidEventLog(f"column {name!r} holds an infinite value; use null for a missing value")
    if not field.nullable and array.null_count:
        raise InvalidEventLog(f"column {name!r} holds {array.null_count} null/NaN values; it may not be null")
    return array


def _latency(name: str, given: pa.Array | None, later: pa.Array, earlier: pa.Array) -> pa.Array:
    derived = pc.subtract(later, earlier)
    if given is None:
        return derived
    difference = pc.abs(pc.subtract(given, derived))
    worst = pc.max(difference).as_py()
    if worst is not None and worst > LATENCY_TOLERANCE_MS:
        raise InvalidEventLog(
            f"column {name!r} disagrees with its times by up to {worst:.6f} ms; "
            f"{name} must equal the later time minus the earlier time")
    return given


def _check_ranges(run: RunInfo, arrays: Mapping[str, pa.Array]) -> None:
    if run.mode == ReadMode.MAFKA3 and arrays["virtual_partition"].null_count != len(arrays["virtual_partition"]):
        raise InvalidEventLog("column 'virtual_partition' must be null in mafka3 mode, which has no virtual partitions")
    for name in ("vp_appended_time_ms", "vp_committed_time_ms"):
        if run.mode == ReadMode.MAFKA3 and arrays[name].null_count != len(arrays[name]):
            raise InvalidEventLog(f"column {name!r} must be null in mafka3 mode, which has no virtual partitions")
    deliveries = pc.min(arrays["deliveries"]).as_py()
    if deliveries is not None and deliveries < 0:
        raise InvalidEventLog(f"column 'deliveries' holds {deliveries}; a message is delivered 0 or more times")
    bounds = {"partition": run.physical_partitions, "virtual_partition": run.virtual_partitions}
    for name, count in bounds.items():
        array = arrays[name]
        if array.null_count == len(array):
            continue
        low, high = pc.min(array).as_py(), pc.max(array).as_py()
        if low < 0 or high >= count:
            raise InvalidEventLog(
                f"column {name!r} holds values in [{low}, {high}], outside [0, {count}) "
                f"given by RunInfo ({'physical' if name == 'partition' else 'virtual'}_partitions={count})")
    for name in LATENCY_TIMES:
        low = pc.min(arrays[name]).as_py()
        if low is not None and low < 0:
            raise InvalidEventLog(f"column {name!r} holds a negative latency ({low} ms); check the clock used")


def event_log_files(path: str | os.PathLike[str]) -> list[Path]:
    """The event-log files at ``path``: the file itself, or every visible ``*.parquet`` below it.

    Hidden and ``_``-prefixed files and directories (temp files, Spark markers) are skipped, and
    so is every directory holding an :data:`ANALYSIS_MARKER` file (the analysis output, whose
    result tables are Parquet too). Raises :class:`NoEventLogs` when no file is left.
    """
    root = Path(path)
    if not root.exists():
        raise NoEventLogs(
            f"event-log directory {str(root)!r} does not exist; run the consumer-scaling experiment "
            "(`mafka4 experiment scaling`) or the fleet model (`mafka4 fleet model`) first, or pass the directory they wrote")
    if root.is_file():
        return [root]
    files = sorted(
        file for file in root.rglob("*.parquet")
        if file.is_file()
        and not any(part.startswith((".", "_")) for part in file.relative_to(root).parts)
        and not any((root / directory / ANALYSIS_MARKER).exists() for directory in file.relative_to(root).parents)
    )
    if not files:
        raise NoEventLogs(
            f"no event-log Parquet files (*.parquet) under {str(root)!r}; run the consumer-scaling "
            "experiment (`mafka4 experiment scaling`) or the fleet model (`mafka4 fleet model`) first, "
            "with this directory as output")
    return files


def check_event_file(file: Path) -> str:
    """The schema version of ``file`` (a key of :data:`READABLE_SCHEMAS`); raise :class:`InvalidEventLog`
    unless its Parquet schema is :data:`EVENT_SCHEMA` or an older layout still read."""
    try:
        found = pq.read_schema(file)
    except (pa.ArrowInvalid, OSError) as error:
        raise InvalidEventLog(f"{str(file)!r} is not a readable Parquet file: {error}") from None
    for version, schema in READABLE_SCHEMAS.items():
        if found.equals(schema, check_metadata=False):
            return version
    expected = {field.name: str(field.type) for field in EVENT_SCHEMA}
    actual = {field.name: str(field.type) for field in found}
    wrong = sorted(name for name in expected.keys() | actual.keys() if expected.get(name) != actual.get(name))
    raise InvalidEventLog(
        f"{str(file)!r} is not an event log of schema version {SCHEMA_VERSION}: columns {wrong} differ "
        f"(expected {[expected.get(n) for n in wrong]}, found {[actual.get(n) for n in wrong]}); "
        "write it with simulations.schema.write_events")


def added_since(version: str) -> dict[str, Any]:
    """The columns added after schema ``version`` (a key of :data:`READABLE_SCHEMAS`), each with the value
    a file of that version reads as."""
    return {name: value for added, columns in ADDED_COLUMNS.items() if int(added) > int(version)
            for name, value in columns.items()}


def read_event_file(file: Path) -> pa.Table:
    """One event-log file as a table of :data:`EVENT_SCHEMA`; a file of an older version gets the columns
    added since, at the value it reads as (``lanes = 0``)."""
    version = check_event_file(file)
    table = pq.read_table(file, schema=READABLE_SCHEMAS[version])
    for name, value in added_since(version).items():
        table = table.append_column(EVENT_SCHEMA.field(name),
                                    pa.repeat(pa.scalar(value, EVENT_SCHEMA.field(name).type), table.num_rows))
    return table.select(EVENT_SCHEMA.names).cast(EVENT_SCHEMA)


def read_events(path_or_dir: str | os.PathLike[str]) -> pa.Table:
    """All event logs at ``path_or_dir`` (a file or a directory searched recursively) as one table.

    Raises :class:`NoEventLogs` when there is none and :class:`InvalidEventLog` naming the first
    file whose schema is not :data:`EVENT_SCHEMA` or an older layout still read (:func:`read_event_file`)."""
    files = event_log_files(path_or_dir)
    for file in files:
        check_event_file(file)
    return pa.concat_tables([read_event_file(file) for file in files])


def git_commit(directory: str | os.PathLike[str] | None = None) -> str:
    """``git rev-parse HEAD`` in ``directory`` (default: this source tree), ``-dirty`` appended
    when tracked files differ from HEAD; ``"unknown"`` outside a git checkout or without git."""
    cwd = Path(directory) if directory is not None else Path(__file__).resolve().parent
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "diff", "--quiet", "HEAD", "--"], cwd=cwd, capture_output=True,
                               timeout=30).returncode == 1
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    if not head or not all(char in "0123456789abcdef" for char in head):
        return "unknown"
    return f"{head}-dirty" if dirty else head
