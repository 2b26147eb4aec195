"""From a calibration run's raw figures to CalibrationParams and their errors, and the calibration file."""

import json
import math
from dataclasses import fields

import pytest

from mafka4.errors import InvalidConfig
from simulations.fleet.fit import SCHEDSTAT_LAG_S_MAX, derive_params
from simulations.fleet.params import CALIBRATION_FORMAT, DEFAULT_CALIBRATION, CalibrationParams, load_calibration

KIB, MIB = 1024, 1024 * 1024
TRIAL_SCALES = (0.98, 1.0, 1.02)  # each cost trial's CPU, relative: the trials' fits spread by 2 %
TRIAL_SPREAD = 0.02 / math.sqrt(3)  # the standard error of their mean, relative
SLICE_NOISE = (0.002, -0.002, 0.001, -0.001, 0.0, 0.0)  # cores, around a process's rate; sum 0
VP_CORES, VP_BYTES, DENSITY_VPS = 7.7e-5, 21_500, 128


def _cpu_s(request_us, msg_us, byte_ns, requests, messages, size):
    return (requests * request_us + messages * msg_us + messages * (size - KIB) * byte_ns / 1000) / 1e6


def _runs(request_us, msg_us, byte_ns, key, scale=1.0):
    shapes = [("small", 1000, 1000, KIB), ("large", 20, 20_000, KIB), ("big", 24, 1500, 16 * KIB)]
    return [{"name": name, "requests": r, "messages": m, "bytes": m * size,
             key: scale * _cpu_s(request_us, msg_us, byte_ns, r, m, size)} for name, r, m, size in shapes]


def _produce_trial(scale):
    rf1 = _runs(900, 3.0, 2.0, "leader_cpu_s", scale)
    replicated = _runs(900 + 400, 3.0 + 1.0, 2.0 + 1.0, "leader_cpu_s", scale)
    for run, follower in zip(replicated, _runs(700, 2.0, 2.0, "followers_cpu_s", scale)):
        run["followers_cpu_s"] = follower["followers_cpu_s"]
    return {"rf1": rf1, "replicated": replicated}


def _feed_trial(scale):
    runs = [{"name": "small", "messages": 500, "bytes": 500 * KIB, "rounds": 80},
            {"name": "large", "messages": 15_000, "bytes": 15_000 * KIB, "rounds": 5}]
    for run in runs:
        calls = run["rounds"] * 4
        run["feeder_cpu_s"] = scale * (calls * 1200 + run["messages"] * 17) / 1e6
        run["vps_cpu_s"] = scale * (calls * 2000 + run["messages"] * 10) / 1e6
    return runs


def _process(role, cores, rss_bytes=300 * MIB):
    return {"pid": 1, "role": role, "cores": cores, "slice_cores": [cores + n for n in SLICE_NOISE],
            "rss_bytes": [rss_bytes] * (len(SLICE_NOISE) + 1)}


def _window(processes, window_s=60.0):
    return {"window_s": window_s, "load_average_1m": [0.5, 0.6], "processes": processes}


def _replicas(leader_cores):
    return {"cal-rf1/leader": _process("unreplicated_leader", leader_cores),
            "cal-vp/leader": _process("unreplicated_leader", 0.010),
            "cal-rf2/leader": _process("replicated_leader", 0.012),
            "cal-rf2/follower": _process("follower", 0.008)}


def synthetic_raw(base_p50=(10.0, 10.2, 9.8, 10.1, 9.9), loaded_p50=(13.0, 13.2, 12.8, 13.1, 12.9), window_s=60.0) -> dict:
    """Raw figures in calibration format 2 generated from known costs, as ``calibrate.measure`` records them."""
    before = {**_replicas(0.010), "read_node": _process("read_node", 0.05)}
    after = {**_replicas(0.010), "cal-density/leader": _process("unreplicated_leader", 0.010),
             "read_node": _process("read_node", 0.05 + DENSITY_VPS * VP_CORES, 300 * MIB + DENSITY_VPS * VP_BYTES)}
    rf3 = {name: _process("", cores) for name, cores in (("cal-rf3/leader", 0.4), ("cal-rf3/follower1", 0.2),
                                                          ("cal-rf3/follower2", 0.2))}
    return {
        "format": CALIBRATION_FORMAT,
        "produce": {"replication_factor": 2, "trials": [_produce_trial(s) for s in TRIAL_SCALES]},
        "read": {"trials": [_runs(1000, 1.0, 0.5, "leader_cpu_s", s) for s in TRIAL_SCALES]},
        "feed": {"virtual_partitions": 4, "trials": [_feed_trial(s) for s in TRIAL_SCALES]},
        "idle": {"before": _window(before, window_s), "after": _window(after, window_s), "rf3": _window(rf3, window_s)},
        "density": {"topic": "cal-density", "virtual_partitions": DENSITY_VPS, "read_replicas": 1,
                    "hosted_vps_before": 4, "hosted_vps_after": 4 + DENSITY_VPS},
        "memory": {"replica_uss_mb": [65.0, 65.0, 66.0, 66.0, 65.5], "replica_rss_mb": [140.0] * 5},
        "latency": {"physical_read_ms": [0.3, 0.5, 0.4, 0.6, 0.5], "virtual_read_ms": [4.0, 4.2, 3.8, 4.1, 3.9],
                    "base_p50_ms": list(base_p50), "loaded_p50_ms": list(loaded_p50), "extra_replicas_per_node": 6},
    }


