"""``metrics.families``: a node's Prometheus metrics from the plain snapshot its describe and counters give."""

from __future__ import annotations

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from mafka4.metrics.families import REFUSAL_REASONS, histogram_buckets, read_node_families, replica_families
from mafka4.metrics.histogram import LatencyHistogram
from mafka4.physical.replica_traffic import ReplicaTraffic

PORT_COUNTERS = {"connections": 7, "connections_refused": 1, "requests": 120, "bad_frames": 2, "auth_failures": 3,
                 "refusals": 4, "protocol_refusals": 5, "errors": 6, "connections_open": 2}


def _replica_snapshot(role="leader", isr=("w0", "w1"), replicas=("w0", "w1", "w2"), min_insync_replicas=2,
                      traffic=None) -> dict:
    """What ``PhysicalPartition._metrics_snapshot`` returns: the replica's describe and what it adds."""
    if traffic is None:
        traffic = ReplicaTraffic()
        traffic.produced(1_000, 10, 0.0007)
        traffic.produced(3_000, 30, 0.004)
        traffic.fetched(4_000)
        traffic.follower_fetched(2_500)
    described = {"partition": "orders-3", "replica": "w0", "role": role, "leader": "w0", "leader_epoch": 4,
                 "log_end_offset": 40, "high_watermark": 38, "replicas": list(replicas), "isr": sorted(isr),
                 "isr_uncommitted": [], "isr_removed_unconfirmed": [], "followers": {}, "log_start_offset": 0,
                 "size_bytes": 4_096}
    return {"topic": "orders", "partition": 3, "node": "w0", "replica": described,
            "min_insync_replicas": min_insync_replicas, "traffic": traffic.snapshot(),
            "client_port": dict(PORT_COUNTERS)}


def _samples(families) -> dict[tuple[str, tuple], float]:
    """Every sample as (sample name, sorted labels) -> value."""
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in families for sample in family.samples}


def _text(families) -> str:
    """The Prometheus text exposition of ``families``, as a scrape would read it."""
    class Collector:
        def collect(self):
            return families

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Collector())
    return generate_latest(registry).decode()


REPLICA = (("node", "w0"), ("partition", "3"), ("topic", "orders"))


def test_a_replica_exposes_its_produce_and_fetch_totals_under_its_topic_partition_and_node():
    samples = _samples(replica_families(_replica_snapshot()))
    assert samples[("mafka4_replica_produce_requests_total", REPLICA)] == 2
    assert samples[("mafka4_replica_produce_bytes_total", REPLICA)] == 4_000
    assert samples[("mafka4_replica_produce_messages_total", REPLICA)] == 40
    assert samples[("mafka4_replica_fetch_requests_total", REPLICA)] == 1
    assert samples[("mafka4_replica_fetch_bytes_total", REPLICA)] == 4_000
    assert samples[("mafka4_replica_follower_fetch_bytes_total", REPLICA)] == 2_500
    assert samples[("mafka4_replica_high_watermark", REPLICA)] == 38
    assert samples[("mafka4_replica_log_end_offset", REPLICA)] == 40
    assert samples[("mafka4_replica_leader_epoch", REPLICA)] == 4
    assert samples[("mafka4_replica_log_size_bytes", REPLICA)] == 4_096


def test_the_produce_latency_histogram_has_cumulative_buckets_its_count_and_sum():
    samples = _samples(replica_families(_replica_snapshot()))
    bucket = "mafka4_replica_produce_latency_seconds_bucket"
    assert samples[(bucket, tuple(sorted((*REPLICA, ("le", "0.0005")))))] == 0
    assert samples[(bucket, tuple(sorted((*REPLICA, ("le", "0.001")))))] == 1
    assert samples[(bucket, tuple(sorted((*REPLICA, ("le", "0.005")))))] == 2
    assert samples[(bucket, tuple(sorted((*REPLICA, ("le", "+Inf")))))] == 2
    assert samples[("mafka4_replica_produce_latency_seconds_count", REPLICA)] == 2
    assert abs(samples[("mafka4_replica_produce_latency_seconds_sum", REPLICA)] - 0.0047) < 1e-12


def test_a_leader_below_its_replicas_is_under_replicated_and_below_min_insync_under_min_isr():
    healthy = _samples(replica_families(_replica_snapshot(isr=("w0", "w1", "w2"))))
    short = _samples(replica_families(_replica_snapshot(isr=("w0", "w1"))))
    alone = _samples(replica_families(_replica_snapshot(isr=("w0",))))
    gauges = ("mafka4_replica_isr_size", "mafka4_replica_under_replicated", "mafka4_replica_under_min_isr")
    assert [healthy[(name, REPLICA)] for name in gauges] == [3, 0, 0]
    assert healthy[("mafka4_replica_replicas", REPLICA)] == short[("mafka4_replica_replicas", REPLICA)] == 3
    assert [short[(name, REPLICA)] for name in gauges] == [2, 1, 0]
    assert [alone[(name, REPLICA)] for name in gauges] == [1, 1, 1]


