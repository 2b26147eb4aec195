"""One join trial's moving parts, for ``bench vp-join`` and ``bench rebalance``: a paced producer
and the group's members, each member a process of its own (``bench.join_member``).

``JoinTrial.run`` starts every member's process at once, the joiner's too, and waits until each
is warm (``bench.join_member``), so that no process starts inside the measuring window;
produces; lets the members join one by one; waits ``warmup_s``; lets the joiner join
(``join_ns``); waits ``after_join_s`` (``end_ns``); stops the producer; then asks the members
for what they polled until they have every message produced (or ``DRAIN_S_MAX``), and stops
them (each closes its consumer: it commits and leaves the group). The callers measure the
members' logs against ``join_ns``.

**The producer is a thread of the bench's process.** The bench does nothing else while it
measures: its main thread waits on the members' wires, which carry nothing in the window but the
joiner's ``Joined`` and a failure, so the producer has this process's GIL to itself apart from
the bench's etcd watches. What is measured is the members, each in a process of its own, as a
deployment runs them.

**Failures.** A member that fails, or whose process ends, fails the trial with its error
(``JoinTrialFailed``), and no member's process outlives the trial: on any way out, the
members are stopped and those that do not stop are killed (``member_process.stop_members``).
"""

from __future__ import annotations

import multiprocessing.connection
import threading
import time
from dataclasses import dataclass, field

from mafka4.bench import member_process
from mafka4.bench.join_member import Join, Joined, MemberSpec, Polled, Ready, TraceJoins
from mafka4.errors import JoinTrialFailed

# A member's process starts, imports the client and reads the topic's metadata (``Ready``)
# within this long, and a member's consumer joins the group within this long.
MEMBER_READY_S_MAX = 60.0
MEMBER_JOIN_S_MAX = 60.0
# After the window, the members consume the tail of the stream within this long, so that
# duplicates and lag can be counted.
DRAIN_S_MAX = 60.0
DRAIN_ASK_INTERVAL_S = 0.1
# A member closes its consumer (a commit, a release, a leave) within this long once stopped.
MEMBER_STOP_S_MAX = 30.0
JOINER = "joiner"


@dataclass
class MemberLog:
    """What one member polled, as its process reported it: the monotonic ns stamp of each
    non-empty poll, the number of messages and their values; and its group member id."""

    name: str
    receive_ns: list[int] = field(default_factory=list)
    messages: int = 0
    values: list[bytes] = field(default_factory=list)
    member_id: str | None = None
    reports: int = 0  # how many ``Polled`` it sent

    def record(self, polled: Polled) -> None:
        for stamp_ns, values in polled.polls:
            self.receive_ns.append(stamp_ns)
            self.messages += len(values)
            self.values.extend(values)
        self.reports += 1


class JoinMembers:
    """The members of one join trial, ``names`` in the order they join, each a process
    (``bench.join_member``), and what they told; ``with`` ends with every process gone."""

    def __init__(self, spec: MemberSpec, names: list[str]):
        assert len(set(names)) == len(names), names
        self.logs = [MemberLog(name) for name in names]
        self._spec = spec
        self._members: list[member_process.Member] = []
        self._ready = [False] * len(names)
        self.join_trace_rows: list[tuple] = []
        self.join_trace_dropped = 0

    def __enter__(self) -> "JoinMembers":
        try:
            for _ in self.logs:  # not waited for: the interpreters start side by side
                self._members.append(member_process.start("mafka4.bench.join_member", self._spec))
            if not self._receive(lambda: all(self._ready), time.monotonic() + MEMBER_READY_S_MAX):
                raise JoinTrialFailed(f"{self._ready.count(False)} of {len(self.logs)} member processes did not "
                                      f"start and read the topic's metadata within {MEMBER_READY_S_MAX} s: "
                                      f"is the machine overloaded?")
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc_info) -> None:
        member_process.stop_members(self._members, MEMBER_STOP_S_MAX)
        for _, channel in self._members:
            channel.close()

    def log(self, name: str) -> MemberLog:
        return next(log for log in self.logs if log.name == name)

    def trace_joins(self) -> None:
        """Every member keeps its join trace rows of the topic from now on (the joiner before it joins)."""
        member_process.send_all(self._members, TraceJoins())

    def join(self, name: str, wait: bool) -> None:
        """Member ``name`` joins the group now; with ``wait``, return once its consumer is built."""
        index = self.logs.index(self.log(name))
        member_process.send_all([self._members[index]], Join())  # its process gone: ``_receive`` says why
        if wait and not self._receive(lambda: self.logs[index].member_id is not None,
                                      time.monotonic() + MEMBER_JOIN_S_MAX):
            raise JoinTrialFailed(f"member {name} did not join in {MEMBER_JOIN_S_MAX} s: see the cluster's logs")

    def watch(self, seconds: float) -> None:
        """Wait ``seconds`` (what the members send then is taken: a join, a failure)."""
        self._receive(lambda: False, time.monotonic() + seconds)

    def collect(self, complete, seconds_max: float) -> None:
        """Ask every member for what it polled, until ``complete()`` (or ``seconds_max``)."""
        deadline = time.monotonic() + seconds_max
        while True:
            wanted = [log.reports + 1 for log in self.logs]
            member_process.send_all(self._members, member_process.Report())
            answered = self._receive(lambda: all(log.reports >= n for log, n in zip(self.logs, wanted)), deadline)
            if not answered or complete() or time.monotonic() >= deadline:
                return
            time.sleep(DRAIN_ASK_INTERVAL_S)

    def _receive(self, until, deadline: float) -> bool:
        """Take what the members send until ``until()`` holds (True) or ``deadline`` passes (False)."""
        channels = [channel for _, channel in self._members]
        while not until():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            for channel in multiprocessing.connection.wait(channels, timeout=left):
                self._take(channels.index(channel))
        return True

    def _take(self, index: int) -> None:
        process, channel = self._members[index]
        log = self.logs[index]
        try:
            message = channel.recv()
        except (EOFError, OSError):
            raise JoinTrialFailed(f"member {log.name}'s process {process.pid} ended before the trial did "
                                  f"(exit code {member_process.exit_code_once_ended(process)}): see its output "
                                  f"above") from None
        if isinstance(message, Polled):
            log.record(message)
            self.join_trace_rows.extend(message.join_trace_rows)
            self.join_trace_dropped += message.join_trace_dropped
        elif isinstance(message, Joined):
            log.member_id = message.member_id
        elif isinstance(message, Ready):
            self._ready[index] = True
        else:
            assert isinstance(message, member_process.Failed), message
            raise JoinTrialFailed(f"member {log.name} (process {process.pid}) failed: {message.error}")


