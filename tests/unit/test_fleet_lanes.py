"""Lanes in the fleet model: Mafka3 makes every lane a topic with physical partitions and replicas
of its own, Mafka4 only VPs on the read side; without lanes every figure is the one before lanes."""

import json
from dataclasses import replace

import numpy as np
import pytest

from mafka4.errors import InvalidConfig
from mafka4.limits import LANES_MAX
from simulations.fleet.capacity import model_design, sample_messages
from simulations.fleet.cli import main
from simulations.fleet.config import ModelConfig, NodeSpec
from simulations.fleet.loads import Design, topic_loads
from simulations.fleet.params import DEFAULT_CALIBRATION
from simulations.fleet.workload import WorkloadConfig, generate, mafka3_topics

FAST = ModelConfig(latency_samples=20_000, sample_replicas_max=3000)
SMALL = WorkloadConfig(topics=300)
ARRAYS = ("rate_msgs_per_s", "message_bytes", "consumers", "groups")


def test_lanes_land_on_the_share_of_topics_and_leave_the_rest_of_the_fleet_as_drawn():
    plain = generate(SMALL, 11)
    ten = generate(replace(SMALL, lane_topics_share=0.1, lanes_per_topic=10), 11)
    hundred = generate(replace(SMALL, lane_topics_share=0.1, lanes_per_topic=100), 11)
    for name in ARRAYS:
        assert np.array_equal(getattr(ten, name), getattr(plain, name)), name
    assert not plain.lanes.any()
    assert np.count_nonzero(ten.lanes) == 30 and set(np.unique(ten.lanes)) == {0, 10}
    assert np.array_equal(hundred.lanes > 0, ten.lanes > 0)  # the same lane topics at every lane count
    assert ten.lanes_total == 300
    share = ten.config.lane_traffic_share
    lane_rate = 10 * share * ten.rate_msgs_per_s[ten.lanes > 0].sum()
    assert ten.msgs_per_s_total == pytest.approx(plain.msgs_per_s_total + lane_rate)
    # a test chain: one member of each of the topic's groups in each lane
    assert ten.consumers_total == plain.consumers_total + 10 * int(ten.groups[ten.lanes > 0].sum())


def test_mafka3_makes_every_lane_a_topic_with_its_topics_config():
    workload = generate(replace(SMALL, lane_topics_share=0.1, lanes_per_topic=4, lane_consumers=2), 3)
    topics = mafka3_topics(workload)
    owners = np.flatnonzero(workload.lanes)
    assert topics.topics == 300 + 30 * 4 and not topics.lanes.any()
    assert np.array_equal(topics.rate_msgs_per_s[:300], workload.rate_msgs_per_s)
    lane_owner = np.repeat(owners, 4)
    assert np.allclose(topics.rate_msgs_per_s[300:], 0.01 * workload.rate_msgs_per_s[lane_owner])
    assert np.array_equal(topics.message_bytes[300:], workload.message_bytes[lane_owner])
    assert np.array_equal(topics.groups[300:], workload.groups[lane_owner])
    assert np.all(topics.consumers[300:] == 2)
    assert topics.msgs_per_s_total == pytest.approx(workload.msgs_per_s_total)
    assert topics.consumers_total == workload.consumers_total
    plain = generate(SMALL, 3)
    assert mafka3_topics(plain) is plain


@pytest.mark.parametrize("lanes", [
    {"lane_topics_share": 0.3},  # a share, no lanes
    {"lanes_per_topic": 5},  # lanes, on no topic
])
def test_without_lanes_every_figure_is_the_one_before_lanes(lanes):
    plain, inert = generate(SMALL, 11), generate(replace(SMALL, **lanes), 11)
    for design in Design:
        before = model_design(design, plain, DEFAULT_CALIBRATION, NodeSpec(), FAST)
        after = model_design(design, inert, DEFAULT_CALIBRATION, NodeSpec(), FAST)
        assert after.result == before.result
        rows, rows_after = sample_messages(before, 500, 3), sample_messages(after, 500, 3)
        assert all(np.array_equal(rows[name], rows_after[name]) for name in rows)


@pytest.mark.parametrize("lanes_per_topic, lane_consumers", [(10, 1), (100, 1), (10, 3)])
def test_mafka3_partitions_grow_with_every_lane_and_mafka4_keeps_its_partitions(lanes_per_topic, lane_consumers):
    plain = generate(SMALL, 11)
    laned = generate(replace(SMALL, lane_topics_share=0.1, lanes_per_topic=lanes_per_topic,
                             lane_consumers=lane_consumers), 11)
    before = {d: topic_loads(d, plain, DEFAULT_CALIBRATION, FAST) for d in Design}
    after = {d: topic_loads(d, laned, DEFAULT_CALIBRATION, FAST) for d in Design}
    lanes = 30 * lanes_per_topic  # share * topics * N
    # a lane's topic: one partition per member (its rate needs less), its own replicas
    mafka3, mafka4 = (after[d].physical_partitions.sum() - before[d].physical_partitions.sum() for d in Design)
    assert mafka3 == lanes * lane_consumers and after[Design.MAFKA3].physical_partitions.size == 300 + lanes
    # mafka4: the same physical partitions (and feeders), one VP per lane member
    assert mafka4 == 0
    assert np.array_equal(after[Design.MAFKA4].physical_partitions, before[Design.MAFKA4].physical_partitions)
    vps = after[Design.MAFKA4].virtual_partitions.sum() - before[Design.MAFKA4].virtual_partitions.sum()
    assert vps == lanes * lane_consumers
    assert after[Design.MAFKA4].lane_virtual_partitions.sum() == lanes * lane_consumers
    assert after[Design.MAFKA4].read_cpu_us_per_s.sum() > before[Design.MAFKA4].read_cpu_us_per_s.sum()


