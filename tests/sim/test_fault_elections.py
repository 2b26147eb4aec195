"""The simulator counts elections after a fault apart from start-up ones (``simulations.dst.coverage``).

Seeded runs with the nemesis silenced still elect every replica group's first leader; none of
those may pass for a fault-driven election, which the coverage check of ``test_simulation.py``
requires.
"""

from __future__ import annotations

import pytest

from simulations.dst.run import run_seed

SEEDS = range(3)
NO_FAULTS = 10**9  # mean ms between faults: the first one is drawn after the chaos phase ended


def test_runs_without_faults_elect_at_start_up_and_count_no_election_after_a_fault():
    outcomes = [run_seed(seed, fault_interval_ms=NO_FAULTS) for seed in SEEDS]
    for outcome in outcomes:
        assert outcome.ok, outcome.summary()
        assert outcome.stats["faults"] == {}
        assert outcome.stats["elections"] > 0, outcome.stats  # every partition's first leader
        for counter in ("elections_after_fault", "vp_failovers_after_fault", "vp_restarted_leader_failovers",
                        "vp_leaders_from_restarted", "vp_restarted_followers_left_risr"):
            assert counter not in outcome.stats, (counter, outcome.stats)
    # A read node's first boot makes its VP replicas "restarted": VPs fail over at start-up too.
    assert any(outcome.stats["vp_failovers"] > 0 for outcome in outcomes)


def test_every_election_counted_after_a_fault_is_traced_as_one_and_follows_a_fault_in_the_trace():
    for seed in range(20):
        outcome = run_seed(seed)
        after = [line for line in outcome.trace if line.endswith("; after a fault)")]
        if after:
            break
    else:
        pytest.fail("no seed of 0..19 elected after a fault")
    counted = outcome.stats.get("elections_after_fault", 0) + outcome.stats.get("vp_failovers_after_fault", 0)
    assert len(after) == counted, (after, outcome.stats)
    first_fault = next(i for i, line in enumerate(outcome.trace) if "nemesis: " in line)
    assert outcome.trace.index(after[0]) > first_fault
