"""Every node of a running cluster serves Prometheus metrics where its liveness key says, and
``mafka4 status --metrics-targets`` tells Prometheus where they all are; a partition's leader
serves each group's lag, as ``group describe`` shows it; ``mafka4 status`` shows the figures the
endpoints serve (produce and end-to-end p99, group lag)."""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from mafka4.client.admin import Admin
from mafka4.client.consumer import Consumer
from mafka4.client.group_admin import GroupAdmin
from mafka4.client.producer import Producer
from mafka4.metadata import keys
from mafka4.metrics.figures import bucket_quantile, summed_buckets
from mafka4.metrics.targets import metrics_address, shown_targets
from mafka4.runtime.local import status
from wait_helpers import wait_until

MESSAGES = 20
BEHIND = 7  # messages produced after a group committed, its lag
SCRAPE_TIMEOUT_S = 30
TIMESTAMP_CUT_S = 0.001  # a record's timestamp is its producer's clock cut to the millisecond


def scrape(address: str) -> dict[tuple[str, tuple], float]:
    """Every sample a node serves: (name, sorted labels) -> value."""
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=SCRAPE_TIMEOUT_S) as answer:
        text = answer.read().decode()
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def of_topic(samples: dict, name: str, topic: str) -> dict[tuple, float]:
    return {labels: value for (sample, labels), value in samples.items()
            if sample == name and ("topic", topic) in labels}


def test_replicas_and_read_nodes_serve_their_metrics_and_status_lists_them_for_prometheus(cluster, tmp_path):
    topic = f"metrics-{secrets.token_hex(3)}"
    admin = Admin(cluster)
    admin.create_topic(topic, partitions=1, virtual_partitions=2)
    with Producer(topic, connection=cluster, acks="all") as producer:
        for n in range(MESSAGES):
            producer.send_sync(b"m%d" % n, key=b"k%d" % n, timeout_s=30)
    leader = admin.describe_topic(topic)["partitions"][0]["leader"]

    leader_liveness = cluster.store.get(keys.replica_liveness(cluster.cluster, topic, 0, leader))
    replica = scrape(metrics_address(leader_liveness.value))
    labels = (("node", leader), ("partition", "0"), ("topic", topic))
    assert replica[("mafka4_replica_produce_messages_total", labels)] == MESSAGES
    assert replica[("mafka4_replica_produce_requests_total", labels)] == MESSAGES, "send_sync: a batch each"
    assert replica[("mafka4_replica_produce_latency_seconds_count", labels)] == MESSAGES
    assert replica[("mafka4_replica_leader", labels)] == 1
    assert replica[("mafka4_replica_high_watermark", labels)] == MESSAGES
    assert replica[("mafka4_replica_under_min_isr", labels)] == 0

    [read_node] = cluster.state.read_nodes
    read_address = metrics_address(cluster.store.get(keys.read_node_liveness(cluster.cluster, read_node)).value)

    def fed_all() -> bool:
        samples = scrape(read_address)
        lag = of_topic(samples, "mafka4_feed_lag_messages", topic)
        return (list(lag.values()) == [0] and list(of_topic(samples, "mafka4_feed_lag_seconds", topic).values()) == [0]
                and sum(of_topic(samples, "mafka4_vp_high_watermark", topic).values()) == MESSAGES)

    assert wait_until(fed_all), f"{read_node} did not feed the {MESSAGES} messages of {topic}: {scrape(read_address)}"
    samples = scrape(read_address)
    assert len(of_topic(samples, "mafka4_vp_risr_size", topic)) == 2, "it leads both VPs"
    assert samples[("mafka4_read_node_hosted_vps", (("node", read_node),))] >= 2

    targets_file = tmp_path / "mafka4.json"
    status = subprocess.run([sys.executable, "-m", "mafka4.cli", "status", "--metrics-targets", str(targets_file)],
                            capture_output=True, timeout=120)
    assert status.returncode == 0, status.stderr
    shown = json.loads(status.stdout)["metrics"]
    assert shown["read_node"][read_node] == read_address
    assert shown["replica"][f"{topic}-0/{leader}"] == metrics_address(leader_liveness.value)
    targets = {entry["labels"]["mafka4_name"]: entry["targets"] for entry in json.loads(targets_file.read_text())}
    assert targets[read_node] == [read_address] and targets[f"{topic}-0/{leader}"] == [
        metrics_address(leader_liveness.value)]


