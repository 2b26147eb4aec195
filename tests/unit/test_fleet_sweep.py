"""``fleet model``: event logs in the shared schema, the calibration beside them, the CLI."""

import argparse
import json

import pyarrow.compute as pc
import pytest

from mafka4.errors import InvalidConfig
from simulations.fleet.cli import add_fleet_parser, main
from simulations.fleet.config import ModelConfig
from simulations.fleet.params import DEFAULT_CALIBRATION
from simulations.fleet.sweep import SweepSettings, run_sweep
from simulations.schema import read_events

FAST = ModelConfig(latency_samples=20_000, sample_replicas_max=3000)


def small_sweep(out, seed=5, topics=(150, 300), consumer_scales=(1.0, 2.0)):
    settings = SweepSettings(seed=seed, topics=topics, consumer_scales=consumer_scales, rows=400, model=FAST)
    return run_sweep(out, settings, DEFAULT_CALIBRATION)


def test_a_sweep_writes_one_event_log_per_design_and_configuration(tmp_path):
    summary = small_sweep(tmp_path)
    assert len(summary) == 8 and len(list(tmp_path.glob("*.parquet"))) == 8
    table = read_events(tmp_path)
    assert table.num_rows == 8 * 400
    assert set(pc.unique(table["source"]).to_pylist()) == {"fleet_model"}
    assert set(pc.unique(table["topics"]).to_pylist()) == {150, 300}
    for run in summary:
        rows = read_events(tmp_path / run["event_log"])
        assert pc.unique(rows["write_nodes"]).to_pylist() == [run["write_nodes"]]
        assert pc.unique(rows["read_nodes"]).to_pylist() == [run["read_nodes"]]
        assert rows["sample_rate"][0].as_py() == pytest.approx(400 / run["msgs_per_s"])
        assert (rows["virtual_partition"].null_count == rows.num_rows) == (run["design"] == "mafka3")
    calibration = json.loads((tmp_path / "calibration.json").read_text())
    assert calibration["derived"] == DEFAULT_CALIBRATION.to_json()
    assert calibration["fleet_model"]["seed"] == 5 and "raw" in calibration
    document = json.loads((tmp_path / "fleet_summary.json").read_text())
    assert document["runs"] == json.loads(json.dumps(summary))
    # every fleet size at every consumer scale, not only the largest
    ratios = {(r["topics"], r["consumers_scale"]): r for r in document["node_ratios"]}
    assert set(ratios) == {(150, 1.0), (300, 1.0), (150, 2.0), (300, 2.0)}
    for run in summary:
        ratio = ratios[(run["topics"], run["consumers_scale"])]
        assert ratio[f"nodes_{run['design']}"] == run["nodes"]
        assert ratio["node_ratio"] == round(ratio["nodes_mafka3"] / ratio["nodes_mafka4"], 4)


def test_the_same_seed_writes_the_same_rows_and_another_seed_others(tmp_path):
    for name, seed in (("a", 5), ("b", 5), ("c", 6)):
        small_sweep(tmp_path / name, seed=seed, topics=(150,), consumer_scales=(1.0,))
    first, again, other = (read_events(tmp_path / name) for name in ("a", "b", "c"))
    for column in ("partition", "virtual_partition", "produce_time_ms", "produce_latency_ms", "end_to_end_latency_ms",
                   "write_nodes", "read_nodes", "physical_partitions"):
        assert first[column].equals(again[column]), column
    assert not first["produce_latency_ms"].equals(other["produce_latency_ms"])


def test_sweep_settings_are_validated():
    with pytest.raises(InvalidConfig, match="topics"):
        SweepSettings(topics=(0,))
    with pytest.raises(InvalidConfig, match="at least one"):
        SweepSettings(consumer_scales=())


def test_the_parser_registers_model_and_calibrate():
    parser = argparse.ArgumentParser()
    add_fleet_parser(parser.add_subparsers(dest="command"))
    model = parser.parse_args(["fleet", "model", "--topics", "10", "20", "--seed", "3", "--ray"])
    assert (model.topics, model.seed, model.ray, model.out) == ([10, 20], 3, True, "results/fleet")
    calibrate = parser.parse_args(["fleet", "calibrate", "--out", "x.json"])
    assert calibrate.out == "x.json" and callable(calibrate.run)


def test_the_command_writes_logs_and_returns_zero(tmp_path, capsys):
    code = main(["model", "--out", str(tmp_path), "--topics", "120", "--consumer-scales", "1", "2", "--rows", "200",
                 "--set", "idle_wakeup_cpu_cores_per_partition=0", "--feeder-calls-every-vp"])
    assert code == 0
    assert len(list(tmp_path.glob("*.parquet"))) == 4
    used = json.loads((tmp_path / "calibration.json").read_text())["fleet_model"]
    assert used["calibration_used"]["idle_wakeup_cpu_cores_per_partition"] == 0
    assert used["model"]["feeder_calls_every_vp"] is True
    printed = capsys.readouterr().out
    assert "mafka4" in printed and "ratio" in printed
    ratio_lines = [line.split() for line in printed.splitlines()[-2:]]
    assert [(line[0], line[1]) for line in ratio_lines] == [("120", "1"), ("120", "2")]  # both consumer scales


def test_a_bad_override_is_a_usage_error(tmp_path, capsys):
    assert main(["model", "--out", str(tmp_path), "--topics", "50", "--set", "no_such_figure=1"]) == 2
    assert "no_such_figure" in capsys.readouterr().err
    assert main(["model", "--out", str(tmp_path), "--topics", "50", "--set", "pass_ms_per_replica"]) == 2
