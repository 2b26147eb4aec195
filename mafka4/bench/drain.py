"""A backlog drained by one consumer group: what ``mafka4 bench consume`` asks, counts and combines (pure).

``bench.consume`` writes one backlog topic per read mode, then drains it once per acknowledgement
cadence, consumer count and repetition with a fresh group whose members are processes of their
own (``bench.consume_member``). This module holds what needs no cluster:

* **the settings** (``ConsumeBenchSettings``), validated on construction, so that the CLI reads
  them without importing Ray; the backlog and the acknowledgement cadences are the terms
  ``bench.drain_terms`` sets for this bench and ``bench redis-streams`` alike;
* **the backlog** as offset ranges (``OffsetRange``), one per physical partition (mafka3 mode)
  or per virtual partition (mafka4 mode): a drain delivers every offset in them;
* **a member's tally** (``OffsetTally``): which of those offsets it was given, and how many twice;
* **when a group has settled** (``GroupSettling``): every member has joined, their assignments
  are disjoint and cover every partition, and nothing changed for ``settle_s``;
* **what members tell the driver** (``Joined`` ... ``Closed``; a failure is
  ``member_process.Failed``), and **one row per drain** (``drain_row``), the summary per read
  mode, cadence and consumer count, and the table the CLI prints: every cell of the sweep, never
  only the best.

How a drain is timed. Members join while the backlog is already written, positioned at its end,
so joining reads nothing (``bench.consume_member`` says how); once the group has settled they
seek to the backlog's start and wait for one start signal, which the driver gives once the
1-minute load average is back at 2.0 or below (their starts load the machine; at most
``quiet_wait_s_max``, and the row records the wait and the load). Each member stamps
``time.monotonic_ns()`` (CLOCK_MONOTONIC: one clock for every process of a Linux machine) just
before its first ``poll()`` after the signal and when the poll that returned its last message
returned, and when its part of the drain ended: when its last commit returned (``per-read``:
the commit after its last poll; ``every-<N>ms``: one ``commit()`` once it was given every offset
it owns), or at its last message (``none``). The drain runs from the earliest first poll to the
latest end; msgs/s is the messages read (each offset once) over that time, MB/s the same of
their values (``message_bytes`` each; keys, headers and framing not counted). A *fetch latency*
is the duration of one ``poll()`` call that returned messages; polls that returned nothing are
not fetches of the drain.

Invariants (asserted): an offset range never ends before it starts; a member's flags cover
exactly its partition's range; a member's end is not before its last message.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from itertools import groupby
from operator import attrgetter
from typing import Iterable, Mapping, Sequence


from mafka4.bench.drain_terms import (ACK_CADENCES_DEFAULT, BACKLOG_MESSAGES_DEFAULT, AckCadence, check_backlog,
                                      check_consumer_counts, check_count, parse_cadences)
from mafka4.bench.stats import PERCENTILES, percentiles_ms
from mafka4.bench.usage import is_quiet
from mafka4.errors import InvalidConfig
from mafka4.limits import (PARTITIONS_MAX, READ_MODES, REPLICATION_FACTOR_MAX, VIRTUAL_PARTITIONS_MAX, MiB,
                           ProducerConfig, ReadMode)

# Every consumer is a process of its own: an interpreter and the thin client, tens of MB each.
CONSUMERS_MAX = 64
# A member's tally holds one byte per backlog offset it may read.
MESSAGES_MAX = 50_000_000
MESSAGE_BYTES_MAX = 1 * MiB
REPETITIONS_MAX = 100
NS_PER_S = 1_000_000_000


@dataclass(frozen=True, slots=True)
class ConsumeBenchSettings:
    """A field with a ``help`` in its metadata is an option of ``mafka4 bench consume`` (``mafka4.cli.bench``)."""

    messages: int = field(default=BACKLOG_MESSAGES_DEFAULT, metadata={
        "help": "messages in the backlog of each read mode (as bench redis-streams' backlog)"})
    message_bytes: int = field(default=1024, metadata={"help": "bytes of each message's value"})
    partitions: int = field(default=4, metadata={"help": "physical partitions of each backlog topic"})
    # None: the largest consumer count. A group of a mafka4-mode topic gets capacity by splitting
    # a VP, but a split cuts at the data fed so far, so every record of a backlog stays in the VP
    # it was fed to: the VPs must exist before the backlog is written for every member to read.
    virtual_partitions: int | None = field(default=None, metadata={
        "help": "VPs of the mafka4-mode backlog, fixed for the run (default: the largest consumer count, so "
                "every consumer owns one)"})
    replication_factor: int = field(default=2, metadata={"help": "replicas per physical partition"})
    consumers: tuple[int, ...] = field(default=(1, 4, 16), metadata={
        "help": "consumer counts: each drains the backlog as one group, one process per consumer"})
    read_modes: tuple[str, ...] = field(default=(ReadMode.MAFKA3.value, ReadMode.MAFKA4.value), metadata={
        "help": "read modes, one backlog topic each: mafka3 (consumers read the physical partitions), mafka4 "
                "(consumers read the VPs)"})
    ack_cadences: tuple[str, ...] = field(default=ACK_CADENCES_DEFAULT, metadata={
        "help": "how often members commit what they read, one drain each: per-read (commit() after each poll), "
                "every-<N>ms (auto-commit every N ms), none (no commit until the drain ended); the last commit ends "
                "the timed drain"})
    repetitions: int = field(default=3, metadata={"help": "drains of each (read mode, cadence, consumer count)"})
    gc_freeze: bool = field(default=False, metadata={
        "help": "each member freezes what its start left out of its garbage collector's full collections (gc.freeze, "
                "as the README advises applications that drain at high rates)"})
    check_crcs: bool = field(default=True, metadata={
        "help": "members do not check each fetched batch's CRC (ConsumerConfig.check_crcs=False, as Kafka's "
                "check.crcs=false; the server checks every batch it serves)", "switch": "--no-check-crcs"})
    read_replicas: int = 1
    linger_ms: int = ProducerConfig().linger_ms
    # The backlog must be committed (and, in mafka4 mode, fed to its VPs) within this long of being sent.
    ready_s_max: float = 300.0
    # The members of one drain must start, join and settle within this long.
    join_s_max: float = 180.0
    # A group in which no member joined and no assignment changed for this long has settled.
    settle_s: float = 2.0
    # One drain must end within this long of the start signal; later, the row says what was missing.
    drain_s_max: float = 300.0
    quiet_wait_s_max: float = field(default=180.0, metadata={
        "help": "before each drain, wait at most this long for the 1-minute load average to fall to 2.0 (the "
                "members' starts load the machine); 0 does not wait"})
    # A test-sized run (the report says so).
    smoke: bool = False

    def __post_init__(self) -> None:
        check_count("messages", self.messages, MESSAGES_MAX)
        check_count("message_bytes", self.message_bytes, MESSAGE_BYTES_MAX)
        check_backlog(self.messages, self.message_bytes)
        object.__setattr__(self, "ack_cadences", tuple(map(str, parse_cadences(self.ack_cadences))))
        check_count("partitions", self.partitions, PARTITIONS_MAX)
        check_count("replication_factor", self.replication_factor, REPLICATION_FACTOR_MAX)
        check_count("repetitions", self.repetitions, REPETITIONS_MAX)
        if self.virtual_partitions is not None:
            check_count("virtual_partitions", self.virtual_partitions, VIRTUAL_PARTITIONS_MAX)
        check_consumer_counts(self.consumers, CONSUMERS_MAX, "1,4,16")
        if (not self.read_modes or len(set(self.read_modes)) != len(self.read_modes)
                or not set(self.read_modes) <= set(READ_MODES)):
            raise InvalidConfig(f"read_modes={','.join(self.read_modes)}: give one or both of "
                                f"{', '.join(sorted(READ_MODES))}, each once, e.g. {','.join(sorted(READ_MODES))}")
        if self.quiet_wait_s_max < 0:
            raise InvalidConfig(f"quiet_wait_s_max={self.quiet_wait_s_max} must be 0 (no wait) or more seconds")
        if min(self.ready_s_max, self.join_s_max, self.settle_s, self.drain_s_max) <= 0:
            raise InvalidConfig(f"ready_s_max={self.ready_s_max}, join_s_max={self.join_s_max}, settle_s="
                                f"{self.settle_s} and drain_s_max={self.drain_s_max} must be positive")

    @classmethod
    def smoke_sized(cls, **changes) -> "ConsumeBenchSettings":
        """A run of a minute for tests: 2,000 messages on 2 partitions, 1 and 2 consumers, once."""
        return cls(**{"messages": 2_000, "partitions": 2, "consumers": (1, 2), "repetitions": 1,
                      "quiet_wait_s_max": 0.0, "smoke": True, **changes})

    @property
    def cadences(self) -> tuple[AckCadence, ...]:
        return tuple(map(AckCadence.parse, self.ack_cadences))

    @property
    def mafka4_virtual_partitions(self) -> int:
        """VPs of the mafka4-mode backlog: ``virtual_partitions``, or the largest consumer count."""
        return self.virtual_partitions if self.virtual_partitions is not None else max(self.consumers)


# --- the backlog and one member's tally -------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OffsetRange:
    """Offsets ``start`` (the log start) to ``end`` (the high watermark, excluded) of one partition or VP."""

    start: int
    end: int

    def __post_init__(self) -> None:
        assert 0 <= self.start <= self.end, (self.start, self.end)

    @property
    def count(self) -> int:
        return self.end - self.start


def backlog_messages(ranges: Mapping[int, OffsetRange]) -> int:
    return sum(offsets.count for offsets in ranges.values())


_partition_of = attrgetter("partition")
_offset_of = attrgetter("offset")


class OffsetTally:
    """The backlog offsets one member was given (one byte per offset), and what it was given again.

    ``record`` counts every message once: as new, as a duplicate (an offset given before), or as
    outside the backlog (a partition or offset not in it; none is expected: nothing is produced
    while a backlog is drained).
    """

    def __init__(self, ranges: Mapping[int, OffsetRange]):
        self._ranges = dict(ranges)
        self._seen = {partition: bytearray(offsets.count) for partition, offsets in self._ranges.items()}
        self._unseen = {partition: offsets.count for partition, offsets in self._ranges.items()}
        self.new = 0
        self.duplicates = 0
        self.outside = 0

    def record(self, partition: int, offset: int) -> None:
        offsets = self._ranges.get(partition)
        if offsets is None or not offsets.start <= offset < offsets.end:
            self.outside += 1
            return
        seen = self._seen[partition]
        index = offset - offsets.start
        if seen[index]:
            self.duplicates += 1
            return
        seen[index] = 1
        self._unseen[partition] -= 1
        self.new += 1

    def record_messages(self, messages: Sequence) -> None:
        """``record`` of each message's ``(partition, offset)``, in order.

        A poll returns each partition's messages as a run of consecutive offsets: such a run,
        all new and inside the backlog, is counted with a few slice operations, not a call per
        message (which took a sixth of a draining member's main thread in a profile: the
        bench's own work, not the consumer's). Any other run is counted message by message.
        """
        for partition, run in groupby(messages, _partition_of):
            offsets = list(map(_offset_of, run))
            if not self._record_new_run(partition, offsets):
                for offset in offsets:
                    self.record(partition, offset)

    def _record_new_run(self, partition: int, offsets: list[int]) -> bool:
        """Count ``offsets`` as new if they are consecutive, inside the backlog and none was given
        before; False (nothing counted) otherwise."""
        offsets_range = self._ranges.get(partition)
        first, last = offsets[0], offsets[-1]
        if (offsets_range is None or not offsets_range.start <= first <= last < offsets_range.end
                or offsets != list(range(first, last + 1))):
            return False
        seen = self._seen[partition]
        start, end = first - offsets_range.start, last + 1 - offsets_range.start
        if seen.find(1, start, end) != -1:
            return False
        seen[start:end] = bytes([1]) * len(offsets)
        self._unseen[partition] -= len(offsets)
        self.new += len(offsets)
        return True

    @property
    def delivered(self) -> int:
        return self.new + self.duplicates + self.outside

    def complete(self, partitions: Iterable[int]) -> bool:
        """True when every backlog offset of ``partitions`` was given (partitions not in the backlog have none)."""
        return all(self._unseen.get(partition, 0) == 0 for partition in partitions)

    def seen(self) -> dict[int, bytes]:
        """Per partition the member was given any of, one byte per backlog offset: 1 if given."""
        return {partition: bytes(seen) for partition, seen in self._seen.items()
                if self._unseen[partition] < self._ranges[partition].count}


# --- when a group has settled -------------------------------------------------------------------


def assignment_problem(assignments: Mapping[int, Sequence[int]], members: int, partitions: Iterable[int]) -> str | None:
    """Why ``assignments`` (member index -> partitions) is not one settled group of ``members``, or None."""
    missing_members = sorted(set(range(members)) - set(assignments))
    if missing_members:
        return f"members {missing_members} have not reported an assignment"
    owners: dict[int, list[int]] = {}
    for member, owned in sorted(assignments.items()):
        for partition in owned:
            owners.setdefault(partition, []).append(member)
    shared = {partition: members_ for partition, members_ in sorted(owners.items()) if len(members_) > 1}
    if shared:
        return f"partitions owned by more than one member (partition: members): {shared}"
    expected = set(partitions)
    unowned, unknown = sorted(expected - set(owners)), sorted(set(owners) - expected)
    if unowned or unknown:
        return f"partitions without an owner: {unowned}; owned but not in the backlog: {unknown}"
    return None


class GroupSettling:
    """Whether a group's members, reporting their joins and their assignments as they change, have settled.

    Settled: every member joined, ``assignment_problem`` finds nothing, and for ``settle_ns`` no
    member joined and no assignment changed. A member that owns something stale (it has not yet
    seen a later join) looks settled until it acts on the change; ``settle_ns`` is the time it
    is given to.
    """

    def __init__(self, members: int, partitions: Iterable[int], settle_ns: int):
        assert members >= 1 and settle_ns > 0, (members, settle_ns)
        self._members = members
        self._partitions = frozenset(partitions)
        self._settle_ns = settle_ns
        self.joined: set[int] = set()
        self.assignments: dict[int, tuple[int, ...]] = {}
        self._changed_ns: int | None = None

    def _changed(self, member: int, now_ns: int) -> None:
        assert 0 <= member < self._members, member
        assert self._changed_ns is None or now_ns >= self._changed_ns, "reports arrive in time order"
        self._changed_ns = now_ns

    def observe_join(self, member: int, now_ns: int) -> None:
        self._changed(member, now_ns)
        self.joined.add(member)

    def observe(self, member: int, assignment: Iterable[int], now_ns: int) -> None:
        owned = tuple(sorted(assignment))
        if self.assignments.get(member) != owned:
            self._changed(member, now_ns)
            self.assignments[member] = owned

    def problem(self) -> str | None:
        if len(self.joined) < self._members:
            return f"{len(self.joined)} of {self._members} members joined"
        return assignment_problem(self.assignments, self._members, self._partitions)

    def settled(self, now_ns: int) -> bool:
        return (self._changed_ns is not None and now_ns - self._changed_ns >= self._settle_ns
                and self.problem() is None)


# --- what members tell the driver (through a multiprocessing queue) ------------------------------


@dataclass(frozen=True, slots=True)
class Joined:
    member: int
    member_id: str


@dataclass(frozen=True, slots=True)
class Assigned:
    """A member's assignment while it joins (sent when it changed)."""

    member: int
    partitions: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Armed:
    """A member stopped polling, moved every partition it owns to the backlog's start, and waits for the start."""

    member: int
    partitions: tuple[int, ...]
    messages_while_joining: int  # given by its polls while it joined (none: it joined at the backlog's end)