def test_derive_recovers_the_costs_the_figures_were_made_from():
    derivation = derive_params(synthetic_raw())
    params, error = derivation.params, derivation.measurement_error
    assert (params.produce_request_cpu_us, params.produce_msg_cpu_us, params.produce_byte_cpu_ns) == pytest.approx((900, 3, 2))
    # per follower: the leader's extra (400, 1, 1) plus the follower's own (700, 2, 2)
    assert (params.replication_request_cpu_us, params.replication_msg_cpu_us,
            params.replication_byte_cpu_ns) == pytest.approx((1100, 3, 3))
    assert (params.read_request_cpu_us, params.read_msg_cpu_us) == pytest.approx((1000, 1))
    assert (params.feeder_call_cpu_us, params.feeder_msg_cpu_us) == pytest.approx((1200, 17))
    assert (params.vp_feed_call_cpu_us, params.vp_feed_msg_cpu_us) == pytest.approx((2000, 10))
    assert params.produce_base_latency_ms == pytest.approx(10.0)
    assert params.physical_read_base_latency_ms == pytest.approx(0.5)
    assert params.virtual_read_base_latency_ms == pytest.approx(4.0)
    assert params.pass_ms_per_replica == pytest.approx(3.0 / 6)
    assert [note for note in derivation.notes if "clamped" in note] == []


def test_cpu_cost_errors_are_the_spread_of_the_trials_fits():
    error = derive_params(synthetic_raw()).measurement_error
    for name, value in (("produce_request_cpu_us", 900), ("produce_msg_cpu_us", 3), ("replication_request_cpu_us", 1100),
                        ("read_byte_cpu_ns", 0.5), ("feeder_call_cpu_us", 1200), ("vp_feed_msg_cpu_us", 10)):
        assert error[name] == pytest.approx(value * TRIAL_SPREAD, rel=1e-2), name


def test_idle_cpu_and_memory_of_replicas_and_hosted_vps():
    derivation = derive_params(synthetic_raw())
    params, error = derivation.params, derivation.measurement_error
    resolution = 2 * SCHEDSTAT_LAG_S_MAX / 60.0
    replicas = [0.010, 0.010, 0.012, 0.008, 0.010]  # the window after: the density topic's leader too
    standard_error = math.sqrt(sum((c - 0.01) ** 2 for c in replicas) / 4 / 5)
    assert params.idle_replica_cpu_cores == pytest.approx(0.01)
    assert error["idle_replica_cpu_cores"] == pytest.approx(math.hypot(standard_error, resolution), rel=1e-2)
    # A VP replica: the read node's growth per hosted VP, in CPU and in RSS.
    assert params.idle_vp_replica_cpu_cores == pytest.approx(VP_CORES, rel=1e-3)
    slice_error = math.sqrt(sum(n * n for n in SLICE_NOISE) / 5 / 6)
    assert error["idle_vp_replica_cpu_cores"] == pytest.approx(
        math.sqrt(2 * slice_error ** 2 + 2 * resolution ** 2) / DENSITY_VPS, rel=1e-2)
    assert params.vp_replica_memory_mb == pytest.approx(VP_BYTES / MIB, rel=1e-3)
    assert error["vp_replica_memory_mb"] == pytest.approx(math.sqrt(2) * 4096 / MIB / DENSITY_VPS, rel=1e-2)
    assert params.replica_memory_mb == pytest.approx(65.5)
    assert params.idle_wakeup_cpu_cores_per_partition == pytest.approx(0.8 - 3 * 0.01)
    assert (params.idle_feeder_cpu_cores, params.feeder_memory_mb) == (0.0, 0.0)
    assert (error["idle_feeder_cpu_cores"], error["feeder_memory_mb"]) == (0.0, 0.0)


