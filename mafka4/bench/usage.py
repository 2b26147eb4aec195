"""What a process used over a window, from the text of ``/proc``, and whether the machine was quiet (pure).

``bench.process_usage`` reads the files; this module turns their text into numbers:

* **CPU** of a process is the sum over its threads of the first field of
  ``/proc/<pid>/task/<tid>/schedstat`` (nanoseconds spent on a CPU). ``/proc/<pid>/schedstat``
  alone counts only the main thread, and a Ray worker works on others (its event loop, gRPC).
  Between two samples a thread contributes what it ran in between: a thread that started in
  the window (or reused the id of one that exited) counts from zero, a thread that exited in
  the window is not counted (so the figure is a lower bound, never an overcount).
* **RSS** is ``VmRSS`` of ``/proc/<pid>/status`` (resident pages, shared ones included).
* **Quiet.** The machine has 2 shared cores: a figure measured while the 1-minute load average
  was above ``QUIET_LOAD_AVERAGE_MAX`` (at the start or the end of its window) measured the run
  queue as much as the process, and is reported as not a result.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

# Above this 1-minute load average, runnable threads wait for one of the 2 cores.
QUIET_LOAD_AVERAGE_MAX = 2.0
KIB = 1024


@dataclass(frozen=True, slots=True)
class ProcessSample:
    """One look at a process: when (monotonic ns), its RSS and each thread's CPU time so far."""

    at_ns: int
    rss_bytes: int
    thread_cpu_ns: Mapping[int, int]  # thread id -> ns on a CPU since the thread started


def schedstat_cpu_ns(text: str) -> int:
    """Nanoseconds on a CPU from one ``schedstat`` line ("<on cpu ns> <waiting ns> <timeslices>")."""
    fields = text.split()
    assert len(fields) == 3, f"a schedstat line has 3 fields, not {text!r}"
    return int(fields[0])


def vm_rss_bytes(status_text: str) -> int:
    """Resident set size from the text of ``/proc/<pid>/status`` (its ``VmRSS:  <n> kB`` line)."""
    for line in status_text.splitlines():
        name, _, value = line.partition(":")
        if name == "VmRSS":
            amount, unit = value.split()
            assert unit == "kB", f"VmRSS is given in kB, not {unit!r}"
            return int(amount) * KIB
    raise ValueError("no VmRSS line: the process has exited (a zombie keeps no memory)")


def cpu_ns_between(before: Mapping[int, int], after: Mapping[int, int]) -> int:
    """CPU time the threads of ``after`` ran since ``before`` (threads new in ``after`` from zero)."""
    used = 0
    for thread, cpu_ns in after.items():
        earlier = before.get(thread, 0)
        # A thread's CPU time only grows: less than before is a new thread that reused the id.
        used += cpu_ns - earlier if cpu_ns >= earlier else cpu_ns
    return used


def cores_between(before: ProcessSample, after: ProcessSample) -> float:
    """Average cores the process used between two samples (CPU seconds per second)."""
    elapsed_ns = after.at_ns - before.at_ns
    assert elapsed_ns > 0, (before.at_ns, after.at_ns)
    return cpu_ns_between(before.thread_cpu_ns, after.thread_cpu_ns) / elapsed_ns


def is_quiet(load_averages_1m: Iterable[float]) -> bool:
    """True if no 1-minute load average taken around a measurement is above ``QUIET_LOAD_AVERAGE_MAX``."""
    loads = list(load_averages_1m)
    assert loads, "a measurement records its load average at least once"
    return max(loads) <= QUIET_LOAD_AVERAGE_MAX