@dataclass(frozen=True, slots=True)
class JoinRun:
    """What ``JoinTrial.run`` measured: the monotonic ns of the join and of the window's end,
    every member's log (the joiner's last), and the join trace rows the members kept."""

    join_ns: int
    end_ns: int
    logs: list[MemberLog]
    produced: int
    join_trace: dict  # {"rows": [...], "dropped": n}, as ``mafka4.join_trace`` takes a trace

    @property
    def joiner(self) -> MemberLog:
        return self.logs[-1]


def produce_loop(producer, rate_msgs_per_s: int, stop: threading.Event, sent: list[int]) -> None:
    start = time.monotonic()
    number = 0
    while not stop.is_set():
        due = int((time.monotonic() - start) * rate_msgs_per_s)
        while number < due:
            producer.send(str(number).encode(), key=str(number).encode())
            number += 1
        time.sleep(0.005)
    producer.flush()
    sent.append(number)


class JoinTrial:
    """One join trial of ``spec``'s topic and group: see the module docstring."""

    def __init__(self, spec: MemberSpec, connection, rate_msgs_per_s: int):
        self._spec, self._connection, self._rate = spec, connection, rate_msgs_per_s

    def run(self, members: int, warmup_s: float, after_join_s: float, before_join=lambda trial: None) -> JoinRun:
        """``before_join(members)`` runs just before the join (``JoinMembers.trace_joins`` is for it)."""
        from mafka4.client.producer import Producer

        names = [f"member-{index}" for index in range(members)] + [JOINER]
        with JoinMembers(self._spec, names) as group:
            stop_producer, sent = threading.Event(), []
            producer = Producer(self._spec.topic, connection=self._connection, linger_ms=5)
            producer_thread = threading.Thread(target=produce_loop, daemon=True,
                                               args=(producer, self._rate, stop_producer, sent))
            try:
                producer_thread.start()
                for name in names[:-1]:
                    group.join(name, wait=True)
                group.watch(warmup_s)
                before_join(group)
                join_ns = time.monotonic_ns()
                group.join(JOINER, wait=False)
                group.watch(after_join_s)
                end_ns = time.monotonic_ns()
            finally:
                stop_producer.set()
                producer_thread.join()
                producer.close()
            if not sent:
                raise JoinTrialFailed("the trial's producer failed: see its traceback above")
            produced = sent[0]
            group.collect(lambda: len({v for log in group.logs for v in log.values}) >= produced, DRAIN_S_MAX)
        unjoined = [log.name for log in group.logs if log.member_id is None]
        if unjoined:
            raise JoinTrialFailed(f"members {unjoined} had not joined the group by the end of the drain "
                                  f"({DRAIN_S_MAX} s at most): see the cluster's logs")
        return JoinRun(join_ns, end_ns, group.logs, produced,
                       {"rows": group.join_trace_rows, "dropped": group.join_trace_dropped})
