"""What ``mafka4 bench redis-streams`` asks, counts and combines (pure).

``benchmarks.redis_streams`` runs Redis Streams on this machine (the driver: a redis-server, its
clients, the consumer processes); this module holds what needs none of them, so that the CLI
reads the settings without importing a Redis client:

* **the settings** (``RedisStreamsBenchSettings``), validated on construction. What the
  comparison with mafka4 needs even is a setting, swept as a list, with mafka4's side named:

  - the backlog (``--messages``) and the acknowledgement cadences (``--ack-cadences``): the
    terms ``mafka4.bench.drain_terms`` sets for this bench and ``bench consume`` alike;
  - the produce runs' size (``--produce-messages``): ``bench produce``'s ``--messages``;
  - the pipeline depth, XADDs per pipeline (``--pipeline-messages``), and the XREADGROUP
    COUNT (``--read-count``): Redis' usual 1,000, or ``matched``, derived from mafka4's
    settings and the message size (``matched_pipeline_messages``: the bytes ``bench
    produce``'s Producer keeps in flight; ``matched_read_count``: the bytes of one fetch);
* **a produce rate**: messages over the time from before the first pipeline was sent to after
  the last one's replies were read (``rate_msgs_per_s``);
* **a drain** of the backlog by one consumer group: each member's stamps and the ids it was
  given (``MemberRead``); the drain runs from the earliest member's first XREADGROUP to the
  latest member's end, its last XACK (its last message when it acknowledges nothing)
  (``drain_elapsed_ns``), and every backlog id must be given exactly once across the members
  (``Delivery``);
* **one row per drain** (``drain_row``; the driver adds the drain's CPU per message, the
  members' and the machine's, as ``mafka4 bench consume`` does: ``mafka4.bench.cpu_cost``) and the
  medians per cell of the sweep (``summary``), every cell of which the table prints.

Invariants (asserted): a backlog holds each stream id once; a member that was given messages
read at least once before its last message, and ended (its last XACK) at or after it.
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from mafka4.bench.drain_terms import (ACK_CADENCES_DEFAULT, BACKLOG_BYTES_MAX, BACKLOG_MESSAGES_DEFAULT, AckCadence,
                                      check_backlog, check_consumer_counts, check_count, parse_cadences)
from mafka4.bench.produce_settings import ProduceBenchSettings
from mafka4.errors import InvalidConfig
from mafka4.limits import ConsumerConfig, MiB

# The two produce clients: which is which is part of every report (``CLIENTS``).
REDIS_PY = "redis-py"
RAW = "raw"
PRODUCE_CLIENTS = (REDIS_PY, RAW)
CLIENTS = {
    REDIS_PY: "redis-py pipeline(transaction=False) of --pipeline-messages XADDs, then execute(): the usual Python "
              "client (its replies parsed by hiredis when installed)",
    RAW: "XADDs packed once with hiredis.pack_command, written to a plain 127.0.0.1 socket in pipelines of "
         "--pipeline-messages, replies read with hiredis.Reader: the ceiling of one Python connection",
}
CONSUME_CLIENT = "redis-py xreadgroup (and xack), its replies parsed by hiredis when installed"
# A pipeline depth or read COUNT derived from mafka4's settings (matched_pipeline_messages, matched_read_count).
MATCHED = "matched"
# The sizes this bench used before ``matched`` existed: the Redis-side choice of the sweep, next to matched.
REDIS_PIPELINE_MESSAGES = 1000
REDIS_READ_COUNT = 1000

# Every consumer is a process of its own with a connection of its own, on this machine's cores.
CONSUMERS_MAX = 32
MESSAGE_BYTES_MAX = 1 * MiB
# redis-server holds a stream in memory (and writes it to its append-only file); the driver holds
# the backlog's ids. A produce run's stream is held the same way as the backlog.
STREAM_BYTES_MAX = BACKLOG_BYTES_MAX
# One pipeline's commands, or one read's answer, are held whole by the client and the server.
PIPELINE_BYTES_MAX = 64 * MiB
REPETITIONS_MAX = 100
NS_PER_S = 1_000_000_000


def matched_pipeline_messages(message_bytes: int, produce: ProduceBenchSettings = ProduceBenchSettings()) -> int:
    """XADDs that hold the bytes ``bench produce``'s Producer keeps in flight: ``in_flight_batches_max`` batches of
    ``batch_bytes_max`` per partition, over its ``partitions`` (5 x 1 MiB x 2 by default: 10,240 of 1 KiB)."""
    in_flight_bytes = produce.partitions * produce.in_flight_batches_max * produce.batch_bytes_max
    return max(1, in_flight_bytes // message_bytes)


def matched_read_count(message_bytes: int, consumer: ConsumerConfig = ConsumerConfig()) -> int:
    """Entries that hold the bytes a mafka4 consumer fetches at once from a partition or VP (``fetch_bytes_max``,
    4 MiB by default: 4,096 of 1 KiB)."""
    return max(1, consumer.fetch_bytes_max // message_bytes)


@dataclass(frozen=True, slots=True)
class RedisStreamsBenchSettings:
    """A field with a ``help`` in its metadata is an option of ``mafka4 bench redis-streams`` (``mafka4.cli.bench``)."""

    produce_messages: int = field(default=ProduceBenchSettings().messages, metadata={
        "help": "messages of each produce run, one stream each (as bench produce's --messages)"})
    messages: int = field(default=BACKLOG_MESSAGES_DEFAULT, metadata={
        "help": "messages in the backlog that each group drains (as bench consume's --messages)"})
    message_bytes: int = field(default=1024, metadata={"help": "bytes of each message's value"})
    consumers: tuple[int, ...] = field(default=(1, 4), metadata={
        "help": "consumer counts: each drains the backlog as one new group, one process per consumer"})
    repetitions: int = field(default=2, metadata={"help": "runs of each cell of the sweep"})
    pipeline_messages: tuple[str, ...] = field(default=(str(REDIS_PIPELINE_MESSAGES), MATCHED), metadata={
        "help": "XADDs per pipeline (both produce clients), one produce run each: a count, or matched: the bytes "
                "bench produce's Producer keeps in flight"})
    read_count: tuple[str, ...] = field(default=(str(REDIS_READ_COUNT), MATCHED), metadata={
        "help": "COUNT of each XREADGROUP, one drain each: a count, or matched: the bytes of one mafka4 fetch "
                "(fetch_bytes_max)"})
    ack_cadences: tuple[str, ...] = field(default=ACK_CADENCES_DEFAULT, metadata={
        "help": "how often members XACK what they read, one drain each: per-read, every-<N>ms (what was read since "
                "the last XACK), none (XREADGROUP NOACK); the last XACK ends the timed drain"})
    quiet_wait_s_max: float = field(default=180.0, metadata={
        "help": "before each measurement, wait at most this long for the 1-minute load average to fall to 2.0; "
                "0 does not wait"})
    # redis-server must answer PING within this long of being started.
    server_start_s_max: float = 10.0
    # The members of one drain must start and connect within this long.
    join_s_max: float = 120.0
    # One drain must end within this long of the start signal; one client call within the socket timeout.
    drain_s_max: float = 300.0
    socket_timeout_s: float = 60.0
    # A test-sized run (the report says so).
    smoke: bool = False

    def __post_init__(self) -> None:
        check_count("message_bytes", self.message_bytes, MESSAGE_BYTES_MAX)
        check_count("repetitions", self.repetitions, REPETITIONS_MAX)
        # The bounds in messages depend on their size.
        stream_max = STREAM_BYTES_MAX // self.message_bytes
        in_stream = f"a stream of {STREAM_BYTES_MAX // MiB} MiB of {self.message_bytes}-byte messages"
        check_count("produce_messages", self.produce_messages, stream_max, in_stream)
        check_backlog(self.messages, self.message_bytes)
        for name in ("pipeline_messages", "read_count"):
            object.__setattr__(self, name, self._checked_depths(name))
        object.__setattr__(self, "ack_cadences", tuple(map(str, parse_cadences(self.ack_cadences))))
        check_consumer_counts(self.consumers, CONSUMERS_MAX, "1,4")
        if self.quiet_wait_s_max < 0:
            raise InvalidConfig(f"quiet_wait_s_max={self.quiet_wait_s_max} must be 0 (no wait) or more seconds")
        if min(self.server_start_s_max, self.join_s_max, self.drain_s_max, self.socket_timeout_s) <= 0:
            raise InvalidConfig(f"server_start_s_max={self.server_start_s_max}, join_s_max={self.join_s_max}, "
                                f"drain_s_max={self.drain_s_max} and socket_timeout_s={self.socket_timeout_s} must "
                                f"be positive")

    def _checked_depths(self, name: str) -> tuple[str, ...]:
        """``name``'s list, each a count within what a pipeline (or a read's answer) may hold, or ``matched``."""
        given = tuple(str(value).strip().lower() for value in getattr(self, name))
        most = PIPELINE_BYTES_MAX // self.message_bytes
        if (not given or len(set(given)) != len(given)
                or not all(value == MATCHED or (value.isdigit() and 1 <= int(value) <= most) for value in given)):
            raise InvalidConfig(f"{name}={','.join(given)}: give distinct counts from 1 to {most} ("
                                f"{PIPELINE_BYTES_MAX // MiB} MiB of {self.message_bytes}-byte messages at once) or "
                                f"{MATCHED}, e.g. {REDIS_PIPELINE_MESSAGES},{MATCHED}")
        return given

    @property
    def pipelines(self) -> tuple[tuple[str, int], ...]:
        """Each produce variant: (as given, XADDs per pipeline)."""
        return tuple((given, matched_pipeline_messages(self.message_bytes) if given == MATCHED else int(given))
                     for given in self.pipeline_messages)

    @property
    def reads(self) -> tuple[tuple[str, int], ...]:
        """Each read variant: (as given, XREADGROUP COUNT)."""
        return tuple((given, matched_read_count(self.message_bytes) if given == MATCHED else int(given))
                     for given in self.read_count)

    @property
    def cadences(self) -> tuple[AckCadence, ...]:
        return tuple(map(AckCadence.parse, self.ack_cadences))

    @classmethod
    def smoke_sized(cls, **changes) -> "RedisStreamsBenchSettings":
        """A run of seconds for tests: 3,000 messages produced and drained, 1 and 2 consumers, once."""
        return cls(**{"produce_messages": 3_000, "messages": 3_000, "consumers": (1, 2), "repetitions": 1,
                      "quiet_wait_s_max": 0.0, "smoke": True, **changes})


def matched_from() -> str:
    """How ``matched`` is derived, with mafka4's figures (for the report and the table)."""
    produce, consumer = ProduceBenchSettings(), ConsumerConfig()
    return (f"matched pipeline: the bytes bench produce's Producer keeps in flight, {produce.partitions} partitions x "
            f"{produce.in_flight_batches_max} batches x {produce.batch_bytes_max / MiB:g} MiB; matched read: the bytes "
            f"of one mafka4 fetch, fetch_bytes_max {consumer.fetch_bytes_max / MiB:g} MiB")


