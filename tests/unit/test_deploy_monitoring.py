"""``deploy/``: the Grafana dashboard and the Prometheus alert rules name only metrics mafka4 serves,
and Prometheus's own checker takes them (when ``promtool`` is installed: scripts/setup.sh installs it)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from mafka4.metrics.controller_counters import ControllerCounters
from mafka4.metrics.families import controller_families, read_node_families, replica_families
from test_metric_families import _read_node_snapshot, _replica_snapshot

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
ALERTS, DASHBOARD = DEPLOY / "prometheus-alerts.yml", DEPLOY / "grafana-dashboard.json"
# A metric name in a PromQL expression (the label values quoted in it are no names: none starts so).
METRIC_NAME = re.compile(r"\bmafka4_[a-z0-9_]+")
# Grafana's variables, as a dashboard's expression holds them, and what stands for each when checked.
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$cluster": ".*"}
EXPECTED_ALERTS = {"mafka4-consumers": {"Mafka4GroupBacklog", "Mafka4GroupBacklogAge", "Mafka4ConsumerOffline"},
                   "mafka4-replication": {"Mafka4UnderMinIsr", "Mafka4UnderReplicated"},
                   "mafka4-read-path": {"Mafka4FeedLag"},
                   "mafka4-controller": {"Mafka4ControllerFailovers"}}


def served_names() -> set[str]:
    """Every sample name a replica leader, a read node and an active controller serve."""
    counters = ControllerCounters("c-a")
    counters.won(1)
    lag = {"group": "g", "topic": "orders", "lag_messages": 3, "lag_ms": 1_000}
    families = (replica_families({**_replica_snapshot(), "group_lag": [{**lag, "partition": 3}]})
                + read_node_families({**_read_node_snapshot(), "group_lag": [{**lag, "vp": 0}]})
                + controller_families(counters.snapshot()))
    return {sample.name for family in families for sample in family.samples}


def alert_rules() -> dict:
    return yaml.safe_load(ALERTS.read_text())


def dashboard_expressions() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    expressions = [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", ())]
    expressions += [variable["query"]["query"] for variable in dashboard["templating"]["list"]
                    if isinstance(variable.get("query"), dict)]
    return expressions


def test_the_alert_rules_are_the_expected_groups_each_rule_with_a_severity_and_a_summary():
    groups = alert_rules()["groups"]
    assert {group["name"]: {rule["alert"] for rule in group["rules"]} for group in groups} == EXPECTED_ALERTS
    for rule in (rule for group in groups for rule in group["rules"]):
        assert rule["labels"]["severity"] in ("warning", "critical"), rule["alert"]
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], rule["alert"]


def test_the_dashboard_shows_produce_fetch_replication_feed_and_group_lag():
    dashboard = json.loads(DASHBOARD.read_text())
    titles = " | ".join(panel["title"] for panel in dashboard["panels"])
    for shown in ("Produce rate", "Produce latency p99", "End-to-end latency p99", "Fetch rate", "ISR", "RISR",
                  "Feed lag", "Group lag (messages)", "Group lag (seconds"):
        assert shown in titles, shown
    assert len({panel["id"] for panel in dashboard["panels"]}) == len(dashboard["panels"]), "panel ids are unique"


def test_every_metric_the_dashboard_and_the_rules_name_is_one_mafka4_serves():
    served = served_names()
    rules = [rule["expr"] for group in alert_rules()["groups"] for rule in group["rules"]]
    named = {name for expression in rules + dashboard_expressions() for name in METRIC_NAME.findall(expression)}
    assert {"mafka4_group_lag_seconds", "mafka4_replica_produce_latency_seconds_bucket",
            "mafka4_end_to_end_latency_seconds_bucket"} <= named, "names were found"
    assert named - served == set(), f"named but never served: {sorted(named - served)}"


PROMTOOL = shutil.which("promtool")


@pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed (scripts/setup.sh installs prometheus)")
def test_promtool_takes_the_alert_rules():
    checked = subprocess.run([PROMTOOL, "check", "rules", str(ALERTS)], capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr


@pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed (scripts/setup.sh installs prometheus)")
def test_promtool_parses_every_dashboard_expression(tmp_path):
    """Each expression, its Grafana variables given a value, as a recording rule: promtool parses it."""
    expressions = []
    for expression in dashboard_expressions():
        if expression.startswith("label_values("):
            continue  # Grafana's own query, not PromQL
        for variable, value in GRAFANA_VARIABLES.items():
            expression = expression.replace(variable, value)
        expressions.append(expression)
    rules = {"groups": [{"name": "dashboard", "rules": [{"record": f"mafka4_dashboard:expression_{n}", "expr": e}
                                                         for n, e in enumerate(expressions)]}]}
    path = tmp_path / "dashboard-rules.yml"
    path.write_text(yaml.safe_dump(rules))
    checked = subprocess.run([PROMTOOL, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr
