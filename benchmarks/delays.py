"""``mafka4 bench delays``: delayed delivery and retries, measured (issue 41).

Against the running local cluster (``mafka4 up``), whose controller runs the delay scheduler
(``mafka4.scheduling.delay_service``), in this order:

1. **produce tail** (A): one Producer sends ``produce_rate_msgs_s`` keyed messages without delay
   for ``produce_s`` (acks=all); each send -> acknowledgement gives p50 / p99 / p99.9.
2. **schedule**: ``scheduled_messages`` delayed messages due in an hour are sent to a topic of their
   own; the scheduler's RSS before and once it holds them all (its state key says how many wait)
   gives the memory per scheduled message.
3. **produce tail** (B): as 1, the million waiting.
4. **recovery**: the scheduler is killed (SIGKILL, by its PID); the controller starts it again and
   it reads the delay topic back; recovery = kill -> the new scheduler has read to the end of it
   (its state's ``caught_up_ms``), and it holds the million again.
5. **produce tail** (A): as 1, once the scheduled topic is deleted (its delay topic with it).
6. **precision**: ``precision_messages`` delayed messages are sent first, due evenly over
   ``precision_window_s`` from ``precision_lead_s`` on, while normal traffic flows at
   ``background_rate_msgs_s``; a group member records when it first reads each. Due-time error =
   read time - the due time its ``mafka4.deliver_at`` header names (same clock): p50 / p99 / p99.9,
   and how many came early (none should).
7. **retries**: per run, a topic with ``retry_messages`` keyed messages; one member handles them
   with ``Consumer.run`` and a handler that never fails (A) or fails ``failing_share`` of them
   once (B, the group's default back-off: 1 s; its retry and delay topics created before the clock
   starts, their creation timed apart), alternating A B B A; rate = messages / (start ->
   the last one handled successfully), and the first pass's rate: the messages that do not fail
   / (start -> the last of them handled).

Every phase records the 1-minute load average before it: a figure taken above 2.0 is not a result.
Before each produce-tail run and the precision run the bench waits (up to ``settle_s_max``) for
the load to fall to ``settle_load``: the phase before may have loaded the machine. ``phases``
chooses the phases run (produce: 1-5; precision: 6; retries: 7; control: the produce tail after
a million plain messages were written to a topic, then without them, to tell what writing a
million costs from what holding it scheduled costs).
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import threading
import time
from dataclasses import asdict
from pathlib import Path

import psutil

from benchmarks.delays_settings import DelaysBenchSettings, latency_figures, summary
from mafka4.client.consumer import Consumer
from mafka4.client.producer import Producer
from mafka4.client.topic_admin import create_topic, delete_topic, describe_topic, open_companion
from mafka4.delays import DELAY_LANE, DELIVER_AT_HEADER, decode_deliver_at
from mafka4.errors import RequestTimedOut
from mafka4.retries import retry_lane
from mafka4.runtime.environment import mafka4_home

SCHEDULER_COMMAND = "mafka4.scheduling.delay_service"


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _load() -> float:
    return round(os.getloadavg()[0], 2)


def run_delays_bench(settings: DelaysBenchSettings, output_path: str) -> dict:
    home = mafka4_home()
    report: dict = {"settings": asdict(settings), "cpu_count": os.cpu_count(), "produce": []}
    if "produce" in settings.phases:
        _produce_phases(settings, home, report, output_path)
    if "control" in settings.phases:
        _control(settings, home, report, output_path)
    if "precision" in settings.phases:
        _settle(settings)
        report["precision"] = _precision(settings, home)
        _write(output_path, report)
    if "retries" in settings.phases:
        report["retries"] = []
        for repetition in range(settings.retry_repetitions):
            for failing in ((False, True) if repetition % 2 == 0 else (True, False)):
                report["retries"].append(_retries(settings, home, failing, repetition))
                _write(output_path, report)
    return _write(output_path, report)


def _produce_phases(settings: DelaysBenchSettings, home: Path, report: dict, output_path: str) -> None:
    """Phases 1-5 of the module docstring."""
    _settle(settings)
    report["produce"].append(_produce_tail(settings, home, "without"))
    _write(output_path, report)
    bulk = _topic(settings, home, "scheduled")
    report["schedule"] = _schedule(settings, home, bulk)
    _write(output_path, report)
    _settle(settings)
    report["produce"].append(_produce_tail(settings, home, "with"))
    _write(output_path, report)
    report["recovery"] = _recovery(settings, home, bulk)
    _write(output_path, report)
    delete_topic(bulk, home)
    time.sleep(5)  # the scheduler's worker of the deleted delay topic stops
    _settle(settings)
    report["produce"].append(_produce_tail(settings, home, "without"))
    _write(output_path, report)


def _control(settings: DelaysBenchSettings, home: Path, report: dict, output_path: str) -> None:
    """The produce tail after ``scheduled_messages`` plain messages were written (the same bytes as the
    scheduled million, nothing scheduled), then without them: what writing the million costs the
    tail, apart from holding it scheduled."""
    bulk = _topic(settings, home, "plain")
    padding = b"x" * max(settings.message_bytes - 16, 0)
    with Producer(bulk, connection=home, acks="all", linger_ms=5) as producer:
        for index in range(settings.scheduled_messages):
            producer.send(b"%d:" % index + padding, key=b"key-%d" % (index % settings.keys))
        producer.flush()
    _settle(settings)
    report["produce"].append(_produce_tail(settings, home, "plain million written"))
    _write(output_path, report)
    delete_topic(bulk, home)
    _settle(settings)
    report["produce"].append(_produce_tail(settings, home, "without"))
    _write(output_path, report)


def _settle(settings: DelaysBenchSettings) -> None:
    """Wait until the 1-minute load average is at most ``settle_load`` (a phase before this one, or
    the scheduler's ingest, loaded the machine), for at most ``settle_s_max``."""
    deadline = time.monotonic() + settings.settle_s_max
    while _load() > settings.settle_load and time.monotonic() < deadline:
        time.sleep(5)


def _write(output_path: str, report: dict) -> dict:
    loads = [run["load_average_1m_before"] for run in report["produce"] + report.get("retries", [])]
    loads += [report[phase]["load_average_1m_before"] for phase in ("schedule", "recovery", "precision") if phase in report]
    report["quiet"] = all(load <= 2.0 for load in loads)
    report["summary"] = summary(report)
    Path(output_path).parent.mkdir(parents=True, exist_ok=True)
    Path(output_path).write_text(json.dumps(report, indent=2))
    return report


def _topic(settings: DelaysBenchSettings, home: Path, what: str) -> str:
    name = f"bench-delays-{what}-{secrets.token_hex(3)}"
    create_topic(name, partitions=settings.partitions, replication_factor=settings.replication_factor,
                 read_mode="mafka4", where=home)
    return name


def _scheduler() -> psutil.Process:
    found = [process for process in psutil.process_iter(["cmdline"])
             if SCHEDULER_COMMAND in " ".join(process.info["cmdline"] or ())]
    if len(found) != 1:
        raise RequestTimedOut(f"{len(found)} delay schedulers run on this machine, not 1: run the bench against one "
                              f"local cluster (mafka4 up)")
    return found[0]


def _delays_state(topic: str, home: Path) -> dict:
    return describe_topic(topic, home).get("delays") or {}


def _wait(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(0.5)
    raise RequestTimedOut(f"{what} within {timeout_s} s: the run is not a result")


# --- produce tail -----------------------------------------------------------------------------


def _paced(producer: Producer, rate: int, seconds: float, settings: DelaysBenchSettings,
           stop: threading.Event | None = None) -> list[float]:
    """Send ``rate`` msgs/s for ``seconds`` (or until ``stop``); each message's send -> ack in ms."""
    latencies: list[float] = []
    failures: list[str] = []
    lock = threading.Lock()
    padding = b"x" * max(settings.message_bytes - 16, 0)

    def on_ack(sent_s: float):
        def callback(_metadata, error) -> None:
            with lock:
                latencies.append((time.perf_counter() - sent_s) * 1000)
                if error is not None:
                    failures.append(str(error))
        return callback

    start = time.perf_counter()
    for index in range(int(rate * seconds)):
        if stop is not None and stop.is_set():
            break
        pause = start + index / rate - time.perf_counter()
        if pause > 0:
            time.sleep(pause)
        producer.send(b"%d:" % index + padding, key=b"key-%d" % (index % settings.keys),
                      callback=on_ack(time.perf_counter()))
    producer.flush()
    if failures:
        raise RequestTimedOut(f"{len(failures)} messages failed ({failures[:1]}): the run is not a result")
    return latencies


def _produce_tail(settings: DelaysBenchSettings, home: Path, scheduled: str) -> dict:
    topic = _topic(settings, home, "produce")
    load = _load()
    try:
        with Producer(topic, connection=home, acks="all", linger_ms=settings.linger_ms) as producer:
            latencies = _paced(producer, settings.produce_rate_msgs_s, settings.produce_s, settings)
    finally:
        delete_topic(topic, home)
    return {"scheduled": scheduled, "load_average_1m_before": load, "latency": latency_figures(latencies)}


# --- schedule, memory, recovery ----------------------------------------------------------------


def _schedule(settings: DelaysBenchSettings, home: Path, topic: str) -> dict:
    load = _load()
    with Producer(topic, connection=home, acks="all", linger_ms=5) as producer:
        producer.send_sync(b"first", key=b"key-0", delay_ms=settings.scheduled_delay_ms)  # opens the delay topic
        time.sleep(5)  # the scheduler finds the new delay topic and starts its worker
        scheduler = _scheduler()
        rss_before = scheduler.memory_info().rss
        started = time.monotonic()
        padding = b"x" * max(settings.message_bytes - 16, 0)
        for index in range(1, settings.scheduled_messages):
            producer.send(b"%d:" % index + padding, key=b"key-%d" % (index % settings.keys),
                          delay_ms=settings.scheduled_delay_ms)
        producer.flush()
    sent_s = time.monotonic() - started
    _wait(lambda: _delays_state(topic, home).get("waiting", 0) >= settings.scheduled_messages, settings.drain_s_max,
          "the scheduler did not hold every scheduled message")
    held_s = time.monotonic() - started
    rss_after = scheduler.memory_info().rss
    return {"load_average_1m_before": load, "messages": settings.scheduled_messages, "message_bytes": settings.message_bytes,
            "send_s": round(sent_s, 2), "held_after_s": round(held_s, 2), "scheduler_rss_before": rss_before,
            "scheduler_rss_after": rss_after,
            "bytes_per_scheduled_message": round((rss_after - rss_before) / settings.scheduled_messages, 1)}


def _recovery(settings: DelaysBenchSettings, home: Path, topic: str) -> dict:
    load = _load()
    scheduler = _scheduler()
    killed_ms = _now_ms()
    os.kill(scheduler.pid, signal.SIGKILL)

    def recovered() -> dict | None:
        state = _delays_state(topic, home)
        caught_up_ms = state.get("caught_up_ms")
        return state if caught_up_ms and state.get("started_ms", 0) > killed_ms else None

    state = _wait(recovered, settings.drain_s_max, "the scheduler did not read its delay topic back")
    state = _wait(lambda: (s := _delays_state(topic, home)).get("written_ms", 0) >= state["caught_up_ms"] and s,
                  30, "the recovered scheduler wrote no state")
    return {"load_average_1m_before": load, "killed_ms": killed_ms, "restarted_after_ms": state["started_ms"] - killed_ms,
            "recovered_after_ms": state["caught_up_ms"] - killed_ms, "waiting_after": state["waiting"],
            "scheduler_rss_after": _scheduler().memory_info().rss}


# --- precision ---------------------------------------------------------------------------------


class _FirstReads:
    """A group member in a thread: per value, (first read time ms, due ms from its header)."""

    def __init__(self, topic: str, home: Path, **consumer_settings):
        self.first: dict[bytes, tuple[int, int | None]] = {}
        self.duplicates = 0
        self.duplicate_examples: list[tuple] = []  # (value, topic, partition, offset, where it was first)
        self.places: dict[bytes, tuple[int, int]] = {}
        self._stop = threading.Event()
        self._consumer = Consumer(topic, group="bench", connection=home, from_beginning=True, **consumer_settings)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for message in self._consumer.poll(200):
                now = _now_ms()
                if message.value in self.first:
                    self.duplicates += 1
                    if len(self.duplicate_examples) < 5:
                        self.duplicate_examples.append((message.value.decode(errors="replace")[:12], message.topic,
                                                        message.partition, message.offset, self.places[message.value]))
                    continue
                self.places[message.value] = (message.partition, message.offset)
                due = next((decode_deliver_at(v) for n, v in message.headers if n == DELIVER_AT_HEADER), None)
                self.first[message.value] = (now, due)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(30)
        self._consumer.close()


def _precision(settings: DelaysBenchSettings, home: Path) -> dict:
    topic = _topic(settings, home, "precision")
    load = _load()
    reader = _FirstReads(topic, home)
    stop = threading.Event()
    background: dict = {}
    try:
        with Producer(topic, connection=home, acks="all", linger_ms=5) as producer:
            first_due_ms = _now_ms() + int(settings.precision_lead_s * 1000)
            step_ms = settings.precision_window_s * 1000 / settings.precision_messages
            for index in range(settings.precision_messages):
                producer.send(b"d%d" % index, key=b"key-%d" % (index % settings.keys),
                              deliver_at_ms=first_due_ms + int(index * step_ms))
            producer.flush()
            sent_ms = _now_ms()

            def normal_traffic() -> None:
                with Producer(topic, connection=home, acks="all", linger_ms=settings.linger_ms) as normal:
                    background["latency"] = latency_figures(_paced(
                        normal, settings.background_rate_msgs_s,
                        settings.precision_lead_s + settings.precision_window_s, settings, stop))

            thread = threading.Thread(target=normal_traffic, daemon=True)
            thread.start()
            _wait(lambda: sum(1 for v in list(reader.first) if v[:1] == b"d") >= settings.precision_messages,
                  settings.precision_lead_s + settings.precision_window_s + settings.drain_s_max,
                  "not every delayed message was read")
            stop.set()
            thread.join(60)
    finally:
        reader.close()
        delete_topic(topic, home)
    errors = sorted(seen - due for value, (seen, due) in reader.first.items() if value[:1] == b"d")
    return {"load_average_1m_before": load, "messages": settings.precision_messages,
            "window_s": settings.precision_window_s, "all_sent_before_first_due_ms": first_due_ms - sent_ms,
            "due_time_error": latency_figures(errors), "early": sum(1 for error in errors if error < 0),
            "min_error_ms": errors[0], "duplicates": reader.duplicates,
            "duplicate_examples": reader.duplicate_examples,
            "background_produce": background.get("latency")}


# --- retries -----------------------------------------------------------------------------------


def _retries(settings: DelaysBenchSettings, home: Path, failing: bool, repetition: int) -> dict:
    topic = _topic(settings, home, "retries")
    with Producer(topic, connection=home, acks="all", linger_ms=5) as producer:
        for index in range(settings.retry_messages):
            producer.send(b"%d" % index, key=b"key-%d" % (index % settings.keys))
    every = round(1 / settings.failing_share)
    handled: set[bytes] = set()
    failed = [0]
    done = threading.Event()

    failing_total = len(range(0, settings.retry_messages, every)) if failing else 0
    first_pass_s: list[float] = []

    def handler(message) -> None:
        if failing and int(message.value) % every == 0 and message.delivery_count == 1:
            failed[0] += 1
            raise RuntimeError("fails once")
        handled.add(message.value)
        if len(handled) == settings.retry_messages - failing_total and not first_pass_s:
            first_pass_s.append(time.monotonic() - started)
        if len(handled) == settings.retry_messages:
            done.set()

    # A group's first nack creates its retry topic (and the topic's delay topic): a first use, timed
    # apart, so that the run's rate is that of retries, not of two topic creations.
    opened = time.monotonic()
    if failing:
        for lane in (DELAY_LANE, retry_lane("bench")):
            open_companion(topic, lane, home)
    companions_open_s = time.monotonic() - opened
    load = _load()
    try:
        with Consumer(topic, group="bench", connection=home, from_beginning=True) as consumer:
            started = time.monotonic()
            thread = threading.Thread(target=consumer.run, args=(handler, done), daemon=True)
            thread.start()
            if not done.wait(settings.drain_s_max):
                raise RequestTimedOut(f"{len(handled)} of {settings.retry_messages} handled: the run is not a result")
            elapsed = time.monotonic() - started
            thread.join(30)
    finally:
        delete_topic(topic, home)
    return {"repetition": repetition, "handler": "fails a share once" if failing else "never fails",
            "load_average_1m_before": load, "messages": settings.retry_messages, "failed_once": failed[0],
            "companions_open_s": round(companions_open_s, 3),
            "seconds": round(elapsed, 3), "messages_per_s": round(settings.retry_messages / elapsed, 1),
            # Until every message that does not fail was handled: the rate of the flow the retries run beside.
            "first_pass_s": round(first_pass_s[0], 3) if first_pass_s else None,
            "first_pass_messages_per_s": round((settings.retry_messages - failing_total) / first_pass_s[0], 1)
            if first_pass_s else None}
