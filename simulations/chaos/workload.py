"""The workload of a chaos run and the recorders of its history.

* ``History``: the driver's history records (``simulations.checkers``), each stamped with
  ``time.monotonic()``; ``merged`` orders them together with the members' records by that
  stamp (one clock for every process on Linux), which is the order the checkers judge.
* ``PacedProducer``: one idempotent ``acks=all`` producer on a thread, sending keyed messages
  at a fixed rate, round robin over the trunk and its lanes (``chaos-1`` ...: ``lane_names``);
  records ``Send`` before each ``send()`` and ``Ack`` in the callback.
  Values are unique (``<key>:<sequence>``): they name a message across Ack and Consumed.
  A share of the messages is sent with a delay (``traffic.draw_delay_ms``, from the seed), keyed
  and laned like the others: their ``Send.deliver_at_ms`` is the epoch ms taken before ``send()``
  plus the delay, a lower bound of the due time the producer writes in their header (it takes
  its own clock a moment later), so a read before it is early whatever the moment; their ``Ack``
  is the delay topic's partition and offset (their message id), which the judge knows by their
  ``Send.deliver_at_ms``.
* ``CommitObserver``: reads the group's committed VP offsets from etcd every
  ``COMMIT_POLL_S`` and records each change as a ``Commit`` (a sample of the commits: one
  between two reads is not seen, which can hide an anomaly but never invent one).
* ``Members``: the consumer-group members, one process each (``simulations.chaos.member``),
  so that killing one is a real crash; their output files give the ``Consumed`` records (reads of
  the topic's VPs and of the group's retry topic, each with its delivery count, the reader's group
  and the epoch ms it was read at) and the ``Nack`` records.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Iterable

import ray

from mafka4.client.partitioner import Partitioner
from mafka4.client.producer import Producer
from mafka4.client.retry_policy import RetryPolicy
from mafka4.errors import CoordinatorUnavailable, MafkaError
from mafka4.metadata import keys
from mafka4.metadata.store import MetadataStore
from mafka4.runtime.connect import CLUSTER_ENV, ETCD_ENDPOINT_ENV, RAY_ADDRESS_ENV, Connection
from simulations.chaos.fault_relay import FaultFile
from simulations.chaos.traffic import draw_delay_ms, retry_stream
from simulations.checkers import Ack, Commit, Consumed, HistoryRecord, Nack, Send

PRODUCER_ID = "producer-0"
SEND_TICK_S = 0.01  # the producer sends what is due this often
COMMIT_POLL_S = 0.1
PRODUCER_STOP_TIMEOUT_S = 180  # flushing waits for every outstanding batch (delivery_timeout_ms bounds each)
MEMBER_STOP_TIMEOUT_S = 60  # a SIGTERMed member commits, releases and leaves within this, or is killed
MEMBER_READY_TIMEOUT_S = 120  # joining Ray and the group on a loaded 2-core machine


def now_ms() -> int:
    """Epoch ms, the clock the producer's due times and the delay scheduler read."""
    return time.time_ns() // 1_000_000


def lane_names(lanes: int) -> tuple[str, ...]:
    """The lanes a chaos run sends in beside the trunk."""
    return tuple(f"chaos-{number}" for number in range(1, lanes + 1))


