"""``metrics.controller_counters``: what a controller process decided, and the Prometheus families of it."""

from __future__ import annotations

import threading

import pytest

from mafka4.metrics.controller_counters import ControllerCounters, reshard_kind
from mafka4.metrics.families import controller_families

C = (("controller", "c-a"),)


def _samples(families) -> dict[tuple[str, tuple], float]:
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in families for sample in family.samples}


def test_a_standby_exposes_its_zero_counts_and_no_epoch():
    samples = _samples(controller_families(ControllerCounters("c-a").snapshot()))
    assert samples[("mafka4_controller_active", C)] == 0
    assert ("mafka4_controller_epoch", C) not in samples, "a standby has no epoch to show"
    assert samples[("mafka4_controller_elections_won_total", C)] == 0
    assert samples[("mafka4_controller_reshards_total", (("controller", "c-a"), ("kind", "split")))] == 0, \
        "every kind is exposed from the start, so rate() and increase() see the first one"


def test_wins_elections_reshards_and_scaling_decisions_are_counted_by_kind():
    counters = ControllerCounters("c-a")
    counters.won(3)
    counters.stepped_down()
    counters.won(5)
    for kind in ("partition", "partition", "vp"):
        counters.leader_elected(kind)
    counters.resharded(reshard_kind(1, 2))
    counters.resharded(reshard_kind(2, 1))
    counters.resharded(reshard_kind(1, 2))
    counters.read_node_scaling_decided("add")
    counters.read_node_scaling_decided("hold")
    samples = _samples(controller_families(counters.snapshot()))
    assert samples[("mafka4_controller_active", C)] == 1 and samples[("mafka4_controller_epoch", C)] == 5
    assert samples[("mafka4_controller_elections_won_total", C)] == 2
    assert samples[("mafka4_controller_leader_elections_total", C + (("kind", "partition"),))] == 2
    assert samples[("mafka4_controller_leader_elections_total", C + (("kind", "vp"),))] == 1
    assert samples[("mafka4_controller_reshards_total", C + (("kind", "split"),))] == 2
    assert samples[("mafka4_controller_reshards_total", C + (("kind", "merge"),))] == 1
    assert samples[("mafka4_controller_read_node_scaling_decisions_total", C + (("kind", "add"),))] == 1
    assert samples[("mafka4_controller_read_node_scaling_decisions_total", C + (("kind", "release"),))] == 0
    counters.stepped_down()
    assert _samples(controller_families(counters.snapshot()))[("mafka4_controller_active", C)] == 0


def test_counts_from_several_threads_are_exact():
    counters = ControllerCounters("c-a")

    def elect():
        for _ in range(10_000):
            counters.leader_elected("vp")

    threads = [threading.Thread(target=elect) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert counters.snapshot()["leader_elections"]["vp"] == 40_000


def test_an_unknown_kind_is_a_defect():
    with pytest.raises(AssertionError):
        ControllerCounters("c-a").resharded("shuffle")
    with pytest.raises(AssertionError):
        reshard_kind(1, 1)
