"""``mafka4 bench redis-streams``: Redis Streams on this machine, the workloads issue 15 compares mafka4 with.

Issue 15 sets mafka4's produce and consume rates against Redis Streams "on the same machine":
1 KiB messages, a single unreplicated node whose append-only file is fsynced every second. This
bench measures that Redis side with a stated client, so that both sides are measured the same
day, on the same cores, by anyone (``mafka4 bench produce`` and ``mafka4 bench consume`` measure
mafka4's). It needs no mafka4 cluster, only ``redis-server`` on the PATH and the ``redis``
extra (redis-py and hiredis); it connects to nothing but the redis-server it starts.

1. **The server.** ``redis-server`` on a free port of 127.0.0.1, listening there only, with its
   data in a temporary directory (under ``$TMPDIR``): no RDB snapshots, AOF with ``appendfsync
   everysec`` (``server_command``). It is stopped by its pid (SIGTERM, then SIGKILL) when the
   bench ends, however it ends.
2. **Produce**, per repetition and pipeline depth of ``pipeline_messages``, ``produce_messages``
   XADDs of ``message_bytes`` each (one field ``v``) to a new stream, in pipelines of that many
   commands, by each of two clients (``redis_streams_figures.CLIENTS``): **redis-py**
   (``pipeline(transaction=False)``, then ``execute()``), the client an application would use;
   and **raw**: the commands packed once with ``hiredis.pack_command``, written to a plain
   socket, replies read with ``hiredis.Reader``: the most one Python connection gets out of
   Redis (about twice redis-py's rate here). The report carries both: a comparison names the
   one it uses. A pipeline is sent whole and its replies read before the next is sent: the
   depth is the commands in flight. ``matched`` gives it the bytes a mafka4 Producer keeps in
   flight (``redis_streams_figures.matched_pipeline_messages``). msgs/s: from before the first
   pipeline is sent to after the last one's replies are read. The stream is then checked to
   hold every message and deleted.
3. **Consume**: a backlog of ``messages`` in one stream (written once, by the raw client in
   pipelines of 1,000, which keeps the ids), drained per repetition, acknowledgement cadence,
   read COUNT and consumer count by one new group (created at id 0) of that many processes
   (``benchmarks.redis_streams_member``, spawned, redis-py). The cadences are
   ``mafka4.bench.drain_terms``': **per-read** (XACK of each read's ids, Redis' at-least-once
   consumer, as a mafka4 member that commits after each poll), **every-<N>ms** (XACK of what was
   read since the last XACK, as a mafka4 member that auto-commits every N ms) and **none**
   (XREADGROUP NOACK: nothing pending; a message counts as processed once it is delivered, so one
   a consumer dies holding is not delivered again: at most once). The read COUNT is a count or
   ``matched``: the bytes of one mafka4 fetch (``redis_streams_figures.matched_read_count``).
   The members start together on one signal once all are connected; msgs/s is the backlog over
   the time from the earliest first read to the latest end, a member's last XACK (or its last
   message, with none) (``redis_streams_figures``). A member acknowledging every N ms learns
   that it is done from a read that returns nothing, so its last XACK follows that empty read.
   The row counts that every backlog id was given exactly once across the members, and that
   the group has nothing pending after, and what the drain cost in CPU per message, the
   members' and the whole machine's (``mafka4.bench.cpu_cost``, as ``mafka4 bench consume``
   reports it).

Before every measurement the bench waits (at most ``quiet_wait_s_max``) for the 1-minute load
average to fall to 2.0; each row records the load average at its start and end, ``quiet``
(judged at the start: a measurement loads the machine by design), and ``server_forks``: forks
of redis-server during it (an AOF rewrite runs in a forked child, on the same cores).

The report (``results/bench_redis_streams.json``): the settings, the server's version and
command line, the redis-py and hiredis versions, what each client is, the backlog, every row,
the medians per cell of the sweep (``summary``), how ``matched`` was derived, and the load
average at the start and end of the run.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import queue
import random
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from benchmarks.redis_streams_figures import (CLIENTS, CONSUME_CLIENT, PRODUCE_CLIENTS, RAW, REDIS_PIPELINE_MESSAGES,
                                              REDIS_PY, MemberRead, RedisStreamsBenchSettings, drain_row,
                                              matched_from, pipeline_sizes, rate_msgs_per_s, summary)
from benchmarks.redis_streams_member import LOOPBACK, Failed, MemberSpec, Ready, run_member
from mafka4.bench.cpu_cost import cpu_per_message
from mafka4.bench.drain_terms import AckCadence
from mafka4.bench.process_usage import TICKS_PER_S, machine_cpu, wait_until_quiet
from mafka4.bench.usage import is_quiet
from mafka4.errors import MissingDependency

INSTALL_SERVER = "apt-get install redis-server (Debian, Ubuntu), or put a redis-server of 7.0 or later on the PATH"
INSTALL_CLIENTS = "pip install 'mafka4[redis]' (in a checkout: pip install -e '.[redis]')"
BACKLOG_STREAM = "bench-backlog"
VALUE_SEED = 0
SERVER_POLL_S = 0.05
SERVER_STOP_S_MAX = 30.0
# The driver looks this often whether a member process exited without a word.
REPORT_WAIT_S = 0.2
# Members that reported their drain exit within this long; later, they are killed.
CLOSE_S_MAX = 30.0
RECV_BYTES = 1 << 20


def client_modules():
    """(redis, hiredis), imported; ``MissingDependency`` naming the extra if either is not."""
    try:
        import hiredis
        import redis
    except ImportError as missing:
        raise MissingDependency(f"`mafka4 bench redis-streams` needs the Python packages redis and hiredis "
                                f"({missing}): {INSTALL_CLIENTS}") from None
    return redis, hiredis


def server_binary() -> str:
    """The path of ``redis-server``; ``MissingDependency`` saying how to install it if it is not on the PATH."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise MissingDependency(f"`mafka4 bench redis-streams` starts a redis-server of its own, and none is on the "
                                f"PATH: {INSTALL_SERVER}")
    return binary