class History:
    """Timestamped history records of the driver's recorders (thread-safe)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._records: list[tuple[float, HistoryRecord]] = []

    def add(self, record: HistoryRecord, t: float | None = None) -> None:
        stamp = time.monotonic() if t is None else t
        with self._lock:
            self._records.append((stamp, record))

    def records(self) -> list[tuple[float, HistoryRecord]]:
        with self._lock:
            return list(self._records)

    def merged(self, others: Iterable[tuple[float, HistoryRecord]]) -> list[HistoryRecord]:
        """Every record, the driver's and ``others``, by time (ties keep the driver's first)."""
        stamped = self.records() + list(others)
        return [record for _, record in sorted(stamped, key=lambda item: item[0])]


class PacedProducer:
    """Keyed ``acks=all`` messages at ``rate_msgs_per_s`` on a thread until ``stop``."""

    def __init__(self, connection: Connection, topic: str, partitions: int, key_count: int, rate_msgs_per_s: int,
                 history: History, delivery_timeout_ms: int, lanes: int = 0, delayed_share: float = 0.0,
                 delay_ms_max: int = 0, seed: int = 0):
        self.sent = self.acknowledged = self.delayed = 0
        self.failures: list[str] = []
        self._keys = [b"k%02d" % i for i in range(key_count)]
        self._lanes = ("", *lane_names(lanes))  # "" the trunk
        self._partitioner = Partitioner(topic, partitions)
        self._rate = rate_msgs_per_s
        self._delayed_share, self._delay_ms_max = delayed_share, delay_ms_max
        self._delays = random.Random(f"chaos-delays-{seed}")  # apart from the nemesis's: the same per seed
        self._history = history
        self._stop = threading.Event()
        self._producer = Producer(topic, connection=connection, acks="all", delivery_timeout_ms=delivery_timeout_ms)
        self._thread = threading.Thread(target=self._run, name="chaos-producer", daemon=True)

    def start(self) -> None:
        """Open the lanes (before any fault: a lane's first message asks a node), then send on a thread."""
        for lane in self._lanes[1:]:
            self._producer.open_lane(lane)
        self._thread.start()

    def _run(self) -> None:
        began = time.monotonic()
        while not self._stop.wait(SEND_TICK_S):
            due = int((time.monotonic() - began) * self._rate)
            while self.sent < due and not self._stop.is_set():
                self._send_one()
        self._producer.flush()

    def _send_one(self) -> None:
        key = self._keys[self.sent % len(self._keys)]
        value = b"%s:%07d" % (key, self.sent)
        lane = self._lanes[self.sent % len(self._lanes)]
        delay_ms = draw_delay_ms(self._delays, self._delayed_share, self._delay_ms_max)
        deliver_at_ms = None if delay_ms is None else now_ms() + delay_ms
        self._history.add(Send(PRODUCER_ID, key, value, self._partitioner.partition(key, None), lane, deliver_at_ms))
        self.sent += 1
        try:
            future = self._producer.send(value, key=key, lane=lane or None, delay_ms=delay_ms)
        except MafkaError as error:  # a delayed one's first send creates the delay topic, which a fault can fail
            self.failures.append(f"{value.decode()}: {type(error).__name__}: {error}")
            return
        self.delayed += delay_ms is not None
        future.add_callback(
            lambda metadata, error, key=key, value=value, lane=lane: self._answered(key, value, lane, metadata, error))

    def _answered(self, key: bytes, value: bytes, lane: str, metadata, error) -> None:
        if error is None:
            self._history.add(Ack(key, value, metadata.partition, metadata.offset, lane))
            self.acknowledged += 1
        else:
            self.failures.append(f"{value.decode()}: {type(error).__name__}: {error}")

    def stop(self) -> None:
        """Stop sending and wait until every message sent is acknowledged or failed."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(PRODUCER_STOP_TIMEOUT_S)
        assert not self._thread.is_alive(), f"the producer did not flush within {PRODUCER_STOP_TIMEOUT_S} s"
        self._producer.close()


class CommitObserver:
    """Records every change of the group's committed VP offsets it sees, on a thread."""

    def __init__(self, connection: Connection, group: str, topic: str, history: History):
        self.group, self.topic = group, topic
        self.reads_failed = 0
        self._prefix = keys.group_vp_offsets_prefix(connection.cluster, group)
        self._store = MetadataStore(connection.store.endpoint)
        self._history = history
        self._last: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-commits", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(COMMIT_POLL_S):
            self.read_once()

    def read_once(self) -> None:
        try:
            items = self._store.get_prefix(self._prefix)
        except CoordinatorUnavailable:
            self.reads_failed += 1  # etcd restarting: commits wait for it too
            return
        for item in items:
            parsed = keys.parse_group_partition(self._prefix, item.key)
            if parsed is None or parsed[0] != self.topic:
                continue
            vp, offset = parsed[1], item.value["offset"]
            if self._last.get(vp) != offset:
                self._last[vp] = offset
                self._history.add(Commit(self.group, f"vp{vp}", offset))

    @property
    def committed(self) -> dict[int, int]:
        return dict(self._last)

    def stop(self) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        self.read_once()  # the commits of members that closed last
        self._store.close()


class MemberProcess:
    """One member process and the JSON-lines file it writes."""

    def __init__(self, name: str, command: list[str], env: dict[str, str], out: Path):
        self.name, self.out = name, out
        self.killed = self.terminated = False
        self.stop_timed_out = False  # asked to stop, hung, and killed by the driver: not a fault
        with open(out.with_suffix(".log"), "ab") as log:
            # Own session: a Ctrl-C meant for the driver must not reach it before the driver stops it.
            self.process = subprocess.Popen(command + ["--out", str(out)], env=env, stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, start_new_session=True)

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def lines(self) -> list[dict]:
        """The complete lines written so far (a line cut by a kill is dropped)."""
        if not self.out.exists():
            return []
        found = []
        for text in self.out.read_text(encoding="utf-8").splitlines():
            try:
                found.append(json.loads(text))
            except json.JSONDecodeError:
                continue
        return found

    def kill(self) -> None:
        """SIGKILL it as a fault: it dies without committing or leaving, and its exit code says nothing."""
        self.killed = True
        self._sigkill()

    def _sigkill(self) -> None:
        if self.alive:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def terminate(self) -> None:
        """Ask the member to close and exit (once: a second SIGTERM could find Ray's exit path without our handler)."""
        if self.alive and not self.terminated:
            self.terminated = True
            self.process.send_signal(signal.SIGTERM)

    def wait_stopped(self) -> None:
        try:
            self.process.wait(MEMBER_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.stop_timed_out = True
            self._sigkill()


class Members:
    """The group's member processes: start, crash and replace them, read what they consumed."""

    def __init__(self, connection: Connection, topic: str, group: str, workdir: Path, member_lease_ttl_s: int,
                 auto_commit_interval_ms: int, retry_policy: RetryPolicy | None = None, nack_share: float = 0.0,
                 poison_share: float = 0.0):
        self.group = group
        self._workdir = workdir
        self.fault_file = FaultFile(workdir / "client-network-fault.json")
        self._command = [sys.executable, "-m", "simulations.chaos.member", "--topic", topic, "--group", group,
                         "--member-lease-ttl-s", str(member_lease_ttl_s),
                         "--auto-commit-interval-ms", str(auto_commit_interval_ms),
                         "--network-fault-file", str(self.fault_file.path)]
        if retry_policy is not None:
            self._command += ["--retry-policy", json.dumps(retry_policy.to_json()), "--nack-share", repr(nack_share),
                              "--poison-share", repr(poison_share)]
        root = str(Path(__file__).resolve().parent.parent)  # the checkout this driver runs from
        self._env = {**os.environ, ETCD_ENDPOINT_ENV: connection.store.endpoint,
                     RAY_ADDRESS_ENV: ray.get_runtime_context().gcs_address, CLUSTER_ENV: connection.cluster,
                     "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
        self.all: list[MemberProcess] = []

    def start(self) -> MemberProcess:
        name = f"member-{len(self.all)}"
        member = MemberProcess(name, self._command, self._env, self._workdir / f"{name}.jsonl")
        self.all.append(member)
        return member

    @property
    def running(self) -> list[MemberProcess]:
        return [m for m in self.all if m.alive and not m.killed]

    def wait_ready(self, timeout_s: float = MEMBER_READY_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout_s
        for member in self.all:
            while not any("ready" in line for line in member.lines()):
                assert member.alive, f"{member.name} exited with {member.process.returncode}; see {member.out.with_suffix('.log')}"
                assert time.monotonic() < deadline, f"{member.name} did not join within {timeout_s} s"
                time.sleep(0.2)

    def stop_all(self) -> None:
        for member in self.all:
            member.terminate()  # all at once: they leave in parallel
        for member in self.all:
            member.wait_stopped()

    def consumed(self) -> list[tuple[float, Consumed]]:
        records = []
        for member in self.all:
            for line in member.lines():
                if "vp" in line or "retry" in line:
                    key = None if line["key"] is None else bytes.fromhex(line["key"])
                    stream = f"vp{line['vp']}" if "vp" in line else retry_stream(line["retry"])
                    records.append((line["t"], Consumed(member.name, stream, line["offset"], key,
                                                        bytes.fromhex(line["value"]), lane=line.get("lane", ""),
                                                        at_ms=line.get("at_ms"), group=self.group,
                                                        delivery_count=line.get("delivery"))))
        return records

    def nacks(self) -> list[tuple[float, Nack]]:
        """The members' nacks, less those taken back (a ``nack_failed`` line after the nack)."""
        records = []
        for member in self.all:
            nacked: list[tuple[float, Nack]] = []
            for line in member.lines():
                if "nack" in line:
                    nacked.append((line["t"], Nack(self.group, member.name, bytes.fromhex(line["nack"]),
                                                   line["delivery"], line["at_ms"], line["due_ms"])))
                elif "nack_failed" in line:
                    failed = (bytes.fromhex(line["nack_failed"]), line["delivery"])
                    last = max((i for i, (_, n) in enumerate(nacked) if (n.value, n.delivery_count) == failed),
                               default=None)
                    if last is not None:
                        del nacked[last]
            records += nacked
        return records

    def errors(self) -> list[str]:
        return [f"{member.name}: {line['error']}" for member in self.all for line in member.lines() if "error" in line]
