"""The fleet workload generator: seeded, within its configured bounds, and validated."""

import numpy as np
import pytest

from mafka4.errors import InvalidConfig
from simulations.fleet.workload import WorkloadConfig, generate


def test_same_seed_gives_the_same_fleet_and_another_seed_another():
    config = WorkloadConfig(topics=2000)
    first, again, other = generate(config, 7), generate(config, 7), generate(config, 8)
    for name in ("rate_msgs_per_s", "message_bytes", "consumers", "groups"):
        assert np.array_equal(getattr(first, name), getattr(again, name))
    assert not np.array_equal(first.rate_msgs_per_s, other.rate_msgs_per_s)


def test_draws_stay_within_the_configured_bounds():
    config = WorkloadConfig(topics=5000, rate_msgs_per_s_max=1000.0, consumers_max=16, groups_max=3)
    fleet = generate(config, 1)
    assert fleet.rate_msgs_per_s.min() >= config.rate_msgs_per_s_min and fleet.rate_msgs_per_s.max() <= 1000.0
    assert fleet.message_bytes.min() >= config.message_bytes_min and fleet.message_bytes.max() <= config.message_bytes_max
    assert set(np.unique(fleet.consumers)) <= set(range(1, 17)) and fleet.consumers.max() == 16
    assert set(np.unique(fleet.groups)) <= {1, 2, 3}
    assert fleet.consumers_total == int((fleet.consumers * fleet.groups).sum())


def test_the_rate_is_skewed_and_the_consumer_count_is_zipf_like():
    fleet = generate(WorkloadConfig(topics=20_000), 3)
    rates = np.sort(fleet.rate_msgs_per_s)[::-1]
    assert rates[:200].sum() / rates.sum() > 0.2  # the top 1 % of topics carry a large share
    counts = np.bincount(fleet.consumers)
    assert counts[1] > counts[2] > counts[4] > counts[16] > 0


def test_consumer_scale_multiplies_every_group():
    base = generate(WorkloadConfig(topics=1000), 5)
    scaled = generate(WorkloadConfig(topics=1000, consumers_scale=4.0), 5)
    assert np.array_equal(scaled.consumers, base.consumers * 4)
    assert np.array_equal(scaled.rate_msgs_per_s, base.rate_msgs_per_s)


def test_generated_arrays_are_read_only():
    fleet = generate(WorkloadConfig(topics=10), 1)
    with pytest.raises(ValueError):
        fleet.rate_msgs_per_s[0] = 1.0


@pytest.mark.parametrize("changes, field", [
    ({"topics": 0}, "topics"),
    ({"rate_sigma": -1.0}, "rate_sigma"),
    ({"consumers_scale": 0.0}, "consumers_scale"),
    ({"groups_geometric_p": 1.5}, "groups_geometric_p"),
    ({"replication_factor": 2.5}, "replication_factor"),
    ({"rate_msgs_per_s_median": float("nan")}, "rate_msgs_per_s_median"),
])
def test_bad_workload_config_names_the_field(changes, field):
    with pytest.raises(InvalidConfig, match=field):
        WorkloadConfig(**changes)


def test_bad_seed_is_refused():
    with pytest.raises(InvalidConfig, match="seed"):
        generate(WorkloadConfig(topics=10), -1)