def server_command(binary: str, port: int, directory: str) -> list[str]:
    """Single node, unreplicated, on 127.0.0.1 only; no RDB snapshots, the AOF fsynced every second (issue 15)."""
    return [binary, "--port", str(port), "--bind", LOOPBACK, "--dir", directory, "--save", "", "--appendonly", "yes",
            "--appendfsync", "everysec"]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind((LOOPBACK, 0))
        return probe.getsockname()[1]


def _start_server(command: list[str], log_path: Path) -> subprocess.Popen:
    with open(log_path, "wb") as log:
        return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def _serving(redis, server: subprocess.Popen, port: int, log_path: Path, settings: RedisStreamsBenchSettings):
    """A redis-py client of the server once it answers PING; raises if it exits or stays silent."""
    client = redis.Redis(host=LOOPBACK, port=port, socket_timeout=settings.socket_timeout_s, protocol=2)
    deadline = time.monotonic() + settings.server_start_s_max
    while True:
        try:
            client.ping()
            return client
        except redis.ConnectionError:
            if server.poll() is not None or time.monotonic() > deadline:
                state = (f"exited with {server.returncode}" if server.returncode is not None
                         else f"did not answer within {settings.server_start_s_max} s")
                raise RuntimeError(f"bench redis-streams: redis-server on {LOOPBACK}:{port} {state}; its log "
                                   f"ends:\n{log_path.read_text(errors='replace')[-2000:]}") from None
            time.sleep(SERVER_POLL_S)


def _stop_server(server: subprocess.Popen) -> None:
    """SIGTERM to the server's pid (it flushes its AOF and exits), SIGKILL if it has not exited in time."""
    server.terminate()
    try:
        server.wait(SERVER_STOP_S_MAX)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


