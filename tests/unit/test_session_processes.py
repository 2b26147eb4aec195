"""A launcher's session's processes are found, also once re-parented, and stopped by PID (runtime.session_processes)."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import psutil

from mafka4.runtime.session_processes import alive, descendants, kill_pids, session_members


# Polls of 0.1 s for the child to exit after its echo: a minute on the most loaded machine.
REPARENTING_POLLS_MAX = 600


def test_a_session_s_members_are_found_after_their_parent_died_and_are_all_killed_by_pid():
    # The leader starts a child that starts a grandchild, then the child exits: the grandchild is
    # re-parented (no longer the leader's descendant) but stays in the leader's session.
    leader = subprocess.Popen(["bash", "-c", "bash -c 'sleep 60 & echo $!' ; sleep 60"], stdout=subprocess.PIPE,
                              text=True, start_new_session=True)
    try:
        orphan = int(leader.stdout.readline())
        # The echo comes before the child's exit: wait for the re-parenting (a bound, not a timing).
        for _ in range(REPARENTING_POLLS_MAX):
            if orphan not in descendants(leader.pid):
                break
            time.sleep(0.1)
        assert orphan not in descendants(leader.pid), "the child that started the grandchild never exited"
        members = session_members(leader.pid)
        assert {leader.pid, orphan} <= members
        assert os.getpid() not in members, "the caller is in a session of its own"

        kill_pids(members - {leader.pid})
        assert not alive(orphan)
        # Killed is enough: a zombie counts as exited, whoever reaps it (init may be slow to).
        assert alive(leader.pid), "only the PIDs given are killed"
    finally:
        leader.send_signal(signal.SIGKILL)
        leader.wait()


def test_a_zombie_counts_as_exited_and_is_reaped_only_when_asked():
    child = subprocess.Popen(["true"])
    while psutil.Process(child.pid).status() != psutil.STATUS_ZOMBIE:
        os.sched_yield()
    assert not alive(child.pid, reap=False)
    assert psutil.pid_exists(child.pid), "not reaped: the PID (a session's id) cannot be reused yet"
    assert not alive(child.pid)
    assert not psutil.pid_exists(child.pid)
    child.returncode = 0  # reaped above: keep Popen from waiting on a PID that is gone
