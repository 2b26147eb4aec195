"""``metrics.end_to_end``: the end-to-end latency of the batches a fetch answer carries, one
observation per batch from its header, and what a replica's metrics make of it."""

from __future__ import annotations

from mafka4.batch_payload import encode_batch
from mafka4.limits import END_TO_END_LATENCY_BUCKETS_S
from mafka4.metrics.end_to_end import observe_served
from mafka4.metrics.families import END_TO_END_FAMILY, replica_families
from mafka4.metrics.histogram import LatencyHistogram
from mafka4.physical.replica_traffic import ReplicaTraffic
from test_metric_families import REPLICA, _replica_snapshot, _samples


def _batch(*timestamps_ms: int) -> bytes:
    return encode_batch([(None, b"v%d" % n, timestamp_ms, None) for n, timestamp_ms in enumerate(timestamps_ms)])


def _histogram() -> LatencyHistogram:
    return LatencyHistogram(END_TO_END_LATENCY_BUCKETS_S)


def test_each_batch_counts_once_at_the_age_of_its_newest_record():
    latency = _histogram()
    data = _batch(1_000, 1_400, 1_200) + _batch(1_900)
    assert observe_served(latency, data, now_ms=2_000) == 2
    assert latency.count == 2, "one observation per batch, not per record"
    assert abs(latency.sum_s - (0.6 + 0.1)) < 1e-9, "the batches' max timestamps: 1400 and 1900"
    assert latency.snapshot()["counts"][END_TO_END_LATENCY_BUCKETS_S.index(0.1)] == 1
    assert latency.snapshot()["counts"][END_TO_END_LATENCY_BUCKETS_S.index(1.0)] == 1


def test_a_batch_served_again_counts_again():
    latency, data = _histogram(), _batch(1_000)
    observe_served(latency, data, now_ms=1_500)
    observe_served(latency, data, now_ms=3_000)
    assert latency.count == 2 and abs(latency.sum_s - 2.5) < 1e-9


def test_a_producer_clock_ahead_of_the_node_s_is_no_negative_latency():
    latency = _histogram()
    observe_served(latency, _batch(5_000), now_ms=2_000)
    assert latency.count == 1 and latency.sum_s == 0


def test_an_empty_answer_observes_nothing_and_a_torn_tail_is_not_a_batch():
    latency, data = _histogram(), _batch(1_000)
    assert observe_served(latency, b"", now_ms=2_000) == 0
    assert observe_served(latency, data + data[:30], now_ms=2_000) == 1
    assert latency.count == 1


def test_a_replica_observes_consumers_fetches_and_exposes_the_family_with_the_produce_labels():
    traffic = ReplicaTraffic()
    traffic.consumer_fetched(_batch(1_000) + _batch(1_000), now_ms=1_020)
    traffic.fetched(len(_batch(1_000)))  # a read node's feed: counted as a fetch, no consumer served
    assert (traffic.fetch_requests, traffic.end_to_end_latency.count) == (2, 2)
    families = replica_families(_replica_snapshot(traffic=traffic))
    samples = _samples(families)
    bucket = f"{END_TO_END_FAMILY}_bucket"
    assert samples[(bucket, tuple(sorted((*REPLICA, ("le", "0.01")))))] == 0
    assert samples[(bucket, tuple(sorted((*REPLICA, ("le", "0.025")))))] == 2
    assert samples[(f"{END_TO_END_FAMILY}_count", REPLICA)] == 2
    [family] = [family for family in families if family.name == END_TO_END_FAMILY]
    assert "clock" in family.documentation and "re-read" in family.documentation
