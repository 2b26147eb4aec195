"""``mafka4 bench consume``: how fast one consumer group drains a backlog, per read mode and consumer count.

On the running cluster (``mafka4 up``, or the one ``$MAFKA4_ETCD_ENDPOINT`` and
``$MAFKA4_RAY_ADDRESS`` name):

1. **backlogs**: per read mode of ``read_modes``, a fresh topic of ``partitions`` physical
   partitions (RF ``replication_factor``). A mafka4-mode topic has
   ``ConsumeBenchSettings.mafka4_virtual_partitions`` VPs and as many at most
   (``virtual_partitions_max``): no group of the run splits it and the controller's upkeep never
   merges it, so every drain reads the same layout. One ``Producer`` sends ``messages`` keyless
   messages of ``message_bytes`` random bytes (acks=all). The backlog is ready when the offset
   ranges of its partitions (or VPs), as group-less consumers see them, hold ``messages``: all
   committed and, in mafka4 mode, fed to the VPs. Nothing is produced after that.
2. **drains**: per repetition, read mode, acknowledgement cadence and consumer count, in that
   order (so the two modes alternate through the run), a fresh group drains the backlog from
   its start. Its members are processes of their own, started at once after the backlog is
   ready (``bench.consume_member``, each on its wire: ``bench.member_process``), committing at
   the drain's cadence (``bench.drain_terms``); they join, the driver waits until the group
   settled (``drain.GroupSettling``), lets them seek to the start, and signals the start to all
   of them at once. The members time themselves, up to their last commit; ``drain.drain_row``
   combines their figures.

The report (``results/bench_consume.json``): the settings; each backlog (topic, VPs, offset
ranges, how fast it was produced); one row per drain with its cadence (``ack``), msgs/s, MB/s, fetch latency
p50/p99/p99.9, messages read, missing and duplicated, the consumers that had work (in mafka3
mode at most ``partitions``, in mafka4 mode at most the VP count), seconds to join and settle,
the 1-minute load average at its start and end and ``quiet`` (``bench.usage``, judged at the
start: the drain loads the machine by design), and the CPU it cost per message, the members'
and the whole machine's (``bench.cpu_cost``); the summary per read mode, cadence and consumer count;
and the load average at the start and end of the run. Every member runs on this machine's cores
beside the cluster, as the brokers' own work does: compare figures within one run.

The members are thin clients (``bench.consume_member``) since 2026-12-03; before, each was a
Ray driver with an etcd client of its own (its consumer already spoke the client protocol). So
in earlier reports the members' CPU per message also counts each member's idle Ray and etcd
threads, the machine's also the Ray processes serving those drivers, ``join_s`` a Ray driver's
start per member, and ``quiet_wait_s`` the load those starts left: compare them across the
change with care.
"""

from __future__ import annotations

import collections
import json
import multiprocessing.connection
import os
import secrets
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from mafka4.bench import member_process
from mafka4.bench.consume_member import Arm, MemberSpec, Start
from mafka4.bench.cpu_cost import MachineCpu, cpu_per_message
from mafka4.bench.drain import (Armed, Assigned, Closed, ConsumeBenchSettings, Drained, GroupSettling, Joined,
                                MemberDrain, OffsetRange, assignment_problem, backlog_messages, drain_row, row_quiet,
                                summary)
from mafka4.bench.drain_terms import AckCadence
from mafka4.bench.process_usage import TICKS_PER_S, machine_cpu, wait_until_quiet
from mafka4.bench.produce import producer_run
from mafka4.bench.produce_settings import ProduceBenchSettings
from mafka4.bench.usage import is_quiet
from mafka4.client.admin import Admin
from mafka4.client.cluster_access import cluster_access
from mafka4.client.consumer import Consumer
from mafka4.limits import ReadMode
from mafka4.runtime.connect import Connection, connect

READY_POLL_S = 0.5
MEMBER_MODULE = "mafka4.bench.consume_member"
# The driver looks at its deadlines at least this often while it waits for the members' reports.
REPORT_WAIT_S = 0.2
# After ``stop``, members report what they read and close within this long (a close commits and leaves).
CLOSE_S_MAX = 60.0


