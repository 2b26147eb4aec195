"""Unit tests of what ``mafka4 bench vp-density`` computes: process usage from /proc text, per-VP costs, ratios.

No cluster: the arithmetic is pure (``bench.usage``, ``bench.density``), and the /proc reader is
tried on this test's own process.
"""

from __future__ import annotations

import os
import threading
import time

import pytest

from mafka4 import cli
from mafka4.bench import process_usage
from mafka4.bench.density import (
    WINDOW_S_MIN, NodeUsage, VpDensityBenchSettings, bare_actor_ratios, hosting_complete, per_vp_costs, ratio,
    risr_complete,
)
from mafka4.bench.process_usage import measure_window, sample_process
from mafka4.bench.usage import (
    QUIET_LOAD_AVERAGE_MAX, ProcessSample, cores_between, cpu_ns_between, is_quiet, schedstat_cpu_ns, vm_rss_bytes,
)
from mafka4.coordinator.control.placement import plan_read_path
from mafka4.errors import InvalidConfig, ProcessNotVisible
from mafka4.limits import ReadMode, TopicConfig
from mafka4.virtual.ranges import HashRange
from mafka4.virtual.vp_state import VirtualPartitionState

STATUS = """Name:\tray::ReadNode
State:\tS (sleeping)
VmPeak:\t 2048000 kB
VmRSS:\t  123456 kB
RssAnon:\t   80000 kB
Threads:\t37
"""


def test_schedstat_gives_the_nanoseconds_on_a_cpu():
    assert schedstat_cpu_ns("1159090 5391828 5\n") == 1_159_090
    with pytest.raises(AssertionError):
        schedstat_cpu_ns("")


def test_rss_is_the_vmrss_line_in_bytes_and_a_process_without_one_has_exited():
    assert vm_rss_bytes(STATUS) == 123_456 * 1024
    with pytest.raises(ValueError, match="exited"):
        vm_rss_bytes("Name:\tzombie\nState:\tZ (zombie)\n")


def test_cpu_between_samples_counts_what_each_thread_ran_in_between():
    before = {1: 1_000, 2: 5_000, 3: 7_000}
    after = {1: 4_000, 2: 5_000, 4: 2_500}  # thread 3 exited, thread 4 started
    assert cpu_ns_between(before, after) == 3_000 + 0 + 2_500, "an exited thread is not counted, a new one from zero"


def test_a_thread_id_reused_by_a_new_thread_counts_from_zero_not_negative():
    assert cpu_ns_between({7: 90_000}, {7: 1_000}) == 1_000


def test_cores_are_cpu_seconds_per_second_over_the_window():
    before = ProcessSample(at_ns=0, rss_bytes=1, thread_cpu_ns={1: 0, 2: 0})
    after = ProcessSample(at_ns=2_000_000_000, rss_bytes=1, thread_cpu_ns={1: 1_000_000_000, 2: 500_000_000})
    assert cores_between(before, after) == pytest.approx(0.75)


def test_a_measurement_is_quiet_only_if_no_load_average_around_it_exceeds_the_cores():
    assert is_quiet([0.3, QUIET_LOAD_AVERAGE_MAX])
    assert not is_quiet([0.3, QUIET_LOAD_AVERAGE_MAX + 0.01])
    assert not is_quiet([2.5, 1.0]), "a busy start spoils the window even if it ends quiet"


def test_the_cpu_of_a_process_includes_the_work_of_threads_other_than_the_main_one():
    spent_ns = 50_000_000
    spun, done = threading.Event(), threading.Event()

    def spin_then_idle():
        started = time.thread_time_ns()
        while time.thread_time_ns() - started < spent_ns:
            pass
        spun.set()
        done.wait()

    before = sample_process(os.getpid())
    worker = threading.Thread(target=spin_then_idle)
    worker.start()
    try:
        spun.wait()
        after = sample_process(os.getpid())
    finally:
        done.set()
        worker.join()
    assert worker.native_id in after.thread_cpu_ns and worker.native_id not in before.thread_cpu_ns
    assert cpu_ns_between(before.thread_cpu_ns, after.thread_cpu_ns) >= spent_ns
    assert after.rss_bytes > 0


def test_a_process_not_on_this_machine_is_reported_with_what_to_do():
    with open("/proc/sys/kernel/pid_max") as pid_max:
        missing = int(pid_max.read()) + 1
    with pytest.raises(ProcessNotVisible, match="run the benchmark on the machine of the read nodes"):
        sample_process(missing)


def test_a_window_records_the_load_average_at_its_start_and_end_and_is_quiet_only_if_both_were(monkeypatch):
    loads = iter([(1.0, 0.0, 0.0), (2.4, 0.0, 0.0)])
    monkeypatch.setattr(process_usage.os, "getloadavg", lambda: next(loads))
    window = measure_window({"self": os.getpid()}, 0.01)
    assert window["load_average_1m"] == [1.0, 2.4] and window["quiet"] is False
    usage = window["processes"]["self"]
    assert usage["pid"] == os.getpid() and usage["rss_bytes"] > 0 and usage["cores"] >= 0