@dataclass(frozen=True, slots=True)
class MemberDrain:
    """One member's drain: its own timings (monotonic ns) and tally."""

    member: int
    partitions: tuple[int, ...]  # its assignment at the start
    first_poll_ns: int | None  # None: it owned nothing to read
    last_message_ns: int | None  # None: it read nothing
    # Its last commit returned (cadence none: its last message); None: it read nothing, or was
    # stopped before its last commit succeeded.
    end_ns: int | None
    fetch_latencies_ns: tuple[int, ...]  # each poll() that returned messages
    delivered: int
    duplicates: int
    outside: int
    seen: Mapping[int, bytes]  # OffsetTally.seen()
    complete: bool  # every offset of its partitions was given before the drain's deadline
    poll_errors: int = 0
    first_poll_error: str | None = None
    cpu_ns: int | None = None  # the process's CPU time, all threads, from its first poll to its drain's end
    commit_errors: int = 0  # commits that failed retriably (each made again)
    first_commit_error: str | None = None


@dataclass(frozen=True, slots=True)
class Drained:
    drain: MemberDrain


@dataclass(frozen=True, slots=True)
class Closed:
    """A member left the group; ``late_messages`` it was given after its drain (none in a settled group)."""

    member: int
    late_messages: int
    # Leaving commits: a failure there changes nothing measured, and is reported beside the row.
    close_error: str | None = None


