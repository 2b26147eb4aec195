"""The pure parts of ``mafka4 chaos``: settings checks, merging the history, sources of reads, judging.

The run itself is an integration test (tests/integration/test_chaos.py); here a two-message
history stands for it, so that what the report says about a loss or a reorder is pinned down.
"""

from __future__ import annotations

import os
import random
import subprocess
import time

import psutil
import pytest

from mafka4.errors import InvalidConfig
from mafka4.partition_gate import CLIENT
from mafka4.runtime.etcd_member import EtcdServer
from simulations.chaos.faults import EtcdControl, FaultRecord
from simulations.chaos.judge import FinalLogs, judge, with_sources
from simulations.chaos.network import draw_partition
from simulations.chaos.processes import NotThatProcess, ProcessStopper, process_of
from simulations.chaos.run import ChaosSettings, faults_by_kind
from simulations.chaos.settings import FAULT_KINDS, FaultTiming
from simulations.chaos.workload import History
from simulations.checkers import Ack, Commit, Consumed, Send, StoredRecord

KEY = b"k00"
FIRST, SECOND = b"k00:0000000", b"k00:0000001"


def final_logs() -> FinalLogs:
    """Both messages in p0 at offsets 0 and 1, fed to vp0 at the same offsets."""
    return FinalLogs(
        committed={0: [StoredRecord(0, KEY, FIRST), StoredRecord(1, KEY, SECOND)]},
        expected_vp={(0, 0): 0, (0, 1): 0},
        physical_replicas={0: {"p0/w0": (2, b"")}},
        vp_logs={0: [StoredRecord(0, KEY, FIRST, 0, 0), StoredRecord(1, KEY, SECOND, 0, 1)]},
        vp_replicas={},
        unreadable=[],
    )


def written() -> list:
    return [Send("producer-0", KEY, FIRST, 0), Send("producer-0", KEY, SECOND, 0),
            Ack(KEY, FIRST, 0, 0), Ack(KEY, SECOND, 0, 1)]


def read(offset: int, value: bytes) -> Consumed:
    return Consumed("member-0", "vp0", offset, KEY, value, 0, offset)


def test_settings_refuse_unknown_faults_and_more_members_than_virtual_partitions():
    with pytest.raises(InvalidConfig, match="faults nap unknown: choose from kill-replica"):
        ChaosSettings(faults=("kill-replica", "nap"))
    with pytest.raises(InvalidConfig, match="members=5 must be from 1 to virtual_partitions=4"):
        ChaosSettings(members=5, virtual_partitions=4)
    with pytest.raises(InvalidConfig, match="lanes=9 must be from 0 \\(the trunk only\\) to 8"):
        ChaosSettings(lanes=9)


def test_a_run_sends_in_the_trunk_and_its_lanes_by_default():
    from simulations.chaos.workload import lane_names

    assert ChaosSettings().lanes == 2 and lane_names(2) == ("chaos-1", "chaos-2") and lane_names(0) == ()


def test_the_history_orders_the_members_records_among_the_drivers_by_time():
    history = History()
    send, ack = written()[0], written()[2]
    history.add(send, t=1.0)
    history.add(ack, t=3.0)
    assert history.merged([(2.0, read(0, FIRST))]) == [send, read(0, FIRST), ack]


def test_a_read_takes_its_source_from_the_ack_else_from_the_vp_log():
    acks = [Ack(KEY, FIRST, 0, 0)]
    vp_logs = {0: [StoredRecord(7, KEY, SECOND, 1, 5)]}  # SECOND was never acknowledged (its send failed)
    plain = [(1.0, Consumed("m", "vp0", 0, KEY, FIRST)), (2.0, Consumed("m", "vp0", 7, KEY, SECOND))]
    sourced = [record for _, record in with_sources(plain, acks, vp_logs)]
    assert [(r.partition, r.partition_offset) for r in sourced] == [(0, 0), (1, 5)]


def test_a_message_the_group_committed_past_without_reading_is_lost_and_explained():
    history = written() + [read(1, SECOND), Commit("chaos", "vp0", 2)]
    judged = judge(history, final_logs(), "chaos", drained=True)
    assert judged["anomalies"]["lost"] == 1 and judged["unread_acknowledged"] == 1
    assert judged["anomalies"]["reordered"] == 0
    assert judged["unread_explained"] == [
        "b'k00:0000000' acked at p0@0: in vp0@0; group committed vp0@2: the group committed past it without reading it"]


def test_a_key_read_out_of_order_is_reordered_and_a_re_read_before_a_commit_is_only_redelivered():
    history = written() + [read(1, SECOND), read(0, FIRST), read(1, SECOND), Commit("chaos", "vp0", 2)]
    judged = judge(history, final_logs(), "chaos", drained=True)
    assert judged["anomalies"]["reordered"] == 1
    assert judged["anomalies"]["lost"] == judged["anomalies"]["duplicate"] == 0
    assert judged["redelivered"] == 1


# --- stopped processes, controller kills and partitions ----------------------------------------

NODES = ["w0", "w1", "w2", "r0", "r1", CLIENT]


def test_the_harder_faults_are_drawn_by_default():
    assert {"sigstop-replica", "sigstop-read-node", "sigstop-controller", "sigstop-etcd", "kill-controller",
            "partition"} <= set(ChaosSettings().faults) == set(FAULT_KINDS)


