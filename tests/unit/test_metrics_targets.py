"""``metrics.targets``: the metrics addresses named in liveness keys, and Prometheus's file_sd JSON of them."""

from __future__ import annotations

from mafka4.metadata import keys
from mafka4.metrics.targets import (MetricsTarget, file_sd, liveness_keys, liveness_prefixes, metrics_address, metrics_targets,
                                    shown_targets, targets_by_process)


def test_targets_come_from_read_node_and_replica_liveness_values_naming_a_metrics_address():
    items = [
        (keys.read_node_liveness("c", "r1"), {"node_id": "r1", "client": "10.0.0.2:9192", "metrics": "10.0.0.2:40001"}),
        (keys.read_node_liveness("c", "r0"), {"node_id": "r0", "client": "10.0.0.1:9192", "metrics": "10.0.0.1:40000"}),
        (keys.replica_liveness("c", "orders", 2, "w0"), {"replica_id": "w0", "client": "h:1", "metrics": "h:2"}),
        # a process of before metrics, and one whose metrics server did not start: no target
        (keys.read_node_liveness("c", "old"), {"node_id": "old", "client": "10.0.0.3:9192"}),
        (keys.replica_liveness("c", "orders", 0, "w1"), {"replica_id": "w1", "client": "h:3", "metrics": None}),
        (keys.read_node_liveness("other", "r9"), {"node_id": "r9", "metrics": "h:9"}),  # another cluster's
        (keys.controller("c"), {"controller_id": "c-a", "controller_epoch": 3, "pid": 7, "metrics": "h:5"}),
        (keys.controller_epoch("c"), 3),  # read with it by a prefix read of the controller key: no target
    ]
    targets = metrics_targets("c", items)
    assert targets == [MetricsTarget("controller", "c-a", "h:5"),
                       MetricsTarget("read_node", "r0", "10.0.0.1:40000"),
                       MetricsTarget("read_node", "r1", "10.0.0.2:40001"),
                       MetricsTarget("replica", "orders-2/w0", "h:2")]
    assert targets_by_process(targets) == {"controller": {"c-a": "h:5"},
                                           "read_node": {"r0": "10.0.0.1:40000", "r1": "10.0.0.2:40001"},
                                           "replica": {"orders-2/w0": "h:2"}}
    assert shown_targets(targets_by_process(targets)) == targets
    assert all(any(key.startswith(prefix) for prefix in liveness_prefixes("c")) for key, _ in items[:5])
    assert keys.controller("c") in liveness_keys("c")
    assert metrics_targets("c", [(keys.controller("c"), {"controller_id": "c-b", "controller_epoch": 1})]) == [], \
        "a controller of before metrics names none"


def test_file_sd_gives_each_process_its_target_with_labels_that_clash_with_no_metric_label():
    targets = [MetricsTarget("read_node", "r0", "127.0.0.1:40000"), MetricsTarget("replica", "orders-2/w0", "h:2")]
    assert file_sd("c", targets) == [
        {"targets": ["127.0.0.1:40000"], "labels": {"cluster": "c", "process": "read_node", "mafka4_name": "r0"}},
        {"targets": ["h:2"], "labels": {"cluster": "c", "process": "replica", "mafka4_name": "orders-2/w0"}},
    ]
    assert file_sd("c", []) == []


def test_a_value_that_is_no_dict_names_no_address():
    assert metrics_address(None) is None and metrics_address("h:1") is None and metrics_address({}) is None
