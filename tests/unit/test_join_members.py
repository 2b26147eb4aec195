"""The join benches' members (``bench vp-join``, ``bench rebalance``), each a process of its own:
a member keeps its poll stamps, values and join trace rows until the bench asks, and then starts
empty; its process imports neither Ray nor etcd; a member that fails, or whose process ends,
fails the trial with its error; Ctrl-C does not reach a member, the bench stops it; and no member
process outlives the bench.

No cluster: a member that must fail is given an address where no node listens.
"""

from __future__ import annotations

import multiprocessing
import signal
import subprocess
import sys
import time

import pytest

from mafka4.bench import member_process
from mafka4.bench.join_member import JoinMember, MemberSpec, Polled, TraceJoins
from mafka4.bench.join_trial import JoinMembers, JoinTrialFailed, MemberLog
from mafka4.bench.member_process import Report, Stop, answered_until_stop, stop_members
from mafka4.client.bootstrap import Credential
from mafka4.client.cluster_access import ClusterAccess
from mafka4.client.message import Message
from mafka4.join_trace import JOIN_TRACES
from mafka4.metadata.endpoints import HostPort

NOWHERE = ClusterAccess((HostPort("127.0.0.1", 1),), Credential("nobody", "none"))  # port 1: no node there


def _message(value: bytes) -> Message:
    return Message(topic="t", partition=0, offset=0, timestamp_ms=0, key=None, value=value, headers=())


@pytest.fixture
def started(monkeypatch) -> list[subprocess.Popen]:
    """Every member process the test starts."""
    processes = []

    def start(*args):
        process, channel = real_start(*args)
        processes.append(process)
        return process, channel

    real_start = member_process.start
    monkeypatch.setattr(member_process, "start", start)
    return processes


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


def test_a_join_member_process_imports_neither_ray_nor_etcd():
    program = ("import sys, mafka4.bench.join_member; "
               "print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] in ('ray', 'etcd3', 'grpc'))))")
    found = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True).stdout.split()
    assert found == [], f"a join member's process imported {found}"


def test_a_member_that_fails_fails_the_trial_with_its_error_and_no_member_process_is_left(started):
    with pytest.raises(JoinTrialFailed, match=r"member member-0 \(process \d+\) failed: ClusterNotRunning"):
        with JoinMembers(MemberSpec(NOWHERE, "join-test", "join-test-group"), ["member-0", "joiner"]) as members:
            members.join("member-0", wait=True)
            pytest.fail("a member that cannot reach a node never joins")
    assert len(started) == 2 and all(process.poll() is not None for process in started)


def test_a_member_process_that_ends_fails_the_trial(started):
    ended = r"member joiner's process \d+ ended before the trial did \(exit code -9\)"
    with pytest.raises(JoinTrialFailed, match=ended):
        with JoinMembers(MemberSpec(NOWHERE, "join-test", "join-test-group"), ["joiner"]) as members:
            started[0].kill()
            members.watch(30)


def test_ctrl_c_does_not_stop_a_member_and_the_bench_stops_its_members(started):
    with JoinMembers(MemberSpec(NOWHERE, "join-test", "join-test-group"), ["member-0"]):
        (process,) = started
        process.send_signal(signal.SIGINT)  # what Ctrl-C sends the whole process group
        with pytest.raises(subprocess.TimeoutExpired):
            process.wait(timeout=0.5)
    assert process.returncode == 0, "stopped by the bench before it joined: it exits as asked"


def test_a_member_that_does_not_stop_is_killed():
    bench_end, member_end = multiprocessing.Pipe()
    with member_end:
        deaf = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    started_s = time.monotonic()
    stop_members([(deaf, bench_end)], seconds_max=0.5)
    assert deaf.returncode == -signal.SIGKILL and time.monotonic() - started_s < 10
