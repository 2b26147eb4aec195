"""The scaling experiment's pure parts: settings and profiles, equal-hardware CPU plan, the order of
the runs, resumable paths."""

from __future__ import annotations

import argparse
import json
import os

import pytest

from mafka4.errors import InvalidConfig
from mafka4.limits import ReadMode
from simulations.scaling.experiment import _busy_cores, ScalingSettings, cluster_config, config_path, cpu_plan, lane_names, run_scaling
from simulations.scaling.run_plan import Block, every_run, run_plan

M3, M4 = ReadMode.MAFKA3, ReadMode.MAFKA4


def test_both_modes_get_the_same_machines_and_cores():
    settings = ScalingSettings(nodes=4)
    mafka3, mafka4 = cluster_config(ReadMode.MAFKA3, settings), cluster_config(ReadMode.MAFKA4, settings)
    assert mafka3.write_nodes + mafka3.read_nodes == mafka4.write_nodes + mafka4.read_nodes == 4
    assert (mafka4.write_nodes, mafka4.read_nodes) == (2, 2)
    plan3, plan4 = cpu_plan(ReadMode.MAFKA3, settings, [0, 1]), cpu_plan(ReadMode.MAFKA4, settings, [0, 1])
    assert plan4 == {"w0": [0], "w1": [0], "r0": [1], "r1": [1]}, "write side on one core, read side on the other"
    assert plan3 == {"w0": [0], "w1": [0], "w2": [1], "w3": [1]}, "mafka3's brokers spread over both sets"
    assert sorted(map(len, plan3.values())) == sorted(map(len, plan4.values()))


def test_one_cpu_machines_share_it():
    assert set(map(tuple, cpu_plan(ReadMode.MAFKA4, ScalingSettings(), [0]).values())) == {(0,)}


@pytest.mark.parametrize("field, value, message", [
    ("consumers", (), "consumer counts between 1 and 64"),
    ("consumers", (0, 2), "consumer counts between 1 and 64"),
    ("modes", ("kafka",), "choose from mafka3, mafka4"),
    ("nodes", 3, "gives mafka4 1 write and 1 read nodes"),
    ("rate_msgs_per_s", 0, "rate_msgs_per_s"),
    ("duration_s", 0, "duration_s=0 must be in"),
    ("message_bytes", 4, "message_bytes"),
])
def test_bad_settings_name_the_field_and_the_fix(field, value, message):
    with pytest.raises(InvalidConfig, match=message):
        ScalingSettings(**{field: value})


def test_finished_configurations_are_not_run_again(tmp_path):
    settings = ScalingSettings(consumers=(1, 2), modes=("mafka3",))
    assert settings.modes == (ReadMode.MAFKA3,) and type(settings.modes[0]) is ReadMode, "--modes strings become ReadModes"
    for consumers in (1, 2):
        path = config_path(tmp_path, settings, ReadMode.MAFKA3, consumers)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"done")
    lines = []

    class Progress:
        def write(self, text):
            lines.append(text)

        def flush(self):
            pass

    # Every configuration is on disk: no cluster is started (this test has none) and nothing changes.
    paths = run_scaling(settings, tmp_path, Progress())
    assert [p.read_bytes() for p in paths] == [b"done", b"done"]
    assert "2/2" in "".join(lines) and "resuming" in "".join(lines)