# --- one row per drain ---------------------------------------------------------------------------


def messages_read(ranges: Mapping[int, OffsetRange], seen: Iterable[Mapping[int, bytes]]) -> int:
    """Backlog offsets given to at least one member."""
    import numpy as np  # here, not at the top: every mafka4 command imports this module for its settings

    union = {partition: np.zeros(offsets.count, dtype=bool) for partition, offsets in ranges.items()}
    for member_seen in seen:
        for partition, flags in member_seen.items():
            assert len(flags) == ranges[partition].count, (partition, len(flags))
            union[partition] |= np.frombuffer(flags, dtype=np.uint8).astype(bool)
    return int(sum(int(flags.sum()) for flags in union.values()))


def drain_row(ranges: Mapping[int, OffsetRange], drains: Sequence[MemberDrain], message_bytes: int) -> dict:
    """The drain's figures, combined from every member's (see the module docstring)."""
    expected = backlog_messages(ranges)
    read = messages_read(ranges, (drain.seen for drain in drains))
    delivered = sum(drain.delivered for drain in drains)
    starts = [drain.first_poll_ns for drain in drains if drain.first_poll_ns is not None]
    ends = [drain.end_ns for drain in drains if drain.end_ns is not None]
    assert len(ends) <= len(starts), "a member that read something polled"
    assert all(drain.end_ns is None or drain.end_ns >= drain.last_message_ns for drain in drains), \
        "a member's part ends at or after its last message"
    elapsed_s = (max(ends) - min(starts)) / NS_PER_S if ends else None
    latencies = [latency for drain in drains for latency in drain.fetch_latencies_ns]
    first_ns = min(starts) if starts else 0
    return {
        "messages": expected,
        "messages_read": read,
        "missing": expected - read,
        "delivered": delivered,
        "duplicates": sum(drain.duplicates for drain in drains),
        # Given again to another member: counted by neither member's own duplicates.
        "duplicates_across_members": delivered - read - sum(drain.duplicates + drain.outside for drain in drains),
        "outside_backlog": sum(drain.outside for drain in drains),
        "consumers_with_work": sum(1 for drain in drains if drain.delivered > 0),
        "elapsed_s": None if elapsed_s is None else round(elapsed_s, 4),
        "msgs_per_s": round(read / elapsed_s) if elapsed_s else None,
        "mb_per_s": round(read * message_bytes / elapsed_s / 1e6, 2) if elapsed_s else None,
        "fetches": len(latencies),
        "fetch_latency_ms": percentiles_ms(latencies) if latencies else None,
        "poll_errors": sum(drain.poll_errors for drain in drains),
        "first_poll_error": next((drain.first_poll_error for drain in drains if drain.first_poll_error), None),
        "commit_errors": sum(drain.commit_errors for drain in drains),
        "first_commit_error": next((drain.first_commit_error for drain in drains if drain.first_commit_error), None),
        "members": [{
            "member": drain.member, "partitions": list(drain.partitions), "delivered": drain.delivered,
            "first_poll_ms": None if drain.first_poll_ns is None else round((drain.first_poll_ns - first_ns) / 1e6, 1),
            "last_message_ms": (None if drain.last_message_ns is None
                                else round((drain.last_message_ns - first_ns) / 1e6, 1)),
            "end_ms": None if drain.end_ns is None else round((drain.end_ns - first_ns) / 1e6, 1),
            "fetches": len(drain.fetch_latencies_ns), "complete": drain.complete,
        } for drain in sorted(drains, key=lambda drain: drain.member)],
    }


