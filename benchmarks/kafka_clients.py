"""``mafka4 bench kafka-clients``: the Kafka protocol's cost, Kafka's own clients beside mafka4's, in one run.

Issue 39 asks for "throughput and produce p99.9 through the Kafka protocol with confluent-kafka, against
our Python producer, in the same run; the same with kcat for consume". Against the running local
cluster (``mafka4 up``), on one Mafka4-mode topic per run, each repetition runs both clients one
after the other (A B A B), each from a fresh topic:

- **throughput**: ``messages`` keyed messages of ``message_bytes``, sent as fast as the producer
  takes them, acks=all, the same linger; msgs/s from the first send to the last acknowledgement;
- **latency**: ``rate_msgs_s`` for ``latency_s``, paced; each message's send -> acknowledgement
  (the delivery callback), p50 / p99 / p99.9;
- **consume**: everything the topic holds read from the beginning by mafka4's Consumer (no group)
  and by ``kcat -C -e`` through the Kafka listener; msgs/s from start to the last message.

Both producers run in this process (confluent-kafka's librdkafka threads, mafka4's sender
thread), the consumers too (kcat as a child). The 1-minute load average is recorded before every
run: a figure taken above 2.0 is not a result (the project's rule), and the report says so.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import threading
import time
from dataclasses import asdict
from pathlib import Path

from benchmarks.kafka_clients_settings import CLIENTS, KafkaClientsBenchSettings, latency_figures, ratios
from mafka4.client.consumer import Consumer
from mafka4.client.producer import Producer
from mafka4.client.topic_admin import create_topic, delete_topic
from mafka4.errors import RequestTimedOut
from mafka4.runtime.environment import mafka4_home
from mafka4.runtime.local import status
from mafka4.security.admin_credential import CREDENTIAL_FILE, load_credential


def run_kafka_clients_bench(settings: KafkaClientsBenchSettings, output_path: str) -> dict:
    home = mafka4_home()
    listeners = status(home).get("kafka_listeners") or {}
    if not listeners:
        raise RequestTimedOut(f"no read node of the cluster at {home} names a Kafka listener: is it up (mafka4 up)?")
    user, password = load_credential(home / CREDENTIAL_FILE)
    kafka = {"bootstrap.servers": ",".join(listeners.values()), "security.protocol": "SASL_PLAINTEXT",
             "sasl.mechanisms": "SCRAM-SHA-256", "sasl.username": user, "sasl.password": password}
    runs = []
    for repetition in range(settings.repetitions):
        for client in CLIENTS:
            runs.append(_one_run(settings, home, kafka, client, repetition))
            _write(output_path, settings, runs)
    return _write(output_path, settings, runs)


def _write(output_path: str, settings: KafkaClientsBenchSettings, runs: list[dict]) -> dict:
    report = {"settings": asdict(settings), "runs": runs, "summary": ratios(runs), "cpu_count": os.cpu_count(),
              "quiet": all(run["load_average_1m_before"] <= 2.0 for run in runs)}
    Path(output_path).parent.mkdir(parents=True, exist_ok=True)
    Path(output_path).write_text(json.dumps(report, indent=2))
    return report


def _one_run(settings: KafkaClientsBenchSettings, home: Path, kafka: dict, client: str, repetition: int) -> dict:
    topic = f"bench-kafka-{secrets.token_hex(3)}"
    create_topic(topic, partitions=settings.partitions, virtual_partitions=settings.virtual_partitions, where=home)
    load_before = os.getloadavg()[0]
    try:
        send = _MafkaSender(topic, home, settings) if client == "mafka4" else _KafkaSender(topic, kafka, settings)
        try:
            produce_msgs_s = _throughput(send, settings)
            latencies = _paced(send, settings)
        finally:
            send.close()
        total = settings.messages + len(latencies)
        consume_msgs_s = (_consume_mafka4(topic, home, total, settings) if client == "mafka4"
                          else _consume_kcat(topic, kafka, total, settings))
    finally:
        delete_topic(topic, where=home)
    return {"client": client, "repetition": repetition, "load_average_1m_before": round(load_before, 2),
            "load_average_1m_after": round(os.getloadavg()[0], 2), "produce_msgs_s": round(produce_msgs_s, 1),
            "latency": latency_figures(latencies), "consume_msgs_s": round(consume_msgs_s, 1), "messages": total}


class _Acks:
    """Counts acknowledgements and keeps each message's send -> ack time (ms)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.done = 0
        self.failed: list[str] = []
        self.latencies_ms: list[float] = []
        self.all_done = threading.Event()
        self.expected = 0

    def callback(self, sent_s: float):
        def on_ack(error) -> None:
            latency_ms = (time.perf_counter() - sent_s) * 1000
            with self.lock:
                self.done += 1
                if error is not None:
                    self.failed.append(str(error))
                self.latencies_ms.append(latency_ms)
                if self.done >= self.expected:
                    self.all_done.set()
        return on_ack

    def reset(self, expected: int) -> None:
        with self.lock:
            self.done, self.expected, self.latencies_ms = 0, expected, []
            self.all_done.clear()


