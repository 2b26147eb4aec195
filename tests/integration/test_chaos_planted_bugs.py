"""Chaos runs on a real cluster catch each bug of ``mafka4.planted_bugs``: the verdict fails on an anomaly.

Each run starts its own throwaway cluster (``run_chaos`` without a connection) whose processes
inherit ``$MAFKA4_PLANTED_BUG``, so its replica actors and read nodes run the broken core. The
faults are the ones that expose each bug: a killed physical replica (a leader now and then) for
the write-path bugs, which lose only what a failover finds unreplicated; a killed read node for
the feeder, whose skipped batches are missing with or without faults. Slow (a cluster start and
about two minutes a run), so excluded by default: ``pytest -m slow tests/integration/test_chaos_planted_bugs.py``.
The simulator catches the same bugs in seconds (``tests/sim/test_planted_bugs_caught.py``).
"""

from __future__ import annotations

import dataclasses

import pytest

from conftest import away_from_session_ray
from mafka4.planted_bugs import PlantedBug
from simulations.chaos.run import ChaosSettings, planted_bug_caught, run_chaos, summary

SETTINGS = ChaosSettings(seed=11, duration_s=60, rate_msgs_per_s=300, members=2, warmup_s=2, settle_s=3,
                         heal_timeout_s=60, drain_timeout_s=30)
FAULTS = {
    PlantedBug.HIGH_WATERMARK: ("kill-replica",),
    PlantedBug.ACK_BEFORE_ISR: ("kill-replica",),
    PlantedBug.FEEDER_SKIPS_BATCH: ("kill-read-node",),
}


@pytest.mark.slow
@pytest.mark.parametrize("bug", list(PlantedBug), ids=lambda bug: bug.value)
def test_a_chaos_run_with_a_planted_bug_fails_its_verdict_on_an_anomaly(bug):
    settings = dataclasses.replace(SETTINGS, faults=FAULTS[bug], planted_bug=bug.value)
    with away_from_session_ray():  # the run's own cluster needs this driver
        report = run_chaos(settings)
    print(summary(report))
    assert report["settings"]["planted_bug"] == bug.value
    assert report["messages"]["acknowledged"] > 0, report["producer_failures"]
    assert not report["verdict"]["passed"]
    assert planted_bug_caught(report), (report["verdict"]["reasons"], report["anomaly_samples"])
    assert f"planted bug {bug.value}: caught" in summary(report)
