"""``mafka4 bench produce``: write throughput, latency and memory, against the transport limit.

In one run, on one running cluster:

1. **producer**: the public ``Producer`` sends ``messages`` messages of ``message_bytes`` to a
   fresh topic as fast as it can: msgs/s and MB/s. Its latencies mostly measure time queued
   in the full buffer, so latency is measured in a second, **paced** run at a fixed rate
   (``paced_msgs_per_s``) below saturation: per-message produce latency, send() to ack.
   Each message's latency is taken by a callback (``send(callback=)``), which costs the
   saturated run throughput. The callback is one function per message (its index a default
   argument: one object the garbage collector tracks, as Kafka's perf test makes one
   ``PerfCallback`` per message); a closure made by a factory is three (function, cell, cell
   tuple), and with that many alive the collector took a quarter of the run instead of a
   sixth (see the README's note on callbacks). A third run, **producer_no_callbacks** (first codec only), sends
   and flushes without callbacks, as a pipelined client does (``redis-benchmark -P``, XADD
   pipelines): what the client can push when the caller does not wait on each message. A fourth,
   **producer_send_many** (first codec only), sends the same messages in ``Producer.send_many``
   calls of a batch's worth each, one callback per call: the Producer without its per-message
   Python (RocketMQ's batch send).
   The first two runs are made once per codec of ``compression``, in the order given, into the same
   topic; each records the **bytes written** per message: what the leader logs grew by,
   over the messages sent, next to the values' own bytes (``bench.written_bytes``). The
   values are random bytes or JSON events (``payload``, ``bench.payloads``), the same values
   for every codec.
2. **raw_leaders**: the same number of messages, pre-encoded into batches of the size the
   producer builds (with the first codec), sent straight to the partition leaders over their
   streams (as the Producer sends) with the producer's in-flight window: the broker's cost
   without the client's.
3. **bare_actor**: exactly those batches sent the same way to ``BareSink``, an actor that only
   returns, as Ray calls: what Ray's transport allows here. **bare_stream**: the same over
   ``BareSink``'s stream (``transport.stream_calls``): what the stream the Producer uses allows.
   The summary gives the Producer's rate over each, side by side (``producer_vs_bare_ratio``,
   ``producer_vs_bare_stream_ratio``): the stream is the transport the Producer uses, so the
   second is its comparable ratio. A ratio above 1 means the Producer outran that bare run: the
   bare actor (or stream) is then no ceiling, only another way of sending the same batches
   (``bare_runs_are_ceilings`` says whether both ratios are at most 1).
4. **memory**: RSS of each partition replica actor, and the peak RSS of a producer process
   whose cluster stops acknowledging (a follower killed under min_insync_replicas=2).

Every Producer run also reports the collections its own process ran meanwhile (``driver_gc``,
``bench.gc_pauses``): a full one of this driver took 100-150 ms here, and one falling inside the
paced run stalls every message then in flight (though the paced p99.9 of about 115 ms seen here
came with no full collection in the run). ``gc_freeze`` (``--gc-freeze``) takes the README's advice to
applications first, so that the runs measure without those pauses (``gc.freeze`` of what the
bench's start left; off by default, as an application that does not tune its process).

The report's ``producer`` and ``paced`` are the first codec's runs; ``compression_runs`` holds
every codec's, and the summary's ``compression_comparison`` sets them side by side. Ratios are
taken within the run, so a noisy machine affects both sides alike. The first codec's saturated
run is also the topic's first, so it alone pays for warming the replicas up.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import secrets
import subprocess
import sys
import time
from collections import deque
from dataclasses import asdict
from functools import lru_cache
from pathlib import Path

import numpy as np
import psutil
import ray

from mafka4.batch_frame import HEADER_BYTES
from mafka4.batch_payload import encode_batch
from mafka4.bench.bare import BareSink
from mafka4.bench.gc_pauses import GcPauses
from mafka4.bench.payloads import payload_bytes, payload_pool, pool_size
from mafka4.bench.produce_settings import ProduceBenchSettings
from mafka4.bench.stats import percentiles_ms
from mafka4.bench.written_bytes import LogTotals, bytes_written, compression_comparison
from mafka4.client.accumulator import RECORD_OVERHEAD_BYTES
from mafka4.client.admin import Admin
from mafka4.client.producer import Producer
from mafka4.client.sender import new_producer_id
from mafka4.collector import freeze_what_start_up_left
from mafka4.compression import Codec
from mafka4.limits import Acks, MiB, ReadMode
from mafka4.physical.handles import replica_handle
from mafka4.runtime.connect import Connection, connect
from mafka4.runtime.ray_cluster import node_resource
from mafka4.transport.stream_calls import StreamHandle, actor_stream

# With acks=0 a producer is answered before the leader appends: its logs may still be growing.
LOG_SETTLE_S_MAX = 30.0
LOG_SETTLE_POLL_S = 0.1


def bench_payloads(settings: ProduceBenchSettings) -> tuple[bytes, ...]:
    """The values every run of ``settings`` sends in turn (``bench.payloads``), made once per process."""
    return _pool(settings.payload, settings.message_bytes, pool_size(settings.message_bytes, settings.batch_bytes_max),
                 settings.payload_seed)


@lru_cache(maxsize=4)
def _pool(kind: str, message_bytes: int, count: int, seed: int) -> tuple[bytes, ...]:
    return tuple(payload_pool(kind, message_bytes, count, seed))


def _throughput(messages: int, values_bytes: int, elapsed_s: float) -> dict:
    return {"messages": messages, "elapsed_s": round(elapsed_s, 3), "msgs_per_s": round(messages / elapsed_s),
            "mb_per_s": round(values_bytes / elapsed_s / 1e6, 2), "payload_bytes": values_bytes}


PACE_STEP_S = 0.005  # the paced run sends a burst every 5 ms
# A callback-less run learns of failures only through flush's verdict; this bounds the wait
# (a run's messages are answered or fail within the producer's delivery_timeout_ms, 120 s).
FLUSH_TIMEOUT_S = 300


def producer_run(connection: Connection, topic: str, settings: ProduceBenchSettings, rate_msgs_per_s: int | None = None,
                 codec: Codec | None = None, callbacks: bool = True, many: bool = False) -> dict:
    """Send ``settings.messages`` (as fast as possible), or ``rate * paced_seconds`` at ``rate``, compressed
    with ``codec`` (by default the first of ``settings.codecs()``). With ``callbacks``, each message's
    send-to-ack latency is taken by a callback; without, the messages are sent and flushed, and
    there is no latency to report. With ``many`` (saturated only), they go in ``send_many`` calls of
    a batch's worth each (``messages_per_batch``), each with one callback."""
    codec = settings.codecs()[0] if codec is None else codec
    messages = settings.messages if rate_msgs_per_s is None else rate_msgs_per_s * settings.paced_seconds
    payloads = bench_payloads(settings)
    done_ns = np.zeros(messages, dtype=np.int64)
    sent_ns = np.zeros(messages, dtype=np.int64)
    errors = []

    producer = Producer(topic, connection=connection, acks=settings.acks, linger_ms=settings.linger_ms,
                        batch_bytes_max=settings.batch_bytes_max, in_flight_batches_max=settings.in_flight_batches_max,
                        compression=codec)
    pauses = GcPauses()
    with pauses:
        started = time.perf_counter()
        if many:
            _send_many_all(producer, messages, payloads, messages_per_batch(settings), errors)
        else:
            _send_all(producer, messages, payloads, rate_msgs_per_s, callbacks, sent_ns, done_ns, errors)
        flushed = producer.flush(FLUSH_TIMEOUT_S)
        elapsed = time.perf_counter() - started
    producer.close()
    assert flushed, f"benchmark produce: messages still unanswered after {FLUSH_TIMEOUT_S} s"
    assert not errors, f"benchmark produce failed: {errors[0]}"
    return {**_throughput(messages, payload_bytes(payloads, messages), elapsed), "compression": str(codec),
            "payload": settings.payload, "target_msgs_per_s": rate_msgs_per_s, "callbacks": callbacks and not many,
            "send_many_values": messages_per_batch(settings) if many else None,
            "latency_ms": percentiles_ms(done_ns - sent_ns) if callbacks and not many else None,
            "driver_gc": pauses.report(elapsed)}


