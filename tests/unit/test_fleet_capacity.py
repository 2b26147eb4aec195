"""The fleet capacity model: deterministic, and node counts move the right way with consumers,
throughput and the latency target; bad settings fail with a clear error."""

import functools
from dataclasses import replace

import numpy as np
import pytest

from mafka4.errors import FleetTargetUnreachable, InvalidConfig, PlacementInfeasible
from simulations.fleet.capacity import Constraint, model_design, sample_messages
from simulations.fleet.config import ModelConfig, NodeSpec
from simulations.fleet.loads import Design, topic_loads
from simulations.fleet.params import DEFAULT_CALIBRATION
from simulations.fleet.placement import place
from simulations.fleet.workload import WorkloadConfig, generate

FAST = ModelConfig(latency_samples=20_000, sample_replicas_max=3000)
SMALL = WorkloadConfig(topics=300)


def sized(design, workload=SMALL, seed=11, params=DEFAULT_CALIBRATION, config=FAST, node=NodeSpec()):
    return _sized(design, workload, seed, params, config, node)


@functools.cache
def _sized(design, workload, seed, params, config, node):
    """One model per distinct input for the whole module: the model is deterministic (the test
    below checks it on a model made afresh) and no test changes one, so tests share them."""
    return model_design(design, generate(workload, seed), params, node, config)


def test_the_same_seed_gives_the_same_model_and_sample():
    for design in Design:
        first = sized(design)
        place.cache_clear()  # the placements too are made afresh
        again = model_design(design, generate(SMALL, 11), DEFAULT_CALIBRATION, NodeSpec(), FAST)
        assert first.result == again.result
        rows, rows_again = sample_messages(first, 500, 3), sample_messages(again, 500, 3)
        assert rows.keys() == rows_again.keys()
        assert all(np.array_equal(rows[name], rows_again[name]) for name in rows)


@pytest.mark.parametrize("wakeup_cores", [DEFAULT_CALIBRATION.idle_wakeup_cpu_cores_per_partition, 0.0])
def test_more_consumers_need_more_mafka3_write_nodes_and_only_more_mafka4_read_nodes(wakeup_cores):
    params = replace(DEFAULT_CALIBRATION, idle_wakeup_cpu_cores_per_partition=wakeup_cores)
    # At 300 topics Mafka4 stays on its minimum of read nodes at any consumer scale since the read
    # requests got cheaper (calibration of 2026-12-04); at 1,000 twice the consumers already move
    # every count the test checks, and four times only costs more to place.
    workload = replace(SMALL, topics=1000)
    few = {d: sized(d, workload, params=params).result for d in Design}
    many = {d: sized(d, replace(workload, consumers_scale=2.0), params=params).result for d in Design}
    assert many[Design.MAFKA3].physical_partitions > few[Design.MAFKA3].physical_partitions
    assert many[Design.MAFKA3].write_nodes > few[Design.MAFKA3].write_nodes
    assert many[Design.MAFKA4].physical_partitions == few[Design.MAFKA4].physical_partitions
    assert many[Design.MAFKA4].write_nodes <= few[Design.MAFKA4].write_nodes
    assert many[Design.MAFKA4].virtual_partitions > few[Design.MAFKA4].virtual_partitions
    assert many[Design.MAFKA4].read_nodes > few[Design.MAFKA4].read_nodes


def test_more_throughput_needs_more_nodes_in_both_designs():
    # On machines of 2 cores, where CPU alone decides both sides' counts (on the default 32 cores,
    # since the calibration of 2026-12-04, memory binds first at any rate this module can size),
    # twice the rate.
    small_node = NodeSpec(cores=2)
    calm_workload = WorkloadConfig(topics=1000, rate_msgs_per_s_median=8 * SMALL.rate_msgs_per_s_median)
    calm = {d: sized(d, calm_workload, node=small_node).result for d in Design}
    busy_rate = 2 * calm_workload.rate_msgs_per_s_median
    busy = {d: sized(d, replace(calm_workload, rate_msgs_per_s_median=busy_rate), node=small_node).result
            for d in Design}
    for design in Design:
        assert busy[design].write_nodes > calm[design].write_nodes
        assert busy[design].msgs_per_s > calm[design].msgs_per_s
    assert busy[Design.MAFKA4].read_nodes > calm[Design.MAFKA4].read_nodes


