"""The benchmarks run end to end at a tiny size: what they measure is in their JSON, not checked here.

Wall-clock figures are never asserted (the machine is shared); what is checked is that a trial
of each mode runs, loses no message and writes the report the README and the notes quote. The
read-path benches (vp-density, feed-lag) need two read nodes and two write nodes: they run on
the module's ``read_cluster``. The consume bench's members are processes of their own, thin
clients of the session cluster (the access its driver reads from its connection).
"""

from __future__ import annotations

import json

import pytest

from benchmarks.feed_lag import run_feed_lag_bench
from benchmarks.lag import FeedLagBenchSettings
from mafka4.bench.consume import run_consume_bench
from mafka4.bench.density import VpDensityBenchSettings
from mafka4.bench.drain import ConsumeBenchSettings, table
from mafka4.bench.join_hops import HOP_NAMES
from mafka4.bench.vp_density import run_vp_density_bench
from mafka4.bench.vp_join import VpJoinBenchSettings, run_vp_join_bench
from mafka4.client.admin import Admin

# Smoke-size runs of experiment commands: CI's second step, not the default suite.
pytestmark = pytest.mark.experiment


def test_the_vp_join_bench_runs_a_mafka4_and_a_mafka3_trial_and_writes_its_report(cluster, tmp_path):
    settings = VpJoinBenchSettings(partitions=2, consumers=2, rate_msgs_per_s=200, warmup_s=2.0, after_join_s=4.0,
                                   trials=1)
    output = tmp_path / "vp_join.json"
    report = run_vp_join_bench(settings, str(output))
    assert json.loads(output.read_text()) == json.loads(json.dumps(report))
    mafka4, mafka3 = report["summary"]["mafka4"], report["summary"]["mafka3"]
    assert mafka4["missing_each"] == [0] and mafka3["missing_each"] == [0]
    (trial,) = report["mafka4_trials"]
    assert trial["split_vps"], "one VP per member: the joiner gets capacity by a split"
    assert trial["virtual_partitions_after"] == 3
    assert set(trial["member_stall_ms"]) == {"member-0", "member-1"}
    assert trial["new_member_first_message_ms"] is not None
    # The join trace saw every process: the joiner, its coordinator, the controller (through the
    # split's result) and the parent's sealed end (through the bench's watch).
    hops = trial["join_hops_ms"]
    assert list(hops) == list(HOP_NAMES) and trial["join_trace_rows_dropped"] == 0 and trial["join_trace_rows"]
    for hop in ("join_sent", "coordinator_join", "split_asked", "intent_taken", "epoch_stored", "children_hosted",
                "parent_sealed", "claimed", "assigned", "fetch_sent", "first_data"):
        assert hops[hop] is not None, (hop, hops)
    assert hops["join_sent"] <= hops["coordinator_join"] and hops["intent_taken"] <= hops["epoch_stored"] <= \
        hops["claimed"] <= hops["assigned"] <= hops["first_data"], hops
    assert set(mafka4["join_hops_ms_median"]) == set(HOP_NAMES)
    assert report["mafka3_trials"][0]["new_member_first_message_ms"] is not None


