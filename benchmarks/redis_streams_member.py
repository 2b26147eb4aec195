"""One consumer of ``mafka4 bench redis-streams``: a process of its own, a member of the drain's group.

The driver (``benchmarks.redis_streams``) spawns one process per member with ``run_member`` as its
target. The member connects to the bench's redis-server (redis-py, on 127.0.0.1), says it is
``Ready``, waits for the start signal that all members get at once, then reads the group's
backlog with XREADGROUP COUNT ``read_count`` (id ``>``: messages no member of the group was
given yet) until a read returns nothing, which happens once the group was given every message.
It acknowledges at its cadence (``mafka4.bench.drain_terms``): ``per-read``, XACK of each read's
ids before its next read; ``every-<N>ms``, XACK of every id read since its last XACK once N ms
passed since it (or since its first read); ``none``, reads with XREADGROUP's NOACK flag (nothing
is left pending). Ids still unacknowledged when a read returns nothing are acknowledged then,
and that last XACK ends the member's part of the drain. It reports the ids it was given and its
stamps (``MemberRead``), or ``Failed`` with the traceback.

redis-py is imported here, in the member, so that importing this module (as the spawned process
does to find its target, and the CLI's tests do) needs no Redis client.
"""

from __future__ import annotations

import time
import traceback
from dataclasses import dataclass

from benchmarks.redis_streams_figures import MemberRead
from mafka4.bench.drain_terms import AckCadence, AckKind

LOOPBACK = "127.0.0.1"  # the bench's redis-server listens here only


@dataclass(frozen=True, slots=True)
class MemberSpec:
    member: int
    port: int
    stream: str
    group: str
    ack_cadence: AckCadence
    read_count: int
    socket_timeout_s: float
    start_s_max: float  # the start signal must come within this long of being ready
    drain_s_max: float  # the member stops reading this long after its first read (``MemberRead.complete`` False)


@dataclass(frozen=True, slots=True)
class Ready:
    member: int


@dataclass(frozen=True, slots=True)
class Failed:
    member: int
    error: str  # the traceback


def run_member(spec: MemberSpec, reports, start) -> None:
    """The member's process: connect, ``Ready``, wait for ``start``, drain, report (``reports``: a queue)."""
    try:
        import redis

        client = redis.Redis(host=LOOPBACK, port=spec.port, socket_timeout=spec.socket_timeout_s, protocol=2)
        client.ping()
        reports.put(Ready(spec.member))
        if not start.wait(spec.start_s_max):
            raise TimeoutError(f"member {spec.member}: no start signal within {spec.start_s_max} s of being ready")
        reports.put(read_until_empty(client, spec))
        client.close()
    except Exception:
        reports.put(Failed(spec.member, traceback.format_exc()))


def read_until_empty(client, spec: MemberSpec) -> MemberRead:
    """XREADGROUP (and XACK at the cadence) until a read returns nothing, or until ``drain_s_max`` after the first."""
    consumer = f"member-{spec.member}"
    noack = spec.ack_cadence.kind is AckKind.NONE
    ids: list[bytes] = []
    unacknowledged: list[bytes] = []
    reads = acks = 0
    last_message_ns = end_ns = None
    first_read_ns, first_read_cpu_ns = time.monotonic_ns(), time.process_time_ns()
    last_ack_ns = first_read_ns
    deadline_ns = first_read_ns + int(spec.drain_s_max * 1e9)

    def acknowledge() -> int:
        nonlocal acks, unacknowledged
        client.xack(spec.stream, spec.group, *unacknowledged)
        acks, unacknowledged = acks + 1, []
        return time.monotonic_ns()

    while True:
        answer = client.xreadgroup(spec.group, consumer, {spec.stream: ">"}, count=spec.read_count, noack=noack)
        reads += 1
        entries = answer[0][1] if answer else []
        if not entries:
            complete = True
            break
        read = [entry_id for entry_id, _ in entries]
        ids.extend(read)
        last_message_ns = end_ns = time.monotonic_ns()
        if not noack:
            unacknowledged.extend(read)
            if spec.ack_cadence.due(last_message_ns, last_ack_ns):
                last_ack_ns = end_ns = acknowledge()
        if last_message_ns >= deadline_ns:
            complete = False
            break
    if unacknowledged:  # what was read since the last XACK: the member's part of the drain ends with it
        end_ns = acknowledge()
    return MemberRead(spec.member, first_read_ns, last_message_ns, end_ns, tuple(ids), reads, acks, complete,
                      cpu_ns=time.process_time_ns() - first_read_cpu_ns)
