"""``mafka4 bench failover``: how long producing stops when a partition leader dies.

On the running cluster, one producer writes a fresh topic (one partition, RF 3 by default,
acks=all) one message at a time with ``send_sync``. Each repetition kills the partition's
leader actor (``ray.kill``) and measures

* ``unavailable_ms``: from the kill to the acknowledgement of the first message *sent* after
  the old leader was confirmed dead (so that message cannot have been served by it);
* ``new_leader_in_etcd_ms``: from the kill to the controller's new partition state in etcd
  (detection by the replica's liveness lease, ``ReplicaConfig.replica_lease_ttl_s``, plus
  the controller's reaction);
* ``replication_restored_ms``: from the kill to an etcd ISR with all RF replicas again (the
  old leader restarted on its node, caught up, and added back by the new leader).

The next repetition starts only once replication is restored. The report goes to
``results/bench_failover.json`` (settings, every repetition, and a summary).
"""

from __future__ import annotations

import json
import os
import secrets
import threading
import time
from dataclasses import asdict
from pathlib import Path

import ray

from benchmarks.failover_settings import FailoverBenchSettings
from mafka4.client.admin import Admin
from mafka4.client.producer import Producer
from mafka4.limits import ReadMode
from mafka4.limits.servers import ControllerConfig, ReplicaConfig
from mafka4.metadata import keys
from mafka4.physical.handles import replica_handle
from mafka4.physical.partition_state import PartitionState
from mafka4.runtime.connect import Connection, connect

POLL_INTERVAL_S = 0.02


class _SteadyProducer:
    """Sends one message at a time and records (send start, acknowledgement) times."""

    def __init__(self, connection: Connection, topic: str, message_bytes: int):
        self._producer = Producer(topic, connection=connection, acks="all", linger_ms=0)
        self._payload = os.urandom(message_bytes)
        self.acknowledged: list[tuple[float, float]] = []
        self.failures: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-failover-producer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            sent = time.monotonic()
            try:
                self._producer.send_sync(self._payload)
            except Exception as error:  # recorded: the bench reports failures, it does not hide them
                self.failures.append(error)
                continue
            self.acknowledged.append((sent, time.monotonic()))

    def first_ack_sent_after(self, moment: float, start_index: int) -> float | None:
        """Acknowledgement time of the first message sent at or after ``moment`` (sends are sequential)."""
        return next((acked for sent, acked in self.acknowledged[start_index:] if sent >= moment), None)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=60)
        self._producer.close()


def _partition_state(connection: Connection, topic: str) -> PartitionState:
    return PartitionState.from_json(0, connection.store.get(keys.physical_partition(connection.cluster, topic, 0)).value)


def _wait_until(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(POLL_INTERVAL_S)
    raise TimeoutError(f"bench failover: {what} did not happen within {timeout_s} s; see <home>/controller.log")


def _kill_confirmed(connection: Connection, topic: str, replica_id: str) -> None:
    handle = replica_handle(connection.cluster, topic, 0, replica_id)
    ray.kill(handle)
    while True:
        try:
            ray.get(handle.ping.remote(), timeout=5)
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
            return
        time.sleep(POLL_INTERVAL_S)


def _one_failover(connection: Connection, topic: str, producer: _SteadyProducer, settings: FailoverBenchSettings) -> dict:
    before = _partition_state(connection, topic)
    count_before = len(producer.acknowledged)
    killed_at = time.monotonic()
    _kill_confirmed(connection, topic, before.leader)
    dead_at = time.monotonic()
    new_leader_at = None
    acked_at = None
    deadline = killed_at + settings.recovery_s_max
    while (new_leader_at is None or acked_at is None) and time.monotonic() < deadline:
        if new_leader_at is None and _partition_state(connection, topic).leader_epoch > before.leader_epoch:
            new_leader_at = time.monotonic()
        acked_at = acked_at or producer.first_ack_sent_after(dead_at, count_before)
        time.sleep(POLL_INTERVAL_S)
    if new_leader_at is None or acked_at is None:
        raise TimeoutError(f"bench failover: no failover within {settings.recovery_s_max} s; see <home>/controller.log")
    after = _partition_state(connection, topic)
    _wait_until(lambda: len(_partition_state(connection, topic).isr) == settings.replication_factor,
                settings.recovery_s_max, "restoring the ISR to the replication factor")
    return {
        "killed_leader": before.leader, "new_leader": after.leader,
        "leader_epoch": [before.leader_epoch, after.leader_epoch],
        "unavailable_ms": round((acked_at - killed_at) * 1000, 1),
        "new_leader_in_etcd_ms": round((new_leader_at - killed_at) * 1000, 1),
        "replication_restored_ms": round((time.monotonic() - killed_at) * 1000, 1),
        "acknowledged_before_kill": count_before,
    }


def _summary(runs: list[dict]) -> dict:
    summary = {}
    for name in ("unavailable_ms", "new_leader_in_etcd_ms", "replication_restored_ms"):
        values = sorted(run[name] for run in runs)
        summary[name] = {"min": values[0], "median": values[len(values) // 2], "max": values[-1]}
    return summary


def run_failover_bench(settings: FailoverBenchSettings, output_path: str) -> dict:
    connection = connect()
    _wait_until(lambda: connection.store.get(keys.controller(connection.cluster)), 60, "a controller becoming active")
    admin = Admin(connection)
    topic = f"bench-failover-{secrets.token_hex(3)}"
    # ReadMode.MAFKA3: no read path, so only the write path is measured.
    admin.create_topic(topic, partitions=1, replication_factor=settings.replication_factor,
                       min_insync_replicas=settings.min_insync_replicas, read_mode=ReadMode.MAFKA3)
    producer = _SteadyProducer(connection, topic, settings.message_bytes)
    load_before = os.getloadavg()[0]  # the machine is shared: the figures depend on what else runs
    runs = []
    try:
        for _ in range(settings.repetitions):
            time.sleep(settings.warmup_s)
            runs.append(_one_failover(connection, topic, producer, settings))
    finally:
        producer.close()
        admin.delete_topic(topic)
    report = {
        "settings": asdict(settings),
        "replica_lease_ttl_s": ReplicaConfig().replica_lease_ttl_s,
        "controller": asdict(ControllerConfig()),
        "runs": runs,
        "producer_failures": [str(error) for error in producer.failures[:10]],
        "summary": _summary(runs),
        "cpu_count": os.cpu_count(),
        "load_average_1m": [round(load_before, 1), round(os.getloadavg()[0], 1)],
    }
    Path(output_path).parent.mkdir(parents=True, exist_ok=True)
    Path(output_path).write_text(json.dumps(report, indent=2))
    return report
