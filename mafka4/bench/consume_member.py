"""One consumer of ``mafka4 bench consume``: a process of its own, a member of the drain's group.

The driver (``bench.consume``) starts one process per member (``bench.member_process``: why, the
wire, Ctrl-C). On that wire the driver sends the member's ``MemberSpec``, then its signals in
order: ``Arm()``, ``Start()``, ``Stop()`` (``member_process.Stop``; the driver's end closing counts
as one). The member goes through four steps, reporting each as it happens (the events of
``bench.drain``) and reading the signals between its polls (``WireSignals``):

1. **join** (``Joined``, then ``Assigned`` whenever its assignment changes): it creates a
   ``Consumer`` of the group on the cluster access its spec carries, at the *latest* offsets,
   auto-committing as its acknowledgement cadence says (``bench.drain_terms``).
   The group is new, so every partition (or VP) it claims starts at its high watermark, the
   backlog's end: the polls that carry the group protocol (Mafka3's eager rebalance, Mafka4's
   VP handovers) read nothing. It polls until the driver, having seen the group settle
   (``drain.GroupSettling``), signals ``arm``.
2. **arm** (``Armed``): it stops polling, waits until the long polls it had out were answered
   (a read node's next fetch goes out only after its last one came back), and seeks every
   partition it owns to the backlog's start. Nothing is read yet.
3. **drain** (``Drained``): at ``start`` it polls until it was given every backlog offset of
   the partitions it owns, or until ``stop``, committing at its cadence (``per-read``: after each
   poll that returned messages; ``every-<N>ms``: the consumer's auto-commit, then one commit once
   it has every offset; ``none``: never); it stamps its first poll, each poll that returned
   messages, its last message and the end of its last commit (``drain`` defines the figures). A
   member that owns nothing does not poll in this step.
4. **stay** (``Closed``): it keeps polling, so the group stays as it is for the members still
   draining, until ``stop``; then it closes the consumer (commit, release, leave). A close that
   fails is reported in ``Closed``: the drain it follows is measured already.

A failure at any other step is reported (``member_process.failure_reported``) and the process exits.
A retriable error of a poll or a commit is counted and the member goes on, as an application
would: it polls again, and a commit that failed is made again after its next poll (the last one
until it succeeds).

**Why a member reports unasked**, where the join benches' members keep what they polled until the
driver sends ``member_process.Report()``: this driver acts on each report as it comes. It settles
the group on the joins and assignments, arms it once settled, starts it once armed, takes the
machine's CPU and stops every member when the last drain came in; and it produces nothing while a
drain runs, so nothing it measures waits for it to read. For the same reason the stay step is not
``member_process.poll_until_stopped``: it counts what it is given late and goes on after a
retriable error, and a failed close is reported in ``Closed``, not dropped.

**A thin client**, as the join benches' and the scaling experiment's members are: its consumer
reaches the cluster through the ``ClusterAccess`` in its spec (the nodes' client addresses and a
credential, which the driver reads once per drain from its own connection:
``client.cluster_access``) and speaks only the client protocol to the nodes. The process imports
neither Ray nor etcd, so what it costs is its consumer's alone. Its start (an interpreter, the
client's imports, a first connection) still loads the machine for a moment, which is why the
driver waits for it to be quiet before it signals the start.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Mapping

from mafka4.bench.drain import Armed, Assigned, Closed, Drained, Joined, MemberDrain, OffsetRange, OffsetTally
from mafka4.bench.drain_terms import AckCadence, AckKind
from mafka4.bench.member_process import Stop, answered_until_stop, failure_reported, serve
from mafka4.client.cluster_access import ClusterAccess
from mafka4.client.consumer import Consumer
from mafka4.collector import freeze_what_start_up_left
from mafka4.errors import MafkaError

# While joining, a member returns from poll() this often to look at the driver's signal.
JOIN_POLL_TIMEOUT_MS = 100
# poll() returns as soon as messages arrive: this bounds only a poll that finds none.
DRAIN_POLL_TIMEOUT_MS = 100
STAY_POLL_TIMEOUT_MS = 200
# Beyond fetch_wait_ms_max, for the answer to a long poll at the backlog's end to arrive.
ANSWER_MARGIN_S = 0.2
# How often a member waiting for the start looks whether the driver stopped instead.
SIGNAL_CHECK_S = 0.05


@dataclass(frozen=True, slots=True)
class MemberSpec:
    """What one member process needs: the cluster, the group, and the backlog it drains."""

    member: int
    access: ClusterAccess
    topic: str
    group: str
    ranges: Mapping[int, OffsetRange]
    ack_cadence: AckCadence
    gc_freeze: bool = False  # freeze what the member's start left (ConsumeBenchSettings.gc_freeze)
    check_crcs: bool = True  # ConsumerConfig.check_crcs of the member's consumer


@dataclass(frozen=True, slots=True)
class Arm:
    """Driver to member: the group settled; stop polling and seek to the backlog's start (step 2)."""


