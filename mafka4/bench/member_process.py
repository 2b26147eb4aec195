"""A consumer-group member in a process of its own, and the wire between it and the driver that
started it: shared by the join benches' members (``bench.join_member``), ``bench consume``'s
(``bench.consume_member``) and the scaling experiment's (``simulations.scaling.consumer_process``).

**Why a process.** A real deployment runs each consumer in its own process. As threads of one
driver, the members queued for one GIL with each other and with the driver's producer, and what
was measured included that queue. A member is ``python -m MODULE FD``: a fresh interpreter that
imports only what MODULE imports (the thin client, neither Ray nor etcd), whatever the driver
holds, and nothing of Ray's threads is forked.

**The wire** is a socket pair (``multiprocessing.Pipe``); FD is the child's end. Pickles of
frozen dataclasses between our own processes, in this order: the driver sends the member's spec
(``start``), then requests (``send_all``); the member answers them between its polls
(``answered_until_stop``, ``poll_until_stopped``) and stops at ``Stop()`` or when the driver's
end closes (the driver is gone), so no member outlives its driver by more than a poll and a
close. A member that fails sends ``Failed(repr of the error)`` and prints its traceback on the
stderr it shares with the driver (``failure_reported``).

**Ctrl-C** reaches the whole process group: a member ignores SIGINT (``serve``), and the driver
stops its members itself (``stop_members``: ``Stop()``, then a kill for any still running).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.connection
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

# A member's end of its wire closes as its process exits: its exit code is there within this long.
PROCESS_END_WAIT_S = 1.0


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


def send_all(members: Sequence[Member], message: object) -> None:
    """``message`` to every member; one whose process is gone is passed over (the driver learns
    why as it reads that member's wire)."""
    for _, channel in members:
        with contextlib.suppress(OSError):
            channel.send(message)


def exit_code_once_ended(process: subprocess.Popen) -> int | None:
    """The exit code of a member whose end of the wire closed; None if its process still runs
    ``PROCESS_END_WAIT_S`` later."""
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=PROCESS_END_WAIT_S)
    return process.poll()


def stop_members(members: Sequence[Member], seconds_max: float, dropping_what_they_send: bool = False) -> None:
    """Ask every member to stop, wait for all of them for at most ``seconds_max`` (they close
    side by side), and kill those still running, also when interrupted while waiting.

    ``dropping_what_they_send``: meanwhile, read and drop what the members still send, for a
    driver that reads their wires in this thread only (no other thread of it may read them
    then). A member blocked sending more than its wire holds, to a driver that no longer reads,
    would never reach its exit, and be killed at ``seconds_max``."""
    send_all(members, Stop())
    deadline = time.monotonic() + seconds_max
    try:
        if dropping_what_they_send:
            _dropped_until_closed([channel for _, channel in members], deadline)
        for process, _ in members:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=max(0.0, deadline - time.monotonic()))
    finally:
        for process, _ in members:
            if process.poll() is None:
                process.kill()
                process.wait()


def _dropped_until_closed(channels: list[Connection], deadline: float) -> None:
    """Read and drop what comes on ``channels`` until each one's other end closed (its process
    exited), or until ``deadline``."""
    open_channels = list(channels)
    while open_channels and (left_s := deadline - time.monotonic()) > 0:
        for channel in multiprocessing.connection.wait(open_channels, timeout=left_s):
            try:
                channel.recv()
            except (EOFError, OSError):
                open_channels.remove(channel)
