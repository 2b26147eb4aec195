"""``fleet sensitivity``: one calibrated parameter moved at a time, every row recorded, sorted by the node ratio's move."""

import json
import pytest

from mafka4.errors import InvalidConfig
from simulations.fleet import sensitivity
from simulations.fleet.calibrate import CalibrationSettings, make_document
from simulations.fleet.cli import main
from simulations.fleet.config import ModelConfig
from simulations.fleet.params import DEFAULT_CALIBRATION
from simulations.fleet.sensitivity import (BASELINE, CHANGES, METRICS, SensitivitySettings, calibrated_parameters,
                                           changed_value, markdown, moves_at, sensitivity_rows)
from simulations.fleet.sweep import SweepSettings, run_configuration
from test_fleet_calibration_shipped import QUIET_MACHINE
from test_fleet_fit import synthetic_raw

FAST = ModelConfig(latency_samples=20_000, sample_replicas_max=3000)


def test_the_baseline_is_a_plain_model_run_and_a_latency_the_sizing_ignores_moves_no_node():
    settings = SensitivitySettings(topics=200, consumer_scales=(1.0,), model=FAST,
                                   parameters=("physical_read_base_latency_ms",))
    rows, skipped = sensitivity_rows(DEFAULT_CALIBRATION, {}, settings)
    baseline, *changed = rows
    plain = {r.design.value: r for r, _, _ in run_configuration(
        SweepSettings(seed=7, topics=(200,), consumer_scales=(1.0,), rows=10, model=FAST), DEFAULT_CALIBRATION, 200, 1.0)}
    assert (baseline["parameter"], baseline["change"], baseline["value"]) == (BASELINE, BASELINE, None)
    for design in ("mafka3", "mafka4"):
        assert baseline[f"nodes_{design}"] == plain[design].nodes
        assert baseline[f"produce_tp999_{design}"] == plain[design].produce_latency_ms["tp999"]
        assert baseline[f"end_to_end_tp999_{design}"] == plain[design].end_to_end_latency_ms["tp999"]
    assert baseline["node_ratio"] == round(plain["mafka3"].nodes / plain["mafka4"].nodes, 4)
    assert [row["change"] for row in changed] == ["x0.8", "x1.2"]
    assert len(skipped) == 2 and all("sigma is 0" in s for s in skipped)
    value = DEFAULT_CALIBRATION.physical_read_base_latency_ms
    for row, factor in zip(changed, (0.8, 1.2)):
        assert row["value"] == pytest.approx(value * factor)
        for same in ("nodes_mafka3", "nodes_mafka4", "node_ratio", "produce_tp999_mafka3", "produce_tp999_mafka4",
                     "end_to_end_tp999_mafka4"):
            assert row[same] == baseline[same], same
        # Mafka3 consumers read the leader: its end-to-end tail moves by exactly the change.
        moved = row["end_to_end_tp999_mafka3"] - baseline["end_to_end_tp999_mafka3"]
        assert moved == pytest.approx(value * (factor - 1), abs=0.002)


def _fake_metrics(workload, params, settings):
    """A stand-in for the model: Mafka3 nodes follow replica memory strongly, idle replica CPU weakly; Mafka4's
    end-to-end tail follows the per-replica pass (as in the model, where a node's pass grows with its replicas)."""
    mafka3 = round(100 * params.replica_memory_mb / 65.5 + 1000 * params.idle_replica_cpu_cores)
    tail = round(46.0 + 600 * params.pass_ms_per_replica, 3)
    metrics = {"nodes_mafka3": mafka3, "nodes_mafka4": 50, "node_ratio": round(mafka3 / 50, 4),
               "produce_tp99_mafka3": 10.0, "produce_tp99_mafka4": 11.0, "produce_tp999_mafka3": 20.0,
               "produce_tp999_mafka4": 20.0, "end_to_end_tp99_mafka3": 12.0, "end_to_end_tp99_mafka4": 15.0,
               "end_to_end_tp999_mafka3": 21.0, "end_to_end_tp999_mafka4": tail}
    return metrics, ""


def test_every_parameter_gets_its_rows_and_sigma_changes_are_skipped_or_clamped(monkeypatch):
    monkeypatch.setattr(sensitivity, "model_metrics", _fake_metrics)
    errors = {"replica_memory_mb": 100.0, "idle_replica_cpu_cores": 0.001, "pass_ms_per_replica": 0.05,
              "idle_vp_replica_cpu_cores": 1.0}
    settings = SensitivitySettings(topics=50, consumer_scales=(1.0, 4.0))
    rows, skipped = sensitivity_rows(DEFAULT_CALIBRATION, errors, settings)
    assert len(calibrated_parameters()) == 24 and "service_scv" not in calibrated_parameters()
    for scale in (1.0, 4.0):
        own = [row for row in rows if row["consumers_scale"] == scale]
        assert [row["change"] for row in own if row["parameter"] == BASELINE] == [BASELINE]
        for name in calibrated_parameters():
            changes = [row["change"] for row in own if row["parameter"] == name]
            expected = list(CHANGES) if name in errors else ["x0.8", "x1.2"]
            if name == "replica_memory_mb":
                expected.remove("-1sigma")  # 65.5 - 100 MB: a replica without memory, refused
            assert changes == expected, name
    assert any(s.startswith("replica_memory_mb -1sigma at x1") and "must be > 0" in s for s in skipped)
    clamped = next(row for row in rows if row["parameter"] == "idle_vp_replica_cpu_cores" and row["change"] == "-1sigma")
    assert clamped["value"] == 0.0 and "set to 0" in clamped["note"]
    assert all(set(row) >= {"parameter", "change", "value", "consumers_scale", "topics", *METRICS} for row in rows)
    table = markdown(rows, skipped, DEFAULT_CALIBRATION, errors, settings, "a test calibration")
    summary = table.split("## Consumer scale x1")[1].split("Both sides")[0]
    listed = [line.split("|")[1].strip() for line in summary.splitlines() if line.startswith("| ") and "parameter" not in line]
    assert listed[:2] == ["replica_memory_mb", "idle_replica_cpu_cores"]  # the ratio hangs on these most
    assert sorted(listed) == sorted(calibrated_parameters())
    assert "replica_memory_mb -1sigma" in table.split("Skipped changes:")[1]