def test_event_columns_take_the_first_delivery_count_every_one_and_join_the_stamps():
    from simulations.scaling.experiment import _ConsumerLog, _ProducerLog, _Trace, event_columns

    producer = _ProducerLog(produce_ms=[1.0, 2.0, 3.0], partition=[0, 0, 1],
                            ack_ms={0: 5.0, 1: 6.0}, offset={0: 0, 1: 1}, sent_ms={0: 1.5, 1: 2.5})
    member_a = _ConsumerLog(seen={0: (9.0, 4, 0), 1: (8.0, 4, 1)}, redelivered={0: 1})
    member_b = _ConsumerLog(seen={0: (7.0, 5, 0)})  # delivered again after a handover, earlier by poll time
    trace = _Trace(physical={0: [(0, 2, 3.0, 3.1, 4.0)]}, read_nodes=[("append", 5, 0, 1, 6.5), ("hw", 5, 1, 6.6)])
    columns = event_columns(ReadMode.MAFKA4, producer, [member_a, member_b], trace)
    assert columns["deliveries"] == [3, 1, 0]
    assert columns["consume_time_ms"] == [7.0, 8.0, None] and columns["virtual_partition"] == [5, 4, None]
    assert columns["committed_time_ms"] == [4.0, 4.0, None] and columns["sent_time_ms"] == [1.5, 2.5, None]
    assert columns["vp_committed_time_ms"] == [6.6, None, None]


def test_a_resumed_run_accepts_its_own_settings_and_refuses_others(tmp_path):
    from dataclasses import replace

    from simulations.scaling.experiment import _write_settings

    settings = ScalingSettings(consumers=(1, 32), repetitions=3)
    _write_settings(tmp_path / "settings.json", settings)
    _write_settings(tmp_path / "settings.json", settings)  # as read back from JSON: the same
    with pytest.raises(InvalidConfig, match="duration_s"):
        _write_settings(tmp_path / "settings.json", replace(settings, duration_s=5.0))


@pytest.mark.parametrize("pinning, layout", [
    ({}, {"consumers": "processes", "producer_cpus": "write set", "consumer_cpus": "read set",
          "service_cpus": "unpinned"}),
    ({"pin_services": True}, {"consumers": "processes", "producer_cpus": "write set", "consumer_cpus": "read set",
                              "service_cpus": "read set"}),
    ({"pin_cpus": False}, {"consumers": "processes", "producer_cpus": "unpinned", "consumer_cpus": "unpinned",
                           "service_cpus": "unpinned"}),
])
def test_settings_json_records_the_layout_the_run_pins_by(tmp_path, pinning, layout):
    import json

    from simulations.scaling.experiment import _write_settings

    settings = ScalingSettings(**pinning)
    assert settings.client_layout == layout
    _write_settings(tmp_path / "settings.json", settings)
    recorded = json.loads((tmp_path / "settings.json").read_text())
    assert recorded["client_layout"] == layout
    assert (recorded["pin_cpus"], recorded["pin_services"]) == (settings.pin_cpus, settings.pin_services)


def test_pinning_the_services_needs_pinning_on():
    with pytest.raises(InvalidConfig, match="drop --no-pin or --pin-services"):
        ScalingSettings(pin_cpus=False, pin_services=True)


def test_the_modes_take_turns_by_repetition_each_block_on_a_cluster_of_its_own():
    settings = ScalingSettings(consumers=(1, 4), repetitions=2)
    shapes = ((1, 0), (4, 0))
    assert run_plan(settings, lambda *_: False) == [
        Block(0, M3, shapes), Block(0, M4, shapes), Block(1, M3, shapes), Block(1, M4, shapes)]
    assert every_run(settings) == [(0, M3, 1, 0), (0, M3, 4, 0), (0, M4, 1, 0), (0, M4, 4, 0),
                                   (1, M3, 1, 0), (1, M3, 4, 0), (1, M4, 1, 0), (1, M4, 4, 0)]


def test_a_resumed_plan_leaves_out_every_run_on_disk_and_every_block_with_none_left():
    settings = ScalingSettings(consumers=(1, 4, 32), repetitions=2)
    on_disk = {(0, M3, 1, 0), (0, M3, 4, 0), (0, M3, 32, 0), (0, M4, 1, 0), (1, M4, 4, 0)}
    plan = run_plan(settings, lambda *run: run in on_disk)
    assert plan == [Block(0, M4, ((4, 0), (32, 0))), Block(1, M3, ((1, 0), (4, 0), (32, 0))),
                    Block(1, M4, ((1, 0), (32, 0)))], "repetition 0 of mafka3 is done: no cluster for it"
    planned = [(block.repetition, block.mode, *shape) for block in plan for shape in block.shapes]
    assert planned == [run for run in every_run(settings) if run not in on_disk], "each missing run, once, in order"
    assert run_plan(settings, lambda *_: True) == []


