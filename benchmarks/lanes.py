"""``mafka4 bench lanes``: what lanes cost, Mafka4's queue merging beside Mafka3's topic per lane (issue 40).

Against the running local cluster (``mafka4 up --write-nodes 2 --read-nodes 1`` or more), three phases:

1. **produce**: for every repetition, lane count and mode (the modes alternating, A B A B), a fresh
   topic of ``partitions`` physical partitions; ``lanes`` lanes are opened first (a Mafka4 lane is
   one split epoch and one VP; a Mafka3 lane is a topic of its own with ``partitions`` partitions,
   created with the topic's config: ``open_lanes_s``), then one Producer sends keyed messages at
   ``rate_msgs_s`` for ``produce_s``, round robin over the lanes, acks=all; each message's send ->
   acknowledgement gives p50 / p99 / p99.9. The run records the physical partitions and replica
   actors the lanes took (from the topics' configs) and the active VPs. Mafka3 runs stop at
   ``mafka3_lanes_max`` lanes: past it the lanes' actors would not fit this machine quietly (the
   report says how many it would take). Mafka3's producer sends a lane through a producer of its
   topic (``Producer``'s mafka3 path): a sender thread per lane, which a multi-topic client would
   not need; the report says so.
2. **idle cost**: one Mafka4 topic; the read nodes' RSS and CPU (``bench.process_usage``) over
   ``window_s``, then ``idle_lanes`` lanes opened (timed), then the same window again with nothing
   produced: RSS and idle cores per idle lane.
3. **takeover**: a trunk member of a group reads the trunk and, by fallback, lane ``x`` while a
   producer sends to both at ``takeover_rate_msgs_s``; after ``warmup_s`` a lane member of ``x``
   joins. Measured: join -> the lane member's first message, and the trunk member's longest gap
   between trunk messages in the ``gap_window_s`` after the join beside the same window before it
   (its background gaps). ``takeovers`` trials, each on a topic and group of its own.

Every run records the 1-minute load average before it: a figure taken above 2.0 is not a result
(the project's rule), and the report says so. Topics are deleted after each run.
"""

from __future__ import annotations

import json
import os
import secrets
import threading
import time
from dataclasses import asdict
from pathlib import Path

from benchmarks.lanes_settings import LanesBenchSettings, largest_gap_ms, latency_figures, produce_ratios
from mafka4.bench.process_usage import measure_window
from mafka4.client.cluster_metadata import list_topics
from mafka4.client.consumer import Consumer
from mafka4.client.producer import Producer
from mafka4.client.topic_admin import create_topic, delete_topic, describe_topic, open_lane
from mafka4.errors import RequestTimedOut
from mafka4.runtime.environment import mafka4_home


def run_lanes_bench(settings: LanesBenchSettings, output_path: str) -> dict:
    home = mafka4_home()
    report: dict = {"settings": asdict(settings), "cpu_count": os.cpu_count(), "produce": [], "idle": None,
                    "takeover": []}
    for repetition, mode, lanes in settings.runs():
        report["produce"].append(_produce_run(settings, home, mode, lanes, repetition))
        _write(output_path, report)
    report["idle"] = _idle_cost(settings, home)
    _write(output_path, report)
    for trial in range(settings.takeovers):
        report["takeover"].append(_takeover(settings, home, trial))
        _write(output_path, report)
    return _write(output_path, report)


def _write(output_path: str, report: dict) -> dict:
    report["summary"] = {"produce_ratios": produce_ratios(report["produce"]),
                         "mafka3_unrun": _unrun(report)}
    loads = [run["load_average_1m_before"] for run in report["produce"] + report["takeover"]]
    if report["idle"]:
        loads += report["idle"]["windows"]["before"]["load_average_1m"] + report["idle"]["windows"]["after"]["load_average_1m"]
    report["quiet"] = all(load <= 2.0 for load in loads)
    Path(output_path).parent.mkdir(parents=True, exist_ok=True)
    Path(output_path).write_text(json.dumps(report, indent=2))
    return report


def _unrun(report: dict) -> list[dict]:
    """The Mafka3 lane counts not run, with the partitions and actors they would have taken."""
    settings = report["settings"]
    return [{"lanes": lanes, "physical_partitions": settings["partitions"] * lanes,
             "replica_actors": settings["partitions"] * lanes * settings["replication_factor"]}
            for lanes in settings["lane_counts"] if lanes > settings["mafka3_lanes_max"]]


