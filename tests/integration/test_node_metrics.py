"""Every node of a running cluster serves Prometheus metrics where its liveness key says, and
``mafka4 status --metrics-targets`` tells Prometheus where they all are."""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from mafka4.client.admin import Admin
from mafka4.client.producer import Producer
from mafka4.metadata import keys
from mafka4.metrics.targets import metrics_address
from wait_helpers import wait_until

MESSAGES = 20
SCRAPE_TIMEOUT_S = 30


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