class RespConnection:
    """One plain socket to the bench's redis-server: packed commands out, replies parsed by ``hiredis.Reader``."""

    def __init__(self, hiredis, port: int, timeout_s: float):
        self._socket = socket.create_connection((LOOPBACK, port), timeout=timeout_s)
        self._socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as redis-py's connections
        self._reader = hiredis.Reader()
        self._reply_error = hiredis.ReplyError

    def send(self, commands: bytes) -> None:
        self._socket.sendall(commands)

    def replies(self, count: int) -> list:
        """The next ``count`` replies; raises on an error reply or a closed connection."""
        replies = []
        while len(replies) < count:
            reply = self._reader.gets()
            if reply is False:  # no whole reply buffered: each recv waits at most the socket's timeout
                data = self._socket.recv(RECV_BYTES)
                if not data:
                    raise ConnectionError(f"redis-server closed the connection after {len(replies)} of {count} replies")
                self._reader.feed(data)
            elif isinstance(reply, self._reply_error):
                raise RuntimeError(f"bench redis-streams: redis-server refused a command: {reply}")
            else:
                replies.append(reply)
        return replies

    def close(self) -> None:
        self._socket.close()


def produce_raw(connection: RespConnection, hiredis, stream: str, messages: int, pipeline_messages: int,
                value: bytes) -> tuple[int, list[bytes]]:
    """XADDs packed once, sent in pipelines: (ns from the first send to the last reply, the ids in order)."""
    command = hiredis.pack_command(("XADD", stream, "*", "v", value))
    packed = {size: command * size for size in set(pipeline_sizes(messages, pipeline_messages))}
    ids: list[bytes] = []
    started_ns = time.monotonic_ns()
    for size in pipeline_sizes(messages, pipeline_messages):
        connection.send(packed[size])
        ids += connection.replies(size)
    return time.monotonic_ns() - started_ns, ids


def produce_redis_py(client, stream: str, messages: int, pipeline_messages: int, value: bytes) -> int:
    """XADDs through redis-py pipelines: ns from building the first pipeline to the last ``execute()``'s return."""
    fields = {"v": value}
    started_ns = time.monotonic_ns()
    for size in pipeline_sizes(messages, pipeline_messages):
        pipeline = client.pipeline(transaction=False)
        for _ in range(size):
            pipeline.xadd(stream, fields)
        pipeline.execute()
    return time.monotonic_ns() - started_ns


def _quiet_start(settings: RedisStreamsBenchSettings) -> tuple[float, float]:
    """(the 1-minute load average once quiet or after ``quiet_wait_s_max``, seconds waited)."""
    waiting = time.monotonic()
    load = wait_until_quiet(settings.quiet_wait_s_max)
    return load, time.monotonic() - waiting


def _conditions(load_start: float, quiet_wait_s: float, forks: int) -> dict:
    load = [round(load_start, 2), round(os.getloadavg()[0], 2)]
    return {"quiet_wait_s": round(quiet_wait_s, 2), "load_average_1m": load, "quiet": is_quiet(load[:1]),
            "server_forks": forks}


def _forks(admin) -> int:
    return int(admin.info("stats")["total_forks"])


def produce_once(client: str, pipeline: tuple[str, int], repetition: int, admin, redis, hiredis, port: int,
                 value: bytes, settings: RedisStreamsBenchSettings) -> dict:
    """One produce measurement of ``client`` in pipelines of ``pipeline`` (as given, XADDs) to a new stream, checked
    and then deleted: its row."""
    (given, pipeline_messages), messages = pipeline, settings.produce_messages
    stream = f"bench-produce-{client}-{given}-{repetition}"
    if client == REDIS_PY:
        producer = redis.Redis(host=LOOPBACK, port=port, socket_timeout=settings.socket_timeout_s, protocol=2)
        producer.ping()  # connected before the clock starts, as the raw socket is
    else:
        producer = RespConnection(hiredis, port, settings.socket_timeout_s)
    try:
        load_start, quiet_wait_s = _quiet_start(settings)
        forks = _forks(admin)
        if client == REDIS_PY:
            elapsed_ns = produce_redis_py(producer, stream, messages, pipeline_messages, value)
        else:
            elapsed_ns, _ = produce_raw(producer, hiredis, stream, messages, pipeline_messages, value)
        conditions = _conditions(load_start, quiet_wait_s, _forks(admin) - forks)
    finally:
        producer.close()
    length = admin.xlen(stream)
    admin.delete(stream)
    if length != messages:
        raise RuntimeError(f"bench redis-streams: {client} sent {messages} XADDs to {stream}, which holds {length}")
    msgs_per_s = rate_msgs_per_s(messages, elapsed_ns)
    return {"workload": "produce", "client": client, "pipeline_choice": given, "pipeline_messages": pipeline_messages,
            "repetition": repetition, "messages": messages,
            "elapsed_s": round(elapsed_ns / 1e9, 4), "msgs_per_s": msgs_per_s,
            "mb_per_s": None if msgs_per_s is None else round(msgs_per_s * settings.message_bytes / 1e6, 2),
            **conditions}


