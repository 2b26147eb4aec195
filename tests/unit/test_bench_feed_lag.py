"""Unit tests of what ``mafka4 bench feed-lag`` computes: lag in records and ms, drain, boundedness (pure)."""

from __future__ import annotations

import time

import pytest

from benchmarks.lag import (
    BOUNDED_DRAIN_S_MAX, FeedLagBenchSettings, FeedLagTracker, LagSample, drained, fed_offset, halves_p99_records,
    is_bounded, lag_figures,
)
from mafka4.errors import InvalidConfig

S = 1_000_000_000  # ns


def test_the_lag_is_the_committed_records_not_yet_fed_and_how_long_the_oldest_has_waited():
    tracker = FeedLagTracker(partitions=1, samples_max=10)
    assert tracker.observe(0, [100], [100]) == LagSample(0, 0, 0.0), "fed all that is committed"
    assert tracker.observe(S // 2, [250], [100]) == LagSample(S // 2, 150, 0.0), "record 100 committed by this sample"
    assert tracker.observe(S, [400], [180]) == LagSample(S, 220, 500.0), "record 180: committed since 0.5 s"
    assert tracker.observe(3 * S // 2, [400], [300]) == LagSample(3 * S // 2, 100, 500.0), "record 300: since 1 s"
    assert tracker.observe(2 * S, [400], [400]) == LagSample(2 * S, 0, 0.0)


def test_a_samples_lag_is_its_worst_partitions_in_records_and_in_ms():
    tracker = FeedLagTracker(partitions=2, samples_max=10)
    tracker.observe(0, [100, 10], [0, 0])
    sample = tracker.observe(S, [110, 500], [50, 20])
    assert sample.records == 480, "partition 1 trails by the most records (500 - 20)"
    assert sample.ms == 1000.0, "partition 0's record 50 is committed since 0 s, partition 1's record 20 since 1 s"


def test_a_resuming_stream_is_left_out_and_a_sample_with_no_known_stream_is_none():
    tracker = FeedLagTracker(partitions=2, samples_max=10)
    assert tracker.observe(0, [100, 100], [None, None]) is None
    assert tracker.observe(S, [300, 900], [250, None]) == LagSample(S, 50, 0.0)


def test_a_lower_hw_reported_for_a_moment_by_a_new_leader_does_not_reset_the_wait():
    tracker = FeedLagTracker(partitions=1, samples_max=10)
    tracker.observe(0, [200], [100])
    assert tracker.observe(S, [150], [100]) == LagSample(S, 100, 1000.0), "the highest HW seen stands"


def test_the_tracker_refuses_samples_past_its_bound_and_out_of_time_order():
    tracker = FeedLagTracker(partitions=1, samples_max=2)
    tracker.observe(S, [1], [1])
    with pytest.raises(AssertionError, match="time order"):
        tracker.observe(0, [1], [1])
    tracker.observe(2 * S, [1], [1])
    with pytest.raises(AssertionError, match="more than 2 samples"):
        tracker.observe(3 * S, [1], [1])


def test_the_fed_offset_of_a_partition_is_its_slowest_running_stream():
    assert fed_offset([500, 320, None]) == 320
    assert fed_offset([None]) is None
    assert fed_offset([]) is None, "no read node runs a stream of it"


def test_drained_only_when_every_partition_fed_all_that_is_committed():
    assert drained([100, 200], [100, 200])
    assert not drained([100, 200], [100, 199])
    assert not drained([100, 200], [100, None]), "a resuming stream is not known to be caught up"


def _samples(records: list[int]) -> list[LagSample]:
    return [LagSample(index * S // 2, value, value / 10) for index, value in enumerate(records)]


def test_figures_give_max_p50_p99_and_the_last_value_while_producing():
    figures = lag_figures(_samples([10, 30, 20, 40, 5]))
    assert figures["samples"] == 5
    assert figures["records"] == {"max": 40, "p50": 20, "p99": 40, "final": 5}
    assert figures["ms"] == {"max": 4.0, "p50": 2.0, "p99": 4.0, "final": 0.5}
    assert lag_figures([]) == {"samples": 0, "records": None, "ms": None}


def test_a_steady_lag_that_drains_in_time_is_bounded():
    samples = _samples([100, 300, 250, 280, 310, 260, 300, 290])
    assert halves_p99_records(samples) == (300, 310)
    assert is_bounded(samples, drain_s=0.8)


def test_a_lag_that_keeps_growing_is_not_bounded():
    assert not is_bounded(_samples([100, 200, 300, 400, 800, 1600, 3200, 6400]), drain_s=0.5)


def test_a_lag_that_drains_late_or_never_is_not_bounded():
    steady = _samples([100] * 8)
    assert is_bounded(steady, drain_s=BOUNDED_DRAIN_S_MAX)
    assert not is_bounded(steady, drain_s=BOUNDED_DRAIN_S_MAX + 0.1)
    assert not is_bounded(steady, drain_s=None)


def test_fewer_than_two_samples_prove_nothing():
    assert halves_p99_records(_samples([3])) is None
    assert not is_bounded(_samples([3]), drain_s=0.1)


def test_settings_refuse_no_vp_counts_and_smoke_runs_are_small():
    with pytest.raises(InvalidConfig, match="VP counts"):
        FeedLagBenchSettings(virtual_partitions=())
    with pytest.raises(InvalidConfig, match="VP counts"):
        FeedLagBenchSettings(virtual_partitions=(8, 0))
    with pytest.raises(InvalidConfig, match="positive"):
        FeedLagBenchSettings(sample_interval_s=0)
    smoke = FeedLagBenchSettings.smoke_sized()
    assert smoke.smoke and smoke.virtual_partitions == (8,) and smoke.duration_s < FeedLagBenchSettings().duration_s


def test_the_sample_bound_covers_one_sample_per_interval_of_producing_flushing_and_draining():
    settings = FeedLagBenchSettings(duration_s=20, sample_interval_s=0.5, flush_s_max=10, drain_s_max=30)
    assert settings.samples_max == 120 + 3


class _InstantProducer:
    """Stands in for the saturated producer: its last message is acknowledged the moment it stops."""

    def __init__(self):
        self.started = time.monotonic()
        self.finished = None

    def stop_sending(self):
        self.finished = time.monotonic()

    def join(self):
        pass


class _TrailingSampler:
    """HWs grow by 100 a sample while producing; every feed stream is two samples behind."""

    def __init__(self, producer: _InstantProducer):
        self._producer = producer
        self._high_watermarks = [0]

    def sample(self):
        high_watermark = self._high_watermarks[-1] + (100 if self._producer.finished is None else 0)
        self._high_watermarks.append(high_watermark)
        fed = self._high_watermarks[-3] if len(self._high_watermarks) >= 3 else 0
        return time.monotonic_ns(), [high_watermark, high_watermark], [fed, fed]


def test_a_run_samples_while_producing_and_measures_the_drain_after_the_last_acknowledgement():
    from benchmarks.feed_lag import _measure

    settings = FeedLagBenchSettings(duration_s=0.1, sample_interval_s=0.01, flush_s_max=5, drain_s_max=5, smoke=True)
    producer = _InstantProducer()
    producing, unknown, drain_s = _measure(producer, _TrailingSampler(producer), settings)
    assert producing and unknown == 0
    assert max(sample.records for sample in producing) == 200, "two samples of 100 records not yet fed"
    assert all(sample.at_ns <= producer.finished * 1e9 for sample in producing), "drain samples are not producing ones"
    assert drain_s is not None and drain_s >= 0, "the streams caught up two samples after the producer stopped"
