"""One short chaos run (``simulations.chaos.run``) on a real cluster: faults lose and reorder nothing,
the cluster heals by itself, and the strict verdict passes.

The run needs RF=3 and RR=2, so 3 write and 2 read nodes; the session cluster has one read
node, so this module starts a cluster of its own (and leaves the session's Ray meanwhile,
like the other own-cluster fixtures). Being thrown away afterwards, that cluster can take
every fault kind, the etcd restart included.
"""

from __future__ import annotations

import pytest

from conftest import own_cluster
from mafka4.limits.servers import ClusterConfig
from simulations.chaos.run import ChaosSettings, run_chaos, summary

SETTINGS = ChaosSettings(seed=7, duration_s=20, rate_msgs_per_s=300, members=2, warmup_s=2, settle_s=3)


@pytest.fixture
def chaos_cluster():
    """3 write nodes and 2 read nodes; yields the connection and the list of etcd servers the run starts."""
    config = ClusterConfig(write_nodes=SETTINGS.replication_factor, read_nodes=SETTINGS.read_replicas)
    with own_cluster(config) as local:
        yield local.connection, local.etcd_started


@pytest.mark.experiment
def test_a_short_chaos_run_heals_and_loses_and_reorders_no_acknowledged_message(chaos_cluster):
    connection, etcd_started = chaos_cluster
    report = run_chaos(SETTINGS, connection, etcd_started)
    print(summary(report))
    injected = [f for f in report["faults"] if not f["outcome"].startswith("not injected")]
    assert injected, f"no fault was injected: {report['faults']}"
    assert report["heal"]["healed"], report["heal"]
    assert report["messages"]["acknowledged"] > 0 and report["drained"], report["unread_explained"]
    messages = report["messages"]
    assert messages["delayed_acknowledged"] > 0 and messages["nacked"] > 0 and messages["retried"] > 0, messages
    assert messages["dead_lettered"] > 0, messages  # the poison values, dead after their last delivery
    assert report["anomalies"]["lost"] == 0, report["anomaly_samples"]
    assert report["anomalies"]["reordered"] == 0, report["anomaly_samples"]
    assert report["verdict"]["passed"], (report["verdict"]["reasons"], report["anomaly_samples"], report["member_errors"])