def test_the_quick_profile_measures_three_consumer_counts_once_and_says_so_in_settings_json(tmp_path):
    from simulations.scaling.experiment import Profile, _write_settings

    full = ScalingSettings(duration_s=50.0)
    quick = full.quick()
    assert (quick.consumers, quick.repetitions, quick.profile) == ((1, 4, 32), 1, Profile.QUICK)
    assert quick.duration_s == 50.0, "the profile sizes the runs' number, not each run"
    for settings, profile in ((full, "full"), (quick, "quick")):
        _write_settings(tmp_path / profile / "settings.json", settings)
        recorded = json.loads((tmp_path / profile / "settings.json").read_text())
        assert (recorded["profile"], recorded["run_order"]) == (profile, "repetition-major")
    with pytest.raises(InvalidConfig, match="quick profile measures one repetition, not 3"):
        ScalingSettings(profile="quick", repetitions=3)
    with pytest.raises(InvalidConfig, match="choose from full, quick"):
        ScalingSettings(profile="fast")


def test_a_results_dir_of_the_old_order_is_refused_with_what_to_do(tmp_path):
    from simulations.scaling.experiment import _write_settings

    settings = ScalingSettings(consumers=(1, 32), repetitions=3)
    old = {key: value for key, value in settings.to_json().items() if key not in ("profile", "run_order")}
    (tmp_path / "settings.json").write_text(json.dumps(old))
    with pytest.raises(InvalidConfig, match="ran all of one mode before the other; this version interleaves the modes "
                                            "by repetition .*pick another --out or --experiment-id"):
        _write_settings(tmp_path / "settings.json", settings)


def parsed(command: str, *argv: str) -> ScalingSettings:
    """The settings ``mafka4 <command> ARGV`` runs with (``experiment`` is ``experiment scaling``)."""
    from simulations.compare import add_compare_parser
    from simulations.scaling.command import add_experiment_parser, settings_from_args

    parser = argparse.ArgumentParser()
    commands = parser.add_subparsers(dest="command")
    add_compare_parser(commands)
    add_experiment_parser(commands)
    words = ["experiment", "scaling"] if command == "experiment" else [command]
    return settings_from_args(parser.parse_args([*words, *argv]))


def test_quick_on_either_command_is_its_defaults_in_the_quick_profile():
    from simulations.compare import COMPARE_DEFAULTS
    from simulations.scaling.command import DEFAULTS

    assert parsed("compare") == COMPARE_DEFAULTS and parsed("experiment") == DEFAULTS
    assert parsed("compare", "--quick") == COMPARE_DEFAULTS.quick()
    assert parsed("experiment", "--quick", "--seed", "9") == ScalingSettings(seed=9).quick()
    assert parsed("compare", "--consumers", "2,8", "--repetitions", "2").consumers == (2, 8)


@pytest.mark.parametrize("sizes, named", [(("--repetitions", "3"), "drop --repetitions"),
                                          (("--consumers", "1,2"), "drop --consumers"),
                                          (("--consumers", "1", "--repetitions", "1"), "drop --consumers and --repetitions")])
def test_quick_with_a_size_given_by_hand_is_refused(sizes, named):
    with pytest.raises(InvalidConfig, match=f"--quick measures consumers 1,4,32 once each: {named}, or drop --quick"):
        parsed("compare", "--quick", *sizes)