def _send_all(producer: Producer, messages: int, payloads: tuple[bytes, ...], rate_msgs_per_s: int | None,
              callbacks: bool, sent_ns: np.ndarray, done_ns: np.ndarray, errors: list) -> None:
    """Send ``messages`` (at ``rate_msgs_per_s`` if given), each with a callback taking its latency if ``callbacks``."""
    started = time.perf_counter()
    for index in range(messages):
        if rate_msgs_per_s is not None and index % max(1, int(rate_msgs_per_s * PACE_STEP_S)) == 0:
            ahead_s = index / rate_msgs_per_s - (time.perf_counter() - started)
            if ahead_s > 0:
                time.sleep(ahead_s)
        if callbacks:
            sent_ns[index] = time.perf_counter_ns()

            def on_done(metadata, error, index=index):
                done_ns[index] = time.perf_counter_ns()
                if error is not None:
                    errors.append(error)
            producer.send(payloads[index % len(payloads)], callback=on_done)
        else:
            producer.send(payloads[index % len(payloads)])


def _send_many_all(producer: Producer, messages: int, payloads: tuple[bytes, ...], per_call: int, errors: list) -> None:
    """Send ``messages`` in ``send_many`` calls of ``per_call`` values, each call with one callback."""
    def on_done(sent, error):
        if error is not None:
            errors.append(error)
    for first in range(0, messages, per_call):
        producer.send_many(_values_from(payloads, first, min(per_call, messages - first)), callback=on_done)


