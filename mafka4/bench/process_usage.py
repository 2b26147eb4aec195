"""Measuring what processes of this machine use over a window: ``/proc`` and the load average (a shell).

Also the single reads a chaos run's resource sampler takes (``rss_bytes``, ``open_fd_count``).

The arithmetic is ``bench.usage``'s. A pid is looked up in this machine's ``/proc``, so the
processes measured must run here (``mafka4 up`` runs every node of a local cluster here);
otherwise ``ProcessNotVisible`` says so. Every window records the 1-minute load average at its
start and its end, and whether both were quiet.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Mapping

from mafka4.bench.cpu_cost import MachineCpu, busy_ticks
from mafka4.bench.usage import (QUIET_LOAD_AVERAGE_MAX, ProcessSample, cores_between, is_quiet, schedstat_cpu_ns,
                                vm_rss_bytes)
from mafka4.errors import ProcessNotVisible

PROC = Path("/proc")
QUIET_POLL_S = 5.0
TICKS_PER_S = os.sysconf("SC_CLK_TCK")  # the unit of /proc/stat's CPU times


def _not_visible(pid: int) -> ProcessNotVisible:
    return ProcessNotVisible(f"process {pid} is not in this machine's /proc (or has exited): run the benchmark "
                             f"on the machine of the read nodes, with the cluster running")


def rss_bytes(pid: int) -> int:
    """Resident set size of ``pid`` now (``VmRSS``); ``ProcessNotVisible`` if it is gone or a zombie."""
    try:
        return vm_rss_bytes((PROC / str(pid) / "status").read_text())
    except (FileNotFoundError, ProcessLookupError, ValueError):
        raise _not_visible(pid) from None


def open_fd_count(pid: int) -> int:
    """How many file descriptors ``pid`` holds open now (the entries of ``/proc/<pid>/fd``)."""
    try:
        return len(os.listdir(PROC / str(pid) / "fd"))
    except (FileNotFoundError, ProcessLookupError):
        raise _not_visible(pid) from None


def sample_process(pid: int) -> ProcessSample:
    """RSS and per-thread CPU time of ``pid`` now."""
    tasks = PROC / str(pid) / "task"
    resident_bytes = rss_bytes(pid)
    try:
        thread_ids = os.listdir(tasks)
    except (FileNotFoundError, ProcessLookupError):
        raise _not_visible(pid) from None
    thread_cpu_ns = {}
    for thread_id in thread_ids:
        try:
            thread_cpu_ns[int(thread_id)] = schedstat_cpu_ns((tasks / thread_id / "schedstat").read_text())
        except (FileNotFoundError, ProcessLookupError):
            continue  # the thread exited after the listing: it ran nothing more in this window
    return ProcessSample(time.monotonic_ns(), resident_bytes, thread_cpu_ns)


def measure_window(pids: Mapping[str, int], window_s: float) -> dict:
    """Per named process: RSS at the start and end of ``window_s`` and the cores it used in between."""
    assert pids, "a window measures at least one process"
    load_start = os.getloadavg()[0]
    before = {name: sample_process(pid) for name, pid in pids.items()}
    time.sleep(window_s)
    after = {name: sample_process(pid) for name, pid in pids.items()}
    load_end = os.getloadavg()[0]
    elapsed_s = (max(s.at_ns for s in after.values()) - min(s.at_ns for s in before.values())) / 1e9
    return {
        "window_s": round(elapsed_s, 3),
        "load_average_1m": [round(load_start, 2), round(load_end, 2)],
        "quiet": is_quiet([load_start, load_end]),
        "processes": {name: {"pid": pid, "rss_bytes_at_start": before[name].rss_bytes,
                             "rss_bytes": after[name].rss_bytes,
                             "cores": round(cores_between(before[name], after[name]), 6)}
                      for name, pid in pids.items()},
    }


def machine_cpu() -> MachineCpu:
    """The whole machine's busy CPU ticks so far, now (``bench.cpu_cost``)."""
    return MachineCpu(time.monotonic_ns(), busy_ticks((PROC / "stat").read_text()))


def wait_until_quiet(wait_s_max: float) -> float:
    """The 1-minute load average once it is at most the quiet bound, or after ``wait_s_max`` seconds."""
    deadline = time.monotonic() + wait_s_max
    load = os.getloadavg()[0]
    while load > QUIET_LOAD_AVERAGE_MAX and time.monotonic() < deadline:
        time.sleep(min(QUIET_POLL_S, max(0.0, deadline - time.monotonic())))
        load = os.getloadavg()[0]
    return load
