"""CPU time and resident memory of this machine's processes, read from ``/proc`` (a shell).

**CPU** of a process is the sum, over its threads, of the first field of
``<proc>/<pid>/task/<tid>/schedstat``: the nanoseconds the thread has been on a CPU
(``sum_exec_runtime``, kept by the scheduler to the nanosecond). Not ``<proc>/<pid>/schedstat``:
that file is the main thread's alone, and a Ray worker does most of its work on other threads
(its asyncio loop, gRPC). Not psutil's ``cpu_times`` either: it reads ``/proc/<pid>/stat``,
counted in 10 ms clock ticks, so an idle actor's 4 s window held 5 to 8 ticks and one tick
moved the fleet model's node ratio (issue 13). The value of a thread that is running when it
is read lags by at most one scheduler tick (``SCHEDSTAT_LAG_S_MAX``); ``fit`` counts that as
the resolution of an idle rate. A thread that exits between two samples takes its CPU time
with it: the deltas (``mafka4.bench.usage.cpu_ns_between``, whose parsing this module shares
with ``bench vp-density``) count what the threads alive at the second sample ran since the
first, a lower bound, never an overcount.

**Memory** is ``VmRSS`` of ``<proc>/<pid>/status``.

Every reader takes the ``/proc`` root as a parameter so that tests can give a fake tree.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

from mafka4.bench.usage import cpu_ns_between, schedstat_cpu_ns, vm_rss_bytes
from mafka4.errors import ProcessNotVisible

PROC_ROOT = Path("/proc")


@dataclass(frozen=True, slots=True)
class ProcessSample:
    """One look at a process: when (monotonic ns), each thread's CPU ns so far, its RSS."""

    at_ns: int
    thread_cpu_ns: Mapping[int, int]
    rss_bytes: int


def thread_cpu_ns(pid: int, proc_root: Path = PROC_ROOT) -> dict[int, int]:
    """Thread id -> ns on a CPU since the thread started, for every thread of ``pid``."""
    tasks = Path(proc_root) / str(pid) / "task"
    try:
        thread_ids = os.listdir(tasks)
    except (FileNotFoundError, ProcessLookupError):
        raise ProcessNotVisible(f"process {pid} is not in {proc_root} (or has exited): calibrate on the machine "
                                f"that runs the cluster's nodes") from None
    used = {}
    for thread_id in thread_ids:
        try:
            used[int(thread_id)] = schedstat_cpu_ns((tasks / thread_id / "schedstat").read_text())
        except (FileNotFoundError, ProcessLookupError):
            continue  # the thread exited after the listing
    return used


def cpu_ns(pid: int, proc_root: Path = PROC_ROOT) -> int:
    """Nanoseconds the live threads of ``pid`` have been on a CPU."""
    return sum(thread_cpu_ns(pid, proc_root).values())


def rss_bytes(pid: int, proc_root: Path = PROC_ROOT) -> int:
    try:
        return vm_rss_bytes((Path(proc_root) / str(pid) / "status").read_text())
    except (FileNotFoundError, ProcessLookupError, ValueError):
        raise ProcessNotVisible(f"process {pid} is not in {proc_root} (or has exited)") from None


def sample(pid: int, proc_root: Path = PROC_ROOT) -> ProcessSample:
    return ProcessSample(time.monotonic_ns(), thread_cpu_ns(pid, proc_root), rss_bytes(pid, proc_root))


def cpu_s_between(before: ProcessSample, after: ProcessSample) -> float:
    """CPU seconds the process ran between two samples."""
    return cpu_ns_between(before.thread_cpu_ns, after.thread_cpu_ns) / 1e9


def idle_window(pids: Mapping[str, int], window_s: float, slices: int, proc_root: Path = PROC_ROOT,
                sleep: Callable[[float], None] = time.sleep) -> dict:
    """Per named process, over ``window_s`` cut into ``slices`` equal slices: the cores it used in the
    whole window (``cores``) and in each slice (``slice_cores``, whose spread ``fit`` turns into an
    error), and its RSS at every slice boundary (``rss_bytes``, ``slices + 1`` values)."""
    assert pids and window_s > 0 and slices >= 1, (pids, window_s, slices)
    load_start = os.getloadavg()[0]
    samples = [{name: sample(pid, proc_root) for name, pid in pids.items()}]
    for _ in range(slices):
        sleep(window_s / slices)
        samples.append({name: sample(pid, proc_root) for name, pid in pids.items()})
    processes = {}
    for name, pid in pids.items():
        taken = [s[name] for s in samples]
        slice_cores = [cpu_s_between(a, b) / ((b.at_ns - a.at_ns) / 1e9) for a, b in zip(taken, taken[1:])]
        total_s = sum(cpu_s_between(a, b) for a, b in zip(taken, taken[1:]))
        processes[name] = {"pid": pid, "cores": round(total_s / ((taken[-1].at_ns - taken[0].at_ns) / 1e9), 7),
                           "slice_cores": [round(c, 7) for c in slice_cores],
                           "rss_bytes": [s.rss_bytes for s in taken]}
    first, last = samples[0], samples[-1]
    elapsed_s = (max(s.at_ns for s in last.values()) - min(s.at_ns for s in first.values())) / 1e9
    return {"window_s": round(elapsed_s, 3), "load_average_1m": [round(load_start, 2), round(os.getloadavg()[0], 2)],
            "processes": processes}