def test_each_sigma_change_gives_both_sides_the_node_ratio_and_every_latency_of_both_designs(monkeypatch):
    monkeypatch.setattr(sensitivity, "model_metrics", _fake_metrics)
    errors = {"pass_ms_per_replica": 0.4, "replica_memory_mb": 10.0}
    settings = SensitivitySettings(topics=50, consumer_scales=(1.0,),
                                   parameters=("pass_ms_per_replica", "replica_memory_mb"))
    rows, skipped = sensitivity_rows(DEFAULT_CALIBRATION, errors, settings)
    baseline, moves = moves_at(rows, 1.0)
    assert [move.parameter for move in moves] == ["replica_memory_mb", "pass_ms_per_replica"], "by the ratio's move"
    passing = moves[1]
    assert passing.ratio == 0 and passing.latency_figure == "end_to_end_tp999_mafka4"
    assert passing.latency_ms == pytest.approx(240.0), "+1 sigma (0.4 ms) moves no node but Mafka4's e2e tp999 by 240"
    table = markdown(rows, skipped, DEFAULT_CALIBRATION, errors, settings, "a test calibration")
    summary_line = next(line for line in table.splitlines() if line.startswith("| pass_ms_per_replica | 0 |"))
    assert summary_line.endswith("| 0.0000 | +240 e2e tp999 Mafka4 |"), summary_line
    both = table.split("Both sides of each +/-1 sigma change")[1].split("Every row")[0]
    header = next(line for line in both.splitlines() if line.startswith("| parameter"))
    assert [cell.strip() for cell in header.split("|")[4:-1]] == [
        "nodes Mafka3", "nodes Mafka4", "ratio", "produce tp99 Mafka3", "produce tp99 Mafka4", "produce tp999 Mafka3",
        "produce tp999 Mafka4", "e2e tp99 Mafka3", "e2e tp99 Mafka4", "e2e tp999 Mafka3", "e2e tp999 Mafka4"]
    plus = next(line for line in both.splitlines() if line.startswith("| pass_ms_per_replica | +1sigma |"))
    cells = [cell.strip() for cell in plus.split("|")[1:-1]]
    assert cells[5] == _cell_of(baseline, "node_ratio") and cells[-1] == "46 -> 286", cells
    memory = next(line for line in both.splitlines() if line.startswith("| replica_memory_mb | +1sigma |"))
    assert " -> " in memory.split("|")[6], "the ratio moved: baseline -> changed"
    assert {row["change"] for row in rows if row["parameter"] == "pass_ms_per_replica"} == set(CHANGES)


def _cell_of(row, name):
    return f"{row[name]:g}"


def test_changed_values():
    assert changed_value(10.0, 2.0, "x0.8") == (8.0, "")
    assert changed_value(10.0, 2.0, "+1sigma") == (12.0, "")
    assert changed_value(10.0, 0.0, "-1sigma") == (None, "skipped: sigma is 0")
    value, note = changed_value(1.0, 2.0, "-1sigma")
    assert value == 0.0 and "below 0" in note


def test_settings_are_validated():
    with pytest.raises(InvalidConfig, match="no calibrated parameter service_scv"):
        SensitivitySettings(parameters=("service_scv",))
    with pytest.raises(InvalidConfig, match="topics"):
        SensitivitySettings(topics=0)
    with pytest.raises(InvalidConfig, match="consumer scale"):
        SensitivitySettings(consumer_scales=())


def test_the_command_writes_the_table_with_sigma_rows_from_a_calibration_file(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(sensitivity, "model_metrics", _fake_metrics)
    document = make_document(synthetic_raw(), CalibrationSettings(), QUIET_MACHINE, "fleet calibrate", 1.0)
    calibration = tmp_path / "calibration.json"
    calibration.write_text(json.dumps(document))
    out = tmp_path / "out"
    code = main(["sensitivity", "--out", str(out), "--calibration", str(calibration), "--topics", "50",
                 "--consumer-scale", "1", "--parameters", "pass_ms_per_replica"])
    assert code == 0
    rows = json.loads((out / "sensitivity.json").read_text())
    assert [(row["parameter"], row["change"]) for row in rows] == [
        (BASELINE, BASELINE), *(("pass_ms_per_replica", change) for change in CHANGES)]
    sigma = document["measurement_error"]["pass_ms_per_replica"]
    assert rows[-1]["value"] == pytest.approx(document["derived"]["pass_ms_per_replica"] + sigma)
    assert "| pass_ms_per_replica |" in (out / "sensitivity.md").read_text()
    assert "pass_ms_per_replica" in capsys.readouterr().out


def test_the_parser_registers_sensitivity():
    import argparse

    from simulations.fleet.cli import add_fleet_parser

    parser = argparse.ArgumentParser()
    add_fleet_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["fleet", "sensitivity", "--out", "d", "--topics", "300", "--consumer-scale", "2"])
    assert (args.out, args.topics, args.consumer_scales, args.calibration) == ("d", 300, [2.0], None)
    assert parser.parse_args(["fleet", "sensitivity"]).topics == 40_000
