"""One consumer of ``mafka4 bench redis-streams``: a process of its own, a member of the drain's group.

The driver (``benchmarks.redis_streams``) spawns one process per member with ``run_member`` as its
target. The member connects to the bench's redis-server (redis-py, on 127.0.0.1), says it is
``Ready``, waits for the start signal that all members get at once, then reads the group's
backlog with XREADGROUP COUNT ``read_count`` (id ``>``: messages no member of the group was
given yet) until a read returns nothing, which happens once the group was given every message.
With ``noack`` the reads carry XREADGROUP's NOACK flag (nothing is left pending); without it
the member sends XACK of each read's ids before its next read. It reports the ids it was given
and its stamps (``MemberRead``), or ``Failed`` with the traceback.

redis-py is imported here, in the member, so that importing this module (as the spawned process
does to find its target, and the CLI's tests do) needs no Redis client.
"""

from __future__ import annotations

import time
import traceback
from dataclasses import dataclass

from benchmarks.redis_streams_figures import MemberRead

LOOPBACK = "127.0.0.1"  # the bench's redis-server listens here only


@dataclass(frozen=True, slots=True)
class MemberSpec:
    member: int
    port: int
    stream: str
    group: str
    noack: bool
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
    """XREADGROUP (and XACK) until a read returns nothing, or until ``drain_s_max`` after the first read."""
    consumer = f"member-{spec.member}"
    ids: list[bytes] = []
    reads = 0
    last_message_ns = None
    first_read_ns, first_read_cpu_ns = time.monotonic_ns(), time.process_time_ns()
    deadline_ns = first_read_ns + int(spec.drain_s_max * 1e9)
    while True:
        answer = client.xreadgroup(spec.group, consumer, {spec.stream: ">"}, count=spec.read_count, noack=spec.noack)
        reads += 1
        entries = answer[0][1] if answer else []
        if not entries:
            return MemberRead(spec.member, first_read_ns, last_message_ns, tuple(ids), reads, complete=True,
                              cpu_ns=time.process_time_ns() - first_read_cpu_ns)
        read = [entry_id for entry_id, _ in entries]
        if not spec.noack:
            client.xack(spec.stream, spec.group, *read)
        ids.extend(read)
        last_message_ns = time.monotonic_ns()
        if last_message_ns >= deadline_ns:
            return MemberRead(spec.member, first_read_ns, last_message_ns, tuple(ids), reads, complete=False,
                              cpu_ns=time.process_time_ns() - first_read_cpu_ns)
