"""``mafka4 demo``: the whole write path once, on a throwaway local cluster.

Starts etcd and a Ray cluster on loopback in a temporary home, creates a topic with two
replicated partitions, produces 2,000 keyed messages with acks=all, reads them all back,
checks that each arrived exactly once, and stops everything it started.
"""

from __future__ import annotations

import time
from collections import Counter

from mafka4.client.admin import Admin
from mafka4.client.consumer import Consumer
from mafka4.client.producer import Producer
from mafka4.limits import ClusterConfig, ReadMode
from mafka4.runtime.temporary import temporary_cluster

DEMO_MESSAGES = 2000
READ_TIMEOUT_S = 60


def run_demo() -> int:
    started = time.monotonic()
    print("starting a local cluster (etcd + Ray on 127.0.0.1, 2 write nodes) ...", flush=True)
    cluster = None
    try:
        with temporary_cluster(ClusterConfig(write_nodes=2, read_nodes=0), home_prefix="m4demo-") as cluster:
            state = cluster.state
            print(f"  up in {time.monotonic() - started:.1f} s in {cluster.home}: "
                  f"etcd {state.etcd_endpoint}, Ray {state.ray_address}")
            return _produce_and_consume(cluster.connection)
    finally:
        if cluster is not None:  # else the start failed, and its error says why
            print(f"cluster stopped ({len(cluster.stopped_pids)} processes); total {time.monotonic() - started:.1f} s")


def _produce_and_consume(connection) -> int:
    admin = Admin(connection)
    admin.create_topic("demo", partitions=2, replication_factor=2, read_mode=ReadMode.MAFKA3)  # no read nodes: read physical partitions
    print("created topic 'demo': 2 partitions x 2 replicas")
    began = time.monotonic()
    with Producer("demo", connection=connection, acks="all") as producer:
        futures = [producer.send(str(n).encode(), key=f"key-{n % 16}".encode()) for n in range(1, DEMO_MESSAGES + 1)]
        producer.flush()
        offsets = [future.result() for future in futures]
    print(f"produced {len(offsets)} messages with acks=all in {time.monotonic() - began:.2f} s")
    seen: Counter[bytes] = Counter()
    with Consumer("demo", connection=connection, from_beginning=True) as consumer:
        deadline = time.monotonic() + READ_TIMEOUT_S
        while sum(seen.values()) < DEMO_MESSAGES and time.monotonic() < deadline:
            seen.update(message.value for message in consumer.poll(timeout_ms=500))
    expected = {str(n).encode() for n in range(1, DEMO_MESSAGES + 1)}
    exactly_once = set(seen) == expected and all(count == 1 for count in seen.values())
    for partition in admin.describe_topic("demo")["partitions"]:
        live = partition["live"] or {}
        print(f"  partition {partition['partition']}: leader {partition['leader']}, ISR {sorted(live.get('isr', []))}, "
              f"high watermark {live.get('high_watermark')}")
    verdict = "every message read back exactly once" if exactly_once else "MISMATCH between produced and consumed"
    print(f"consumed {sum(seen.values())} messages: {verdict}")
    return 0 if exactly_once else 1