# --- produce -----------------------------------------------------------------------------------


def _lanes_of(count: int) -> list[str]:
    return [f"lane-{index}" for index in range(count)]


def _produce_run(settings: LanesBenchSettings, home: Path, mode: str, lanes: int, repetition: int) -> dict:
    topic = f"bench-lanes-{secrets.token_hex(3)}"
    create_topic(topic, partitions=settings.partitions, replication_factor=settings.replication_factor,
                 read_mode=mode, where=home)
    try:
        started = time.monotonic()
        for lane in _lanes_of(lanes):
            open_lane(topic, lane, where=home)
        open_lanes_s = time.monotonic() - started
        shape = _shape(topic, home)
        time.sleep(settings.settle_s)
        load_before = os.getloadavg()[0]
        latencies = _paced(topic, home, settings, _lanes_of(lanes), settings.rate_msgs_s, settings.produce_s)
    finally:
        _delete_with_lanes(topic, home)
    return {"mode": mode, "lanes": lanes, "repetition": repetition, "open_lanes_s": round(open_lanes_s, 3),
            **shape, "load_average_1m_before": round(load_before, 2),
            "load_average_1m_after": round(os.getloadavg()[0], 2), "latency": latency_figures(latencies)}


def _shape(topic: str, home: Path) -> dict:
    """The physical partitions and replica actors of ``topic`` and its lane topics, and its active VPs."""
    partitions = actors = vps = 0
    for name in [topic, *(name for name in list_topics(home) if name.startswith(f"{topic}."))]:
        described = describe_topic(name, home)
        config = described["config"]
        partitions += config.partitions
        actors += config.partitions * config.replication_factor
        vps += sum(1 for row in described["virtual_partitions"] if row["active"])
    return {"physical_partitions": partitions, "replica_actors": actors, "active_vps": vps}


def _delete_with_lanes(topic: str, home: Path) -> None:
    for name in [topic, *(name for name in list_topics(home) if name.startswith(f"{topic}."))]:
        delete_topic(name, where=home)


def _paced(topic: str, home: Path, settings: LanesBenchSettings, lanes: list[str], rate: int,
           seconds: float) -> list[float]:
    """Send ``rate`` msgs/s for ``seconds`` round robin over ``lanes``; each message's send -> ack in ms."""
    latencies: list[float] = []
    failures: list[str] = []
    lock = threading.Lock()
    total = int(rate * seconds)
    done = threading.Event()

    def on_ack(sent_s: float):
        def callback(_metadata, error) -> None:
            with lock:
                latencies.append((time.perf_counter() - sent_s) * 1000)
                if error is not None:
                    failures.append(str(error))
                if len(latencies) == total:
                    done.set()
        return callback

    padding = b"x" * max(settings.message_bytes - 16, 0)
    with Producer(topic, connection=home, acks="all", linger_ms=settings.linger_ms) as producer:
        start = time.perf_counter()
        for index in range(total):
            due = start + index / rate
            pause = due - time.perf_counter()
            if pause > 0:
                time.sleep(pause)
            key = b"key-%d" % (index % settings.keys)
            producer.send(b"%d:" % index + padding, key=key, lane=lanes[index % len(lanes)],
                          callback=on_ack(time.perf_counter()))
        producer.flush()
    if not done.wait(settings.drain_s_max) or failures:
        raise RequestTimedOut(f"{len(latencies)} of {total} messages acknowledged, {len(failures)} failed "
                              f"({failures[:1]}): the run is not a result")
    return latencies


# --- idle cost ----------------------------------------------------------------------------------


