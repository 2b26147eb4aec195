"""One member of the scaling experiment's consumer group, in a process of its own, and its wire to the driver.

``bench.member_process`` says why a member is a process (``python -m
simulations.scaling.consumer_process FD``), how its wire works and how Ctrl-C stops it; this
module is what this experiment's member does and says. On the wire, in this order:

* driver to child: ``(access, groups)`` (``access`` a ``ClusterAccess`` the driver computed,
  ``groups`` the (topic, group) pairs to read: one, or in a Mafka3 lane run the trunk topic's and
  each lane topic's, read by a ``TopicsConsumer``),
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

import queue
import threading
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


class TopicsConsumer:
    """A member of one group per topic, polled as one consumer: how a Mafka3 member reads a topic
    and its lane topics (Mafka3 has no lane fallback; a Kafka consumer would subscribe to them
    all). Each topic's ``Consumer`` long-polls in a thread of its own, so a message of any topic
    is returned as soon as it is polled, not after the others' polls time out."""

    def __init__(self, consumers: list[Consumer], poll_timeout_ms: int):
        self._consumers = consumers
        self._polled: queue.SimpleQueue[list] = queue.SimpleQueue()
        self._assigned = [0] * len(consumers)  # each consumer's assignment size, as its thread last saw it
        self._stopping = threading.Event()
        self._failure: BaseException | None = None
        self._threads = [threading.Thread(target=self._poll_loop, args=(i, poll_timeout_ms), daemon=True,
                                          name=f"poll-{consumer.topic}") for i, consumer in enumerate(consumers)]
        for thread in self._threads:
            thread.start()

    def _poll_loop(self, index: int, poll_timeout_ms: int) -> None:
        consumer = self._consumers[index]
        try:
            while not self._stopping.is_set():
                messages = consumer.poll(timeout_ms=poll_timeout_ms)
                self._assigned[index] = len(consumer.assignment())
                if messages:
                    self._polled.put(messages)
        except BaseException as error:  # the member reports it at its next poll
            self._failure = error
            self._polled.put([])

    def poll(self, timeout_ms: int) -> list:
        """What the topics' consumers polled since the last call, waiting up to ``timeout_ms`` for some."""
        batches = []
        try:
            batches.append(self._polled.get(timeout=timeout_ms / 1000))
            while True:
                batches.append(self._polled.get_nowait())
        except queue.Empty:
            pass
        if self._failure is not None:
            raise self._failure
        return [message for batch in batches for message in batch]

    def assignment(self) -> list[int]:
        """One entry per partition owned, over all the topics (only its size is used)."""
        return [0] * sum(self._assigned)

    def close(self) -> None:
        self._stopping.set()
        for thread in self._threads:
            thread.join()
        failures = []
        for consumer in self._consumers:  # every one, even after one failed to close
            try:
                consumer.close()
            except Exception as error:
                failures.append(error)
        if failures:
            raise failures[0]


def start(access: ClusterAccess, groups: tuple[tuple[str, str], ...]) -> member_process.Member:
    """A member's process, started (not waited for), and the driver's end of its wire."""
    return member_process.start(__name__, (access, groups))


def consume(channel: Connection, access: ClusterAccess, groups: tuple[tuple[str, str], ...]) -> None:
    """Poll as a member of each (topic, group) of ``groups`` until the driver says stop or is gone,
    telling it what was polled when it asks."""
    with failure_reported(channel):
        consumers = [Consumer(topic, group=group, connection=access, from_beginning=True) for topic, group in groups]
        consumer = consumers[0] if len(consumers) == 1 else TopicsConsumer(consumers, POLL_TIMEOUT_MS)
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