# --- rates ------------------------------------------------------------------------------------


def pipeline_sizes(messages: int, pipeline_messages: int) -> list[int]:
    """The commands of each pipeline that sends ``messages``: full pipelines, then what is left."""
    assert messages >= 0 and pipeline_messages >= 1, (messages, pipeline_messages)
    full, left = divmod(messages, pipeline_messages)
    return [pipeline_messages] * full + ([left] if left else [])


def rate_msgs_per_s(messages: int, elapsed_ns: int | None) -> float | None:
    """``messages`` over ``elapsed_ns``; None when nothing was timed (no message, or no time passed)."""
    if elapsed_ns is None or elapsed_ns <= 0:
        return None
    return round(messages * NS_PER_S / elapsed_ns, 1)


@dataclass(frozen=True, slots=True)
class MemberRead:
    """One member's drain: its stamps (``time.monotonic_ns()``, one clock for every process here) and its ids."""

    member: int
    first_read_ns: int  # just before its first XREADGROUP after the start signal
    last_message_ns: int | None  # after the read that gave its last messages; None: none
    end_ns: int | None  # after its last XACK (none sent: its last message); None: it was given nothing
    ids: tuple[bytes, ...]  # the stream ids it was given, in order
    reads: int  # XREADGROUP calls, the last (empty) one included
    acks: int  # XACK calls
    complete: bool  # it stopped on an empty read, not at the drain's deadline
    cpu_ns: int | None = None  # the process's CPU time, all threads, from its first read to its drain's end


