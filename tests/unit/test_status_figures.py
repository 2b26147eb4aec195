"""``metrics.figures``: the short report ``mafka4 status`` makes of its targets' expositions, and
``metrics.scrape``: the bounded scrape of those targets (on loopback, no cluster)."""

from __future__ import annotations

import math
import socket

from mafka4.metrics.controller_counters import ControllerCounters
from mafka4.metrics.exposition import MetricsServer
from mafka4.metrics.families import controller_families, read_node_families, replica_families
from mafka4.metrics.figures import TargetAnswer, bucket_quantile, figures, summed_buckets
from mafka4.metrics.scrape import scrape_all
from mafka4.metrics.targets import MetricsTarget
from mafka4.physical.replica_traffic import ReplicaTraffic
from test_metric_families import _read_node_snapshot, _replica_snapshot, _text

LOOPBACK = "127.0.0.1"


def _replica(node: str, epoch: int, role="leader", isr=("w0", "w1", "w2"), produced_s=(), group_lag=None,
             partition=3) -> str:
    traffic = ReplicaTraffic()
    for latency_s in produced_s:
        traffic.produced(100, 1, latency_s)
    snapshot = _replica_snapshot(role=role, isr=isr, traffic=traffic)
    snapshot["node"], snapshot["partition"], snapshot["replica"]["leader_epoch"] = node, partition, epoch
    snapshot["group_lag"] = group_lag
    return _text(replica_families(snapshot))


def _controller() -> str:
    counters = ControllerCounters("c-a")
    counters.won(7)
    counters.leader_elected("partition")
    counters.leader_elected("partition")
    counters.leader_elected("vp")
    counters.resharded("split")
    return _text(controller_families(counters.snapshot()))


def _answer(process: str, name: str, text: str | None = None, error: str | None = None) -> TargetAnswer:
    return TargetAnswer(MetricsTarget(process, name, f"{LOOPBACK}:1"), text, error)


def _cluster() -> list[TargetAnswer]:
    """Partition orders-3 led by w1 (epoch 5, ISR 2 of 3) while w0, deposed at epoch 4, still says
    it leads with a full ISR; read node r0 as ``_read_node_snapshot`` has it, with two groups' lag."""
    lags = [{"group": "billing", "topic": "orders", "vp": 0, "lag_messages": 30, "lag_ms": 12_500},
            {"group": "billing", "topic": "orders", "vp": 1, "lag_messages": 5, "lag_ms": 40_000},
            {"group": "audit", "topic": "orders", "vp": 0, "lag_messages": 0, "lag_ms": 0}]
    legacy = [{"group": "legacy", "topic": "orders", "partition": 3, "lag_messages": 8, "lag_ms": 4_000}]
    return [_answer("replica", "orders-3/w0", _replica("w0", 4, produced_s=(0.0007,))),
            _answer("replica", "orders-3/w1", _replica("w1", 5, isr=("w1", "w2"), produced_s=(0.004, 0.004, 0.02),
                                                       group_lag=legacy)),
            _answer("replica", "orders-3/w2", _replica("w2", 5, role="follower")),
            _answer("read_node", "r0", _text(read_node_families({**_read_node_snapshot(), "group_lag": lags}))),
            _answer("controller", "c-a", _controller())]


def test_the_believed_leader_names_the_partitions_under_replicated_and_their_isr_beside_the_replicas():
    report = figures(_cluster())
    assert report["partitions"] == {"under_replicated": ["orders-3"], "under_min_isr": [],
                                    "isr_below_replicas": {"orders-3": {"isr": 2, "replicas": 3}}}, \
        "w1 leads epoch 5: the deposed w0's full ISR is not believed"
    assert report["vps"] == {"risr_below_replicas": {"orders/v0": {"risr": 2, "replicas": 3}}}
    alone = figures([_answer("replica", "orders-3/w0", _replica("w0", 9, isr=("w0",)))])
    assert alone["partitions"]["under_min_isr"] == ["orders-3"]
    two = figures([_answer("replica", f"orders-{partition}/w0", _replica("w0", 1, isr=("w0",), partition=partition))
                   for partition in (10, 2)])
    assert two["partitions"]["under_replicated"] == ["orders-2", "orders-10"], "in the order of their numbers"


def test_feed_lag_is_the_worst_feed_per_read_node_and_group_lag_the_worst_partition_per_group_with_where():
    report = figures(_cluster())
    assert report["feed_lag"] == {"r0": {"messages": 30, "seconds": 2.5}}
    assert report["group_lag"] == {
        "audit": {"messages": 0, "messages_at": "orders/v0", "seconds": 0.0, "seconds_at": "orders/v0"},
        "billing": {"messages": 30, "messages_at": "orders/v0", "seconds": 40.0, "seconds_at": "orders/v1"},
        "legacy": {"messages": 8, "messages_at": "orders-3", "seconds": 4.0, "seconds_at": "orders-3"}}


def test_produce_and_end_to_end_p99_come_from_every_series_buckets_summed_in_all_and_per_topic():
    latency = figures(_cluster())["latency"]
    produce = latency["produce"]
    assert produce["count"] == 4, "w0's one and w1's three; the follower observed none"
    # Cumulative at 0.001: 1, at 0.005: 3, at 0.025: 4; the 99th of 4 (rank 3.96) is in (0.01, 0.025].
    assert math.isclose(produce["p99_s"], 0.01 + 0.015 * 0.96)
    assert produce["by_topic"] == {"orders": {"count": 4, "p99_s": produce["p99_s"]}}
    end_to_end = latency["end_to_end"]
    # r0's histogram (0.004, 0.05, 0.06 in buckets 0.01 and 0.1) and the replicas' empty ones, whose
    # other buckets are left out of the sum: at 0.01: 1, at 0.1: 3; rank 2.97 in (0.01, 0.1].
    assert end_to_end["count"] == 3
    assert math.isclose(end_to_end["p99_s"], 0.01 + 0.09 * (2.97 - 1) / 2)