def test_mafka3_gives_every_consumer_a_partition_and_mafka4_a_virtual_partition():
    workload = generate(SMALL, 11)
    mafka3 = topic_loads(Design.MAFKA3, workload, DEFAULT_CALIBRATION, FAST)
    mafka4 = topic_loads(Design.MAFKA4, workload, DEFAULT_CALIBRATION, FAST)
    assert np.all(mafka3.physical_partitions >= workload.consumers)
    assert np.all(mafka4.virtual_partitions >= workload.consumers)
    assert mafka4.physical_partitions.sum() < mafka3.physical_partitions.sum()
    assert np.all(mafka3.virtual_partitions == 0)


def test_a_tighter_latency_target_never_needs_fewer_nodes():
    params = replace(DEFAULT_CALIBRATION, pass_ms_per_replica=0.05)  # latency now depends on replicas per node
    loose = sized(Design.MAFKA3, params=params).result
    target = loose.produce_latency_ms["tp999"] - 2.0
    tight = sized(Design.MAFKA3, params=params, config=replace(FAST, produce_tp999_ms_target=target)).result
    assert tight.write_nodes > loose.write_nodes
    assert tight.write_constraint in (Constraint.LATENCY, Constraint.PLACEMENT)
    assert tight.produce_latency_ms["tp999"] <= target


def test_a_target_below_the_base_latency_is_unreachable():
    with pytest.raises(FleetTargetUnreachable, match="raise produce_tp999_ms_target"):
        sized(Design.MAFKA4, config=replace(FAST, produce_tp999_ms_target=DEFAULT_CALIBRATION.produce_base_latency_ms / 2))


def test_sampled_messages_fit_the_design():
    mafka3, mafka4 = sized(Design.MAFKA3), sized(Design.MAFKA4)
    rows3, rows4 = sample_messages(mafka3, 2000, 1), sample_messages(mafka4, 2000, 1)
    assert "virtual_partition" not in rows3
    assert 0 <= rows4["virtual_partition"].min() and rows4["virtual_partition"].max() < mafka4.result.virtual_partitions
    for model, rows in ((mafka3, rows3), (mafka4, rows4)):
        assert 0 <= rows["partition"].min() and rows["partition"].max() < model.result.physical_partitions
        assert np.all(rows["produce_latency_ms"] >= DEFAULT_CALIBRATION.produce_base_latency_ms)
        assert np.all(rows["end_to_end_latency_ms"] >= rows["produce_latency_ms"])
        assert np.all((0 <= rows["produce_time_ms"]) & (rows["produce_time_ms"] < 1000))


def test_a_small_fleet_is_placed_whole_and_rack_aware():
    result = sized(Design.MAFKA4).result
    assert result.placement_sample_nodes == result.write_nodes
    assert result.placement_sample_partitions == result.physical_partitions
    assert result.write_hottest_utilisation <= NodeSpec().cpu_utilisation_hottest_max


@pytest.mark.parametrize("build, field", [
    (lambda: NodeSpec(cores=0), "cores"),
    (lambda: NodeSpec(cpu_utilisation_max=0.95, cpu_utilisation_hottest_max=0.9), "cpu_utilisation_hottest_max"),
    (lambda: ModelConfig(produce_tp999_ms_target=-1.0), "produce_tp999_ms_target"),
    (lambda: ModelConfig(feeder_calls_every_vp="yes"), "feeder_calls_every_vp"),
])
def test_bad_model_settings_name_the_field(build, field):
    with pytest.raises(InvalidConfig, match=field):
        build()


def test_fewer_racks_than_replicas_is_refused_with_a_fix():
    with pytest.raises(PlacementInfeasible, match="add racks or lower the replication factor"):
        sized(Design.MAFKA3, config=replace(FAST, racks=2))