def test_run_scaling_starts_a_cluster_per_block_and_measures_its_runs_in_plan_order(tmp_path, monkeypatch):
    import contextlib

    from simulations.scaling import experiment

    settings = ScalingSettings(consumers=(1, 4), repetitions=2)
    done_before = config_path(tmp_path, settings, M3, 1, 0), config_path(tmp_path, settings, M3, 4, 0)
    for path in done_before:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"done")
    events = []

    @contextlib.contextmanager
    def cluster(mode, _settings):
        events.append(("cluster", str(mode)))
        yield None

    def measure(_cluster, _settings, mode, consumers, lanes, repetition, out_dir):
        events.append((repetition, str(mode), consumers))
        config_path(out_dir, settings, mode, consumers, repetition, lanes).write_bytes(b"new")
        return f"{mode} N={consumers} r{repetition}"

    monkeypatch.setattr(experiment, "_mode_cluster", cluster)
    monkeypatch.setattr(experiment, "_measure_run", measure)
    lines = []
    progress = type("Progress", (), {"write": lambda self, text: lines.append(text), "flush": lambda self: None})()
    paths = run_scaling(settings, tmp_path, progress)
    assert events == [("cluster", "mafka4"), (0, "mafka4", 1), (0, "mafka4", 4),
                      ("cluster", "mafka3"), (1, "mafka3", 1), (1, "mafka3", 4),
                      ("cluster", "mafka4"), (1, "mafka4", 1), (1, "mafka4", 4)], "no cluster for r0 of mafka3"
    assert all(path.exists() for path in paths) and len(paths) == 8
    assert "2/8" in lines[0] and "resuming" in lines[0] and "8/8" in "".join(lines)


def test_busy_cores_before_a_run_is_a_share_of_the_machine():
    busy = _busy_cores(0.2)
    assert 0.0 <= busy <= os.cpu_count()


def test_compare_waits_for_a_quiet_machine_by_default():
    from simulations.compare import COMPARE_DEFAULTS

    assert COMPARE_DEFAULTS.settle_load == 1.5


def test_lane_counts_multiply_the_runs_and_mafka3_leaves_out_those_above_its_bound(tmp_path):
    settings = ScalingSettings(consumers=(4,), lanes=(0, 10, 100), mafka3_lanes_max=10)
    assert every_run(settings) == [(0, M3, 4, 0), (0, M3, 4, 10), (0, M4, 4, 0), (0, M4, 4, 10), (0, M4, 4, 100)], \
        "mafka3 at 100 lanes would take 404 partitions: not run"
    assert run_plan(settings, lambda *_: False) == [Block(0, M3, ((4, 0), (4, 10))),
                                                    Block(0, M4, ((4, 0), (4, 10), (4, 100)))]
    assert config_path(tmp_path, settings, M4, 4, 1, lanes=10).name == "mafka4-c004-l010-r1.parquet"
    assert config_path(tmp_path, settings, M4, 4, 1).name == "mafka4-c004-r1.parquet", "no lanes: the name of before"
    assert lane_names(3) == ("lane-001", "lane-002", "lane-003") and lane_names(0) == ()


@pytest.mark.parametrize(("settings", "message"), [
    ({"lanes": ()}, "give lane counts between 0"),
    ({"lanes": (1, 257)}, "lanes=\\[1, 257\\]: give lane counts between 0 \\(no lanes\\) and 256"),
    ({"mafka3_lanes_max": -1}, "mafka3_lanes_max"),
])
def test_bad_lane_settings_name_the_field(settings, message):
    with pytest.raises(InvalidConfig, match=message):
        ScalingSettings(**settings)


def test_the_command_line_takes_lane_counts_and_the_mafka3_bound():
    settings = parsed("experiment", "--lanes", "0,10", "--mafka3-lanes-max", "3")
    assert (settings.lanes, settings.mafka3_lanes_max) == ((0, 10), 3)
    assert parsed("experiment").lanes == (0,), "no lanes unless asked"