def drain_elapsed_ns(members: Sequence[MemberRead]) -> int | None:
    """From the earliest member's first read to the latest member's end; None if none read a message."""
    ends = [member.end_ns for member in members if member.end_ns is not None]
    if not ends:
        return None
    start = min(member.first_read_ns for member in members)
    assert all(member.last_message_ns is None or member.first_read_ns <= member.last_message_ns <= member.end_ns
               for member in members), "a member reads before its last message, and acknowledges it after"
    return max(ends) - start


@dataclass(frozen=True, slots=True)
class Delivery:
    """How the backlog's ids were given to a group's members: each exactly once, or what went wrong."""

    messages: int  # in the backlog
    delivered: int  # ids given, counting every copy and ids not in the backlog
    read: int  # backlog ids given at least once
    duplicates: int  # copies of backlog ids beyond the first, in one member or across members
    outside_backlog: int  # ids not in the backlog (none expected: nothing is written while a group drains)

    @property
    def missing(self) -> int:
        return self.messages - self.read

    @property
    def exactly_once(self) -> bool:
        return self.missing == self.duplicates == self.outside_backlog == 0


def delivery(backlog_ids: Sequence[bytes], given: Iterable[Sequence[bytes]]) -> Delivery:
    """Counts the ids ``given`` (one sequence per member) against the backlog's ids."""
    expected = set(backlog_ids)
    assert len(expected) == len(backlog_ids), "a stream holds each id once"
    counts = Counter(entry_id for ids in given for entry_id in ids)
    inside = {entry_id: count for entry_id, count in counts.items() if entry_id in expected}
    return Delivery(messages=len(expected), delivered=sum(counts.values()), read=len(inside),
                    duplicates=sum(inside.values()) - len(inside),
                    outside_backlog=sum(counts.values()) - sum(inside.values()))


