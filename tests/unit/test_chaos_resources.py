"""The soak's measuring of ``mafka4 chaos`` (issue 14): slopes of what processes and etcd hold, and the sampler.

Synthetic samples stand for a run: flat, growing, a process restarted under a new PID, too few
sweeps. The sampler runs against this test's own processes and a fake etcd, so that a process
vanishing or an etcd not answering mid-run is shown to be skipped, never to fail the run.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from mafka4.errors import CoordinatorUnavailable, InvalidConfig
from simulations.chaos import resource_sampler
from simulations.chaos.resource_sampler import ResourceSampler
from simulations.chaos.resource_trend import (MIB, DRIVER_ROLE, EtcdSample, ProcessSample, Samples, Window,
                                              line_slope, resource_trends, role_of, steady_window, summary_lines)
from simulations.chaos.settings import ChaosSettings

HOUR_S = 3600.0


def sweeps(role: str, pid_at, rss_mib_at, fds_at=lambda t: 20, times=range(0, 3601, 60)) -> list[ProcessSample]:
    """One process of ``role`` seen at each of ``times``, its pid, RSS (MiB) and open fds given per time."""
    return [ProcessSample(float(t), role, pid_at(t), int(rss_mib_at(t) * MIB), fds_at(t)) for t in times]


def trends_of(processes: list[ProcessSample], etcd: list[EtcdSample] = (), window: Window = Window(0.0, HOUR_S)):
    return resource_trends(Samples(tuple(processes), tuple(etcd), sweeps=61), window)


# --- the lines ----------------------------------------------------------------------------------


def test_a_flat_process_has_a_zero_slope_and_its_level_as_start_and_end():
    (raylet,) = trends_of(sweeps("raylet", lambda t: 7, lambda t: 80.0)).roles
    assert raylet.rss_mib.per_hour == pytest.approx(0.0) and raylet.open_fds.per_hour == pytest.approx(0.0)
    assert (raylet.rss_mib.start, raylet.rss_mib.end, raylet.rss_mib.points) == (80.0, 80.0, 61)


def test_a_growing_process_has_its_growth_per_hour_through_noise():
    noise = {0: 1.0, 1: -1.0, 2: 0.5}
    samples = sweeps("gcs_server", lambda t: 9, lambda t: 100.0 + 12.0 * t / HOUR_S + noise[int(t / 60) % 3],
                     fds_at=lambda t: 30 + int(t // 600))
    (gcs,) = trends_of(samples).roles
    assert gcs.rss_mib.per_hour == pytest.approx(12.0, abs=0.5)
    assert gcs.open_fds.per_hour == pytest.approx(6.0, abs=0.5)


def test_a_restarted_process_keeps_its_role_and_the_role_sums_its_processes():
    # Two replicas at 50 MiB each; one is killed at 30 min and comes back under a new PID, flat again.
    first = sweeps("ray::PhysicalPartition", lambda t: 100, lambda t: 50.0)
    second = sweeps("ray::PhysicalPartition", lambda t: 101 if t < 1800 else 202, lambda t: 50.0)
    (replicas,) = trends_of(first + second).roles
    assert replicas.rss_mib.per_hour == pytest.approx(0.0) and replicas.rss_mib.start == 100.0
    assert (replicas.processes_at_start, replicas.processes_at_end, replicas.pids_seen) == (2, 2, 3)


def test_a_role_missing_from_a_sweep_has_no_point_there_rather_than_a_zero():
    # The controller killed and restarted: no sample for 5 minutes, flat before and after.
    samples = sweeps("controller", lambda t: 5 if t < 1200 else 6, lambda t: 60.0,
                     times=[t for t in range(0, 3601, 60) if not 1200 <= t < 1500])
    (controller,) = trends_of(samples).roles
    assert controller.rss_mib.per_hour == pytest.approx(0.0) and controller.rss_mib.points == 56


def test_too_few_sweeps_give_no_slope_and_none_gives_no_level():
    (raylet,) = trends_of(sweeps("raylet", lambda t: 7, lambda t: 80.0, times=[0, 60])).roles
    assert raylet.rss_mib.per_hour is None and raylet.rss_mib.points == 2
    trends = trends_of([])
    assert trends.roles == () and trends.etcd_keys.per_hour is None and trends.etcd_keys.start is None
    assert summary_lines({"sample_s": 10.0, **trends.to_json()})[:3] == [
        "resources: 61 sweeps every 10 s, steady window 0-3600 s (0 sweeps); etcd not sampled",
        "  RSS MiB/h: no process sampled", "  open fds/h: no process sampled"]
    assert line_slope([(5.0, 1.0), (5.0, 2.0), (5.0, 3.0)]) is None  # all at one time: no line


def test_only_the_steady_window_counts_start_up_and_the_drain_are_left_out():
    # Start-up climbs 200 MiB in the first 6 minutes, the drain after the fault phase drops it; flat between.
    samples = sweeps("ray::ReadNode", lambda t: 3,
                     lambda t: min(t, 360) / 360 * 200.0 if t <= 3600 else 50.0, times=range(0, 4201, 60))
    window = steady_window(0.0, 3600.0)
    assert (window.from_s, window.to_s) == (360.0, 3600.0)
    (node,) = trends_of(samples, window=window).roles
    assert node.rss_mib.per_hour == pytest.approx(0.0) and node.rss_mib.points == 55


def test_etcd_keys_and_its_database_have_lines_of_their_own():
    etcd = [EtcdSample(float(t), 40 + t // 300, (2 + 3 * t / HOUR_S) * MIB) for t in range(0, 3601, 60)]
    trends = trends_of([], etcd)
    assert trends.etcd_keys.per_hour == pytest.approx(12.0, abs=0.5)
    assert (trends.etcd_keys.start, trends.etcd_keys.end) == (40, 52)
    assert trends.etcd_db_size_mib.per_hour == pytest.approx(3.0)


def test_the_report_section_and_its_summary_lines():
    samples = sweeps("raylet", lambda t: 7, lambda t: 80.0 + t / 360) + sweeps("etcd-0", lambda t: 4, lambda t: 30.0)
    etcd = [EtcdSample(float(t), 41, 2 * MIB) for t in range(0, 3601, 60)]
    section = resource_trends(Samples(tuple(samples), tuple(etcd), 61, processes_unreadable=3), Window(0, HOUR_S)).to_json()
    assert section["window_s"] == [0.0, 3600.0] and section["sweeps_in_window"] == 61
    assert section["roles"]["raylet"] == {
        "processes": [1, 1], "pids_seen": 1,
        "rss_mib": {"points": 61, "start": 80.0, "end": 90.0, "per_hour": 10.0},
        "open_fds": {"points": 61, "start": 20, "end": 20, "per_hour": 0.0}}
    assert section["etcd_keys"] == {"points": 61, "start": 41, "end": 41, "per_hour": 0.0}
    lines = summary_lines({"sample_s": 10.0, **section})
    assert lines[0] == ("resources: 61 sweeps every 10 s, steady window 0-3600 s (61 sweeps); "
                        "etcd keys 41 -> 41 (+0.0/h), db 2 -> 2 MiB (+0.0 MiB/h)")
    assert lines[1] == "  RSS MiB/h: raylet +10.0, etcd-0 +0.0"
    assert lines[3] == "  skipped: 3 process reads (gone), 0 etcd counts (no answer), 0 sweep errors"


# --- roles -------------------------------------------------------------------------------------


@pytest.mark.parametrize("cmdline, name, role", [
    (["ray::PhysicalPartition.append"], "python3", "ray::PhysicalPartition"),
    (["ray::ReadNode"], "python3", "ray::ReadNode"),
    (["ray::IDLE", "", ""], "python3", "ray::IDLE"),
    (["/usr/bin/etcd", "--name", "etcd-1", "--data-dir", "/tmp/m4chaos-x/etcd-1", "--log-level", "warn"], "etcd", "etcd-1"),
    (["/usr/bin/etcd", "--name", "mafka4", "--data-dir=/tmp/m4chaos-x/etcd"], "etcd", "etcd"),
    (["/usr/bin/etcd", "--data-dir"], "etcd", "etcd"),
    (["/site-packages/ray/core/src/ray/gcs/gcs_server", "--log_dir=/tmp/x"], "gcs_server", "gcs_server"),
    (["/site-packages/ray/core/src/ray/raylet/raylet", "--raylet_socket_name=/tmp/x/raylet"], "raylet", "raylet"),
    (["/usr/bin/python3.11", "-m", "mafka4.runtime.controller_process", "--etcd", "x"], "python3.11", "controller"),
    (["/usr/bin/python3.11", "-m", "mafka4.runtime.daemon", "--home", "/tmp/h"], "python3.11", "daemon"),
    (["/usr/bin/python3", "-m", "simulations.chaos.member", "--topic", "t"], "python3", "chaos-member"),
    (["/usr/bin/python3", "-u", "/site-packages/ray/_private/log_monitor.py", "--logs-dir=x"], "python3", "log_monitor"),
    ([], "kworker", "kworker"),
])
def test_a_process_is_named_by_its_role_which_survives_a_restart_under_a_new_pid(cmdline, name, role):
    assert role_of(cmdline, name) == role


# --- the sampler ---------------------------------------------------------------------------------


class FakeEtcd:
    """Answers (keys, db size) from a list; CoordinatorUnavailable where it holds an error."""

    def __init__(self, answers):
        self.answers, self.closed = list(answers), False

    def read(self):
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer

    def close(self):
        self.closed = True


@pytest.fixture
def sleeper():
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield process
    process.kill()
    process.wait()


def wait_for_sweeps(sampler: ResourceSampler, count: int) -> None:
    deadline = time.monotonic() + 10
    while sampler._sweeps < count:
        assert time.monotonic() < deadline, "the sampler did not sweep"
        time.sleep(0.01)


def test_the_sampler_reads_every_listed_process_skips_the_gone_and_the_unanswered_etcd(sleeper):
    etcd = FakeEtcd([(40, 2 * MIB), CoordinatorUnavailable("etcd at 127.0.0.1:1 did not answer"), (41, 2 * MIB)])
    gone = 2**22 + 1  # above the kernel's pid limit: never a process
    sampler = ResourceSampler(lambda: {sleeper.pid, gone, os.getpid()}, etcd, 0.02, time.monotonic())
    sampler.start()
    wait_for_sweeps(sampler, 3)
    samples = sampler.stop()
    assert samples.sweeps >= 3 and samples.etcd_unanswered == 1 and samples.sweep_errors == ()
    assert samples.processes_unreadable == samples.sweeps  # the missing pid, once per sweep
    assert [(s.keys, s.db_size_bytes) for s in samples.etcd[:2]] == [(40, 2 * MIB), (41, 2 * MIB)]
    first = [s for s in samples.processes if s.time_s == samples.processes[0].time_s]
    assert {s.pid for s in first} == {sleeper.pid, os.getpid()}
    assert {s.role for s in first} == {DRIVER_ROLE, os.path.basename(sys.executable)}
    assert all(s.rss_bytes > 0 and s.open_fds >= 3 for s in first)
    assert etcd.closed and sampler.stop() == samples  # stopping again changes nothing


def test_a_sweep_that_raises_is_recorded_and_the_sampler_goes_on():
    calls = []

    def list_pids():
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("psutil hiccup")
        return set()

    sampler = ResourceSampler(list_pids, None, 0.02, time.monotonic())
    sampler.start()
    wait_for_sweeps(sampler, 2)
    samples = sampler.stop()
    assert samples.sweep_errors == ("listing processes: RuntimeError: psutil hiccup",)
    assert samples.sweeps >= 2 and samples.etcd == ()


def test_sampling_ends_after_its_sweep_bound(monkeypatch):
    monkeypatch.setattr(resource_sampler, "SWEEPS_MAX", 2)
    sampler = ResourceSampler(set, None, 0.001, time.monotonic())
    sampler.start()
    sampler._thread.join(5)
    assert sampler.stop().sweeps == 2 and sampler.stop().sweep_errors == ("stopped after 2 sweeps",)


def test_the_sample_interval_must_be_positive():
    with pytest.raises(InvalidConfig, match="resource_sample_s=0 must be positive"):
        ChaosSettings(resource_sample_s=0)
    assert ChaosSettings().resource_sample_s == 10.0
