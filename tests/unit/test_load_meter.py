"""``LoadMeter``: a read node's load counters turned into reports, each over the window since the last."""

import pytest

from mafka4.metadata.read_node_load import ReadNodeLoad
from mafka4.virtual.hosted_vp import VpId
from mafka4.virtual.load_meter import LoadMeter, open_and_sealed

WALL_MS = 1_700_000_000_000  # the wall clock only dates a report
START_MS = 5_000  # the monotonic clock at the meter's creation


def test_the_first_report_covers_the_time_since_creation_and_gives_rates_per_second():
    meter = LoadMeter("r0", START_MS)
    meter.fed_bytes_total += 3_000_000
    meter.fetch_cpu_ns_total += 500_000_000  # half a CPU second
    report = meter.report(7, WALL_MS, START_MS + 2_000)
    assert report == ReadNodeLoad("r0", hosted_vp_replicas=7, fed_bytes_per_s=1_500_000.0, fetch_cpu_cores=0.25,
                                  window_ms=2_000, measured_at_ms=WALL_MS)
    assert meter.last_report is report


def test_each_report_counts_only_what_grew_in_its_own_window():
    meter = LoadMeter("r0", START_MS)
    meter.fed_bytes_total += 10_000
    meter.report(1, WALL_MS, START_MS + 1_000)
    meter.fed_bytes_total += 4_000
    meter.fetch_cpu_ns_total += 40_000_000
    second = meter.report(1, WALL_MS + 4_000, START_MS + 5_000)
    assert (second.window_ms, second.fed_bytes_per_s, second.fetch_cpu_cores) == (4_000, 1_000.0, 0.01)
    assert meter.fed_bytes_total == 14_000, "the counters are never reset: a report remembers where they stood"


def test_an_idle_window_reports_zero_rates_and_the_hosted_count_it_is_given():
    meter = LoadMeter("r0", START_MS)
    meter.fed_bytes_total += 10_000
    meter.report(3, WALL_MS, START_MS + 1_000)
    idle = meter.report(0, WALL_MS + 10_000, START_MS + 11_000)
    assert (idle.hosted_vp_replicas, idle.fed_bytes_per_s, idle.fetch_cpu_cores) == (0, 0.0, 0.0)


def test_the_replicas_of_sealed_vps_are_reported_apart():
    meter = LoadMeter("r0", START_MS)
    report = meter.report(5, WALL_MS, START_MS + 1_000, sealed_vp_replicas=2)
    assert (report.hosted_vp_replicas, report.sealed_vp_replicas) == (5, 2)
    assert meter.report(5, WALL_MS, START_MS + 2_000).sealed_vp_replicas == 0


def test_hosted_replicas_split_into_open_and_sealed_by_each_topic_s_sealed_vps():
    hosted = {("t", 0): "replica", ("t", 1): "replica", ("t", 2): "replica", ("u", 0): "replica"}
    # t/v1 sealed; t/v7 and u/v3 sealed but hosted elsewhere; v topic not hosted here at all.
    assert open_and_sealed(hosted, {"t": frozenset({1, 7}), "u": frozenset({3}), "v": frozenset({0})}) == (3, 1)
    assert open_and_sealed(hosted, {"t": frozenset({0, 1, 2}), "u": frozenset({0})}) == (0, 4)
    assert open_and_sealed(hosted, {}) == (4, 0)
    assert open_and_sealed({}, {"t": frozenset({1})}) == (0, 0)
    # As a read node holds them: keyed by ``VpId``, a named tuple equal to its (topic, VP id).
    assert open_and_sealed({VpId("t", 0): "replica", VpId("t", 1): "replica"}, {"t": frozenset({1})}) == (1, 1)


def test_windows_follow_the_monotonic_clock_whatever_the_wall_clock_does():
    meter = LoadMeter("r0", START_MS)
    meter.fed_bytes_total += 1_000
    report = meter.report(1, WALL_MS - 60_000, START_MS + 1_000)  # the wall clock stepped back a minute
    assert (report.window_ms, report.fed_bytes_per_s, report.measured_at_ms) == (1_000, 1_000.0, WALL_MS - 60_000)


def test_no_report_while_no_time_passed_and_the_window_stays_open():
    meter = LoadMeter("r0", START_MS)
    meter.fed_bytes_total += 2_000
    assert meter.report(1, WALL_MS, START_MS) is None
    assert meter.last_report is None
    later = meter.report(1, WALL_MS + 1_000, START_MS + 1_000)
    assert (later.window_ms, later.fed_bytes_per_s) == (1_000, 2_000.0), "nothing counted was lost"


def test_a_counter_that_went_back_is_a_broken_invariant():
    meter = LoadMeter("r0", START_MS)
    meter.fed_bytes_total += 100
    meter.report(1, WALL_MS, START_MS + 1_000)
    meter.fed_bytes_total = 50
    with pytest.raises(AssertionError, match="went back"):
        meter.report(1, WALL_MS, START_MS + 2_000)


def test_a_report_survives_json():
    meter = LoadMeter("r0", START_MS)
    meter.fetch_cpu_ns_total += 123_456_789
    report = meter.report(4, WALL_MS, START_MS + 10_000)
    assert ReadNodeLoad.from_json(report.to_json()) == report
