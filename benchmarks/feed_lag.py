"""``mafka4 bench feed-lag``: do the read nodes' feed streams keep up with a saturated producer?

For each VP count of ``virtual_partitions`` (default 8 and 256), on the running cluster (two
write nodes for RF 2, two read nodes for RR 2):

1. a fresh mafka4-mode topic (``partitions`` physical partitions of RF ``replication_factor``,
   ``read_replicas`` per VP), used once some read node feeds every partition;
2. one ``Producer`` thread sends keyless ``message_bytes`` messages (acks=all, ``linger_ms``) for
   ``duration_s`` as fast as the producer takes them: no pacing, ``send`` blocks only while the
   producer's buffer is full;
3. every ``sample_interval_s``, per physical partition, the leader's high watermark
   (``list_offsets``) and the smallest ``next_offset`` of the partition's feed streams over the
   read nodes running one (``ReadNode.describe(topic)``): the feed lag of ``benchmarks.lag``, in
   records and in ms. Samples are taken until the producer's last message is acknowledged;
4. the drain: seconds from that acknowledgement until the lag is 0 on every partition (at most
   ``drain_s_max``; longer: ``drain_s`` is None).

Per VP count the report (``results/bench_feed_lag.json``) holds the producer's msgs/s, the lag's
max, p50, p99 and final value (the last sample while producing) in records and ms, the p99 of
each half of the run, the drain seconds, ``bounded`` (``benchmarks.lag``), each node's feed stream
counters at the end, and the load average at the start and the end. ``quiet`` (``mafka4.bench.usage``)
judges the start only: a saturated producer loads the 2 cores by design, so the load at the end
says nothing about what else ran. Before each count the run waits (at most ``quiet_wait_s_max``)
for the load left by the previous count to fall. Each topic is deleted after its run, so the next
count runs alone.

Sampling is not free: each sample asks every read node to ``describe`` the topic, VPs included
(at 256 VPs and two samples a second, a small load on the nodes measured).
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

from benchmarks.lag import (FeedLagBenchSettings, FeedLagTracker, LagSample, drained, fed_offset, halves_p99_records,
                            is_bounded, lag_figures)
from mafka4.bench.process_usage import sample_process, wait_until_quiet
from mafka4.bench.read_nodes import running_read_nodes
from mafka4.bench.usage import ProcessSample, cpu_ns_between, is_quiet
from mafka4.client.admin import Admin
from mafka4.client.producer import Producer
from mafka4.limits import ReadMode
from mafka4.physical.handles import replica_handle
from mafka4.runtime.connect import Connection, connect

CALL_TIMEOUT_S = 30
CLOSE_TIMEOUT_S = 30
PAYLOAD_POOL_SIZE = 64  # distinct payloads, so batches do not compress to one repeated value
FEED_COUNTERS = ("rounds", "records_fed", "resumes", "errors")


def _ticks(interval_s: float, deadline: float):
    """Yield every ``interval_s`` (monotonic) until ``deadline``; a tick missed while busy is skipped."""
    tick = time.monotonic()
    while tick < deadline:
        time.sleep(max(0.0, tick - time.monotonic()))
        yield
        tick = max(tick + interval_s, time.monotonic())


class _SaturatedProducer:
    """One thread that sends as fast as the producer takes messages, until asked to stop."""

    def __init__(self, connection: Connection, topic: str, settings: FeedLagBenchSettings):
        self._producer = Producer(topic, connection=connection, acks="all", linger_ms=settings.linger_ms)
        self._payloads = [os.urandom(settings.message_bytes) for _ in range(PAYLOAD_POOL_SIZE)]
        self._message_bytes = settings.message_bytes
        self._flush_s_max = settings.flush_s_max
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.sent = 0
        self.failed = 0
        self.first_error: BaseException | None = None
        self.flushed = False
        self.started = time.monotonic()
        self.finished: float | None = None  # when the last message was answered
        self._thread = threading.Thread(target=self._run, name="bench-feed-lag-producer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self._producer.send(self._payloads[self.sent % PAYLOAD_POOL_SIZE]).add_callback(self._on_done)
                self.sent += 1
        except Exception as error:  # recorded: the report says the producer failed, it does not hide it
            self._record_failure(error)
        self.flushed = self._producer.flush(self._flush_s_max)
        self.finished = time.monotonic()
        self._producer.close(CLOSE_TIMEOUT_S)

    def _on_done(self, metadata, error) -> None:
        if error is not None:
            self._record_failure(error)

    def _record_failure(self, error: BaseException) -> None:
        with self._lock:
            self.failed += 1
            self.first_error = self.first_error or error

    def stop_sending(self) -> None:
        self._stop.set()

    def join(self) -> None:
        self._stop.set()
        self._thread.join(timeout=self._flush_s_max + CLOSE_TIMEOUT_S)

    def figures(self) -> dict:
        elapsed_s = (time.monotonic() if self.finished is None else self.finished) - self.started
        acknowledged = self.sent - self.failed
        return {"messages": self.sent, "failed": self.failed, "flushed": self.flushed, "elapsed_s": round(elapsed_s, 3),
                "msgs_per_s": round(acknowledged / elapsed_s),
                "mb_per_s": round(acknowledged * self._message_bytes / elapsed_s / 1e6, 2),
                "first_error": None if self.first_error is None else str(self.first_error)}


class _LagSampler:
    """Reads the leaders' HWs and the read nodes' feed streams of one topic, all calls at once."""

    def __init__(self, admin: Admin, topic: str, read_nodes: dict[str, object]):
        self._topic = topic
        self._leaders = [replica_handle(admin.cluster, topic, state.partition, state.leader)
                         for state in admin.topic_metadata(topic).partitions]
        assert all(leader is not None for leader in self._leaders), f"a partition leader of {topic} is not running"
        self._read_nodes = read_nodes
        self.feeds: dict[str, dict] = {}  # the last answer: node -> partition -> feed stream description

    def sample(self) -> tuple[int, list[int], list[int | None]]:
        """(monotonic ns, HW per partition, fed offset per partition)."""
        at_ns = time.monotonic_ns()
        offsets = [leader.list_offsets.remote() for leader in self._leaders]
        described = [node.describe.remote(self._topic) for node in self._read_nodes.values()]
        high_watermarks = [high_watermark for _, high_watermark in ray.get(offsets, timeout=CALL_TIMEOUT_S)]
        answers = ray.get(described, timeout=CALL_TIMEOUT_S)
        self.feeds = {node: answer["feeds"].get(self._topic, {}) for node, answer in zip(self._read_nodes, answers)}
        fed = [fed_offset(feeds[partition]["next_offset"] for feeds in self.feeds.values() if partition in feeds)
               for partition in range(len(self._leaders))]
        return at_ns, high_watermarks, fed

    def counters(self) -> dict[str, dict[int, dict]]:
        return {node: {partition: {name: feed[name] for name in FEED_COUNTERS} for partition, feed in feeds.items()}
                for node, feeds in self.feeds.items()}


def _wait_until_fed(sampler: _LagSampler, settings: FeedLagBenchSettings, topic: str) -> None:
    for _ in _ticks(settings.sample_interval_s, time.monotonic() + settings.ready_s_max):
        _, high_watermarks, fed = sampler.sample()
        if drained(high_watermarks, fed):
            return
    raise TimeoutError(f"bench feed-lag: no read node fed every partition of {topic} within {settings.ready_s_max} s; "
                       f"see <home>/controller.log")


def _measure(producer: _SaturatedProducer, sampler: _LagSampler, settings: FeedLagBenchSettings
             ) -> tuple[list[LagSample], int, float | None]:
    """Samples while producing, the samples without a known fed offset, and the drain seconds."""
    tracker = FeedLagTracker(settings.partitions, settings.samples_max)
    producing: list[LagSample] = []
    unknown = 0

    def observe() -> tuple[list[int], list[int | None]]:
        nonlocal unknown
        at_ns, high_watermarks, fed = sampler.sample()
        lag = tracker.observe(at_ns, high_watermarks, fed)
        if lag is None:
            unknown += 1
        elif producer.finished is None:
            producing.append(lag)
        return high_watermarks, fed

    for _ in _ticks(settings.sample_interval_s, producer.started + settings.duration_s):
        observe()
    producer.stop_sending()
    for _ in _ticks(settings.sample_interval_s, time.monotonic() + settings.flush_s_max):
        if producer.finished is not None:
            break
        observe()
    producer.join()
    if producer.finished is None:
        return producing, unknown, None
    for _ in _ticks(settings.sample_interval_s, producer.finished + settings.drain_s_max):
        if drained(*observe()):
            return producing, unknown, round(time.monotonic() - producer.finished, 3)
    return producing, unknown, None


def run_one_vp_count(connection: Connection, admin: Admin, read_nodes: dict[str, object], virtual_partitions: int,
                 settings: FeedLagBenchSettings) -> dict:
    """One VP count: a fresh topic, a saturated producer, the lag while it produces and the drain after."""
    topic = f"bench-feedlag-{secrets.token_hex(3)}"
    admin.create_topic(topic, partitions=settings.partitions, replication_factor=settings.replication_factor,
                       virtual_partitions=virtual_partitions, read_replicas=settings.read_replicas, read_mode=ReadMode.MAFKA4)
    producer = None
    try:
        sampler = _LagSampler(admin, topic, read_nodes)
        _wait_until_fed(sampler, settings, topic)
        load_start = wait_until_quiet(settings.quiet_wait_s_max)
        fed_before, cpu_before = _records_fed(sampler.counters()), _read_node_samples(read_nodes, topic)
        producer = _SaturatedProducer(connection, topic, settings)
        producing, unknown, drain_s = _measure(producer, sampler, settings)
        read_node_cpu = _read_node_cpu(cpu_before, _read_node_samples(read_nodes, topic),
                                       (_records_fed(sampler.counters()) - fed_before) * settings.message_bytes)
        load_end = os.getloadavg()[0]
    finally:
        if producer is not None:
            producer.join()
        admin.delete_topic(topic)
    return {
        "virtual_partitions": virtual_partitions, "topic": topic, "producer": producer.figures(),
        "lag": lag_figures(producing), "lag_p99_records_halves": halves_p99_records(producing),
        "samples_without_fed_offset": unknown, "drain_s": drain_s, "bounded": is_bounded(producing, drain_s),
        "feeds_at_end": sampler.counters(), "read_node_cpu": read_node_cpu,
        "load_average_1m": [round(load_start, 2), round(load_end, 2)], "quiet": is_quiet([load_start]),
    }


def _records_fed(counters: dict[str, dict[int, dict]]) -> int:
    """Records the topic's feed streams appended, summed over the read nodes and partitions."""
    return sum(feed["records_fed"] for feeds in counters.values() for feed in feeds.values())