def _median(values: Sequence[float | None]) -> float | None:
    present = [value for value in values if value is not None]
    return round(statistics.median(present), 3) if present else None


def summary(rows: Sequence[dict]) -> dict:
    """Per read mode, cadence and consumer count (as text): medians over the repetitions, and each one's msgs/s."""
    grouped: dict[str, dict[str, dict[str, list[dict]]]] = {}
    for row in rows:
        grouped.setdefault(row["read_mode"], {}).setdefault(row["ack"], {}).setdefault(str(row["consumers"]),
                                                                                        []).append(row)
    return {mode: {ack: {consumers: {
        "repetitions": len(runs),
        "msgs_per_s_median": _median([run["msgs_per_s"] for run in runs]),
        "msgs_per_s_each": [run["msgs_per_s"] for run in runs],
        "mb_per_s_median": _median([run["mb_per_s"] for run in runs]),
        "fetch_latency_ms_median": {name: _median([(run["fetch_latency_ms"] or {}).get(name) for run in runs])
                                    for name in PERCENTILES},
        "member_cpu_us_per_message_median": _median([run.get("member_cpu_us_per_message") for run in runs]),
        "machine_cpu_us_per_message_median": _median([run.get("machine_cpu_us_per_message") for run in runs]),
        "consumers_with_work_each": [run["consumers_with_work"] for run in runs],
        "missing_each": [run["missing"] for run in runs],
        "duplicates_each": [run["duplicates"] + run["duplicates_across_members"] for run in runs],
        "quiet_each": [run["quiet"] for run in runs],
    } for consumers, runs in by_count.items()} for ack, by_count in by_ack.items()} for mode, by_ack in grouped.items()}