@dataclass(frozen=True, slots=True)
class Backlog:
    read_mode: ReadMode
    topic: str
    virtual_partitions: int  # 0 in mafka3 mode
    ranges: dict[int, OffsetRange]  # per partition, or per VP in mafka4 mode
    produced: dict

    def to_json(self) -> dict:
        return {"read_mode": self.read_mode.value, "topic": self.topic, "virtual_partitions": self.virtual_partitions,
                "ranges": {str(p): [r.start, r.end] for p, r in sorted(self.ranges.items())}, "produced": self.produced}


def backlog_ranges(connection: Connection, topic: str) -> dict[int, OffsetRange]:
    """Per partition (or VP) of ``topic``, its log start and high watermark, as group-less consumers see them."""
    starts = Consumer(topic, connection=connection, from_beginning=True)
    ends = Consumer(topic, connection=connection)
    try:
        partitions = starts.assignment()
        assert ends.assignment() == partitions, (ends.assignment(), partitions)
        return {partition: OffsetRange(starts.position(partition), ends.position(partition))
                for partition in partitions}
    finally:
        starts.close()
        ends.close()


def write_backlog(connection: Connection, admin: Admin, read_mode: ReadMode, settings: ConsumeBenchSettings,
                  created: list[str]) -> Backlog:
    """A fresh topic of ``read_mode`` holding ``settings.messages``, ready to read (appended to ``created``)."""
    topic = f"bench-consume-{read_mode.value}-{secrets.token_hex(3)}"
    if read_mode is ReadMode.MAFKA4:
        virtual_partitions = settings.mafka4_virtual_partitions
        admin.create_topic(topic, partitions=settings.partitions, replication_factor=settings.replication_factor,
                           virtual_partitions=virtual_partitions, virtual_partitions_max=virtual_partitions,
                           read_replicas=settings.read_replicas, read_mode=ReadMode.MAFKA4)
    else:
        virtual_partitions = 0
        admin.create_topic(topic, partitions=settings.partitions, replication_factor=settings.replication_factor,
                           read_mode=ReadMode.MAFKA3)
    created.append(topic)
    # bench produce's saturated send_many run: keyless messages of random bytes, acks=all, a batch's
    # worth per call. The batches are those that send would make; only the backlog is written sooner.
    produced = producer_run(connection, topic, ProduceBenchSettings(
        messages=settings.messages, message_bytes=settings.message_bytes, partitions=settings.partitions,
        replication_factor=settings.replication_factor, linger_ms=settings.linger_ms), many=True)
    deadline = time.monotonic() + settings.ready_s_max
    while True:
        ranges = backlog_ranges(connection, topic)
        held = backlog_messages(ranges)
        if held == settings.messages:
            return Backlog(read_mode, topic, virtual_partitions, ranges, produced)
        assert held < settings.messages, f"bench consume: {topic} holds {held} messages, sent {settings.messages}"
        if time.monotonic() > deadline:
            raise TimeoutError(f"bench consume: {topic} holds {held} of {settings.messages} readable messages after "
                               f"{settings.ready_s_max} s (committed and, in mafka4 mode, fed to the VPs); see "
                               f"<home>/controller.log and the read nodes' logs")
        time.sleep(READY_POLL_S)


