"""CPU time and RSS of a process from /proc: every thread's schedstat, not the main thread's alone."""

import os
import threading
import time

import pytest

from mafka4.errors import ProcessNotVisible
from simulations.fleet import proc_cpu


def _fake_process(root, pid, threads: dict[int, int], rss_kb=2048):
    """A /proc entry: per-thread schedstat lines, the main thread's also at <pid>/schedstat, a status file."""
    entry = root / str(pid)
    for tid, cpu_ns in threads.items():
        (entry / "task" / str(tid)).mkdir(parents=True, exist_ok=True)
        (entry / "task" / str(tid) / "schedstat").write_text(f"{cpu_ns} 1234 56\n")
    (entry / "schedstat").write_text(f"{threads[pid]} 1234 56\n")
    (entry / "status").write_text(f"Name:\tworker\nVmPeak:\t 9999 kB\nVmRSS:\t {rss_kb} kB\nThreads:\t{len(threads)}\n")


def test_cpu_is_the_sum_over_every_thread_of_a_fake_proc_tree(tmp_path):
    _fake_process(tmp_path, 40, {40: 1_000, 41: 250_000, 47: 3_000_000})
    assert proc_cpu.cpu_ns(40, tmp_path) == 3_251_000  # not 1_000: <pid>/schedstat is the main thread's
    assert proc_cpu.thread_cpu_ns(40, tmp_path) == {40: 1_000, 41: 250_000, 47: 3_000_000}
    assert proc_cpu.rss_bytes(40, tmp_path) == 2048 * 1024


def test_a_thread_that_exits_is_not_counted_and_a_new_one_counts_from_zero(tmp_path):
    _fake_process(tmp_path, 40, {40: 1_000, 41: 5_000})
    before = proc_cpu.sample(40, tmp_path)
    (tmp_path / "40" / "task" / "41" / "schedstat").unlink()
    (tmp_path / "40" / "task" / "41").rmdir()
    _fake_process(tmp_path, 40, {40: 3_000, 42: 700})
    after = proc_cpu.sample(40, tmp_path)
    assert proc_cpu.cpu_s_between(before, after) == pytest.approx((2_000 + 700) / 1e9)


def test_a_missing_process_is_named(tmp_path):
    with pytest.raises(ProcessNotVisible, match="process 99"):
        proc_cpu.cpu_ns(99, tmp_path)
    with pytest.raises(ProcessNotVisible, match="process 99"):
        proc_cpu.rss_bytes(99, tmp_path)


def _spin(seconds: float) -> None:
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        pass


def test_a_busy_thread_of_this_process_raises_its_cpu_time():
    """Checked against the busy thread's own CPU clock. The process clock would not do: in a
    long test run this process holds other threads (left by earlier tests) that may spin or
    exit meanwhile, and an exited thread's time leaves the live-thread sum."""
    pid = os.getpid()
    go, spun, leave = threading.Event(), threading.Event(), threading.Event()
    used: dict[str, int] = {}

    def busy() -> None:
        go.wait()
        started = time.thread_time_ns()
        while time.thread_time_ns() - started < 300_000_000:  # 0.3 s of its own CPU, however loaded
            pass
        used["ns"] = time.thread_time_ns() - started
        spun.set()
        leave.wait()  # alive while sampled: an exited thread is not listed

    worker = threading.Thread(target=busy)
    worker.start()
    try:
        before = proc_cpu.sample(pid)
        go.set()
        assert spun.wait(60)
        after = proc_cpu.sample(pid)
    finally:
        leave.set()
        worker.join()
    thread = worker.native_id
    assert after.thread_cpu_ns[thread] - before.thread_cpu_ns[thread] == pytest.approx(used["ns"], rel=0.05, abs=5e6)
    # The live-thread figure counts it too, whatever else ran (other threads only add to it).
    assert proc_cpu.cpu_s_between(before, after) * 1e9 >= used["ns"] * 0.95


def test_an_idle_window_reports_cores_per_slice_and_rss_at_every_boundary():
    pid = os.getpid()
    started, clock = time.perf_counter(), time.process_time()
    window = proc_cpu.idle_window({"me": pid}, 0.3, 3, sleep=_spin)  # this process spins through its window
    wall_s = time.perf_counter() - started
    cores_by_clock = (time.process_time() - clock) / wall_s
    me = window["processes"]["me"]
    assert len(me["slice_cores"]) == 3 and len(me["rss_bytes"]) == 4 and me["pid"] == pid
    assert me["cores"] == pytest.approx(cores_by_clock, abs=0.15) and me["cores"] > 0
    assert all(0.0 <= cores <= os.cpu_count() for cores in me["slice_cores"])
    # The window spans the three slices it slept through and no more than the call took (no bound
    # in seconds: a loaded machine may stretch the samples between slices).
    assert 0.3 <= window["window_s"] <= wall_s + 0.001 and len(window["load_average_1m"]) == 2