def test_a_partition_leader_serves_each_group_s_lag_and_group_describe_shows_the_same(cluster):
    """A Mafka3-mode group's lag on the physical leader (the VP leaders' is test_prometheus's)."""
    topic, group = f"metrics-lag-{secrets.token_hex(3)}", f"lagging-{secrets.token_hex(3)}"
    admin = Admin(cluster)
    admin.create_topic(topic, partitions=1, read_mode="mafka3")
    with Producer(topic, connection=cluster, acks="all") as producer:
        for n in range(MESSAGES):
            producer.send_sync(b"m%d" % n, timeout_s=30)
        with Consumer(topic, group=group, connection=cluster, from_beginning=True) as consumer:
            read = []
            assert wait_until(lambda: read.extend(consumer.poll(timeout_ms=500)) or len(read) >= MESSAGES)
        # The consumer closed, committing offset MESSAGES; what comes now is its lag.
        first_unread_ms = time.time() * 1000
        for n in range(MESSAGES, MESSAGES + BEHIND):
            producer.send_sync(b"m%d" % n, timeout_s=30)
    leader = admin.describe_topic(topic)["partitions"][0]["leader"]
    address = metrics_address(cluster.store.get(keys.replica_liveness(cluster.cluster, topic, 0, leader)).value)
    labels = (("group", group), ("partition", "0"), ("topic", topic))

    def lagging() -> dict | None:  # the leader reads the committed offsets again at most every 5 s
        samples = scrape(address)
        return samples if samples.get(("mafka4_group_lag_messages", labels)) == BEHIND else None
    samples = wait_until(lagging)
    assert samples, f"{leader} does not serve {group}'s lag of {BEHIND}: {scrape(address)}"
    age_s = samples[("mafka4_group_lag_seconds", labels)]
    # Record timestamps are whole milliseconds, cut down: an age may exceed the test's own clock by under 1 ms.
    assert 0 < age_s <= time.time() - first_unread_ms / 1000 + TIMESTAMP_CUT_S, \
        "the age of the first message produced after the commit"

    with GroupAdmin(cluster) as group_admin:
        [row] = group_admin.describe_group(group).partitions
    assert (row.committed_offset, row.high_watermark, row.lag) == (MESSAGES, MESSAGES + BEHIND, BEHIND)
    assert round(age_s * 1000) <= row.lag_ms <= time.time() * 1000 - first_unread_ms + TIMESTAMP_CUT_S * 1000, \
        "the same rule, a moment later"


def _summed_histogram(scraped: list[dict], family: str, topic: str) -> dict[float, float]:
    """The cumulative buckets of ``family``'s series of ``topic`` in every scrape, summed."""
    series: dict[tuple, dict[float, float]] = {}
    for samples in scraped:
        for (name, labels), value in samples.items():
            named = dict(labels)
            if name == f"{family}_bucket" and named.get("topic") == topic:
                key = tuple(label for label in labels if label[0] != "le")
                series.setdefault(key, {})[float(named["le"])] = value
    return summed_buckets(series.values())


def test_status_shows_produce_and_end_to_end_p99_and_a_group_s_lag_as_the_metrics_endpoints_serve_them(cluster):
    topic, group = f"metrics-figures-{secrets.token_hex(3)}", f"figures-{secrets.token_hex(3)}"
    Admin(cluster).create_topic(topic, partitions=1, virtual_partitions=2)
    with Producer(topic, connection=cluster, acks="all") as producer:
        for n in range(MESSAGES):
            producer.send_sync(b"m%d" % n, key=b"k%d" % n, timeout_s=30)
        with Consumer(topic, group=group, connection=cluster, from_beginning=True) as consumer:
            read = []
            assert wait_until(lambda: read.extend(consumer.poll(timeout_ms=500)) or len(read) >= MESSAGES)
        # The consumer closed, committing every VP it read to its end; one key puts what follows in one VP.
        for n in range(MESSAGES, MESSAGES + BEHIND):
            producer.send_sync(b"m%d" % n, key=b"late", timeout_s=30)
    home = Path(cluster.state.home)

    def figured() -> dict | None:  # the read node reads the committed offsets again at most every 5 s
        report = status(home)
        lag = report.get("figures", {}).get("group_lag", {}).get(group, {})
        return report if lag.get("messages") == BEHIND else None
    report = wait_until(figured)
    assert report, f"status shows no lag of {BEHIND} for {group}: {status(home).get('figures')}"
    figures = report["figures"]
    scraped = [scrape(target.address) for target in shown_targets(report["metrics"])
               if target.name not in figures["not_answering"].get(target.process, {})]

    produce = figures["latency"]["produce"]["by_topic"][topic]
    buckets = _summed_histogram(scraped, "mafka4_replica_produce_latency_seconds", topic)
    assert produce["count"] == MESSAGES + BEHIND == buckets[float("inf")], "send_sync: a batch each, on the leader"
    assert produce["p99_s"] == bucket_quantile(0.99, buckets) and produce["p99_s"] > 0

    end_to_end = figures["latency"]["end_to_end"]["by_topic"][topic]
    buckets = _summed_histogram(scraped, "mafka4_end_to_end_latency_seconds", topic)
    assert end_to_end["count"] >= 1 and end_to_end["count"] == buckets[float("inf")], "the batches the consumer read"
    assert end_to_end["p99_s"] == bucket_quantile(0.99, buckets) and end_to_end["p99_s"] > 0

    lag = figures["group_lag"][group]
    served = {dict(labels)["vp"]: value for samples in scraped for (name, labels), value in samples.items()
              if name == "mafka4_group_lag_messages" and ("group", group) in labels}
    late_vp = max(served, key=served.get)
    assert served[late_vp] == BEHIND and sum(served.values()) == BEHIND, served
    assert lag["messages_at"] == f"{topic}/v{late_vp}"
    served_age_s = max(value for samples in scraped for (name, labels), value in samples.items()
                       if name == "mafka4_group_lag_seconds" and ("group", group) in labels)
    assert 0 < lag["seconds"] <= served_age_s, "the age of the oldest message not committed, scraped a moment later"