class _Members:
    """The member processes of one drain, each on its wire (``bench.member_process``): the
    driver's signals to all of them, and their reports as they come."""

    def __init__(self, members: list[member_process.Member]):
        self._members = members
        self._pending: collections.deque = collections.deque()  # received, not yet handed out
        self._ended: set[int] = set()  # members whose end of the wire closed
        self.stopped = False

    @classmethod
    def started(cls, specs: list[MemberSpec]) -> "_Members":
        """A process per spec, started side by side (not waited for)."""
        members: list[member_process.Member] = []
        try:
            for spec in specs:
                members.append(member_process.start(MEMBER_MODULE, spec))
        except BaseException:
            cls(members).close()
            raise
        return cls(members)

    def arm(self) -> None:
        member_process.send_all(self._members, Arm())

    def start_drain(self) -> None:
        member_process.send_all(self._members, Start())

    def stop(self) -> None:
        self.stopped = True
        member_process.send_all(self._members, member_process.Stop())

    def next_report(self):
        """The next report, or None if none came within ``REPORT_WAIT_S``; raises when a member failed, or its
        process ended before it was stopped."""
        if not self._pending:
            waiting = {channel: index for index, (_, channel) in enumerate(self._members) if index not in self._ended}
            for channel in multiprocessing.connection.wait(list(waiting), timeout=REPORT_WAIT_S):
                self._receive(waiting[channel])
        if not self._pending:
            return None
        index, report = self._pending.popleft()
        if isinstance(report, member_process.Failed):
            raise RuntimeError(f"bench consume: member {index} (process {self._members[index][0].pid}) failed: "
                               f"{report.error}; its traceback is above")
        return report

    def _receive(self, index: int) -> None:
        process, channel = self._members[index]
        try:
            self._pending.append((index, channel.recv()))
        except (EOFError, OSError):
            self._ended.add(index)
            if self.stopped:
                return  # a stopped member exits
            raise RuntimeError(f"bench consume: member {index}'s process {process.pid} ended before the drain did "
                               f"(exit code {member_process.exit_code_once_ended(process)}): see its output "
                               f"above") from None

    def close(self) -> None:
        """Stop every member; one that has not exited within ``CLOSE_S_MAX`` is killed. What they still
        send meanwhile is read and dropped (``member_process.stop_members``)."""
        self.stopped = True
        member_process.stop_members(self._members, CLOSE_S_MAX, dropping_what_they_send=True)
        for _, channel in self._members:
            channel.close()


def _settle(members: _Members, settling: GroupSettling, consumers: int, settings: ConsumeBenchSettings) -> None:
    """Until every member joined and the group settled (``drain.GroupSettling``)."""
    deadline = time.monotonic() + settings.join_s_max
    while not settling.settled(time.monotonic_ns()):
        report = members.next_report()
        if isinstance(report, Joined):
            settling.observe_join(report.member, time.monotonic_ns())
        elif isinstance(report, Assigned):
            settling.observe(report.member, report.partitions, time.monotonic_ns())
        if time.monotonic() > deadline:
            raise TimeoutError(f"bench consume: the group of {consumers} members did not settle within "
                               f"{settings.join_s_max} s: {settling.problem() or 'assignments still changing'}")


def _arm(members: _Members, consumers: int, partitions, settings: ConsumeBenchSettings) -> dict[int, Armed]:
    members.arm()
    armed: dict[int, Armed] = {}
    deadline = time.monotonic() + settings.join_s_max
    while len(armed) < consumers:
        report = members.next_report()
        if isinstance(report, Armed):
            armed[report.member] = report
        if time.monotonic() > deadline:
            raise TimeoutError(f"bench consume: {len(armed)} of {consumers} members armed within "
                               f"{settings.join_s_max} s")
    problem = assignment_problem({member: a.partitions for member, a in armed.items()}, consumers, partitions)
    if problem is not None:
        raise RuntimeError(f"bench consume: the group changed while its members stopped polling: {problem}")
    return armed


def _collect(members: _Members, consumers: int, settings: ConsumeBenchSettings
             ) -> tuple[list[MemberDrain], list[Closed], MachineCpu]:
    """Every member's drain (``stop`` at the deadline: they report what they read), then their closes;
    and the machine's busy CPU when the last drain was reported."""
    drains: dict[int, MemberDrain] = {}
    closed: dict[int, Closed] = {}
    drained_at = None
    deadline = time.monotonic() + settings.drain_s_max
    while len(drains) < consumers or len(closed) < consumers:
        report = members.next_report()
        if isinstance(report, Drained):
            drains[report.drain.member] = report.drain
            if len(drains) == consumers:
                drained_at = machine_cpu()
        elif isinstance(report, Closed):
            closed[report.member] = report
        if len(drains) == consumers or time.monotonic() > deadline:
            if not members.stopped:
                members.stop()
                deadline = time.monotonic() + CLOSE_S_MAX
            elif time.monotonic() > deadline:
                raise TimeoutError(f"bench consume: {len(drains)} of {consumers} members reported their drain and "
                                   f"{len(closed)} closed within {CLOSE_S_MAX} s of being stopped")
    assert drained_at is not None, "every member reported its drain before closing"
    return list(drains.values()), list(closed.values()), drained_at


