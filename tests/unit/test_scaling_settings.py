"""The scaling experiment's pure parts: settings, equal-hardware CPU plan, resumable paths."""

from __future__ import annotations

import pytest

from mafka4.errors import InvalidConfig
from mafka4.limits import ReadMode
from simulations.scaling.experiment import ScalingSettings, cluster_config, config_path, cpu_plan, run_scaling


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

    producer = _ProducerLog(first_sequence=100, produce_ms=[1.0, 2.0, 3.0], partition=[0, 0, 1],
                            ack_ms={0: 5.0, 1: 6.0}, offset={0: 0, 1: 1}, sent_ms={0: 1.5, 1: 2.5})
    member_a = _ConsumerLog(seen={100: (9.0, 4, 0), 101: (8.0, 4, 1)}, redelivered={100: 1})
    member_b = _ConsumerLog(seen={100: (7.0, 5, 0)})  # delivered again after a handover, earlier by poll time
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