def test_the_active_controller_s_elections_failovers_and_reshards_and_refusals_summed_by_reason():
    report = figures(_cluster())
    assert report["controller"] == {"c-a": {"active": True, "epoch": 7, "elections_won": 1,
                                            "leader_elections": {"partition": 2, "vp": 1},
                                            "reshards": {"merge": 0, "open_lane": 0, "split": 1}}}
    assert report["refused"] == {"authentication": 12, "bad_frame": 8, "connections_max": 4, "not_authorized": 16,
                                 "out_of_turn": 20}, "three replicas and a read node, each with the same counters"


def test_a_target_that_gave_no_exposition_is_listed_with_why_and_its_figures_are_missing():
    report = figures([_answer("read_node", "r0", error="did not answer within 2.0 s"),
                      _answer("replica", "orders-3/w1", "this is not an exposition {"),
                      _answer("controller", "c-a", _controller())])
    assert report["not_answering"]["read_node"] == {"r0": "did not answer within 2.0 s"}
    assert report["not_answering"]["replica"]["orders-3/w1"].startswith("served no Prometheus text exposition")
    assert report["feed_lag"] == {} and report["group_lag"] == {} and report["refused"] == {}
    assert report["latency"]["produce"] == {"count": 0, "p99_s": None, "by_topic": {}}
    assert report["controller"]["c-a"]["epoch"] == 7


def test_a_literal_exposition_as_a_node_serves_it():
    text = "\n".join([
        "# TYPE mafka4_group_lag_messages gauge",
        'mafka4_group_lag_messages{group="g",topic="t",vp="2"} 41.0',
        "# TYPE mafka4_end_to_end_latency_seconds histogram",
        'mafka4_end_to_end_latency_seconds_bucket{le="1.0",node="r0",topic="t"} 0.0',
        'mafka4_end_to_end_latency_seconds_bucket{le="+Inf",node="r0",topic="t"} 10.0',
        'mafka4_end_to_end_latency_seconds_count{node="r0",topic="t"} 10.0',
        'mafka4_end_to_end_latency_seconds_sum{node="r0",topic="t"} 100.0', ""])
    report = figures([_answer("read_node", "r0", text)])
    assert report["group_lag"] == {"g": {"messages": 41, "messages_at": "t/v2"}}, "no seconds served: none shown"
    assert report["latency"]["end_to_end"] == {"count": 10, "p99_s": 1.0,
                                               "by_topic": {"t": {"count": 10, "p99_s": 1.0}}}, \
        "past every finite bound: the highest, as histogram_quantile says"


def test_bucket_quantile_interpolates_within_its_bucket_as_prometheus_does():
    buckets = {0.1: 50, 0.5: 90, 1.0: 100, math.inf: 100}
    assert bucket_quantile(0.5, buckets) == 0.1
    assert math.isclose(bucket_quantile(0.25, buckets), 0.05)
    assert math.isclose(bucket_quantile(0.7, buckets), 0.1 + 0.4 * 0.5)
    assert math.isclose(bucket_quantile(0.99, buckets), 0.5 + 0.5 * 0.9)
    assert bucket_quantile(0.99, {0.1: 0, math.inf: 0}) is None, "nothing observed"
    assert summed_buckets([{0.1: 1, 1.0: 2, math.inf: 3}, {0.1: 4, math.inf: 4}]) == {0.1: 5, math.inf: 7}


def test_status_scrapes_every_target_in_parallel_and_lists_one_that_does_not_answer_in_time():
    served = MetricsServer("read node r0", read_node_families, _read_node_snapshot)
    silent = socket.socket()  # accepts connections (the kernel's backlog) and never answers
    silent.bind((LOOPBACK, 0))
    silent.listen(8)
    refused = socket.socket()
    refused.bind((LOOPBACK, 0))  # bound, not listening: connections are refused
    try:
        targets = [MetricsTarget("read_node", "r0", served.start(LOOPBACK)),
                   MetricsTarget("replica", "orders-0/w0", "%s:%d" % silent.getsockname()),
                   MetricsTarget("replica", "orders-0/w1", "%s:%d" % refused.getsockname())]
        answers = scrape_all(targets, timeout_s=0.5, threads_max=2, deadline_s=5)
    finally:
        served.stop()
        silent.close()
        refused.close()
    assert [answer.target for answer in answers] == targets
    assert answers[0].error is None and "mafka4_feed_lag_messages" in answers[0].text
    assert answers[1].text is None and "within 0.5 s" in answers[1].error
    assert answers[2].text is None and answers[2].error
    report = figures(answers)
    assert set(report["not_answering"]["replica"]) == {"orders-0/w0", "orders-0/w1"}
    assert report["feed_lag"] == {"r0": {"messages": 30, "seconds": 2.5}}


def test_scrapes_not_started_by_the_deadline_are_listed_not_waited_for():
    silent = socket.socket()
    silent.bind((LOOPBACK, 0))
    silent.listen(8)
    try:
        address = "%s:%d" % silent.getsockname()
        targets = [MetricsTarget("replica", f"orders-{n}/w0", address) for n in range(3)]
        answers = scrape_all(targets, timeout_s=0.3, threads_max=1, deadline_s=0.1)
    finally:
        silent.close()
    assert "within 0.3 s" in answers[0].error, "the one running at the deadline ends within its own timeout"
    assert all("not scraped" in answer.error for answer in answers[1:])