def test_the_consume_bench_drains_a_backlog_per_read_mode_with_each_consumer_count_and_loses_nothing(cluster, tmp_path):
    settings = ConsumeBenchSettings.smoke_sized(ack_cadences=("per-read", "every-50ms"))
    output = tmp_path / "consume.json"
    report = run_consume_bench(settings, str(output))
    assert json.loads(output.read_text()) == json.loads(json.dumps(report))
    rows = report["rows"]
    assert [(row["read_mode"], row["ack"], row["consumers"]) for row in rows] == [
        (mode, ack, consumers) for mode in ("mafka3", "mafka4") for ack in ("per-read", "every-50ms")
        for consumers in (1, 2)]
    for row in rows:
        where = (row["read_mode"], row["ack"], row["consumers"])
        assert row["commit_errors"] == 0, where
        assert all(member["end_ms"] >= member["last_message_ms"] for member in row["members"]), "the last commit ends it"
        assert row["messages_read"] == row["messages"] == settings.messages and row["missing"] == 0, where
        assert row["duplicates"] == row["duplicates_across_members"] == row["outside_backlog"] == 0, where
        assert row["messages_while_joining"] == 0 and row["late_messages"] == 0, where
        assert row["consumers_with_work"] == row["consumers"], "2 partitions (or VPs): every member reads one"
        assert all(member["complete"] for member in row["members"]), where
        latency = row["fetch_latency_ms"]
        assert row["msgs_per_s"] > 0 and 0 < latency["p50"] <= latency["p99"] <= latency["p99.9"], where
    backlogs = {backlog["read_mode"]: backlog for backlog in report["backlogs"]}
    assert backlogs["mafka4"]["virtual_partitions"] == 2 and len(backlogs["mafka4"]["ranges"]) == 2
    assert backlogs["mafka3"]["virtual_partitions"] == 0 and len(backlogs["mafka3"]["ranges"]) == 2
    assert set(report["summary"]) == {"mafka3", "mafka4"} and len(report["load_average_1m"]) == 2
    assert "not a result" in table(report)
    topics = Admin(cluster).list_topics()
    assert not {backlog["topic"] for backlog in report["backlogs"]} & set(topics), "the bench deletes its topics"


def test_the_vp_density_bench_measures_read_nodes_before_and_after_hosting_next_to_a_bare_actor(read_cluster, tmp_path):
    settings = VpDensityBenchSettings.smoke_sized()
    output = tmp_path / "vp_density.json"
    report = run_vp_density_bench(settings, str(output))
    assert json.loads(output.read_text()) == json.loads(json.dumps(report))
    assert sorted(report["read_nodes"]) == ["r0", "r1"]
    nodes = report["nodes"]
    replicas = settings.virtual_partitions * settings.read_replicas
    assert sum(node["topic_vps_hosted"] for node in nodes.values()) == replicas
    for node in nodes.values():
        assert node["rss_bytes_before"] > 0 and node["rss_bytes_after"] > 0
        assert node["cores_before"] >= 0 and node["cores_after"] >= 0
    for window in report["windows"].values():
        assert len(window["load_average_1m"]) == 2 and isinstance(window["quiet"], bool)
        assert set(window["processes"]) == {"r0", "r1", "bare_actor"}
    summary = report["summary"]
    for name in ("rss_bytes_per_vp", "rss_bytes_per_vp_replica", "idle_cores_per_vp", "idle_cores_per_vp_replica",
                 "bare_actor_vs_vp_rss_ratio", "bare_actor_uss_vs_vp_rss_ratio", "bare_actor_vs_vp_cores_ratio"):
        assert name in summary, name
    assert summary["bare_actor_rss_bytes"] >= summary["bare_actor_uss_bytes"] > 0
    assert summary["bare_actor_idle_cores"] >= 0
    assert 0 < summary["create_topic_s"] <= summary["risr_complete_s"]
    assert isinstance(summary["quiet"], bool)
    assert not set(report["topics"]) & set(Admin(read_cluster).list_topics()), "the bench deletes its topics"


def test_the_feed_lag_bench_samples_the_lag_while_producing_and_until_feeding_caught_up(read_cluster, tmp_path):
    settings = FeedLagBenchSettings.smoke_sized()
    output = tmp_path / "feed_lag.json"
    report = run_feed_lag_bench(settings, str(output))
    assert json.loads(output.read_text()) == json.loads(json.dumps(report))
    (run,) = report["runs"]
    assert run["virtual_partitions"] == 8 and set(report["summary"]) == {"8"}
    producer = run["producer"]
    assert producer["messages"] > 0 and producer["failed"] == 0 and producer["flushed"] and producer["msgs_per_s"] > 0
    lag = run["lag"]
    assert lag["samples"] >= 2
    for unit in ("records", "ms"):
        assert 0 <= lag[unit]["p50"] <= lag[unit]["p99"] <= lag[unit]["max"]
    assert run["drain_s"] is not None, "feeding caught up with everything produced"
    assert isinstance(run["bounded"], bool) and isinstance(run["quiet"], bool)
    assert sum(counters["records_fed"] for feeds in run["feeds_at_end"].values() for counters in feeds.values()) > 0
    assert run["topic"] not in Admin(read_cluster).list_topics(), "the bench deletes its topic"
