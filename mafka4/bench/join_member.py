"""One member of a join trial (``bench vp-join``, ``bench rebalance``), in a process of its own
(``bench.member_process``: why, the wire, Ctrl-C), and the messages of its wire.

The same member reads a Mafka4 topic (its VPs) and a Mafka3 topic (its physical partitions, with
the eager rebalance): only the topic's read mode differs, and the spec's consumer settings (the
Mafka3 trial's assignor). In order, on the wire ``member_process.start`` made:

* driver to member: ``MemberSpec``; ``TraceJoins()`` at any time (keep the topic's join trace
  rows, ``mafka4.join_trace``, from now on: the client's hops of a join happen in this process);
  ``Join()`` once; ``Report()`` whenever the driver wants what was polled; ``Stop()``;
* member to driver: ``Ready()`` once it is warm (below); ``Joined(member_id)`` once its
  consumer is built (the consumer joins the group as it is built); ``Polled`` in answer to each
  ``Report()``; ``Failed`` if its consumer raised (``member_process.failure_reported``).

**Warm before the join.** Before ``Ready`` a member reads the topic's metadata once: its
interpreter has imported the client, the client's event loop runs, and its first connection
has derived the salted password (``security.scram_client``). A running consumer process is
in that state when it joins a group (as the bench's own process was when members were its
threads), so a join timed by the driver times the group protocol, not a process's start.

**Stamps.** Each non-empty poll is stamped with ``time.monotonic_ns()`` as it returns:
CLOCK_MONOTONIC is one clock for every process of a Linux machine, so the driver sets the
stamps of all its members against its own join time. A member keeps its stamps, values and
trace rows until the driver asks (``Report``), which it does only once the trial's measuring
window is over: while it measures, nothing crosses the wire but the join (``TraceJoins``,
``Join``, ``Joined``) and a failure.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from multiprocessing.connection import Connection

from mafka4.bench.member_process import Report, Stop, failure_reported, poll_until_stopped, serve
from mafka4.client.cluster_access import ClusterAccess
from mafka4.client.cluster_metadata import topic_metadata
from mafka4.client.consumer import Consumer
from mafka4.join_trace import JOIN_TRACES, JoinRow

# A member answers the driver between polls: a poll returns at once while messages flow, else
# after this long.
POLL_TIMEOUT_MS = 100


@dataclass(frozen=True, slots=True)
class MemberSpec:
    access: ClusterAccess
    topic: str
    group: str
    consumer_settings: tuple[tuple[str, object], ...] = ()  # Consumer keyword settings, e.g. (("assignor", "range"),)


@dataclass(frozen=True, slots=True)
class TraceJoins:
    pass


@dataclass(frozen=True, slots=True)
class Join:
    pass


@dataclass(frozen=True, slots=True)
class Ready:
    pass


@dataclass(frozen=True, slots=True)
class Joined:
    member_id: str | None  # None: a member of no group (never, in a join trial)


@dataclass(frozen=True, slots=True)
class Polled:
    """What a member polled since its last ``Polled``: per non-empty poll, its monotonic ns stamp
    and the messages' values; and the join trace rows it recorded since (``mafka4.join_trace``)."""

    polls: tuple[tuple[int, tuple[bytes, ...]], ...]
    join_trace_rows: tuple[JoinRow, ...] = ()
    join_trace_dropped: int = 0  # rows its trace could not keep


class JoinMember:
    """What a member keeps between the driver's ``Report``s, and its answers to the driver."""

    def __init__(self, channel: Connection, topic: str):
        self._channel, self._topic = channel, topic
        self.polls: list[tuple[int, tuple[bytes, ...]]] = []

    def record(self, messages: list) -> None:
        if messages:
            self.polls.append((time.monotonic_ns(), tuple(message.value for message in messages)))

    def answer(self, request: object) -> None:
        if isinstance(request, TraceJoins):
            JOIN_TRACES.start(self._topic)
            return
        assert isinstance(request, Report), f"a join member cannot answer {request!r}"
        trace = JOIN_TRACES.take(self._topic)
        self._channel.send(Polled(tuple(self.polls), tuple(tuple(row) for row in trace["rows"]), trace["dropped"]))
        self.polls.clear()

    def wait_for_join(self) -> bool:
        """Answer the driver until it says ``Join`` (True) or stop, or is gone (False)."""
        while True:
            try:
                request = self._channel.recv()
            except EOFError:
                return False
            if isinstance(request, Join):
                return True
            if isinstance(request, Stop):
                return False
            self.answer(request)


def run_member(channel: Connection, spec: MemberSpec) -> None:
    """Wait for ``Join``, join ``spec.group`` and poll until the driver says stop or is gone."""
    member = JoinMember(channel, spec.topic)
    with failure_reported(channel):
        topic_metadata(spec.access, spec.topic)
        channel.send(Ready())
        if not member.wait_for_join():
            return
        consumer = Consumer(spec.topic, group=spec.group, connection=spec.access, from_beginning=True,
                            **dict(spec.consumer_settings))
        channel.send(Joined(consumer.member_id))
        poll_until_stopped(channel, consumer, POLL_TIMEOUT_MS, member.answer, member.record)


def main() -> None:
    serve(run_member)


if __name__ == "__main__":
    # Under its own name, so that what it sends is pickled as this module's classes, not __main__'s.
    from mafka4.bench.join_member import main as main_of_the_module

    main_of_the_module()