@dataclass(frozen=True, slots=True)
class Start:
    """Driver to member: drain now (step 3)."""


class WireSignals:
    """The driver's signals as a member sees them: ``arm``, ``start`` and ``stop``, each set once
    its message came (``stop`` also once the driver's end closed), with the two calls of a
    ``threading.Event`` the steps make, ``is_set()`` and ``wait(timeout_s)``. A member reads its
    wire only when a step asks, between its polls."""

    def __init__(self, channel: Connection):
        self._channel = channel
        self._arrived: set[type] = set()
        self.arm, self.start, self.stop = _Signal(self, Arm), _Signal(self, Start), _Signal(self, Stop)

    def arrived(self, kind: type) -> bool:
        return kind in self._arrived

    def take(self, timeout_s: float) -> None:
        """Take the signals waiting on the wire, waiting up to ``timeout_s`` for one to come."""
        if Stop not in self._arrived and self._channel.poll(timeout_s) \
                and not answered_until_stop(self._channel, self._take_one):
            self._arrived.add(Stop)

    def _take_one(self, request: object) -> None:
        assert isinstance(request, (Arm, Start)), f"a bench consume member cannot answer {request!r}"
        self._arrived.add(type(request))


class _Signal:
    """One of the driver's signals, as a step looks at it."""

    def __init__(self, signals: WireSignals, kind: type):
        self._signals, self._kind = signals, kind

    def is_set(self) -> bool:
        self._signals.take(0)
        return self._signals.arrived(self._kind)

    def wait(self, timeout_s: float) -> bool:
        """Until set or ``timeout_s`` passed; at once once stopped (every step looks at ``stop`` next)."""
        deadline = time.monotonic() + timeout_s
        while not self.is_set():
            left_s = deadline - time.monotonic()
            if left_s <= 0 or self._signals.arrived(Stop):
                return False
            self._signals.take(left_s)
        return True


def run_member(channel: Connection, spec: MemberSpec) -> None:
    """The member's ``main`` (``member_process.serve``): the four steps of the module docstring."""
    with failure_reported(channel):
        signals = WireSignals(channel)
        _run(spec, channel, signals.arm, signals.start, signals.stop)


def _run(spec: MemberSpec, reports: Connection, arm, start, stop) -> None:
    consumer = Consumer(spec.topic, group=spec.group, connection=spec.access,  # at the latest offsets: step 1
                        check_crcs=spec.check_crcs, auto_commit_interval_ms=spec.ack_cadence.auto_commit_interval_ms)
    if spec.gc_freeze:
        freeze_what_start_up_left()
    try:
        late_messages = _steps(consumer, spec, reports, arm, start, stop)
    except BaseException:
        consumer.close()
        raise
    close_error = None
    try:
        consumer.close()
    except MafkaError as error:
        close_error = f"{type(error).__name__}: {error}"
    if late_messages is not None:
        reports.send(Closed(spec.member, late_messages, close_error))


def _steps(consumer: Consumer, spec: MemberSpec, reports, arm, start, stop) -> int | None:
    """Steps 1 to 4 up to the close, each reported (``reports.send``): the messages given after the
    drain, or None if stopped before it."""
    reports.send(Joined(spec.member, consumer.member_id))
    joining = _join(consumer, spec, reports, arm, stop)
    if stop.is_set():
        return None
    reports.send(Armed(spec.member, _arm(consumer, spec), joining))
    tally = OffsetTally(spec.ranges)
    while not start.wait(SIGNAL_CHECK_S):
        if stop.is_set():
            return None
    reports.send(Drained(_drain(consumer, spec.member, tally, spec.ack_cadence, stop)))
    return _stay(consumer, stop)


class _Retriable(Exception):
    """A poll or a commit failed in a way an application retries (a failover, etcd away for a moment)."""


def _retried(call):
    """``call()``; a retriable error is raised as ``_Retriable`` for the caller to count, any other propagates."""
    try:
        return call()
    except MafkaError as error:
        if not error.retriable:
            raise
        raise _Retriable(f"{type(error).__name__}: {error}") from error


def _poll(consumer: Consumer, timeout_ms: int) -> list:
    return _retried(lambda: consumer.poll(timeout_ms=timeout_ms))


