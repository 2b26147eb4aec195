"""What a drain cost in CPU per message: its consumers' share and the rest of the machine's (pure).

A drain's msgs/s moves by ±15% between runs of unchanged code on this machine's 2 shared cores
(where the scheduler puts the members, what the idle cluster wakes up for meanwhile); the CPU
it spends per message moves less, and says *where* a drain's time goes, so ``mafka4 bench
consume`` and ``mafka4 bench redis-streams`` report it beside msgs/s, the same way:

* **members**: each consumer process's CPU time, all its threads (``time.process_time_ns``),
  from just before its first poll (or read) to the end of its drain, summed over the members.
* **machine**: the busy CPU time of the whole machine, from the first line of ``/proc/stat``
  (user, nice, system, irq and softirq ticks; idle, I/O wait and time stolen by the hypervisor
  are not busy), from the driver's start signal until it has every member's report. That
  window is a little longer than the drain (the signal's way to the members, the reports' way
  back), so it is an upper bound. It holds the servers (read nodes and replicas, or
  redis-server), what an idle cluster spends anyway, and the driver.
* **the rest**: machine minus members.

Each is given in microseconds per message read (each backlog offset once). ``/proc/stat`` counts
in ticks of 10 ms, so the machine's figures need a window of ``MACHINE_WINDOW_NS_MIN`` at least
(200 ticks of 2 CPUs: a resolution of half a percent); a shorter drain (a smoke run's) has none.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

# The fields of a ``/proc/stat`` cpu line, in order (proc(5)); guest time is counted in user already.
_STAT_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal", "guest", "guest_nice")
_BUSY_FIELDS = ("user", "nice", "system", "irq", "softirq")
NS_PER_US = 1_000
MACHINE_WINDOW_NS_MIN = 1_000_000_000


@dataclass(frozen=True, slots=True)
class MachineCpu:
    """One look at the whole machine: busy CPU ticks (``USER_HZ``) so far, and when (monotonic ns)."""

    at_ns: int
    busy_ticks: int


def busy_ticks(proc_stat_text: str) -> int:
    """Busy CPU ticks of all CPUs together, from the text of ``/proc/stat`` (its first, ``cpu`` line)."""
    first = proc_stat_text.split("\n", 1)[0].split()
    assert first and first[0] == "cpu", f"/proc/stat starts with the all-CPU line, not {first[:1]}"
    values = dict(zip(_STAT_FIELDS, map(int, first[1:])))
    assert set(_BUSY_FIELDS) <= values.keys(), f"a /proc/stat cpu line too short: {first}"
    return sum(values[name] for name in _BUSY_FIELDS)


def cpu_per_message(member_cpu_ns: Sequence[int | None], before: MachineCpu, after: MachineCpu, ticks_per_s: int,
                    messages_read: int) -> dict:
    """The figures of the module doc for one drain; None for those without a message read, and the
    machine's for a window shorter than ``MACHINE_WINDOW_NS_MIN``.

    ``member_cpu_ns``: each member's CPU time over its drain (None: it did not drain).
    """
    assert after.at_ns > before.at_ns and after.busy_ticks >= before.busy_ticks, (before, after)
    members_ns = sum(cpu_ns for cpu_ns in member_cpu_ns if cpu_ns is not None)
    machine_ns = (after.busy_ticks - before.busy_ticks) * 1_000_000_000 // ticks_per_s
    window_ns = after.at_ns - before.at_ns

    def per_message(ns: int) -> float | None:
        return round(ns / NS_PER_US / messages_read, 3) if messages_read else None

    members = {"member_cpu_us_per_message": per_message(members_ns)}
    if window_ns < MACHINE_WINDOW_NS_MIN:
        return {**members, "machine_cpu_us_per_message": None, "rest_cpu_us_per_message": None,
                "machine_busy_cores": None}
    return {
        **members,
        "machine_cpu_us_per_message": per_message(machine_ns),
        # Ticks are 10 ms: over a drain of a few seconds the machine's figure can fall short of
        # the members' by a tick or two; the rest is then none, not negative.
        "rest_cpu_us_per_message": per_message(max(machine_ns - members_ns, 0)),
        "machine_busy_cores": round(machine_ns / window_ns, 3),
    }