def test_a_follower_exposes_no_isr_figures_its_view_of_the_isr_is_not_the_partition_s():
    samples = _samples(replica_families(_replica_snapshot(role="follower", isr=("w0",))))
    names = {name for name, _ in samples}
    assert samples[("mafka4_replica_leader", REPLICA)] == 0
    assert not names & {"mafka4_replica_isr_size", "mafka4_replica_replicas", "mafka4_replica_under_replicated",
                        "mafka4_replica_under_min_isr"}
    assert ("mafka4_replica_high_watermark", REPLICA) in samples


def test_refusals_are_counted_by_reason_beside_the_port_s_other_counters():
    samples = _samples(replica_families(_replica_snapshot()))
    refused = {dict(labels)["reason"]: value for (name, labels), value in samples.items()
               if name == "mafka4_client_port_refused_total"}
    assert refused == {"authentication": 3, "not_authorized": 4, "bad_frame": 2, "out_of_turn": 5,
                       "connections_max": 1}
    assert set(refused) == set(REFUSAL_REASONS.values())
    assert samples[("mafka4_client_port_requests_total", REPLICA)] == 120
    assert samples[("mafka4_client_port_connections_open", REPLICA)] == 2
    assert samples[("mafka4_client_port_errors_total", REPLICA)] == 6


def test_what_a_snapshot_lacks_is_left_out_not_exposed_as_zero():
    snapshot = _replica_snapshot()
    del snapshot["traffic"], snapshot["client_port"], snapshot["min_insync_replicas"]
    names = {name for name, _ in _samples(replica_families(snapshot))}
    assert "mafka4_replica_produce_requests_total" not in names
    assert "mafka4_replica_under_min_isr" not in names
    assert not {name for name in names if name.startswith("mafka4_client_port")}
    assert "mafka4_replica_under_replicated" in names


def _read_node_snapshot() -> dict:
    """What ``ReadNode._metrics_snapshot`` returns: its describe, its port's counters and the
    end-to-end latency per topic."""
    leader = {"virtual_partition": "orders/v0", "leader": "r0", "role": "leader", "high_watermark": 90,
              "log_end_offset": 95, "risr": ["r0", "r1"], "fetch_requests": 12, "fetch_bytes": 9_000,
              "replicas": {replica: {"status": "in_sync", "log_end_offset": 95} for replica in ("r0", "r1", "r2")}}
    follower = {"virtual_partition": "orders/v1", "leader": "r1", "role": "follower", "high_watermark": 50,
                "log_end_offset": 50, "fetch_requests": 0, "fetch_bytes": 0}
    feeding = {"partition": 0, "next_offset": 100, "high_watermark": 130, "lag_messages": 30, "lag_ms": 2_500,
               "records_fed": 100, "errors": 1}
    resuming = {"partition": 1, "next_offset": None, "high_watermark": None, "lag_messages": None, "lag_ms": None,
                "records_fed": 0, "errors": 0}
    end_to_end = LatencyHistogram((0.01, 0.1))
    for latency_s in (0.004, 0.05, 0.06):
        end_to_end.observe(latency_s)
    return {"node_id": "r0", "hosted_vps": 2, "vps": {"orders/v0": leader, "orders/v1": follower},
            "feeds": {"orders": {0: feeding, 1: resuming}}, "replication": {}, "client_port": dict(PORT_COUNTERS),
            "end_to_end_latency": {"orders": end_to_end.snapshot()}}


def test_a_read_node_exposes_its_vps_hw_and_risr_and_its_feeds_lag_in_messages_and_seconds():
    samples = _samples(read_node_families(_read_node_snapshot()))
    v0, v1 = (("node", "r0"), ("topic", "orders"), ("vp", "0")), (("node", "r0"), ("topic", "orders"), ("vp", "1"))
    p0, p1 = (("node", "r0"), ("partition", "0"), ("topic", "orders")), (("node", "r0"), ("partition", "1"),
                                                                           ("topic", "orders"))
    assert samples[("mafka4_read_node_hosted_vps", (("node", "r0"),))] == 2
    assert samples[("mafka4_vp_high_watermark", v0)] == 90 and samples[("mafka4_vp_high_watermark", v1)] == 50
    assert samples[("mafka4_vp_risr_size", v0)] == 2
    assert ("mafka4_vp_risr_size", v1) not in samples, "a follower does not know the RISR"
    assert samples[("mafka4_vp_replicas", v0)] == 3 and ("mafka4_vp_replicas", v1) not in samples
    assert samples[("mafka4_vp_leader", v0)] == 1 and samples[("mafka4_vp_leader", v1)] == 0
    assert samples[("mafka4_vp_fetch_requests_total", v0)] == 12
    assert samples[("mafka4_vp_fetch_bytes_total", v0)] == 9_000
    assert samples[("mafka4_feed_lag_messages", p0)] == 30
    assert samples[("mafka4_feed_lag_seconds", p0)] == 2.5
    assert samples[("mafka4_feed_records_total", p0)] == 100
    assert ("mafka4_feed_lag_seconds", p1) not in samples, "a stream with no position has no lag yet"
    assert samples[("mafka4_client_port_refused_total", (("node", "r0"), ("reason", "not_authorized")))] == 4
    by_topic = (("node", "r0"), ("topic", "orders"))  # per topic, not per VP
    assert samples[("mafka4_end_to_end_latency_seconds_bucket", (("le", "0.01"), *by_topic))] == 1
    assert samples[("mafka4_end_to_end_latency_seconds_bucket", (("le", "0.1"), *by_topic))] == 3
    assert samples[("mafka4_end_to_end_latency_seconds_count", by_topic)] == 3


