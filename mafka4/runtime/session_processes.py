"""Find and stop, by PID, every process a launcher started in a session of its own.

A launcher (``mafka4 up``'s daemon, the fake Ray cluster of the integration tests) is started
with ``start_new_session``, so its PID is the id of a session that holds everything it starts,
including processes re-parented after their parent died (a Ray worker whose raylet was killed):
Ray and etcd start no sessions of their own. Those processes are found by that session id, or
from the launcher down its process tree, and stopped by their PIDs, never by their names: a name
would also match another cluster's processes on the same machine.

The session id is the launcher's PID: once the launcher has exited and been reaped that PID may
be reused, so callers list the members while the launcher is alive or not yet reaped.
"""

from __future__ import annotations

import os
import signal
import time

import psutil

from mafka4.limits import KILLED_PROCESSES_WAIT_S, LOCAL_CLUSTER_POLL_INTERVAL_S


def session_members(session_id: int) -> set[int]:
    """PIDs of the processes in the session ``session_id`` (its leader's PID), the leader included."""
    members = set()
    for process in psutil.process_iter():
        try:
            if os.getsid(process.pid) == session_id:
                members.add(process.pid)
        except (ProcessLookupError, PermissionError):
            continue
    return members


def descendants(pid: int) -> list[int]:
    """PIDs of ``pid``'s children, their children and so on (none if ``pid`` is gone)."""
    try:
        return [child.pid for child in psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def alive(pid: int, reap: bool = True) -> bool:
    """False once ``pid`` exited (a zombie counts as exited, and is reaped if it is our child)."""
    try:
        if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
            return True
    except psutil.NoSuchProcess:
        return False
    if not reap:
        return False
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass  # someone else's child: its parent (or init) reaps it
    return False


def wait_gone(pids: list[int], timeout_s: float) -> bool:
    """Wait up to ``timeout_s`` for every PID to have exited; True if they all did."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not any(alive(pid) for pid in pids):
            return True
        time.sleep(LOCAL_CLUSTER_POLL_INTERVAL_S)
    return False


def kill_pids(pids) -> None:
    """SIGKILL each PID still alive, then wait (bounded) for them to be gone."""
    for pid in pids:
        if alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    wait_gone(list(pids), KILLED_PROCESSES_WAIT_S)