def test_a_feeder_round_calls_a_lane_vp_only_for_its_lanes_messages():
    plain = generate(SMALL, 11)
    laned = generate(replace(SMALL, lane_topics_share=0.1, lanes_per_topic=100), 11)
    before = topic_loads(Design.MAFKA4, plain, DEFAULT_CALIBRATION, FAST)
    after = topic_loads(Design.MAFKA4, laned, DEFAULT_CALIBRATION, FAST)
    every_vp = topic_loads(Design.MAFKA4, laned, DEFAULT_CALIBRATION, replace(FAST, feeder_calls_every_vp=True))
    lane_topics = laned.lanes > 0
    # 100 lanes double a lane topic's messages and add 100 VPs to its few: its read requests grow
    # about with its messages, not with its VPs, unless every round calls every VP (the what-if)
    messages = after.topic_msgs_per_s[lane_topics].sum() / before.topic_msgs_per_s[lane_topics].sum()
    requests = after.read_requests_per_s[lane_topics].sum() / before.read_requests_per_s[lane_topics].sum()
    vps = after.virtual_partitions[lane_topics].sum() / before.virtual_partitions[lane_topics].sum()
    assert messages == pytest.approx(2.0)
    assert requests < 1.5 * messages < vps
    assert every_vp.read_requests_per_s[lane_topics].sum() > 2 * after.read_requests_per_s[lane_topics].sum()


def test_a_sized_fleet_reports_lanes_actors_and_nodes_per_design():
    plain = generate(SMALL, 11)
    laned = generate(replace(SMALL, lane_topics_share=0.1, lanes_per_topic=10), 11)
    rf, rr = SMALL.replication_factor, SMALL.read_replicas
    for design in Design:
        before = model_design(design, plain, DEFAULT_CALIBRATION, NodeSpec(), FAST).result
        after = model_design(design, laned, DEFAULT_CALIBRATION, NodeSpec(), FAST).result
        assert (before.lanes, after.lanes) == (0, 300) and after.topics == before.topics == 300
        assert after.actors == after.write_actors + after.read_actors
        assert after.nodes >= before.nodes
        if design is Design.MAFKA3:
            assert after.write_actors == before.write_actors + 300 * rf and after.read_actors == 0
        else:
            assert after.write_actors == before.write_actors
            assert after.read_actors == before.read_actors + 300 * rr  # one VP per lane, its replicas


@pytest.mark.parametrize("changes, field", [
    ({"lane_topics_share": 1.5}, "lane_topics_share"),
    ({"lane_topics_share": -0.1}, "lane_topics_share"),
    ({"lanes_per_topic": -1}, "lanes_per_topic"),
    ({"lanes_per_topic": 2.5}, "lanes_per_topic"),
    ({"lanes_per_topic": LANES_MAX + 1}, "lanes_per_topic"),
    ({"lane_traffic_share": 0.0}, "lane_traffic_share"),
    ({"lane_traffic_share": 1.5}, "lane_traffic_share"),
    ({"lane_consumers": 0}, "lane_consumers"),
    ({"topics": 5_000_000, "lane_topics_share": 1.0, "lanes_per_topic": 2}, "lanes_per_topic"),
])
def test_bad_lane_settings_name_the_field(changes, field):
    with pytest.raises(InvalidConfig, match=field):
        WorkloadConfig(**changes)


def test_the_command_sweeps_lane_counts(tmp_path, capsys):
    code = main(["model", "--out", str(tmp_path), "--topics", "120", "--consumer-scales", "1", "--rows", "100",
                 "--lanes-per-topic", "0", "4", "--lane-topics-share", "0.5"])
    assert code == 0
    assert sorted(path.name for path in tmp_path.glob("*.parquet")) == [
        "fleet-mafka3-topics120-consumers_x1-lanes4.parquet", "fleet-mafka3-topics120-consumers_x1.parquet",
        "fleet-mafka4-topics120-consumers_x1-lanes4.parquet", "fleet-mafka4-topics120-consumers_x1.parquet"]
    document = json.loads((tmp_path / "fleet_summary.json").read_text())
    runs = {(run["design"], run["lanes_per_topic"]): run for run in document["runs"]}
    assert runs[("mafka3", 4)]["physical_partitions"] == runs[("mafka3", 0)]["physical_partitions"] + 60 * 4
    assert runs[("mafka4", 4)]["physical_partitions"] == runs[("mafka4", 0)]["physical_partitions"]
    assert [(r["lanes_per_topic"], r["topics"]) for r in document["node_ratios"]] == [(0, 120), (4, 120)]
    workload = json.loads((tmp_path / "calibration.json").read_text())["fleet_model"]["workload"]
    assert workload["lane_topics_share"] == 0.5
    printed = capsys.readouterr().out
    assert "read act" in printed and printed.splitlines()[-1].split()[:3] == ["120", "1", "4"]


def test_a_bad_lane_option_is_a_usage_error(tmp_path, capsys):
    assert main(["model", "--out", str(tmp_path), "--topics", "50", "--lanes-per-topic", "3",
                 "--lane-topics-share", "2"]) == 2
    assert "lane_topics_share" in capsys.readouterr().err