def write_backlog(admin, hiredis, port: int, value: bytes, settings: RedisStreamsBenchSettings) -> tuple[dict, list]:
    """The backlog stream, written by the raw client: (what it is, its ids in order)."""
    connection = RespConnection(hiredis, port, settings.socket_timeout_s)
    try:
        elapsed_ns, ids = produce_raw(connection, hiredis, BACKLOG_STREAM, settings.messages, REDIS_PIPELINE_MESSAGES,
                                      value)
    finally:
        connection.close()
    length = admin.xlen(BACKLOG_STREAM)
    if length != settings.messages or len(set(ids)) != len(ids):
        raise RuntimeError(f"bench redis-streams: {settings.messages} XADDs to {BACKLOG_STREAM} gave "
                           f"{len(set(ids))} distinct ids; it holds {length}")
    return {"stream": BACKLOG_STREAM, "messages": length, "client": RAW, "write_s": round(elapsed_ns / 1e9, 4),
            "msgs_per_s": rate_msgs_per_s(length, elapsed_ns)}, ids


def _collect(reports, processes, kind: type, count: int, wait_s_max: float) -> list:
    """``count`` reports of ``kind`` from the members; raises if one failed, exited unasked, or they are late."""
    got = []
    deadline = time.monotonic() + wait_s_max
    while len(got) < count:
        try:
            report = reports.get(timeout=REPORT_WAIT_S)
        except queue.Empty:
            exited = [(process.name, process.exitcode) for process in processes if process.exitcode not in (None, 0)]
            if exited:
                raise RuntimeError(f"bench redis-streams: member processes exited before reporting (name, exit "
                                   f"code): {exited}") from None
            if time.monotonic() > deadline:
                raise TimeoutError(f"bench redis-streams: {len(got)} of {count} members reported "
                                   f"{kind.__name__} within {wait_s_max} s") from None
            continue
        if isinstance(report, Failed):
            raise RuntimeError(f"bench redis-streams: member {report.member} failed:\n{report.error}")
        assert isinstance(report, kind), (kind, report)
        got.append(report)
    return got


def _end(processes, wait_s_max: float) -> None:
    deadline = time.monotonic() + wait_s_max
    for process in processes:
        process.join(max(0.0, deadline - time.monotonic()))
        if process.exitcode is None:
            process.kill()
            process.join()


