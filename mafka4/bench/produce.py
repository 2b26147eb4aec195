"""``mafka4 bench produce``: write throughput, latency and memory, against the transport limit.

In one run, on one running cluster:

1. **producer**: the public ``Producer`` sends ``messages`` messages of ``message_bytes`` to a
   fresh topic as fast as it can: msgs/s and MB/s. Its latencies mostly measure time queued
   in the full buffer, so latency is measured in a second, **paced** run at a fixed rate
   (``paced_msgs_per_s``) below saturation: per-message produce latency, send() to ack.
2. **raw_leaders**: the same number of messages, pre-encoded into batches of the size the
   producer builds, sent straight to the partition leaders with the producer's in-flight
   window: the broker's cost without the client's.
3. **bare_actor**: exactly those batches sent the same way to ``BareSink``, an actor that only
   returns: what Ray's transport allows here.
4. **memory**: RSS of each partition replica actor, and the peak RSS of a producer process
   whose cluster stops acknowledging (a follower killed under min_insync_replicas=2).

Ratios are taken within the run, so a noisy machine affects both sides alike.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import subprocess
import sys
import time
from collections import deque
from dataclasses import asdict
from pathlib import Path

import numpy as np
import psutil
import ray

from mafka4.bench.bare import BareSink
from mafka4.bench.produce_settings import ProduceBenchSettings
from mafka4.bench.stats import percentiles_ms
from mafka4.client.accumulator import RECORD_OVERHEAD_BYTES
from mafka4.client.admin import Admin
from mafka4.client.producer import Producer
from mafka4.client.sender import new_producer_id
from mafka4.limits import Acks, MiB, ReadMode
from mafka4.physical.handles import replica_handle
from mafka4.records import HEADER_BYTES, encode_batch
from mafka4.runtime.connect import Connection, connect
from mafka4.runtime.ray_cluster import node_resource

PAYLOAD_POOL_SIZE = 64  # distinct payloads, so batches do not compress to one repeated value


def _payloads(size: int) -> list[bytes]:
    return [os.urandom(size) for _ in range(PAYLOAD_POOL_SIZE)]


def _throughput(messages: int, message_bytes: int, elapsed_s: float) -> dict:
    return {"messages": messages, "elapsed_s": round(elapsed_s, 3),
            "msgs_per_s": round(messages / elapsed_s), "mb_per_s": round(messages * message_bytes / elapsed_s / 1e6, 2)}


PACE_STEP_S = 0.005  # the paced run sends a burst every 5 ms


def producer_run(connection: Connection, topic: str, settings: ProduceBenchSettings, rate_msgs_per_s: int | None = None) -> dict:
    """Send ``settings.messages`` (as fast as possible), or ``rate * paced_seconds`` at ``rate``."""
    messages = settings.messages if rate_msgs_per_s is None else rate_msgs_per_s * settings.paced_seconds
    payloads = _payloads(settings.message_bytes)
    done_ns = np.zeros(messages, dtype=np.int64)
    sent_ns = np.zeros(messages, dtype=np.int64)
    errors = []

    def on_done(index: int):
        def callback(metadata, error):
            done_ns[index] = time.perf_counter_ns()
            if error is not None:
                errors.append(error)
        return callback

    producer = Producer(topic, connection=connection, acks=settings.acks, linger_ms=settings.linger_ms,
                        batch_bytes_max=settings.batch_bytes_max, in_flight_batches_max=settings.in_flight_batches_max)
    started = time.perf_counter()
    for index in range(messages):
        if rate_msgs_per_s is not None and index % max(1, int(rate_msgs_per_s * PACE_STEP_S)) == 0:
            ahead_s = index / rate_msgs_per_s - (time.perf_counter() - started)
            if ahead_s > 0:
                time.sleep(ahead_s)
        sent_ns[index] = time.perf_counter_ns()
        producer.send(payloads[index % PAYLOAD_POOL_SIZE]).add_callback(on_done(index))
    producer.flush()
    elapsed = time.perf_counter() - started
    producer.close()
    assert not errors, f"benchmark produce failed: {errors[0]}"
    return {**_throughput(messages, settings.message_bytes, elapsed), "target_msgs_per_s": rate_msgs_per_s,
            "latency_ms": percentiles_ms(done_ns - sent_ns)}


def encoded_batches(settings: ProduceBenchSettings) -> list[list[bytes]]:
    """Per partition, the batches a producer would build for this workload."""
    per_batch = max(1, (settings.batch_bytes_max - HEADER_BYTES) // (settings.message_bytes + RECORD_OVERHEAD_BYTES))
    payloads = _payloads(settings.message_bytes)
    batches: list[list[bytes]] = [[] for _ in range(settings.partitions)]
    sequences = [0] * settings.partitions
    producer_ids = [new_producer_id() for _ in range(settings.partitions)]
    now_ms = time.time_ns() // 1_000_000
    for number, first in enumerate(range(0, settings.messages, per_batch)):
        partition = number % settings.partitions
        count = min(per_batch, settings.messages - first)
        records = [(None, payloads[(first + i) % PAYLOAD_POOL_SIZE], now_ms, None) for i in range(count)]
        batches[partition].append(encode_batch(records, producer_ids[partition], sequences[partition]))
        sequences[partition] += count
    return batches


async def _drive(handle, batches: list[bytes], acks: Acks, window: int, latencies: list[int]) -> None:
    pending: deque = deque()
    for batch in batches:
        if len(pending) >= window:
            sent, future = pending.popleft()
            await future
            latencies.append(time.perf_counter_ns() - sent)
        pending.append((time.perf_counter_ns(), asyncio.wrap_future(handle.produce.remote(batch, acks, 60_000).future())))
    while pending:
        sent, future = pending.popleft()
        await future
        latencies.append(time.perf_counter_ns() - sent)


def raw_run(handles: list, batches: list[list[bytes]], settings: ProduceBenchSettings) -> dict:
    latencies: list[int] = []
    acks = Acks.parse(settings.acks)  # the --acks string, as the replicas take it

    async def main():
        await asyncio.gather(*(_drive(h, b, acks, settings.in_flight_batches_max, latencies)
                               for h, b in zip(handles, batches)))

    started = time.perf_counter()
    asyncio.run(main())
    elapsed = time.perf_counter() - started
    return {**_throughput(settings.messages, settings.message_bytes, elapsed),
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


def run_produce_bench(settings: ProduceBenchSettings, output_path: str) -> dict:
    connection = connect()
    admin = Admin(connection)
    topic = f"bench-{secrets.token_hex(3)}"
    # ReadMode.MAFKA3: no read path, so only the write path is measured.
    metadata = admin.create_topic(topic, partitions=settings.partitions, replication_factor=settings.replication_factor,
                                  read_mode=ReadMode.MAFKA3)
    bare = BareSink.options(num_cpus=0, resources={node_resource(metadata.partitions[0].leader): 1}).remote()
    try:
        producer = producer_run(connection, topic, settings)
        paced = producer_run(connection, topic, settings, settings.paced_msgs_per_s)
        batches = encoded_batches(settings)
        leaders = [replica_handle(admin.cluster, topic, s.partition, s.leader) for s in metadata.partitions]
        raw_leaders = raw_run(leaders, batches, settings)
        ray.get(bare.ping.remote())
        bare_actor = raw_run([bare] * settings.partitions, batches, settings)
        memory = {"partition_actor_rss_mb": [round(b / MiB, 1) for b in replica_rss_bytes(admin, topic)]}
    finally:
        ray.kill(bare)
        admin.delete_topic(topic)
    if settings.stalled_producer:
        memory["stalled_producer"] = stalled_producer_run(admin, settings)
    summary = {
        "producer_msgs_per_s": producer["msgs_per_s"], "producer_mb_per_s": producer["mb_per_s"],
        "producer_saturated_latency_ms": producer["latency_ms"],
        "paced_msgs_per_s": paced["msgs_per_s"], "paced_latency_ms": paced["latency_ms"],
        "raw_leaders_msgs_per_s": raw_leaders["msgs_per_s"], "bare_actor_msgs_per_s": bare_actor["msgs_per_s"],
        "producer_vs_bare_ratio": round(producer["msgs_per_s"] / bare_actor["msgs_per_s"], 3),
        "raw_leaders_vs_bare_ratio": round(raw_leaders["msgs_per_s"] / bare_actor["msgs_per_s"], 3),
        "memory": memory,
    }
    report = {"settings": asdict(settings), "producer": producer, "paced": paced, "raw_leaders": raw_leaders,
              "bare_actor": bare_actor, "summary": summary, "cpu_count": os.cpu_count()}
    Path(output_path).parent.mkdir(parents=True, exist_ok=True)
    Path(output_path).write_text(json.dumps(report, indent=2))
    return report