def test_per_vp_costs_sum_the_growth_of_every_node_and_divide_by_vps_and_by_replicas():
    nodes = [NodeUsage(rss_bytes_before=100_000_000, rss_bytes_after=110_240_000, cores_before=0.010,
                       cores_after=0.030),
             NodeUsage(rss_bytes_before=90_000_000, rss_bytes_after=100_240_000, cores_before=0.008,
                       cores_after=0.028)]
    costs = per_vp_costs(nodes, virtual_partitions=1024, read_replicas=2)
    assert costs["rss_bytes_per_vp"] == pytest.approx(20_480_000 / 1024)
    assert costs["rss_bytes_per_vp_replica"] == pytest.approx(20_480_000 / 2048)
    assert costs["idle_cores_per_vp"] == pytest.approx(0.040 / 1024)
    assert costs["idle_cores_per_vp_replica"] == pytest.approx(0.040 / 2048)


def test_the_bare_actor_ratio_says_how_many_idle_vps_cost_one_actor():
    costs = {"rss_bytes_per_vp": 20_000.0, "idle_cores_per_vp": 0.00004}
    ratios = bare_actor_ratios(bare_rss_bytes=80_000_000, bare_uss_bytes=20_000_000, bare_cores=0.002, costs=costs)
    assert ratios["bare_actor_vs_vp_rss_ratio"] == pytest.approx(4000)
    assert ratios["bare_actor_uss_vs_vp_rss_ratio"] == pytest.approx(1000)
    assert ratios["bare_actor_vs_vp_cores_ratio"] == pytest.approx(50)


@pytest.mark.parametrize("cost", [0.0, -512.0])
def test_a_ratio_over_a_cost_that_did_not_grow_is_none_not_a_number(cost):
    assert ratio(80_000_000, cost) is None
    ratios = bare_actor_ratios(80_000_000, 20_000_000, 0.002, {"rss_bytes_per_vp": cost, "idle_cores_per_vp": cost})
    assert set(ratios.values()) == {None}


def _state(vp: int, replicas: tuple[str, ...], risr: tuple[str, ...]) -> VirtualPartitionState:
    return VirtualPartitionState(vp, HashRange(vp, vp + 1), replicas[0], 0, replicas, risr)


def test_the_risr_is_complete_only_when_every_vp_exists_with_every_replica_in_sync():
    full = [_state(vp, ("r0", "r1"), ("r0", "r1")) for vp in range(4)]
    assert risr_complete(full, virtual_partitions=4, read_replicas=2)
    assert not risr_complete(full[:3], virtual_partitions=4, read_replicas=2), "a VP not yet in etcd"
    lagging = full[:3] + [_state(3, ("r0", "r1"), ("r0",))]
    assert not risr_complete(lagging, virtual_partitions=4, read_replicas=2), "a follower not yet in the RISR"
    single = [_state(vp, ("r0",), ("r0",)) for vp in range(4)]
    assert not risr_complete(single, virtual_partitions=4, read_replicas=2), "fewer replicas than asked"


def test_a_window_shorter_than_the_minimum_is_refused_unless_the_run_is_a_smoke_test():
    with pytest.raises(InvalidConfig, match="--smoke"):
        VpDensityBenchSettings(window_s=WINDOW_S_MIN - 1)
    smoke = VpDensityBenchSettings.smoke_sized()
    assert smoke.smoke and smoke.window_s < WINDOW_S_MIN
    assert smoke.virtual_partitions < VpDensityBenchSettings().virtual_partitions
    assert VpDensityBenchSettings.smoke_sized(virtual_partitions=32).virtual_partitions == 32


def test_no_topic_at_all_is_refused():
    with pytest.raises(InvalidConfig, match="at least one topic"):
        VpDensityBenchSettings(topics=0)


def test_the_cli_refuses_a_short_window_before_connecting_to_any_cluster(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MAFKA4_HOME", str(tmp_path / "no-cluster-here"))
    assert cli.main(["bench", "vp-density", "--window-s", "5"]) == 2
    assert "at least 30 s, or --smoke" in capsys.readouterr().err


def test_hosting_is_complete_once_the_nodes_together_host_every_replica():
    assert hosting_complete({"r0": 4, "r1": 4}, virtual_partitions=4, read_replicas=2)
    assert not hosting_complete({"r0": 4, "r1": 3}, virtual_partitions=4, read_replicas=2), "a replica not hosted yet"
    assert not hosting_complete({}, virtual_partitions=1, read_replicas=1), "no read node answered"


def test_with_one_read_replica_a_new_vp_is_in_its_risr_before_any_node_hosts_it():
    """Why the bench waits for hosting too: a new VP's state names its replicas as its RISR."""
    plan = plan_read_path(TopicConfig(read_mode=ReadMode.MAFKA4, virtual_partitions=4, read_replicas=1), ["r0"])
    assert risr_complete(plan.states, virtual_partitions=4, read_replicas=1)