def _read_node_samples(read_nodes: dict[str, object], topic: str) -> dict[str, ProcessSample]:
    answers = ray.get([node.describe.remote(topic) for node in read_nodes.values()], timeout=CALL_TIMEOUT_S)
    return {name: sample_process(answer["pid"]) for name, answer in zip(read_nodes, answers)}


def _read_node_cpu(before: dict[str, ProcessSample], after: dict[str, ProcessSample], fed_bytes: int) -> dict:
    """The read nodes' CPU from the producer's start to the drain's end, and per MB fed (the
    records the feed streams appended, at the message size: what the split's cost is measured by)."""
    cpu_s = {name: cpu_ns_between(before[name].thread_cpu_ns, after[name].thread_cpu_ns) / 1e9 for name in after}
    total_s = sum(cpu_s.values())
    fed_mb = fed_bytes / 1e6
    return {"cpu_s": {name: round(value, 3) for name, value in cpu_s.items()}, "cpu_s_total": round(total_s, 3),
            "fed_mb": round(fed_mb, 3), "cpu_ms_per_fed_mb": round(1000 * total_s / fed_mb, 3) if fed_mb else None}


def _summary(run: dict) -> dict:
    lag = run["lag"]
    records, ms = lag["records"] or {}, lag["ms"] or {}
    return {"msgs_per_s": run["producer"]["msgs_per_s"], "lag_records_p99": records.get("p99"),
            "lag_records_max": records.get("max"), "lag_ms_p99": ms.get("p99"), "lag_ms_max": ms.get("max"),
            "drain_s": run["drain_s"], "bounded": run["bounded"], "quiet": run["quiet"]}


def run_feed_lag_bench(settings: FeedLagBenchSettings, output_path: str) -> dict:
    connection = connect()
    admin = Admin(connection)
    load_start = os.getloadavg()[0]
    read_nodes = running_read_nodes(connection, settings.read_replicas, "feed-lag")
    runs = [run_one_vp_count(connection, admin, read_nodes, count, settings) for count in settings.virtual_partitions]
    report = {
        "settings": asdict(settings), "read_nodes": list(read_nodes), "runs": runs,
        "summary": {str(run["virtual_partitions"]): _summary(run) for run in runs},
        # A lag in ms is known to within one sampling interval (benchmarks.lag).
        "lag_ms_resolution_ms": settings.sample_interval_s * 1000,
        "cpu_count": os.cpu_count(), "load_average_1m": [round(load_start, 2), round(os.getloadavg()[0], 2)],
    }
    Path(output_path).parent.mkdir(parents=True, exist_ok=True)
    Path(output_path).write_text(json.dumps(report, indent=2))
    return report
