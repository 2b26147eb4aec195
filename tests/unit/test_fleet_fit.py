"""From a calibration run's raw figures to CalibrationParams, and the calibration file."""

import json

import pytest

from mafka4.errors import InvalidConfig
from simulations.fleet.fit import derive_params
from simulations.fleet.params import DEFAULT_CALIBRATION, CalibrationParams, load_calibration

KIB = 1024


def _cpu_s(request_us, msg_us, byte_ns, requests, messages, size):
    return (requests * request_us + messages * msg_us + messages * (size - KIB) * byte_ns / 1000) / 1e6


def _runs(request_us, msg_us, byte_ns, key):
    shapes = [("small", 1000, 1000, KIB), ("large", 20, 20_000, KIB), ("big", 24, 1500, 16 * KIB)]
    return [{"name": name, "requests": r, "messages": m, "bytes": m * size,
             key: _cpu_s(request_us, msg_us, byte_ns, r, m, size)} for name, r, m, size in shapes]


def synthetic_raw(base_p50=(10.0, 11.0), loaded_p50=(40.0, 41.0)) -> dict:
    """Raw figures generated from known costs, as ``calibrate.measure`` records them."""
    rf1 = _runs(900, 3.0, 2.0, "leader_cpu_s")
    replicated = _runs(900 + 400, 3.0 + 1.0, 2.0 + 1.0, "leader_cpu_s")
    for run, follower in zip(replicated, _runs(700, 2.0, 2.0, "followers_cpu_s")):
        run["followers_cpu_s"] = follower["followers_cpu_s"]
    feed_runs = [{"name": "small", "messages": 500, "bytes": 500 * KIB, "rounds": 80},
                 {"name": "large", "messages": 15_000, "bytes": 15_000 * KIB, "rounds": 5}]
    for run in feed_runs:
        calls = run["rounds"] * 4
        run["feeder_cpu_s"] = (calls * 1200 + run["messages"] * 17) / 1e6
        run["vps_cpu_s"] = (calls * 2000 + run["messages"] * 10) / 1e6
    return {
        "produce": {"replication_factor": 2, "rf1": rf1, "replicated": replicated},
        "read": {"runs": _runs(1000, 1.0, 0.5, "leader_cpu_s")},
        "feed": {"virtual_partitions": 4, "runs": feed_runs},
        "idle": {"unreplicated_leader_cores": [0.01, 0.01], "replicated_leader_cores": [0.02], "follower_cores": [0.01],
                 "vp_replica_cores": [0.01] * 4, "feeder_cores": [0.03], "wakeups": {"rf3_replica_cores": [0.4, 0.2, 0.2]}},
        "memory": {"unreplicated_leader_uss_mb": [65.0, 65.0], "replicated_leader_uss_mb": [66.0],
                   "follower_uss_mb": [66.0], "vp_replica_uss_mb": [66.0] * 4, "feeder_uss_mb": [67.0]},
        "latency": {"physical_read_p50_ms": 0.5, "virtual_read_p50_ms": 9.0, "base_p50_ms": list(base_p50),
                    "loaded_p50_ms": list(loaded_p50), "extra_replicas_per_node": 6},
    }


def test_derive_recovers_the_costs_the_figures_were_made_from():
    params, notes = derive_params(synthetic_raw())
    assert (params.produce_request_cpu_us, params.produce_msg_cpu_us, params.produce_byte_cpu_ns) == pytest.approx((900, 3, 2))
    # per follower: the leader's extra (400, 1, 1) plus the follower's own (700, 2, 2)
    assert (params.replication_request_cpu_us, params.replication_msg_cpu_us,
            params.replication_byte_cpu_ns) == pytest.approx((1100, 3, 3))
    assert (params.read_request_cpu_us, params.read_msg_cpu_us) == pytest.approx((1000, 1))
    assert (params.feeder_call_cpu_us, params.feeder_msg_cpu_us) == pytest.approx((1200, 17))
    assert (params.vp_feed_call_cpu_us, params.vp_feed_msg_cpu_us) == pytest.approx((2000, 10))
    assert params.idle_replica_cpu_cores == pytest.approx(0.01)
    assert params.idle_wakeup_cpu_cores_per_partition == pytest.approx(0.8 - 3 * 0.01)
    assert params.produce_base_latency_ms == pytest.approx(10.5)
    assert params.pass_ms_per_replica == pytest.approx(30 / 6)
    assert notes == []


def test_a_latency_difference_within_the_noise_gives_no_per_replica_cost():
    params, notes = derive_params(synthetic_raw(base_p50=(10.0, 30.0), loaded_p50=(25.0, 12.0)))
    assert params.pass_ms_per_replica == 0.0
    assert any("pass_ms_per_replica" in note for note in notes)


def test_calibration_file_round_trip_and_errors(tmp_path):
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps({"derived": DEFAULT_CALIBRATION.to_json()}))
    assert load_calibration(path) == DEFAULT_CALIBRATION
    path.write_text(json.dumps({"derived": {**DEFAULT_CALIBRATION.to_json(), "produce_msg_cpu_us": -1}}))
    with pytest.raises(InvalidConfig, match="produce_msg_cpu_us"):
        load_calibration(path)
    path.write_text(json.dumps({"raw": {}}))
    with pytest.raises(InvalidConfig, match="derived"):
        load_calibration(path)
    with pytest.raises(InvalidConfig, match="cannot read"):
        load_calibration(tmp_path / "missing.json")


def test_unknown_and_missing_fields_are_named():
    values = DEFAULT_CALIBRATION.to_json()
    with pytest.raises(InvalidConfig, match="bogus"):
        CalibrationParams.from_json({**values, "bogus": 1})
    del values["feeder_call_cpu_us"]
    with pytest.raises(InvalidConfig, match="feeder_call_cpu_us"):
        CalibrationParams.from_json(values)


def test_the_default_calibration_is_what_the_shipped_run_derives():
    from simulations.fleet.params import DEFAULT_CALIBRATION_PATH

    document = json.loads(DEFAULT_CALIBRATION_PATH.read_text())
    assert CalibrationParams.from_json(document["derived"]) == DEFAULT_CALIBRATION
    params, notes = derive_params(document["raw"])
    assert params == DEFAULT_CALIBRATION and notes == document["notes"]
