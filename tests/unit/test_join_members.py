"""The join benches' members (``bench vp-join``, ``bench rebalance``), each a process of its own:
a member keeps its poll stamps, values and join trace rows until the bench asks, and then starts
empty; its process imports neither Ray nor etcd (nor does ``bench consume``'s member); a member
that fails, or whose process ends, fails the trial with its error; Ctrl-C does not reach a
member, the bench stops it; and no member process outlives the bench.

No cluster: a member that must fail is given an address where no node listens, one that must
stay busy an address where connections are taken and never answered.
"""

from __future__ import annotations

import multiprocessing
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Iterator

import pytest

from mafka4.bench import member_process
from mafka4.bench.join_member import Join, JoinMember, MemberSpec, Polled, TraceJoins
from mafka4.bench.join_trial import JoinMembers, MemberLog
from mafka4.bench.member_process import Report, Stop, answered_until_stop, stop_members
from mafka4.client.bootstrap import Credential
from mafka4.client.cluster_access import ClusterAccess
from mafka4.client.message import Message
from mafka4.errors import JoinTrialFailed
from mafka4.join_trace import JOIN_TRACES
from mafka4.metadata.endpoints import HostPort

NOWHERE = ClusterAccess((HostPort("127.0.0.1", 1),), Credential("nobody", "none"))  # port 1: no node there


def _message(value: bytes) -> Message:
    return Message(topic="t", partition=0, offset=0, timestamp_ms=0, key=None, value=value, headers=())


def test_a_member_keeps_its_polls_and_join_trace_rows_until_asked_and_then_starts_empty():
    bench_end, member_end = multiprocessing.Pipe()
    member = JoinMember(member_end, "traced-topic")
    try:
        member.record([])  # an empty poll is no stamp: the gaps are between polls that returned messages
        before_ns = time.monotonic_ns()
        member.record([_message(b"1"), _message(b"2")])
        JOIN_TRACES.record("traced-topic", "join_sent", "m1")  # before the trace is on: not kept
        member.answer(TraceJoins())
        JOIN_TRACES.record("traced-topic", "join_sent", "m1", ms=12.5)
        assert not bench_end.poll(), "nothing crosses the wire until the bench asks"
        member.answer(Report())
        polled = bench_end.recv()
        member.answer(Report())
        again = bench_end.recv()
    finally:
        JOIN_TRACES.stop("traced-topic")
    ((stamp_ns, values),) = polled.polls
    assert before_ns <= stamp_ns <= time.monotonic_ns() and values == (b"1", b"2")
    assert polled.join_trace_rows == (("join_sent", 12.5, "m1", ""),) and polled.join_trace_dropped == 0
    assert again == Polled((), (), 0)


def test_a_member_waits_for_its_join_answering_the_bench_and_leaves_if_told_to_stop_or_the_bench_is_gone():
    bench_end, member_end = multiprocessing.Pipe()
    member = JoinMember(member_end, "traced-topic")
    try:
        bench_end.send(TraceJoins())  # the joiner's trace goes on before it joins
        bench_end.send(Join())
        assert member.wait_for_join() and JOIN_TRACES.on("traced-topic")
    finally:
        JOIN_TRACES.stop("traced-topic")
    bench_end.send(Report())
    bench_end.send(Stop())
    assert not member.wait_for_join() and bench_end.recv() == Polled(())
    bench_end.close()
    assert not member.wait_for_join()


def test_a_member_log_folds_what_its_process_polled_in_order():
    log = MemberLog("member-0")
    log.record(Polled(((10, (b"a", b"b")), (20, (b"c",)))))
    log.record(Polled(((30, (b"d",)),)))
    assert (log.receive_ns, log.messages, log.values, log.reports) == ([10, 20, 30], 4, [b"a", b"b", b"c", b"d"], 2)


def test_a_member_answers_requests_between_polls_until_stop():
    bench_end, member_end = multiprocessing.Pipe()
    answered = []
    bench_end.send(Report())
    bench_end.send(Report())
    assert answered_until_stop(member_end, answered.append) and answered == [Report(), Report()]
    bench_end.send(Stop())
    bench_end.send(Report())  # after Stop: never answered
    assert not answered_until_stop(member_end, answered.append) and len(answered) == 2
    bench_end.close()
    member_end.recv()  # the Report after Stop
    assert not answered_until_stop(member_end, answered.append), "the bench is gone: the member stops"