def drain_once(cadence: AckCadence, reading: tuple[str, int], consumers: int, repetition: int, admin, port: int,
               backlog_ids: list[bytes], settings: RedisStreamsBenchSettings) -> dict:
    """One new group of ``consumers`` member processes, acknowledging at ``cadence`` and reading ``reading`` (as
    given, COUNT) at a time, drains the backlog from id 0: its row."""
    (given, read_count), ack = reading, str(cadence)
    group = f"bench-{ack}-{given}-{consumers}-{repetition}"
    admin.xgroup_create(BACKLOG_STREAM, group, id="0")
    context = multiprocessing.get_context("spawn")  # a fresh interpreter, as a user's consumer is
    reports, start = context.Queue(), context.Event()
    specs = [MemberSpec(member, port, BACKLOG_STREAM, group, cadence, read_count,
                        settings.socket_timeout_s, settings.join_s_max + settings.quiet_wait_s_max,
                        settings.drain_s_max) for member in range(consumers)]
    processes = [context.Process(target=run_member, args=(spec, reports, start),
                                 name=f"bench-redis-member-{spec.member}") for spec in specs]
    joining = time.monotonic()
    try:
        for process in processes:
            process.start()
        _collect(reports, processes, Ready, consumers, settings.join_s_max)
        join_s = time.monotonic() - joining
        # The members' starts load the machine for a while: the drain waits.
        load_start, quiet_wait_s = _quiet_start(settings)
        forks = _forks(admin)
        started_at = machine_cpu()
        start.set()
        reads: list[MemberRead] = _collect(reports, processes, MemberRead, consumers,
                                           settings.drain_s_max + settings.socket_timeout_s)
        drained_at = machine_cpu()
        conditions = _conditions(load_start, quiet_wait_s, _forks(admin) - forks)
    except BaseException:
        _end(processes, 0.0)
        raise
    _end(processes, CLOSE_S_MAX)
    reports.close()
    pending = admin.xpending(BACKLOG_STREAM, group)["pending"]
    admin.xgroup_destroy(BACKLOG_STREAM, group)
    figures = drain_row(backlog_ids, reads, settings.message_bytes)
    return {"workload": "consume", "ack": ack, "read_count_choice": given, "read_count": read_count, "consumers": consumers,
            "repetition": repetition, "group": group,
            "join_s": round(join_s, 2), **figures,
            **cpu_per_message([read.cpu_ns for read in reads], started_at, drained_at, TICKS_PER_S,
                              figures["messages_read"]),
            "pending_after": pending, **conditions}


def _measure(admin, redis, hiredis, port: int, settings: RedisStreamsBenchSettings) -> tuple[dict, list[dict]]:
    """The backlog, then per repetition every produce run and every drain of the sweep: (the backlog, every row)."""
    value = random.Random(VALUE_SEED).randbytes(settings.message_bytes)
    backlog, backlog_ids = write_backlog(admin, hiredis, port, value, settings)
    rows = []
    for repetition in range(settings.repetitions):
        rows += [produce_once(client, pipeline, repetition, admin, redis, hiredis, port, value, settings)
                 for client in PRODUCE_CLIENTS for pipeline in settings.pipelines]
        rows += [drain_once(cadence, reading, consumers, repetition, admin, port, backlog_ids, settings)
                 for cadence in settings.cadences for reading in settings.reads for consumers in settings.consumers]
    return backlog, rows


def run_redis_streams_bench(settings: RedisStreamsBenchSettings, output_path: str) -> dict:
    redis, hiredis = client_modules()
    binary = server_binary()
    version = subprocess.run([binary, "--version"], capture_output=True, text=True, check=True,
                             timeout=settings.server_start_s_max).stdout.strip()
    load_start = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="mafka4-bench-redis-") as directory:
        port = _free_port()
        command = server_command(binary, port, directory)
        log_path = Path(directory) / "redis-server.log"
        server = _start_server(command, log_path)
        try:
            admin = _serving(redis, server, port, log_path, settings)
            backlog, rows = _measure(admin, redis, hiredis, port, settings)
            admin.close()
        finally:
            _stop_server(server)
    load = [round(load_start, 2), round(os.getloadavg()[0], 2)]
    figures = summary(rows)
    if settings.smoke:
        figures["smoke"] = "a test-sized run: not a result"
    report = {"settings": asdict(settings),
              "redis_server": {"version": version, "command": command, "pid": server.pid},
              "redis_py_version": redis.__version__, "hiredis_version": hiredis.__version__,
              "clients": {**CLIENTS, "consume": CONSUME_CLIENT}, "matched": matched_from(), "backlog": backlog,
              "rows": rows, "summary": figures,
              "cpu_count": os.cpu_count(), "load_average_1m": load, "quiet": is_quiet(load[:1])}
    Path(output_path).parent.mkdir(parents=True, exist_ok=True)
    Path(output_path).write_text(json.dumps(report, indent=2))
    return report