def test_latency_errors_are_standard_errors_over_the_trials():
    error = derive_params(synthetic_raw()).measurement_error
    base = [10.0, 10.2, 9.8, 10.1, 9.9]
    sd = math.sqrt(sum((b - 10.0) ** 2 for b in base) / 4)
    assert error["produce_base_latency_ms"] == pytest.approx(sd / math.sqrt(5), rel=1e-2)
    # the slope's error: the Welch standard error of the difference of means, per extra replica
    assert error["pass_ms_per_replica"] == pytest.approx(math.sqrt(2 * sd ** 2 / 5) / 6, rel=1e-2)
    assert error["virtual_read_base_latency_ms"] == pytest.approx(
        math.sqrt(math.pi / 2) * sd / math.sqrt(5), rel=1e-2)
    assert error["service_scv"] == error["reference_message_bytes"] == 0.0
    assert set(error) == {f.name for f in fields(CalibrationParams)}


def test_a_significant_latency_slope_is_kept_and_the_note_states_the_test():
    notes = [n for n in derive_params(synthetic_raw()).notes if n.startswith("pass_ms_per_replica")]
    assert len(notes) == 1
    for part in ("slope +0.5000", "standard error", "Welch", "t=", "df=", "p=", "kept"):
        assert part in notes[0], part


def test_a_latency_difference_within_the_noise_gives_no_per_replica_cost():
    derivation = derive_params(synthetic_raw(base_p50=(10.0, 30.0, 12.0, 25.0, 11.0), loaded_p50=(25.0, 12.0, 30.0, 11.0, 14.0)))
    assert derivation.params.pass_ms_per_replica == 0.0
    assert derivation.measurement_error["pass_ms_per_replica"] > 0  # the slope's uncertainty stays on record
    (note,) = [n for n in derivation.notes if n.startswith("pass_ms_per_replica")]
    assert "not distinguishable from 0 at p >= 0.05" in note


def test_a_negative_latency_slope_is_clamped_to_zero():
    derivation = derive_params(synthetic_raw(base_p50=(13.0, 13.2, 12.8, 13.1, 12.9), loaded_p50=(10.0, 10.2, 9.8, 10.1, 9.9)))
    assert derivation.params.pass_ms_per_replica == 0.0
    (note,) = [n for n in derivation.notes if n.startswith("pass_ms_per_replica")]
    assert "slope -0.5000" in note and "negative slope is clamped to 0" in note


def test_a_vp_growth_hidden_by_the_noise_is_clamped_with_a_note():
    raw = synthetic_raw()
    after = raw["idle"]["after"]["processes"]["read_node"]
    after["rss_bytes"] = [300 * MIB] * len(after["rss_bytes"])
    after["cores"], after["slice_cores"] = 0.049, [0.049] * len(after["slice_cores"])
    derivation = derive_params(raw)
    assert derivation.params.vp_replica_memory_mb == 0.001 and derivation.params.idle_vp_replica_cpu_cores == 0.0
    assert sum("clamped" in note for note in derivation.notes) == 2


def test_short_idle_windows_are_noted():
    assert any("shorter than 60 s" in note for note in derive_params(synthetic_raw(window_s=4.0)).notes)
    assert not any("shorter than 60 s" in note for note in derive_params(synthetic_raw()).notes)


def test_raw_figures_of_the_old_format_or_of_one_trial_are_refused():
    with pytest.raises(InvalidConfig, match="format 1"):
        derive_params({"produce": {"rf1": []}})
    raw = synthetic_raw()
    raw["read"]["trials"] = raw["read"]["trials"][:1]
    with pytest.raises(InvalidConfig, match="cost trial"):
        derive_params(raw)


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


def test_a_density_topic_not_wholly_hosted_is_noted():
    raw = synthetic_raw()
    raw["density"]["hosted_vps_after"] = raw["density"]["hosted_vps_before"] + 96
    assert any("hosted 96 more VP replicas" in note for note in derive_params(raw).notes)
    assert not any("more VP replicas" in note for note in derive_params(synthetic_raw()).notes)