def _idle_cost(settings: LanesBenchSettings, home: Path) -> dict:
    from mafka4.bench.read_nodes import running_read_nodes
    from mafka4.runtime.connect import connect
    import ray

    connection = connect()
    handles = running_read_nodes(connection, 1, "lanes")
    topic = f"bench-lanes-idle-{secrets.token_hex(3)}"
    create_topic(topic, partitions=settings.partitions, replication_factor=settings.replication_factor,
                 read_mode="mafka4", where=home)
    try:
        pids = {node: ray.get(handle.describe.remote(topic), timeout=60)["pid"] for node, handle in handles.items()}
        time.sleep(settings.settle_s)
        before = measure_window(pids, settings.window_s)
        started = time.monotonic()
        for lane in _lanes_of(settings.idle_lanes):
            open_lane(topic, lane, where=home)
        open_s = time.monotonic() - started
        time.sleep(settings.settle_s)
        after = measure_window(pids, settings.window_s)
        vps = sum(1 for row in describe_topic(topic, home)["virtual_partitions"] if row["active"])
    finally:
        delete_topic(topic, where=home)
    per_node = {}
    for node in pids:
        rss_delta = after["processes"][node]["rss_bytes"] - before["processes"][node]["rss_bytes"]
        cores_delta = after["processes"][node]["cores"] - before["processes"][node]["cores"]
        per_node[node] = {"rss_bytes_per_lane": round(rss_delta / settings.idle_lanes, 1),
                          "idle_cores_per_lane": round(cores_delta / settings.idle_lanes, 9),
                          "idle_cores_before": before["processes"][node]["cores"],
                          "idle_cores_after": after["processes"][node]["cores"]}
    return {"lanes": settings.idle_lanes, "open_s": round(open_s, 3), "open_ms_per_lane": round(open_s * 1000 /
            settings.idle_lanes, 2), "active_vps": vps, "nodes": per_node, "windows": {"before": before, "after": after}}


# --- takeover -----------------------------------------------------------------------------------


class _Reader:
    """A group member polling in a thread; the arrival time of every message, by lane."""

    def __init__(self, topic: str, home: Path, group: str, lane: str | None):
        self.arrivals: dict[str, list[float]] = {}
        self._consumer = Consumer(topic, group=group, connection=home, from_beginning=True, lane=lane)
        self._stop = threading.Event()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                for message in self._consumer.poll(timeout_ms=100):
                    self.arrivals.setdefault(message.lane, []).append(time.monotonic())
        except BaseException as error:
            self.error = error
        finally:
            self._consumer.close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=60)
        if self.error is not None:
            raise self.error


def _takeover(settings: LanesBenchSettings, home: Path, trial: int) -> dict:
    topic, group = f"bench-lanes-take-{secrets.token_hex(3)}", f"bench-g-{secrets.token_hex(3)}"
    create_topic(topic, partitions=settings.partitions, replication_factor=settings.replication_factor,
                 read_mode="mafka4", where=home)
    open_lane(topic, "x", where=home)
    time.sleep(settings.settle_s)
    load_before = os.getloadavg()[0]
    trunk = _Reader(topic, home, group, None)
    stop = threading.Event()
    sender = threading.Thread(target=_send_until, args=(topic, home, settings, stop), daemon=True)
    sender.start()
    lane_member = None
    try:
        time.sleep(settings.warmup_s)
        join_s = time.monotonic()
        lane_member = _Reader(topic, home, group, "x")
        deadline = join_s + settings.drain_s_max
        while not lane_member.arrivals.get("x") and time.monotonic() < deadline:
            time.sleep(0.01)
        first_s = min(lane_member.arrivals.get("x", [float("nan")]))
        time.sleep(max(0.0, join_s + settings.gap_window_s - time.monotonic()) + 0.5)
    finally:
        stop.set()
        sender.join(timeout=60)
        trunk.stop()
        if lane_member is not None:
            lane_member.stop()
        delete_topic(topic, where=home)
    trunk_times = trunk.arrivals.get("", [])
    window = settings.gap_window_s
    return {"trial": trial, "load_average_1m_before": round(load_before, 2),
            "load_average_1m_after": round(os.getloadavg()[0], 2),
            "join_to_first_message_ms": round((first_s - join_s) * 1000, 3),
            "trunk_largest_gap_after_join_ms": largest_gap_ms(trunk_times, join_s, join_s + window),
            "trunk_largest_gap_before_join_ms": largest_gap_ms(trunk_times, join_s - window, join_s),
            "trunk_read_lane_before_join": len(trunk.arrivals.get("x", [])),
            "lane_member_lanes": sorted(lane_member.arrivals) if lane_member else []}


def _send_until(topic: str, home: Path, settings: LanesBenchSettings, stop: threading.Event) -> None:
    rate = settings.takeover_rate_msgs_s
    with Producer(topic, connection=home, acks="all", linger_ms=settings.linger_ms) as producer:
        start, index = time.perf_counter(), 0
        while not stop.is_set():
            pause = start + index / rate - time.perf_counter()
            if pause > 0:
                time.sleep(pause)
            producer.send(b"%d" % index, key=b"key-%d" % (index % settings.keys), lane="x" if index % 2 else None)
            index += 1
