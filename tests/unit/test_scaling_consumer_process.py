"""The scaling experiment's consumers: what a member polled folds into its log, a member process
imports neither Ray nor etcd, a member that fails fails the run and leaves no process behind, and
pinning a client's process pins all its threads, and pinning the
cluster's services pins every thread of their descendants too.

No cluster: the failing member is given an address where no node listens.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from mafka4.client.bootstrap import Credential
from mafka4.client.cluster_access import ClusterAccess
from mafka4.metadata.endpoints import HostPort
from simulations.scaling.experiment import ExperimentFailed, _ConsumerLog, _Group


def test_a_log_keeps_the_first_poll_of_a_message_and_counts_its_redeliveries():
    log = _ConsumerLog()
    log.record([(100, 5.0, 3, 0), (101, 5.0, 3, 1)])
    log.record([(100, 9.0, 4, 7), (102, 9.0, 4, 8), (100, 9.5, 4, 7)])  # 100 again: after a handover, then twice
    assert log.seen == {100: (5.0, 3, 0), 101: (5.0, 3, 1), 102: (9.0, 4, 8)}
    assert log.redelivered == {100: 2}


def test_a_member_process_imports_neither_ray_nor_etcd():
    program = ("import sys, simulations.scaling.consumer_process; "
               "print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] in ('ray', 'etcd3', 'grpc'))))")
    found = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True).stdout.split()
    assert found == [], f"a consumer process imported {found}"


def test_a_member_that_fails_fails_the_run_and_no_member_process_is_left(started_members):
    nowhere = ClusterAccess((HostPort("127.0.0.1", 1),), Credential("nobody", "none"))  # port 1: no node there
    with pytest.raises(ExperimentFailed, match="a consumer failed during the run: ClusterNotRunning"):
        with _Group(nowhere, ("scaling-test",), consumers=2, owned=2, cpus=None):
            pytest.fail("a group whose members cannot reach a node never settles")
    assert len(started_members) == 2 and all(process.poll() is not None for process in started_members)


def test_every_thread_of_a_pinned_process_runs_on_the_cpus_given():
    from simulations.scaling.pinning import pin_threads, usable_cpus

    program = "import threading, time; [threading.Thread(target=time.sleep, args=(30,), daemon=True).start() for _ in range(3)]; time.sleep(30)"
    child = subprocess.Popen([sys.executable, "-c", program])
    try:
        deadline = time.monotonic() + 30
        while len(os.listdir(f"/proc/{child.pid}/task")) < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        cpu = usable_cpus()[-1]
        before = pin_threads(child.pid, [cpu])
        affinities = {int(task): os.sched_getaffinity(int(task)) for task in os.listdir(f"/proc/{child.pid}/task")}
        pin_threads(os.getpid(), [cpu])  # this process pinned too, as the driver is while it measures
        try:
            pin_threads(child.pid, sorted(before))  # given back a set wider than this process's own
        finally:
            pin_threads(os.getpid(), sorted(before))
        restored = os.sched_getaffinity(child.pid)
    finally:
        child.kill()
        child.wait()
    assert before == set(usable_cpus()) == restored
    assert len(affinities) >= 4 and all(found == {cpu} for found in affinities.values()), affinities


def test_pinning_the_services_pins_every_thread_of_every_descendant():
    from simulations.scaling.pinning import pin_services, usable_cpus

    # A service whose child has threads, as the cluster daemon has Ray's head and its workers.
    grandchild = "import threading, time; [threading.Thread(target=time.sleep, args=(30,), daemon=True).start() for _ in range(2)]; time.sleep(30)"
    program = f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {grandchild!r}]); time.sleep(30)"
    service = subprocess.Popen([sys.executable, "-c", program])
    try:
        import psutil

        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            children = psutil.Process(service.pid).children()
            if children and children[0].num_threads() >= 3:
                break
            time.sleep(0.05)
        cpu = usable_cpus()[-1]
        pin_services(service.pid, [], [cpu])
        tasks = [int(task) for process in (service.pid, children[0].pid) for task in os.listdir(f"/proc/{process}/task")]
        affinities = {task: os.sched_getaffinity(task) for task in tasks}
    finally:
        for process in psutil.Process(service.pid).children(recursive=True):
            process.kill()
        service.kill()
        service.wait()
    assert len(affinities) >= 4 and all(found == {cpu} for found in affinities.values()), affinities


class _StubConsumer:
    """A topic's consumer as ``TopicsConsumer`` uses one: polls hand out the batches given, then nothing."""

    def __init__(self, topic: str, batches: list[list], owned: int):
        self.topic, self._batches, self._owned, self.closed = topic, list(batches), owned, False

    def poll(self, timeout_ms: int) -> list:
        if self._batches:
            return self._batches.pop(0)
        time.sleep(timeout_ms / 1000)
        return []

    def assignment(self) -> list[int]:
        return list(range(self._owned))

    def close(self) -> None:
        self.closed = True


def test_a_member_of_several_topics_polls_them_as_one_and_owns_what_they_own_together():
    from simulations.scaling.consumer_process import TopicsConsumer

    trunk = _StubConsumer("t", [["t0"], ["t1"]], owned=2)
    lane = _StubConsumer("t.lane-001", [["l0"]], owned=1)
    reader = TopicsConsumer([trunk, lane], poll_timeout_ms=20)
    polled: list = []
    deadline = time.monotonic() + 10
    while len(polled) < 3 and time.monotonic() < deadline:
        polled += reader.poll(timeout_ms=50)
    assert sorted(polled) == ["l0", "t0", "t1"] and polled.index("t0") < polled.index("t1"), "per topic in order"
    assert len(reader.assignment()) == 3
    reader.close()
    assert trunk.closed and lane.closed


def test_a_failing_topic_consumer_fails_the_member_at_its_next_poll():
    from simulations.scaling.consumer_process import TopicsConsumer

    class Failing(_StubConsumer):
        def poll(self, timeout_ms: int) -> list:
            raise RuntimeError("node gone")

    reader = TopicsConsumer([_StubConsumer("t", [], owned=1), Failing("t.lane-001", [], owned=1)], poll_timeout_ms=20)
    with pytest.raises(RuntimeError, match="node gone"):
        for _ in range(100):
            reader.poll(timeout_ms=50)
    reader.close()