def test_the_leader_of_a_vp_or_partition_exposes_each_group_s_lag_in_messages_and_seconds():
    snapshot = {**_read_node_snapshot(), "group_lag": [
        {"group": "billing", "topic": "orders", "vp": 0, "committed_offset": 60, "high_watermark": 90,
         "lag_messages": 30, "lag_ms": 12_500},
        {"group": "audit", "topic": "orders", "vp": 0, "committed_offset": 90, "high_watermark": 90,
         "lag_messages": 0, "lag_ms": 0},
        {"group": "gone", "topic": "orders", "vp": 0, "committed_offset": 10, "high_watermark": 90,
         "lag_messages": 80, "lag_ms": None}]}
    samples = _samples(read_node_families(snapshot))
    billing = (("group", "billing"), ("topic", "orders"), ("vp", "0"))
    assert samples[("mafka4_group_lag_messages", billing)] == 30
    assert samples[("mafka4_group_lag_seconds", billing)] == 12.5
    assert samples[("mafka4_group_lag_seconds", (("group", "audit"), ("topic", "orders"), ("vp", "0")))] == 0
    gone = (("group", "gone"), ("topic", "orders"), ("vp", "0"))
    assert samples[("mafka4_group_lag_messages", gone)] == 80
    assert ("mafka4_group_lag_seconds", gone) not in samples, "an unknown age is left out"

    replica = {**_replica_snapshot(), "group_lag": [
        {"group": "legacy", "topic": "orders", "partition": 3, "committed_offset": 30, "high_watermark": 38,
         "lag_messages": 8, "lag_ms": 4_000}]}
    samples = _samples(replica_families(replica))
    legacy = (("group", "legacy"), ("partition", "3"), ("topic", "orders"))
    assert samples[("mafka4_group_lag_messages", legacy)] == 8 and samples[("mafka4_group_lag_seconds", legacy)] == 4
    assert not [name for name, _ in _samples(replica_families(_replica_snapshot())) if "group_lag" in name], \
        "a follower (no group_lag) exposes none"


def test_the_text_exposition_a_scrape_reads():
    text = _text(replica_families(_replica_snapshot()))
    assert '# TYPE mafka4_replica_produce_bytes_total counter' in text
    assert 'mafka4_replica_produce_bytes_total{node="w0",partition="3",topic="orders"} 4000.0' in text
    assert '# TYPE mafka4_replica_produce_latency_seconds histogram' in text
    assert 'mafka4_replica_produce_latency_seconds_bucket{le="+Inf",node="w0",partition="3",topic="orders"} 2.0' in text
    assert '# TYPE mafka4_replica_under_min_isr gauge' in text
    assert 'mafka4_client_port_refused_total{node="w0",partition="3",reason="bad_frame",topic="orders"} 2.0' in text
    text = _text(read_node_families(_read_node_snapshot()))
    assert 'mafka4_feed_lag_seconds{node="r0",partition="0",topic="orders"} 2.5' in text
    assert 'mafka4_vp_risr_size{node="r0",topic="orders",vp="0"} 2.0' in text
    parsed = {family.name: family.type for family in text_string_to_metric_families(text)}
    assert parsed["mafka4_feed_lag_messages"] == "gauge" and parsed["mafka4_vp_fetch_bytes"] == "counter"
    assert all(name.startswith("mafka4_") for name in parsed)


def test_a_histogram_counts_each_duration_in_the_first_bucket_at_or_above_it():
    histogram = LatencyHistogram((0.001, 0.01, 0.1))
    for duration_s in (0.0, 0.001, 0.002, 0.01, 0.5, 7.0):
        histogram.observe(duration_s)
    snapshot = histogram.snapshot()
    assert snapshot["counts"] == [2, 2, 0, 2] and snapshot["count"] == 6
    assert histogram_buckets(snapshot) == ([("0.001", 2), ("0.01", 4), ("0.1", 4), ("+Inf", 6)], snapshot["sum_s"])
    histogram.observe(0.05)
    assert snapshot["counts"] == [2, 2, 0, 2], "a snapshot is a copy: later observations leave it alone"