def drain_row(backlog_ids: Sequence[bytes], members: Sequence[MemberRead], message_bytes: int) -> dict:
    """The drain's figures from every member's: msgs/s and MB/s of the backlog ids read, and their delivery."""
    counted = delivery(backlog_ids, (member.ids for member in members))
    elapsed_ns = drain_elapsed_ns(members)
    msgs_per_s = rate_msgs_per_s(counted.read, elapsed_ns)
    start_ns = min((member.first_read_ns for member in members), default=0)
    return {
        "messages": counted.messages,
        "messages_read": counted.read,
        "missing": counted.missing,
        "delivered": counted.delivered,
        "duplicates": counted.duplicates,
        "outside_backlog": counted.outside_backlog,
        "exactly_once": counted.exactly_once,
        "elapsed_s": None if elapsed_ns is None else round(elapsed_ns / NS_PER_S, 4),
        "msgs_per_s": msgs_per_s,
        "mb_per_s": None if msgs_per_s is None else round(msgs_per_s * message_bytes / 1e6, 2),
        "reads": sum(member.reads for member in members),
        "acks": sum(member.acks for member in members),
        "consumers_with_work": sum(1 for member in members if member.ids),
        "members": [{
            "member": member.member, "messages": len(member.ids), "reads": member.reads, "acks": member.acks,
            "complete": member.complete, "first_read_ms": round((member.first_read_ns - start_ns) / 1e6, 1),
            "last_message_ms": (None if member.last_message_ns is None
                                else round((member.last_message_ns - start_ns) / 1e6, 1)),
            "end_ms": None if member.end_ns is None else round((member.end_ns - start_ns) / 1e6, 1),
        } for member in sorted(members, key=lambda member: member.member)],
    }


# --- the summary --------------------------------------------------------------------------------


def _median(values: Sequence[float | None], digits: int = 1) -> float | None:
    present = [value for value in values if value is not None]
    return round(statistics.median(present), digits) if present else None


def _figures(runs: Sequence[dict]) -> dict:
    return {"repetitions": len(runs), "msgs_per_s_median": _median([run["msgs_per_s"] for run in runs]),
            "msgs_per_s_each": [run["msgs_per_s"] for run in runs], "quiet_each": [run["quiet"] for run in runs]}


