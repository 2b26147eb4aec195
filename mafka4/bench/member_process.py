"""A consumer-group member in a process of its own, and the wire between it and the driver that
started it: shared by the join benches' members (``bench.join_member``) and the scaling
experiment's (``simulations.scaling.consumer_process``).

**Why a process.** A real deployment runs each consumer in its own process. As threads of one
driver, the members queued for one GIL with each other and with the driver's producer, and what
was measured included that queue. A member is ``python -m MODULE FD``: a fresh interpreter that
imports only what MODULE imports (the thin client: neither Ray nor etcd), whatever the driver
holds, and nothing of Ray's threads is forked.

**The wire** is a socket pair (``multiprocessing.Pipe``); FD is the child's end. Pickles of
frozen dataclasses between our own processes, in this order: the driver sends the member's spec
(``start``), then requests; the member answers them between its polls (``poll_until_stopped``)
and stops at ``Stop()`` or when the driver's end closes (the driver is gone), so no member
outlives its driver by more than a poll and a close. A member that fails sends
``Failed(repr of the error)`` and prints its traceback on the stderr it shares with the driver
(``failure_reported``).

**Ctrl-C** reaches the whole process group: a member ignores SIGINT (``serve``), and the driver
stops its members itself (``stop_members``: ``Stop()``, then a kill for any still running).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import signal
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, Callable, Iterator, Sequence

from mafka4.errors import MafkaError


@dataclass(frozen=True, slots=True)
class Report:
    """Driver to member: send what you polled since the last ``Report``."""


@dataclass(frozen=True, slots=True)
class Stop:
    """Driver to member: close the consumer (commit, release, leave the group) and exit."""


@dataclass(frozen=True, slots=True)
class Failed:
    """Member to driver: its consumer raised this (the exception's ``repr``); it exits."""

    error: str


# The members a driver started: each one's process and the driver's end of its wire.
Member = tuple[subprocess.Popen, Connection]


def start(module: str, spec: object) -> Member:
    """``python -m module FD``, started (not waited for), with ``spec`` sent as its first message."""
    driver_end, child_end = multiprocessing.Pipe()
    try:
        with child_end:
            process = subprocess.Popen([sys.executable, "-m", module, str(child_end.fileno())],
                                       pass_fds=(child_end.fileno(),), stdin=subprocess.DEVNULL)
        driver_end.send(spec)
    except BaseException:
        driver_end.close()
        raise
    return process, driver_end


def serve(member: Callable[[Connection, Any], None]) -> None:
    """The ``main`` of a member's module: ``member(channel, spec)`` on the wire ``start`` made."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with Connection(int(sys.argv[1])) as channel:
        member(channel, channel.recv())


@contextlib.contextmanager
def failure_reported(channel: Connection) -> Iterator[None]:
    """Tell the driver of an error raised inside (``Failed``) instead of raising it: the driver
    fails its run with it."""
    try:
        yield
    except Exception as error:
        traceback.print_exc()  # for whoever reads the run's stderr; the driver fails the run with the repr
        with contextlib.suppress(OSError):  # the driver may be gone
            channel.send(Failed(repr(error)))


def answered_until_stop(channel: Connection, answer: Callable[[object], None]) -> bool:
    """``answer`` every request waiting on ``channel``; False once ``Stop()`` arrived or the
    driver's end closed."""
    while channel.poll():
        try:
            request = channel.recv()
        except EOFError:
            return False
        if isinstance(request, Stop):
            return False
        answer(request)
    return True


def poll_until_stopped(channel: Connection, consumer, poll_timeout_ms: int, answer: Callable[[object], None],
                       record: Callable[[list], None]) -> None:
    """Poll ``consumer`` until the driver says stop or is gone, ``record``ing what each poll
    returned and ``answer``ing the driver's requests between polls; then close it."""
    try:
        while answered_until_stop(channel, answer):
            record(consumer.poll(timeout_ms=poll_timeout_ms))
    finally:
        with contextlib.suppress(MafkaError):
            consumer.close()  # the measurement is complete; a failed final commit changes nothing in it


def stop_members(members: Sequence[Member], seconds_max: float) -> None:
    """Ask every member to stop, wait for all of them for at most ``seconds_max`` (they close
    side by side), and kill those still running, also when interrupted while waiting."""
    for _, channel in members:
        with contextlib.suppress(OSError):  # its process is gone already
            channel.send(Stop())
    deadline = time.monotonic() + seconds_max
    try:
        for process, _ in members:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=max(0.0, deadline - time.monotonic()))
    finally:
        for process, _ in members:
            if process.poll() is None:
                process.kill()
                process.wait()