def test_a_seed_names_the_same_partition_and_every_plan_is_a_partition():
    timing = FaultTiming()
    assert draw_partition(random.Random(7), NODES, timing) == draw_partition(random.Random(7), NODES, timing)
    for seed in range(200):
        plan = draw_partition(random.Random(seed), NODES, timing)
        assert plan.isolated in NODES and plan.others and plan.isolated not in plan.others
        assert set(plan.others) <= set(NODES)
        assert plan.delay_ms == 0 or timing.partition_delay_ms[0] <= plan.delay_ms <= timing.partition_delay_ms[1]
        assert timing.partition_s[0] <= plan.hold_s <= timing.partition_s[1]
        links = {(link.source, link.destination) for link in plan.fault(timing.lost_call_ms).links}
        one_way = {(plan.isolated, other) for other in plan.others}
        assert links == (one_way | {(b, a) for a, b in one_way} if plan.both_ways else one_way)


def test_the_partition_draws_cover_every_shape():
    plans = [draw_partition(random.Random(seed), NODES, FaultTiming()) for seed in range(200)]
    shapes = {(len(plan.others) == len(NODES) - 1, plan.both_ways, plan.delay_ms > 0) for plan in plans}
    assert len(shapes) == 8, "cut off from all or one, both ways or one way, dropped or delayed"


def test_the_report_counts_every_kind_asked_for_including_those_never_drawn():
    faults = [FaultRecord("partition", "w0", 1.0, 2.0, "w0 <-> w1: traffic dropped for 2.0 s"),
              FaultRecord("partition", "r0", 5.0, 3.0, "r0 -> client: traffic dropped for 3.0 s"),
              FaultRecord("kill-controller", "controller epoch 1", 9.0, 6.0, "SIGKILLed pid 7")]
    assert faults_by_kind(("partition", "kill-controller", "sigstop-etcd"), faults) == {
        "partition": 2, "kill-controller": 1, "sigstop-etcd": 0}


@pytest.fixture
def sleeper():
    process = subprocess.Popen(["sleep", "60"])
    try:
        # Its command line reads "" for a moment after the start on a loaded machine (it failed a
        # run so once): the tests are about stopping a process known to be a sleeper.
        for _ in range(500):
            if psutil.Process(process.pid).cmdline():
                break
            time.sleep(0.01)
        yield process
    finally:
        process.kill()
        process.wait()


def wait_until_stopped(child: subprocess.Popen) -> None:
    """Block until the kernel reports that ``child`` stopped.

    A stop signal takes effect only once the child runs again, which on a loaded machine may take
    any time: the parent's wait is told, so nothing polls against a bound.
    """
    _, status = os.waitpid(child.pid, os.WUNTRACED)
    assert os.WIFSTOPPED(status), f"pid {child.pid} changed state ({status:#x}) but did not stop"


def wait_until_continued(child: subprocess.Popen) -> None:
    """Block until the kernel reports that the stopped ``child`` was continued."""
    _, status = os.waitpid(child.pid, os.WCONTINUED)
    assert os.WIFCONTINUED(status), f"pid {child.pid} changed state ({status:#x}) but was not continued"
    assert psutil.Process(child.pid).status() != psutil.STATUS_STOPPED


def test_a_stopped_process_is_continued_and_nothing_stays_stopped(sleeper):
    stopper = ProcessStopper()
    process = stopper.stop(sleeper.pid, "a sleeper", "sleep")
    wait_until_stopped(sleeper)
    assert stopper.stopped == [f"a sleeper (pid {sleeper.pid})"]
    assert stopper.resume(process)
    wait_until_continued(sleeper)
    stopper.stop(sleeper.pid, "a sleeper")
    wait_until_stopped(sleeper)  # a continue sent before the stop took effect would cancel it unreported
    assert stopper.resume_all() == [f"a sleeper (pid {sleeper.pid})"], "as heal and a failed run do"
    wait_until_continued(sleeper)
    assert stopper.stopped == []


def test_a_process_that_is_gone_when_continued_is_reported_as_replaced(sleeper):
    stopper = ProcessStopper()
    process = stopper.stop(sleeper.pid, "a sleeper")
    sleeper.kill()  # as the controller kills a frozen replica before starting it again
    sleeper.wait()
    assert not stopper.resume(process)
    assert stopper.stopped == []


def test_a_pid_from_a_record_must_be_the_process_the_record_names(sleeper):
    with pytest.raises(NotThatProcess, match="not 'mafka4.runtime.controller_process'"):
        process_of(sleeper.pid, "mafka4.runtime.controller_process")
    with pytest.raises(NotThatProcess, match="this process"):
        process_of(psutil.Process().pid)
    assert process_of(sleeper.pid, "sleep").pid == sleeper.pid


def test_settings_take_one_or_three_etcd_members_and_the_member_kill_is_drawn_by_default():
    assert "kill-etcd-member" in ChaosSettings().faults
    assert ChaosSettings(etcd_members=3).etcd_members == 3
    with pytest.raises(InvalidConfig, match="etcd_members=2 must be one of"):
        ChaosSettings(etcd_members=2)


def test_the_etcd_control_finds_a_member_by_the_name_etcd_gives_its_leader():
    members = [EtcdServer(100 + i, 2379 + i, f"/d/etcd-{i}", f"/d/etcd-{i}.log", f"etcd-{i}") for i in range(3)]
    control = EtcdControl(members, [])
    assert control.index_of("etcd-2") == 2
    assert control.index_of(None) is None and control.index_of("elsewhere") is None
    assert control.running