def summary(rows: Sequence[dict]) -> dict:
    """Medians over the repetitions of every cell: produce per client and pipeline; consume per cadence, read COUNT
    and consumer count (as text)."""
    produce: dict[str, dict[str, list[dict]]] = {}
    consume: dict[str, dict[str, dict[str, list[dict]]]] = {}
    for row in rows:
        if row["workload"] == "produce":
            produce.setdefault(row["client"], {}).setdefault(row["pipeline_choice"], []).append(row)
        else:
            assert row["workload"] == "consume", row["workload"]
            consume.setdefault(row["ack"], {}).setdefault(row["read_count_choice"], {}).setdefault(
                str(row["consumers"]), []).append(row)
    return {
        "produce": {client: {pipeline: {**_figures(runs), "pipeline_messages": runs[0]["pipeline_messages"]}
                             for pipeline, runs in by_pipeline.items()} for client, by_pipeline in produce.items()},
        "consume": {ack: {read: {consumers: {
            **_figures(runs), "read_count": runs[0]["read_count"],
            "exactly_once_each": [run["exactly_once"] for run in runs],
            "member_cpu_us_per_message_median": _median([run.get("member_cpu_us_per_message") for run in runs], 3),
            "machine_cpu_us_per_message_median": _median([run.get("machine_cpu_us_per_message") for run in runs], 3),
        } for consumers, runs in by_count.items()} for read, by_count in by_read.items()}
            for ack, by_read in consume.items()},
        "clients": {**{client: CLIENTS[client] for client in produce}, "consume": CONSUME_CLIENT},
        "matched": matched_from(),
    }


TABLE_COLUMNS = ("workload", "client/ack", "pipeline/read", "consumers", "msgs/s", "each", "quiet", "members us/msg",
                 "machine us/msg", "exactly once")


def table(report: dict) -> str:
    """Every cell of the sweep as a line of a text table, medians over repetitions and each repetition's msgs/s
    (what ``mafka4 bench redis-streams`` prints)."""
    figures = report["summary"]
    lines = [TABLE_COLUMNS]
    for client, by_pipeline in figures["produce"].items():
        for pipeline, runs in by_pipeline.items():
            lines.append(("produce", client, _depth(pipeline, runs["pipeline_messages"]), "-", *_cells(runs), "-",
                          "-", "-"))
    for ack, by_read in figures["consume"].items():
        for read, by_count in by_read.items():
            for consumers, runs in by_count.items():
                lines.append(("consume", ack, _depth(read, runs["read_count"]), consumers, *_cells(runs),
                              *(_shown(runs[name], ".2f") for name in ("member_cpu_us_per_message_median",
                                                                    "machine_cpu_us_per_message_median")),
                              "/".join("yes" if once else "NO" for once in runs["exactly_once_each"])))
    widths = [max(len(line[column]) for line in lines) for column in range(len(TABLE_COLUMNS))]
    text = ["  ".join(cell.rjust(width) for cell, width in zip(line, widths)) for line in lines]
    text += [f"{name}: {what}" for name, what in figures["clients"].items()]
    text.append(figures["matched"])
    load = report["load_average_1m"]
    text.append(f"{report['redis_server']['version'].split(' sha=')[0]}, redis-py {report['redis_py_version']}, "
                f"hiredis {report['hiredis_version']}; medians of {report['settings']['repetitions']} repetition(s); "
                f"1-minute load average {load[0]} before, {load[1]} after"
                + ("; a smoke run: not a result" if report["settings"]["smoke"] else ""))
    return "\n".join(text)


def _depth(given: str, resolved: int) -> str:
    return f"{given}={resolved:,}" if given == MATCHED else f"{resolved:,}"


def _cells(runs: dict) -> tuple[str, str, str]:
    return (_shown(runs["msgs_per_s_median"]), "/".join(map(_shown, runs["msgs_per_s_each"])),
            "/".join("yes" if quiet else "no" for quiet in runs["quiet_each"]))


def _shown(value: float | None, spec: str = ",.0f") -> str:
    return "-" if value is None else format(value, spec)