def _join(consumer: Consumer, spec: MemberSpec, reports, arm, stop) -> int:
    """Poll until ``arm`` (or ``stop``), reporting each new assignment; the messages given meanwhile."""
    reported: tuple[int, ...] | None = None
    messages = 0
    while not arm.is_set() and not stop.is_set():
        assignment = tuple(consumer.assignment())
        if assignment != reported:
            reports.send(Assigned(spec.member, assignment))
            reported = assignment
        try:
            messages += len(_poll(consumer, JOIN_POLL_TIMEOUT_MS))
        except _Retriable:
            arm.wait(JOIN_POLL_TIMEOUT_MS / 1000)  # the group protocol goes on at the next poll
    return messages


def _arm(consumer: Consumer, spec: MemberSpec) -> tuple[int, ...]:
    time.sleep(consumer.config.fetch_wait_ms_max / 1000 + ANSWER_MARGIN_S)
    owned = tuple(consumer.assignment())
    for partition in owned:
        assert partition in spec.ranges, f"member {spec.member} owns {partition}: not in the backlog"
        consumer.seek(partition, spec.ranges[partition].start)
    return owned


def _drain(consumer: Consumer, member: int, tally: OffsetTally, cadence: AckCadence, stop) -> MemberDrain:
    owned = tuple(consumer.assignment())
    latencies: list[int] = []
    first_poll_ns = last_message_ns = end_ns = first_poll_cpu_ns = None
    poll_errors, first_poll_error = 0, None
    commits = _Commits(consumer, stop)
    owed = False  # messages were returned since this member's last commit, and its cadence commits them
    while not tally.complete(consumer.assignment()) and not stop.is_set():
        before = time.monotonic_ns()
        if first_poll_ns is None:
            first_poll_ns, first_poll_cpu_ns = before, time.process_time_ns()
        try:
            messages = _poll(consumer, DRAIN_POLL_TIMEOUT_MS)
        except _Retriable as error:
            poll_errors += 1
            first_poll_error = first_poll_error or str(error)
            stop.wait(DRAIN_POLL_TIMEOUT_MS / 1000)
            continue
        after = time.monotonic_ns()
        if messages:
            latencies.append(after - before)
            last_message_ns = end_ns = after
            tally.record_messages(messages)
            owed = cadence.kind is not AckKind.NONE
        if owed and cadence.kind is AckKind.PER_READ:
            owed, end_ns = commits.once(end_ns)
    if owed:  # every-<N>ms: the commit that ends its part; per-read: the last one, if it failed
        end_ns = commits.until_done()
    cpu_ns = None if first_poll_cpu_ns is None else time.process_time_ns() - first_poll_cpu_ns
    return MemberDrain(member, owned, first_poll_ns, last_message_ns, end_ns, tuple(latencies), tally.delivered,
                       tally.duplicates, tally.outside, tally.seen(), tally.complete(consumer.assignment()),
                       poll_errors, first_poll_error, cpu_ns, commits.errors, commits.first_error)


class _Commits:
    """A draining member's commits, counting the ones that failed retriably."""

    def __init__(self, consumer: Consumer, stop):
        self._consumer, self._stop = consumer, stop
        self.errors, self.first_error = 0, None

    def once(self, end_ns: int | None) -> tuple[bool, int | None]:
        """One commit: (still owed, the member's end: when it returned, else ``end_ns`` unchanged)."""
        try:
            _retried(self._consumer.commit)
        except _Retriable as error:
            self.errors += 1
            self.first_error = self.first_error or str(error)
            return True, end_ns
        return False, time.monotonic_ns()

    def until_done(self) -> int | None:
        """Commit until it succeeds: when it returned; None if ``stop`` came first (the member's end is unknown)."""
        while not self._stop.is_set():
            owed, end_ns = self.once(None)
            if not owed:
                return end_ns
            self._stop.wait(DRAIN_POLL_TIMEOUT_MS / 1000)
        return None


def _stay(consumer: Consumer, stop) -> int:
    """Poll until ``stop``; the messages given meanwhile."""
    messages = 0
    while not stop.is_set():
        try:
            messages += len(_poll(consumer, STAY_POLL_TIMEOUT_MS))
        except _Retriable:
            stop.wait(STAY_POLL_TIMEOUT_MS / 1000)
    return messages


def main() -> None:
    serve(run_member)


if __name__ == "__main__":
    # Under its own name, so that what it sends is pickled as this module's classes, not __main__'s.
    from mafka4.bench.consume_member import main as main_of_the_module

    main_of_the_module()