def _values_from(payloads: tuple[bytes, ...], first: int, count: int) -> list[bytes]:
    """The values of messages ``first`` to ``first + count - 1`` (message i sends ``payloads[i % len]``),
    sliced as a caller holding its messages in a list passes them."""
    start = first % len(payloads)
    values = list(payloads[start:start + count])
    while len(values) < count:
        values.extend(payloads[:count - len(values)])
    return values


def messages_per_batch(settings: ProduceBenchSettings) -> int:
    """How many of the bench's messages fill one of the producer's batches."""
    return max(1, (settings.batch_bytes_max - HEADER_BYTES) // (settings.message_bytes + RECORD_OVERHEAD_BYTES))


def leader_log_totals(admin: Admin, topic: str) -> LogTotals:
    """The size and offsets of ``topic``'s leader logs, as each leader reports them."""
    handles = [replica_handle(admin.cluster, topic, state.partition, state.leader)
               for state in admin.topic_metadata(topic).partitions]
    return LogTotals.of(ray.get([handle.describe.remote() for handle in handles]))


def measured_run(connection: Connection, admin: Admin, topic: str, settings: ProduceBenchSettings, codec: Codec,
                 rate_msgs_per_s: int | None = None, callbacks: bool = True, many: bool = False) -> dict:
    """``producer_run``, and the bytes its messages added to the leader logs (``written_bytes.bytes_written``)."""
    before = leader_log_totals(admin, topic)
    run = producer_run(connection, topic, settings, rate_msgs_per_s, codec, callbacks, many)
    deadline = time.monotonic() + LOG_SETTLE_S_MAX
    after = leader_log_totals(admin, topic)
    while after.log_end_offset < before.log_end_offset + run["messages"] and time.monotonic() < deadline:
        time.sleep(LOG_SETTLE_POLL_S)
        after = leader_log_totals(admin, topic)
    return {**run, "bytes_written": bytes_written(before, after, run["messages"], run["payload_bytes"])}


def encoded_batches(settings: ProduceBenchSettings, codec: Codec | None = None) -> list[list[bytes]]:
    """Per partition, the batches a producer would build for this workload, compressed with ``codec`` (by
    default the first of ``settings.codecs()``)."""
    codec = settings.codecs()[0] if codec is None else codec
    per_batch = messages_per_batch(settings)
    payloads = bench_payloads(settings)
    batches: list[list[bytes]] = [[] for _ in range(settings.partitions)]
    sequences = [0] * settings.partitions
    producer_ids = [new_producer_id() for _ in range(settings.partitions)]
    now_ms = time.time_ns() // 1_000_000
    for number, first in enumerate(range(0, settings.messages, per_batch)):
        partition = number % settings.partitions
        count = min(per_batch, settings.messages - first)
        records = [(None, payloads[(first + i) % len(payloads)], now_ms, None) for i in range(count)]
        batches[partition].append(encode_batch(records, producer_ids[partition], sequences[partition], codec))
        sequences[partition] += count
    return batches


async def _drive(send, batches: list[bytes], window: int, latencies: list[int]) -> None:
    pending: deque = deque()
    for batch in batches:
        if len(pending) >= window:
            sent, future = pending.popleft()
            await future
            latencies.append(time.perf_counter_ns() - sent)
        pending.append((time.perf_counter_ns(), send(batch)))
    while pending:
        sent, future = pending.popleft()
        await future
        latencies.append(time.perf_counter_ns() - sent)


def raw_run(handles: list, batches: list[list[bytes]], settings: ProduceBenchSettings, over_stream: bool) -> dict:
    """Send ``batches[i]`` to ``handles[i]``'s ``produce`` with the producer's in-flight window, over
    each actor's stream (as the Producer sends) or as Ray calls."""
    latencies: list[int] = []
    acks = Acks.parse(settings.acks)  # the --acks string, as the replicas take it

    def ray_sender(handle):
        return lambda batch: asyncio.wrap_future(handle.produce.remote(batch, acks, 60_000).future())

    def stream_sender(stream: StreamHandle):
        return lambda batch: asyncio.ensure_future(stream.produce.remote(batch, acks, 60_000))

    async def main():
        streams = {id(h): actor_stream(h, "a bench target") for h in handles} if over_stream else {}
        senders = [stream_sender(streams[id(h)]) if over_stream else ray_sender(h) for h in handles]
        try:
            await asyncio.gather(*(_drive(send, b, settings.in_flight_batches_max, latencies)
                                   for send, b in zip(senders, batches)))
        finally:
            for stream in streams.values():
                stream.close()

    started = time.perf_counter()
    asyncio.run(main())
    elapsed = time.perf_counter() - started
    return {**_throughput(settings.messages, payload_bytes(bench_payloads(settings), settings.messages), elapsed),
            "batches": sum(len(b) for b in batches), "batch_latency_ms": percentiles_ms(latencies)}


def replica_rss_bytes(admin: Admin, topic: str) -> list[int]:
    rss = []
    for state in admin.topic_metadata(topic).partitions:
        for replica in state.replicas:
            handle = replica_handle(admin.cluster, topic, state.partition, replica)
            pid = ray.get(handle.describe.remote())["pid"]
            rss.append(psutil.Process(pid).memory_info().rss)
    return rss


def stalled_producer_run(admin: Admin, settings: ProduceBenchSettings) -> dict:
    """Peak RSS of a producer process whose partition stops acknowledging."""
    topic = f"bench-stall-{secrets.token_hex(3)}"
    metadata = admin.create_topic(topic, partitions=1, replication_factor=2, min_insync_replicas=2, read_mode=ReadMode.MAFKA3)
    try:
        follower = metadata.partitions[0].replicas[1]
        ray.kill(replica_handle(admin.cluster, topic, 0, follower))
        command = [sys.executable, "-m", "mafka4.bench.stalled_producer", topic,
                   "--seconds", str(settings.stalled_seconds), "--message-bytes", str(settings.message_bytes),
                   "--buffer-bytes-max", str(settings.stalled_buffer_bytes_max)]
        finished = subprocess.run(command, capture_output=True, text=True, check=True, timeout=settings.stalled_seconds + 120)
        return json.loads(finished.stdout.strip().splitlines()[-1])
    finally:
        admin.delete_topic(topic)


def produce_summary(settings: ProduceBenchSettings, runs: list[dict], no_callbacks: dict, send_many: dict,
                    raw_leaders: dict, bare_actor: dict, bare_stream: dict, memory: dict) -> dict:
    """The figures the command prints: the first codec's runs, and each against the transport limits beside them."""
    producer, paced = runs[0]["producer"], runs[0]["paced"]
    over_bare = round(producer["msgs_per_s"] / bare_actor["msgs_per_s"], 3)
    over_bare_stream = round(producer["msgs_per_s"] / bare_stream["msgs_per_s"], 3)
    return {
        "producer_msgs_per_s": producer["msgs_per_s"], "producer_mb_per_s": producer["mb_per_s"],
        "producer_saturated_latency_ms": producer["latency_ms"],
        "paced_msgs_per_s": paced["msgs_per_s"], "paced_latency_ms": paced["latency_ms"],
        "paced_driver_gc_longest_pause_ms": paced["driver_gc"]["longest_pause_ms"],
        "driver_gc_frozen": settings.gc_freeze,
        "raw_leaders_msgs_per_s": raw_leaders["msgs_per_s"], "bare_actor_msgs_per_s": bare_actor["msgs_per_s"],
        "bare_stream_msgs_per_s": bare_stream["msgs_per_s"],
        "producer_vs_bare_ratio": over_bare,
        "producer_vs_bare_stream_ratio": over_bare_stream,
        # Above 1, a ratio says the Producer outran that bare run: it is then no ceiling.
        "bare_runs_are_ceilings": over_bare <= 1 and over_bare_stream <= 1,
        "producer_no_callbacks_msgs_per_s": no_callbacks["msgs_per_s"],
        "producer_no_callbacks_vs_bare_ratio": round(no_callbacks["msgs_per_s"] / bare_actor["msgs_per_s"], 3),
        "producer_send_many_msgs_per_s": send_many["msgs_per_s"],
        "producer_send_many_vs_bare_ratio": round(send_many["msgs_per_s"] / bare_actor["msgs_per_s"], 3),
        "producer_send_many_vs_raw_leaders_ratio": round(send_many["msgs_per_s"] / raw_leaders["msgs_per_s"], 3),
        "raw_leaders_vs_bare_ratio": round(raw_leaders["msgs_per_s"] / bare_actor["msgs_per_s"], 3),
        "memory": memory,
        "compression": producer["compression"], "payload": settings.payload,
        "bytes_written_per_message": producer["bytes_written"]["bytes_written_per_message"],
        "payload_bytes_per_message": producer["bytes_written"]["payload_bytes_per_message"],
        "written_vs_payload_ratio": producer["bytes_written"]["written_vs_payload_ratio"],
        "compression_comparison": compression_comparison(runs),
    }


def run_produce_bench(settings: ProduceBenchSettings, output_path: str) -> dict:
    codecs = settings.codecs()  # before connecting: a bad $MAFKA4_COMPRESSION is refused at once
    connection = connect()
    admin = Admin(connection)
    topic = f"bench-{secrets.token_hex(3)}"
    # ReadMode.MAFKA3: no read path, so only the write path is measured.
    metadata = admin.create_topic(topic, partitions=settings.partitions, replication_factor=settings.replication_factor,
                                  read_mode=ReadMode.MAFKA3, segment_bytes_max=settings.segment_bytes_max)
    bare = BareSink.options(num_cpus=0, resources={node_resource(metadata.partitions[0].leader): 1}).remote()
    if settings.gc_freeze:
        freeze_what_start_up_left()
    try:
        runs = [{"compression": str(codec), "payload": settings.payload,
                 "producer": measured_run(connection, admin, topic, settings, codec),
                 "paced": measured_run(connection, admin, topic, settings, codec, settings.paced_msgs_per_s)}
                for codec in codecs]
        producer, paced = runs[0]["producer"], runs[0]["paced"]
        no_callbacks = measured_run(connection, admin, topic, settings, codecs[0], callbacks=False)
        send_many = measured_run(connection, admin, topic, settings, codecs[0], many=True)
        batches = encoded_batches(settings, codecs[0])
        leaders = [replica_handle(admin.cluster, topic, s.partition, s.leader) for s in metadata.partitions]
        raw_leaders = raw_run(leaders, batches, settings, over_stream=True)
        ray.get(bare.ping.remote())
        bare_actor = raw_run([bare] * settings.partitions, batches, settings, over_stream=False)
        bare_stream = raw_run([bare] * settings.partitions, batches, settings, over_stream=True)
        memory = {"partition_actor_rss_mb": [round(b / MiB, 1) for b in replica_rss_bytes(admin, topic)]}
    finally:
        if settings.gc_freeze:
            gc.unfreeze()  # the process may go on (a test's): what the bench froze is collected again
        ray.kill(bare)
        admin.delete_topic(topic)
    if settings.stalled_producer:
        memory["stalled_producer"] = stalled_producer_run(admin, settings)
    summary = produce_summary(settings, runs, no_callbacks, send_many, raw_leaders, bare_actor, bare_stream, memory)
    report = {"settings": asdict(settings), "producer": producer, "paced": paced,
              "producer_no_callbacks": no_callbacks, "producer_send_many": send_many, "raw_leaders": raw_leaders,
              "bare_actor": bare_actor, "bare_stream": bare_stream, "compression_runs": runs, "summary": summary, "cpu_count": os.cpu_count()}
    Path(output_path).parent.mkdir(parents=True, exist_ok=True)
    Path(output_path).write_text(json.dumps(report, indent=2))
    return report
