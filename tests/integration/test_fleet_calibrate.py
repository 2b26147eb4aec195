"""``fleet calibrate`` against a live local cluster (etcd + Ray): slow, excluded by default.

Run with ``pytest -m slow tests/integration/test_fleet_calibrate.py``. The calibration starts
and stops its own cluster in a temp home, so no other cluster may run in this test session.
"""

import json

import pytest

from simulations.fleet.calibrate import CalibrationSettings, run_calibration
from simulations.fleet.params import load_calibration

SMALL = CalibrationSettings(small_messages=300, large_messages=5000, big_messages=300, feed_small_messages=200,
                            feed_large_messages=3000, idle_window_s=2.0, extra_partitions_per_node=2, paced_seconds=2,
                            pass_trials=2, wake_trials=4, cost_trials=2, density_virtual_partitions=32, settle_s=2.0)


@pytest.mark.slow
def test_calibration_measures_a_live_cluster_and_writes_usable_parameters(tmp_path):
    path = tmp_path / "calibration.json"
    document = run_calibration(path, SMALL, command="pytest test_fleet_calibrate")
    params = load_calibration(path)
    assert json.loads(path.read_text())["derived"] == params.to_json() == document["derived"]
    assert document["command"] == "pytest test_fleet_calibrate" and document["git_commit"] and document["date"]
    assert params.produce_msg_cpu_us > 0 and params.produce_request_cpu_us > 0
    assert params.feeder_msg_cpu_us > 0 and params.vp_feed_msg_cpu_us > 0
    assert 1.0 < params.replica_memory_mb < 4096
    # A VP is a log inside the read node, not a process: it costs a small part of one.
    assert 0 < params.vp_replica_memory_mb < params.replica_memory_mb / 10
    assert 0.0 <= params.idle_replica_cpu_cores < 1.0
    assert params.produce_base_latency_ms > 0
    raw = document["raw"]
    assert raw["format"] == 2 and len(raw["produce"]["trials"]) == SMALL.cost_trials
    assert [run["messages"] for run in raw["produce"]["trials"][0]["rf1"]] == [300, 5000, 300]
    assert all(run["rounds"] >= 1 for trial in raw["feed"]["trials"] for run in trial)
    assert len(raw["latency"]["base_p50_ms"]) == 2
    # Ack -> reader, produced and read over the client ports on both sides (wake_latency).
    latency = raw["latency"]
    assert len(latency["physical_read_ms"]) == len(latency["virtual_read_ms"]) == SMALL.wake_trials
    assert min(latency["physical_read_ms"] + latency["virtual_read_ms"]) >= 0.0
    assert latency["wake_trials_over"].startswith("client ports")
    assert raw["density"]["hosted_vps_after"] - raw["density"]["hosted_vps_before"] == SMALL.density_virtual_partitions
    assert set(document["measurement_error"]) == set(document["derived"]) and "quiet" in document["machine"]
