"""Stopping real processes for a while (SIGSTOP, then SIGCONT) and killing them, by PID only.

The chaos faults ``sigstop-*`` freeze a process as a long GC pause, a swapped-out VM or a hung
disk would: it holds its sockets, locks and leases but does nothing, and then goes on as if
no time had passed. ``ProcessStopper`` remembers every process it stopped until it continued
it, so that the heal step and the run's ``finally`` continue whatever is still stopped and
nothing stays frozen after a run, also one that failed.

Every signal goes through ``psutil.Process``, which refuses to signal a PID that another
process took over since it was looked up. A PID read from a record (the controller key, the
cluster record) may be stale, so ``process_of`` checks the process's command line names what
the record says it is; an actor's PID comes from the actor itself.
"""

from __future__ import annotations

import os

import psutil


class NotThatProcess(Exception):
    """The PID belongs to another process than the one a record named (it exited and the PID was reused)."""


def process_of(pid: int, command_has: str | None = None) -> psutil.Process:
    """The process ``pid``; ``psutil.NoSuchProcess`` if none, ``NotThatProcess`` if its command line
    does not contain ``command_has``."""
    if pid == os.getpid() or pid <= 1:
        raise NotThatProcess(f"pid {pid} is this process or init: never stopped or killed")
    process = psutil.Process(pid)
    if command_has is not None and command_has not in " ".join(process.cmdline()):
        raise NotThatProcess(f"pid {pid} is {' '.join(process.cmdline())[:120]!r}, not {command_has!r}")
    return process


class ProcessStopper:
    """The processes it stopped and did not continue yet."""

    def __init__(self):
        self._stopped: dict[int, tuple[psutil.Process, str]] = {}

    def stop(self, pid: int, what: str, command_has: str | None = None) -> psutil.Process:
        process = process_of(pid, command_has)
        self._stopped[pid] = (process, what)
        process.suspend()  # SIGSTOP
        return process

    def resume(self, process: psutil.Process) -> bool:
        """SIGCONT ``process``; False if it is gone meanwhile (killed and restarted by the cluster)."""
        self._stopped.pop(process.pid, None)
        try:
            process.resume()
        except psutil.NoSuchProcess:
            return False
        return True

    def resume_all(self) -> list[str]:
        """Continue every process still stopped; what each was."""
        resumed = []
        for process, what in list(self._stopped.values()):
            self.resume(process)
            resumed.append(f"{what} (pid {process.pid})")
        return resumed

    @property
    def stopped(self) -> list[str]:
        return [f"{what} (pid {process.pid})" for process, what in self._stopped.values()]