class _MafkaSender:
    def __init__(self, topic: str, home: Path, settings: KafkaClientsBenchSettings):
        self.acks = _Acks()
        self._producer = Producer(topic, connection=home, acks="all", linger_ms=settings.linger_ms)

    def send(self, key: bytes, value: bytes) -> None:
        on_ack = self.acks.callback(time.perf_counter())
        self._producer.send(value, key=key, callback=lambda _metadata, error: on_ack(error))

    def pump(self) -> None:
        pass  # the sender thread answers by itself

    def close(self) -> None:
        self._producer.close()


class _KafkaSender:
    def __init__(self, topic: str, kafka: dict, settings: KafkaClientsBenchSettings):
        from confluent_kafka import Producer as KafkaProducer

        self.acks = _Acks()
        self._topic = topic
        # Idempotent, as mafka4's Producer always is: both sides pay for their retries' safety.
        self._producer = KafkaProducer({**kafka, "acks": "all", "linger.ms": settings.linger_ms,
                                        "enable.idempotence": True})

    def send(self, key: bytes, value: bytes) -> None:
        on_ack = self.acks.callback(time.perf_counter())
        while True:
            try:
                self._producer.produce(self._topic, value, key, on_delivery=lambda error, _message: on_ack(error))
                break
            except BufferError:  # librdkafka's queue is full: let it deliver, then send again
                self._producer.poll(0.01)
        self._producer.poll(0)

    def pump(self) -> None:
        self._producer.poll(0.01)

    def close(self) -> None:
        self._producer.flush(30)


def _payload(settings: KafkaClientsBenchSettings, index: int) -> tuple[bytes, bytes]:
    return b"key-%d" % (index % settings.keys), (b"%d:" % index).ljust(settings.message_bytes, b"x")


def _wait_for_acks(send, settings: KafkaClientsBenchSettings) -> None:
    deadline = time.monotonic() + settings.drain_s_max
    while not send.acks.all_done.is_set():
        if time.monotonic() > deadline:
            raise RequestTimedOut(f"{send.acks.done} of {send.acks.expected} messages acknowledged after "
                                  f"{settings.drain_s_max} s")
        send.pump()
        send.acks.all_done.wait(0.01)
    if send.acks.failed:
        raise RequestTimedOut(f"{len(send.acks.failed)} messages failed, first: {send.acks.failed[0]}")


def _throughput(send, settings: KafkaClientsBenchSettings) -> float:
    send.acks.reset(settings.messages)
    started = time.perf_counter()
    for index in range(settings.messages):
        send.send(*_payload(settings, index))
    _wait_for_acks(send, settings)
    return settings.messages / (time.perf_counter() - started)


def _paced(send, settings: KafkaClientsBenchSettings) -> list[float]:
    count = int(settings.rate_msgs_s * settings.latency_s)
    send.acks.reset(count)
    started = time.perf_counter()
    for index in range(count):
        due = started + index / settings.rate_msgs_s
        while (wait := due - time.perf_counter()) > 0:
            send.pump() if wait > 0.01 else time.sleep(wait)
        send.send(*_payload(settings, settings.messages + index))
    _wait_for_acks(send, settings)
    return list(send.acks.latencies_ms)


def _consume_mafka4(topic: str, home: Path, total: int, settings: KafkaClientsBenchSettings) -> float:
    read = 0
    started = time.perf_counter()
    deadline = time.monotonic() + settings.drain_s_max
    with Consumer(topic, connection=home, from_beginning=True) as consumer:
        while read < total:
            if time.monotonic() > deadline:
                raise RequestTimedOut(f"mafka4's consumer read {read} of {total} messages in {settings.drain_s_max} s")
            read += len(consumer.poll(timeout_ms=500))
    return total / (time.perf_counter() - started)


def _consume_kcat(topic: str, kafka: dict, total: int, settings: KafkaClientsBenchSettings) -> float:
    options = [argument for name, value in kafka.items() if name != "bootstrap.servers"
               for argument in ("-X", f"{name}={value}")]
    started = time.perf_counter()
    done = subprocess.run(["kcat", "-b", kafka["bootstrap.servers"], *options, "-C", "-t", topic, "-o", "beginning",
                           "-e", "-q", "-f", "%o\n"], capture_output=True, timeout=settings.drain_s_max)
    elapsed = time.perf_counter() - started
    read = done.stdout.count(b"\n")
    if done.returncode != 0 or read != total:
        raise RequestTimedOut(f"kcat read {read} of {total} messages (exit {done.returncode}): "
                              f"{done.stderr.decode()[-500:]}")
    return total / elapsed