@pytest.mark.parametrize("module", ["mafka4.bench.join_member", "mafka4.bench.consume_member"])
def test_a_bench_member_process_imports_neither_ray_nor_etcd(module):
    """The join benches' members and ``bench consume``'s alike: a member is a thin client."""
    program = (f"import sys, {module}; "
               "print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] in ('ray', 'etcd3', 'grpc'))))")
    found = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True).stdout.split()
    assert found == [], f"{module}'s process imported {found}"


def test_a_member_that_fails_fails_the_trial_with_its_error_and_no_member_process_is_left(started_members):
    failed = r"member (member-0|joiner) \(process \d+\) failed: ClusterNotRunning"
    with pytest.raises(JoinTrialFailed, match=failed):
        with JoinMembers(MemberSpec(NOWHERE, "join-test", "join-test-group"), ["member-0", "joiner"]):
            pytest.fail("a member that cannot reach a node is never ready: it reads the topic's metadata first")
    assert len(started_members) == 2 and all(process.poll() is not None for process in started_members)


@pytest.fixture
def silent_node() -> Iterator[tuple[ClusterAccess, socket.socket]]:
    """An address where connections are taken and never answered: a member reading the topic's
    metadata there waits (up to the client's open timeout) before it is ready."""
    with socket.create_server(("127.0.0.1", 0)) as listening:
        yield ClusterAccess((HostPort("127.0.0.1", listening.getsockname()[1]),), Credential("nobody", "none")), listening


def _wait_for_a_connection(listening: socket.socket) -> None:
    """Until a member connected: then its process ignores SIGINT already (``member_process.serve``)."""
    ready, _, _ = select.select([listening], [], [], 30)
    assert ready, "the member never connected"


def test_a_member_process_that_ends_fails_the_trial(started_members, silent_node):
    access, listening = silent_node
    threading.Thread(target=lambda: (_wait_for_a_connection(listening), started_members[0].kill()), daemon=True).start()
    ended = r"member joiner's process \d+ ended before the trial did \(exit code -9\)"
    with pytest.raises(JoinTrialFailed, match=ended):
        with JoinMembers(MemberSpec(access, "join-test", "join-test-group"), ["joiner"]):
            pytest.fail("its process was killed before it was ready")


def test_ctrl_c_does_not_stop_a_member_and_the_bench_stops_its_members(silent_node):
    access, listening = silent_node
    member = member_process.start("mafka4.bench.join_member", MemberSpec(access, "join-test", "join-test-group"))
    process, channel = member
    try:
        _wait_for_a_connection(listening)
        process.send_signal(signal.SIGINT)  # what Ctrl-C sends the whole process group
        with pytest.raises(subprocess.TimeoutExpired):
            process.wait(timeout=0.5)
    finally:
        stop_members([member], seconds_max=0.5)  # busy reading the metadata: it does not stop, and is killed
        channel.close()
    assert process.returncode == -signal.SIGKILL


def test_a_member_that_does_not_stop_is_killed():
    bench_end, member_end = multiprocessing.Pipe()
    with member_end:
        deaf = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    started_s = time.monotonic()
    stop_members([(deaf, bench_end)], seconds_max=0.5)
    assert deaf.returncode == -signal.SIGKILL and time.monotonic() - started_s < 10


def test_a_member_blocked_sending_more_than_its_wire_holds_exits_when_the_driver_drops_what_it_sends():
    program = ("import sys; from multiprocessing.connection import Connection; "
               "channel = Connection(int(sys.argv[1])); channel.send(bytes(8 << 20)); channel.recv()")
    bench_end, member_end = multiprocessing.Pipe()
    with member_end:
        member = subprocess.Popen([sys.executable, "-c", program, str(member_end.fileno())],
                                  pass_fds=(member_end.fileno(),))
    try:
        stop_members([(member, bench_end)], seconds_max=60, dropping_what_they_send=True)
    finally:
        bench_end.close()
    assert member.returncode == 0, "it was read to its end, took the Stop and exited"