def row_quiet(load_average_1m: Sequence[float]) -> bool:
    """Quiet when the 1-minute load average at the drain's start was (``bench.usage``): the drain loads the end."""
    return is_quiet(load_average_1m[:1])


TABLE_COLUMNS = ("read mode", "ack", "consumers", "working", "msgs/s", "each", "MB/s", "p50 ms", "p99 ms", "p99.9 ms",
                 "members us/msg", "machine us/msg", "missing", "dup")


def table(report: dict) -> str:
    """The summary as a text table, one line per cell of the sweep: medians over repetitions and each repetition's
    msgs/s (what ``mafka4 bench consume`` prints)."""
    lines = [TABLE_COLUMNS]
    for mode, by_ack in report["summary"].items():
        for ack, by_count in by_ack.items():
            lines += [_table_line(mode, ack, consumers, figures) for consumers, figures in by_count.items()]
    widths = [max(len(line[column]) for line in lines) for column in range(len(TABLE_COLUMNS))]
    text = ["  ".join(cell.rjust(width) for cell, width in zip(line, widths)) for line in lines]
    load = report["load_average_1m"]
    text.append(f"medians of {report['settings']['repetitions']} repetition(s); 1-minute load average "
                f"{load[0]} before, {load[1]} after" + ("; a smoke run: not a result" if report["settings"]["smoke"]
                                                        else ""))
    return "\n".join(text)


def _table_line(mode: str, ack: str, consumers: str, figures: dict) -> tuple[str, ...]:
    latency = figures["fetch_latency_ms_median"]
    return (mode, ack, consumers, "/".join(map(str, figures["consumers_with_work_each"])),
            _shown(figures["msgs_per_s_median"], ",.0f"),
            "/".join(_shown(each, ",.0f") for each in figures["msgs_per_s_each"]),
            _shown(figures["mb_per_s_median"], ".1f"), *(_shown(latency[name], ".2f") for name in PERCENTILES),
            _shown(figures["member_cpu_us_per_message_median"], ".2f"),
            _shown(figures["machine_cpu_us_per_message_median"], ".2f"),
            str(sum(figures["missing_each"])), str(sum(figures["duplicates_each"])))


def _shown(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)
