"""The bugs of ``mafka4.planted_bugs`` are caught by the simulator's checkers; the same seeds pass without them.

Each bug is planted in the production core the simulator runs (``planted_bugs.planted``), and
the run is judged by ``simulations/checkers.py`` as any seed is. The write-path bugs (a high
watermark past the ISR, an acknowledgement before the ISR has the batch) damage nothing until a
leader fails over while acknowledged batches are missing from its successor; in many seeds the
producers are done before the first fault, so these runs keep the producers writing through the
whole fault phase and draw faults often (``UNDER_FAULTS``). The feeder's skipped batch needs no
fault: every seed that commits enough records to a partition catches it.
"""

from __future__ import annotations

import os

import pytest

from mafka4 import planted_bugs
from mafka4.planted_bugs import PlantedBug
from simulations.checkers import Kind
from simulations.dst.run import RunResult, run_seed

START = int(os.environ.get("MAFKA4_SIM_START", "0"))
# Writes span the 2 s fault phase (40 rounds, 50 ms apart) and a fault comes every 80 ms on average.
UNDER_FAULTS = dict(writes_per_producer=40, produce_interval_ms=50, chaos_ms=2000, fault_interval_ms=80)
# Seeds tried per bug before the test gives up: here a write-path bug is caught by about 2 seeds in 5.
SEEDS_MAX = 30


def _caught(outcome: RunResult, bug: PlantedBug) -> bool:
    """True if the checkers report the damage ``bug`` does, where it does it."""
    details = {anomaly.kind: [] for anomaly in outcome.anomalies}
    for anomaly in outcome.anomalies:
        details[anomaly.kind].append(anomaly.detail)
    if bug is PlantedBug.HIGH_WATERMARK:
        return bool({Kind.LOST, Kind.MISPLACED, Kind.DIVERGED} & set(details))
    if bug is PlantedBug.ACK_BEFORE_ISR:  # an acknowledged batch gone from the physical log
        return any("the final log holds" in detail for detail in details.get(Kind.LOST, ()))
    # The physical log keeps every acknowledged batch; the VPs miss the skipped ones.
    return (any("is in no VP" in detail for detail in details.get(Kind.LOST, ()))
            and not any("the final log holds" in detail for detail in details.get(Kind.LOST, ())))


def first_catch(bug: PlantedBug, **overrides) -> RunResult:
    with planted_bugs.planted(bug):
        for seed in range(START, START + SEEDS_MAX):
            outcome = run_seed(seed, **overrides)
            assert outcome.error is None, outcome.summary()  # caught by the checkers, not by a crash
            if _caught(outcome, bug):
                return outcome
    pytest.fail(f"no seed of {START}..{START + SEEDS_MAX - 1} caught the planted bug {bug.value}")


@pytest.mark.parametrize("bug", [PlantedBug.HIGH_WATERMARK, PlantedBug.ACK_BEFORE_ISR], ids=lambda bug: bug.value)
def test_a_write_path_bug_loses_acknowledged_messages_at_a_failover_and_the_seed_passes_without_it(bug):
    outcome = first_catch(bug, **UNDER_FAULTS)
    print(f"\nplanted bug {bug.value} first caught by seed {outcome.seed} (with {UNDER_FAULTS}):\n{outcome.summary()}")
    assert outcome.planted_bug is bug and f"--planted-bug {bug.value}" in outcome.summary()
    assert outcome.stats["elections_after_fault"] > 0
    clean = run_seed(outcome.seed, **UNDER_FAULTS)
    assert clean.ok, f"seed {outcome.seed} fails without the planted bug too: {clean.summary()}"


def test_a_feeder_that_skips_batches_leaves_acknowledged_messages_undelivered_and_the_seeds_pass_without_it():
    seeds = range(START, START + 3)
    with planted_bugs.planted(PlantedBug.FEEDER_SKIPS_BATCH):
        outcomes = [run_seed(seed) for seed in seeds]
    for outcome in outcomes:
        assert _caught(outcome, PlantedBug.FEEDER_SKIPS_BATCH), outcome.summary()
        assert any("was never read" in anomaly.detail for anomaly in outcome.anomalies), outcome.summary()
    for seed in seeds:
        clean = run_seed(seed)
        assert clean.ok, f"seed {seed} fails without the planted bug too: {clean.summary()}"
