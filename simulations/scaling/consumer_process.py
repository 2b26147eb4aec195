"""One member of the scaling experiment's consumer group, in a process of its own, and its wire to the driver.

**Why a process.** A real deployment runs each consumer in its own process. As threads of the
experiment's driver, N consumers did their Python work under the producer's GIL, and the
producer's tail latency grew with N (its accumulator's p99.9 reached 46 ms at 32 consumers): the
experiment measured its own driver. Each member is now ``python -m
simulations.scaling.consumer_process FD``, a fresh interpreter, so it imports the thin client
only (neither Ray nor etcd), whatever the driver holds, and nothing of Ray's threads is forked.

**The wire** is the socket pair ``start`` makes; FD is the child's end. Pickles between our own
processes, in this order:

* driver to child: ``(access, topic, group)`` (``access`` a ``ClusterAccess`` the driver computed),
  then ``Report()`` whenever the driver wants what was polled, and ``Stop()`` when the run is over;
* child to driver: ``Assigned(size)`` whenever the size of its assignment changes (0 until it
  owns something), ``Polled(messages)`` in answer to each ``Report()``: everything polled since the
  last one, each message as ``(sequence, wall ms at the poll, partition or VP, offset)``; and
  ``Failed(error)`` (the exception's ``repr``) if its consumer raised; then it closes the consumer
  and exits.

**Why a member keeps what it polled until asked.** The driver is also the producer being measured.
A thread of it receiving and unpickling every poll took the producer's GIL while production ran,
and that thread sat on the members' CPUs: preempted there while holding the GIL, it stalled the
producer's threads on the write side's CPUs. So the driver asks only once production is over.

The child polls until ``Stop`` arrives or the driver's end closes (the driver is gone), so no
member outlives its driver by more than a poll and a close. It ignores SIGINT: Ctrl-C reaches the
whole process group, and the driver stops its members itself (``experiment._Group``).
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

from mafka4.client.cluster_access import ClusterAccess
from mafka4.client.consumer import Consumer
from mafka4.errors import MafkaError
from simulations.scaling.experiment import POLL_TIMEOUT_MS, VALUE_HEADER


@dataclass(frozen=True, slots=True)
class Assigned:
    size: int


@dataclass(frozen=True, slots=True)
class Polled:
    messages: tuple[tuple[int, float, int, int], ...]  # (sequence, wall ms at the poll, partition or VP, offset)


@dataclass(frozen=True, slots=True)
class Failed:
    error: str


@dataclass(frozen=True, slots=True)
class Report:
    pass


@dataclass(frozen=True, slots=True)
class Stop:
    pass


def start(access: ClusterAccess, topic: str, group: str) -> tuple[subprocess.Popen, Connection]:
    """A member's process, started (not waited for), and the driver's end of its wire."""
    driver_end, child_end = multiprocessing.Pipe()
    try:
        with child_end:
            process = subprocess.Popen([sys.executable, "-m", __name__, str(child_end.fileno())],
                                       pass_fds=(child_end.fileno(),), stdin=subprocess.DEVNULL)
        driver_end.send((access, topic, group))
    except BaseException:
        driver_end.close()
        raise
    return process, driver_end


def consume(channel: Connection, access: ClusterAccess, topic: str, group: str) -> None:
    """Poll as a member of ``group`` until the driver says stop or is gone, telling it what was
    polled when it asks."""
    consumer = None
    try:
        consumer = Consumer(topic, group=group, connection=access, from_beginning=True)
        assigned = None
        polled: list[tuple[int, float, int, int]] = []
        while _answered_until_stop(channel, polled):
            messages = consumer.poll(timeout_ms=POLL_TIMEOUT_MS)
            now_ms = time.time() * 1000
            polled.extend((VALUE_HEADER.unpack_from(message.value)[0], now_ms, message.partition, message.offset)
                          for message in messages)
            size = len(consumer.assignment())
            if size != assigned:
                channel.send(Assigned(size))
                assigned = size
    except Exception as error:
        traceback.print_exc()  # for whoever reads the run's stderr; the driver fails the run with the repr
        with contextlib.suppress(OSError):  # the driver may be gone
            channel.send(Failed(repr(error)))
    finally:
        if consumer is not None:
            with contextlib.suppress(MafkaError):
                consumer.close()  # the measurement is complete; a failed final commit changes nothing in it


def _answered_until_stop(channel: Connection, polled: list[tuple[int, float, int, int]]) -> bool:
    """Answer every ``Report()`` waiting on ``channel`` with ``polled`` (then emptied); False once
    ``Stop()`` arrived or the driver's end closed."""
    while channel.poll():
        try:
            request = channel.recv()
        except EOFError:
            return False
        if not isinstance(request, Report):
            assert isinstance(request, Stop), request
            return False
        channel.send(Polled(tuple(polled)))
        polled.clear()
    return True


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with Connection(int(sys.argv[1])) as channel:
        consume(channel, *channel.recv())


if __name__ == "__main__":
    # Under its own name, so that what it sends is pickled as this module's classes, not __main__'s.
    from simulations.scaling.consumer_process import main as main_of_the_module

    main_of_the_module()