def drain_once(connection: Connection, backlog: Backlog, cadence: AckCadence, consumers: int, repetition: int,
               settings: ConsumeBenchSettings) -> dict:
    """One fresh group of ``consumers`` member processes, committing at ``cadence``, drains ``backlog`` from its
    start: its row."""
    ranges = backlog_ranges(connection, backlog.topic)
    if ranges != backlog.ranges:
        raise RuntimeError(f"bench consume: the offsets of {backlog.topic} changed since it was written: "
                           f"{backlog.ranges} then {ranges}")
    group = f"bench-consume-{secrets.token_hex(4)}"
    access = cluster_access(connection)  # here, once per drain: a member imports neither Ray nor etcd
    specs = [MemberSpec(member, access, backlog.topic, group, ranges, cadence, settings.gc_freeze, settings.check_crcs)
             for member in range(consumers)]
    joining = time.monotonic()
    members = _Members.started(specs)
    try:
        _settle(members, GroupSettling(consumers, ranges, int(settings.settle_s * 1e9)), consumers, settings)
        join_s = time.monotonic() - joining
        armed = _arm(members, consumers, ranges, settings)
        # The members' starts (an interpreter and a thin client each) load the machine for a while: the drain waits.
        waiting = time.monotonic()
        load_start = wait_until_quiet(settings.quiet_wait_s_max)
        quiet_wait_s = time.monotonic() - waiting
        started_at = machine_cpu()
        members.start_drain()
        drains, closes, drained_at = _collect(members, consumers, settings)
        load_end = os.getloadavg()[0]
    finally:
        members.close()
    load = [round(load_start, 2), round(load_end, 2)]
    figures = drain_row(ranges, drains, settings.message_bytes)
    return {"read_mode": backlog.read_mode.value, "ack": str(cadence), "consumers": consumers, "repetition": repetition,
            "group": group,
            "join_s": round(join_s, 2), "quiet_wait_s": round(quiet_wait_s, 2), **figures,
            **cpu_per_message([drain.cpu_ns for drain in drains], started_at, drained_at, TICKS_PER_S,
                              figures["messages_read"]),
            "messages_while_joining": sum(a.messages_while_joining for a in armed.values()),
            "late_messages": sum(c.late_messages for c in closes),
            "close_errors": [c.close_error for c in closes if c.close_error is not None],
            "load_average_1m": load, "quiet": row_quiet(load)}


def run_consume_bench(settings: ConsumeBenchSettings, output_path: str) -> dict:
    connection = connect()
    admin = Admin(connection)
    load_start = os.getloadavg()[0]
    created: list[str] = []
    try:
        backlogs = [write_backlog(connection, admin, ReadMode.parse(mode), settings, created)
                    for mode in settings.read_modes]
        rows = [drain_once(connection, backlog, cadence, consumers, repetition, settings)
                for repetition in range(settings.repetitions) for backlog in backlogs
                for cadence in settings.cadences for consumers in settings.consumers]
    finally:
        for topic in created:
            admin.delete_topic(topic)
    load = [round(load_start, 2), round(os.getloadavg()[0], 2)]
    report = {"settings": asdict(settings), "backlogs": [backlog.to_json() for backlog in backlogs], "rows": rows,
              "summary": summary(rows), "cpu_count": os.cpu_count(), "load_average_1m": load,
              "quiet": is_quiet(load[:1])}
    Path(output_path).parent.mkdir(parents=True, exist_ok=True)
    Path(output_path).write_text(json.dumps(report, indent=2))
    return report
