"""One member of the scaling experiment's consumer group, in a process of its own, and its wire to the driver.

``bench.member_process`` says why a member is a process (``python -m
simulations.scaling.consumer_process FD``), how its wire works and how Ctrl-C stops it; this
module is what this experiment's member does and says. On the wire, in this order:

* driver to child: ``(access, topic, group)`` (``access`` a ``ClusterAccess`` the driver computed),
  then ``Report()`` whenever the driver wants what was polled, and ``Stop()`` when the run is over;
* child to driver: ``Assigned(size)`` whenever the size of its assignment changes (0 until it
  owns something), ``Polled(messages)`` in answer to each ``Report()``: everything polled since the
  last one, each message as ``(sequence, wall ms at the poll, partition or VP, offset)``; and
  ``Failed(error)`` if its consumer raised; then it closes the consumer and exits.

**Why a member keeps what it polled until asked.** The driver is also the producer being measured.
A thread of it receiving and unpickling every poll took the producer's GIL while production ran,
and that thread sat on the members' CPUs: preempted there while holding the GIL, it stalled the
producer's threads on the write side's CPUs. So the driver asks only once production is over.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from multiprocessing.connection import Connection

from mafka4.bench import member_process
from mafka4.bench.member_process import Report, failure_reported, poll_until_stopped, serve
from mafka4.client.cluster_access import ClusterAccess
from mafka4.client.consumer import Consumer
from simulations.scaling.experiment import POLL_TIMEOUT_MS, VALUE_HEADER


@dataclass(frozen=True, slots=True)
class Assigned:
    size: int


@dataclass(frozen=True, slots=True)
class Polled:
    messages: tuple[tuple[int, float, int, int], ...]  # (sequence, wall ms at the poll, partition or VP, offset)


def start(access: ClusterAccess, topic: str, group: str) -> member_process.Member:
    """A member's process, started (not waited for), and the driver's end of its wire."""
    return member_process.start(__name__, (access, topic, group))


def consume(channel: Connection, access: ClusterAccess, topic: str, group: str) -> None:
    """Poll as a member of ``group`` until the driver says stop or is gone, telling it what was
    polled when it asks."""
    with failure_reported(channel):
        consumer = Consumer(topic, group=group, connection=access, from_beginning=True)
        assigned = None
        polled: list[tuple[int, float, int, int]] = []

        def answer(request: object) -> None:
            assert isinstance(request, Report), request
            channel.send(Polled(tuple(polled)))
            polled.clear()

        def record(messages: list) -> None:
            nonlocal assigned
            now_ms = time.time() * 1000
            polled.extend((VALUE_HEADER.unpack_from(message.value)[0], now_ms, message.partition, message.offset)
                          for message in messages)
            size = len(consumer.assignment())
            if size != assigned:
                channel.send(Assigned(size))
                assigned = size

        poll_until_stopped(channel, consumer, POLL_TIMEOUT_MS, answer, record)


def main() -> None:
    serve(lambda channel, spec: consume(channel, *spec))


if __name__ == "__main__":
    # Under its own name, so that what it sends is pickled as this module's classes, not __main__'s.
    from simulations.scaling.consumer_process import main as main_of_the_module

    main_of_the_module()
