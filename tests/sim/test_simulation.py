"""Seeded simulations of a whole cluster (``simulations.dst``) judged by ``simulations/checkers.py``.

Every seed builds a cluster (RF=3 physical partitions on the real replica core and the real
log on a simulated disk, VPs with RISR, feeders, resharding, producers running the real
sender pipeline, a consumer group whose members join and leave), runs it
through crashes, power losses, partitions, message drops and duplicates, heals it, drains
it, and checks the history: nothing acknowledged lost, replicas identical below the high
watermark, every committed record once in its VP, per-key order, monotonic commits.

Knobs (environment):

* ``MAFKA4_SIM_SEEDS`` (default 200): how many seeds; ``MAFKA4_SIM_SEEDS=5000`` for a long run.
* ``MAFKA4_SIM_START`` (default 0): the first seed.
* ``MAFKA4_COMPRESSION`` (default none): the simulated producers' codec, as for any ``Producer``.

A failing seed prints its trace and the exact replay command
(``python3 -m simulations.dst --seed N --trace``).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import pathlib
import subprocess
import sys

import pytest

from mafka4.client.sender_core import PipelineCore
from mafka4.coordinator.groups.vp_ownership import GroupView, OwnershipPlan, plan_ownership
from mafka4.log import fsync_points
from mafka4.physical.replica import ReplicaState, Role
from simulations.checkers import Kind
from simulations.dst.run import RunResult, run_seed

SEEDS = int(os.environ.get("MAFKA4_SIM_SEEDS", "200"))
START = int(os.environ.get("MAFKA4_SIM_START", "0"))


@functools.lru_cache(maxsize=None)
def result(seed: int) -> RunResult:
    return run_seed(seed)


@pytest.mark.parametrize("seed", range(START, START + SEEDS))
def test_seed(seed):
    outcome = result(seed)
    assert outcome.ok, "\n".join(outcome.trace[-60:]) + "\n" + outcome.summary()


def test_the_seeds_exercise_what_they_claim_to():
    """A simulation that never elects, crashes or reshards proves nothing: the seeds together
    must exercise every kind of fault and every protocol path (results are cached: the seeds
    already ran above). Elections and VP failovers count only when they follow a fault
    (``simulations.dst.coverage``): every replica set elects its first leader at start-up."""
    seeds = range(START, START + SEEDS)
    totals: dict[str, int] = {}
    faults: dict[str, int] = {}
    for seed in seeds:
        stats = result(seed).stats
        for key, value in stats.items():
            if isinstance(value, int):
                totals[key] = totals.get(key, 0) + value
        for kind, count in stats["faults"].items():
            faults[kind] = faults.get(kind, 0) + count
    for key in ("acked", "consumed", "elections_after_fault", "vp_failovers_after_fault", "vp_restarted_leader_failovers",
                "vp_leaders_from_restarted", "reshards", "torn_files", "vp_lost_bytes", "vp_tails_lost", "truncations",
                "vp_truncations", "producer_retries", "duplicates_refused", "refeeds_dropped", "members_joined",
                "members_left", "member_leases_lapsed", "ownership_claims", "ownership_releases", "ownership_splits",
                "lanes_opened", "lane_messages_acked", "lane_messages_read", "lane_messages_read_by_fallback",
                "members_joined_for_lanes"):
        assert totals.get(key, 0) > 0, (key, totals)
    for kind in ("crash-write", "crash-write-power-loss", "stop-write", "isolate-write", "cut-coordinator",
                 "crash-read", "crash-read-power-loss", "crash-feeder", "crash-consumer"):
        assert faults.get(kind, 0) > 0, (kind, faults)


def test_a_seed_replays_exactly_even_in_another_process():
    first, second = run_seed(START + 7), run_seed(START + 7)
    assert first.digest == second.digest and first.trace == second.trace and first.stats == second.stats
    # The replay command runs in a new process, with another string-hash salt.
    root = pathlib.Path(__file__).resolve().parents[2]
    replay = subprocess.run([sys.executable, "-m", "simulations.dst", "--seed", str(START + 7)], cwd=root,
                            env={**os.environ, "PYTHONHASHSEED": "12345", "PYTHONPATH": str(root)},
                            capture_output=True, text=True, timeout=600)
    assert f"history digest: {first.digest}" in replay.stdout, replay.stdout + replay.stderr


def test_a_seed_replays_exactly_in_a_process_that_records_fsync_points():
    """A replay started while the integration session's cluster records fsync points inherits
    ``$MAFKA4_RECORD_FSYNC_POINTS``; the simulated disk must not write their files (CI found seed 7
    replaying another history)."""
    plain = run_seed(START + 7)
    fsync_points.set_recording(True)
    try:
        recording = run_seed(START + 7)
    finally:
        fsync_points.set_recording(False)
    assert recording.digest == plain.digest and recording.trace == plain.trace


class HighWatermarkPastTheSlowestIsrMember(ReplicaState):
    """A broken replica core, for the test below only: the leader's high watermark follows the
    most advanced in-sync follower instead of the slowest, so it can pass an ISR member's log
    end offset (a "majority" rule where the ISR rule is "all"). Its own invariant check is
    switched off so that the simulator's checkers, not the core's assertion, have to notice.
    """

    def _advance_high_watermark(self) -> bool:
        if self._role is not Role.LEADER:
            return False
        members = (self._isr | self._committed_isr) - {self.replica_id}
        known = [self._followers[m].log_end_offset for m in members if self._followers[m].log_end_offset is not None]
        target = min(self._log_end_offset, max(known)) if known else self._log_end_offset
        if target <= self._high_watermark:
            return False
        self._high_watermark = target
        return True

    def _check_invariants(self) -> None:
        pass


def test_a_high_watermark_passing_an_isr_member_is_caught_by_the_checkers():
    caught = {Kind.LOST, Kind.DIVERGED, Kind.MISPLACED}
    for seed in range(START, START + SEEDS):
        outcome = run_seed(seed, replica_state_class=HighWatermarkPastTheSlowestIsrMember)
        if {anomaly.kind for anomaly in outcome.anomalies} & caught:
            break
    else:
        pytest.fail(f"no seed of {START}..{START + SEEDS - 1} caught a high watermark passing an ISR member")
    print(f"\nbroken high watermark first caught by seed {seed}:\n{outcome.summary()}")
    assert result(seed).ok, f"seed {seed} fails with the real core too: {result(seed).summary()}"


class RenumberingEveryRetry(PipelineCore):
    """A broken sender pipeline, for the test below only: every resend goes out under a fresh
    producer id from sequence 0, so a leader that appended a batch whose answer was lost cannot
    recognise the retry (a producer without idempotence)."""

    def resend(self):
        self._producer_id, self._next_sequence, self._renumber = self._new_producer_id(), 0, True
        return super().resend()


def test_a_sender_that_retries_under_a_fresh_producer_id_is_caught_by_the_checkers():
    """The simulated producers run production's pipeline (``client.sender_core``): a change to it
    changes what the simulator sees."""
    for seed in range(START, START + SEEDS):
        outcome = run_seed(seed, pipeline_class=RenumberingEveryRetry)
        if Kind.DUPLICATE in {anomaly.kind for anomaly in outcome.anomalies}:
            break
    else:
        pytest.fail(f"no seed of {START}..{START + SEEDS - 1} caught retries under a fresh producer id")
    print(f"\nretries under a fresh producer id first caught by seed {seed}:\n{outcome.summary()}")
    assert result(seed).ok, f"seed {seed} fails with the real pipeline too: {result(seed).summary()}"


class EveryUnreadVpConsumable(GroupView):
    """A broken group view, for the test below only: every VP not yet read to its sealed end is
    consumable, children as soon as they exist, while their parents are still being read (the
    parent-before-child rule of ``TopicLayout.consumable_vps`` left out)."""

    __slots__ = ()

    def consumable(self) -> tuple[int, ...]:
        opened = sorted({vp for epoch in self.layout.epochs for vp in epoch.children})
        sealed, committed = self.sealed_end_offsets, self.committed
        return tuple(vp for vp in opened if not (vp in sealed and committed.get(vp, 0) >= sealed[vp]))


def children_with_their_parents(view: GroupView, me: str) -> OwnershipPlan:
    return plan_ownership(EveryUnreadVpConsumable(view.members, view.layout, view.sealed_end_offsets, view.owners,
                                                  view.committed, view.lag, view.retired, view.drained,
                                                  view.member_lanes, view.lane_fallback), me)


def test_a_group_reading_children_before_their_parents_is_caught_by_the_checkers():
    for seed in range(START, START + SEEDS):
        outcome = run_seed(seed, ownership_rule=children_with_their_parents)
        if Kind.REORDERED in {anomaly.kind for anomaly in outcome.anomalies}:
            break
    else:
        pytest.fail(f"no seed of {START}..{START + SEEDS - 1} caught a group reading children before their parents")
    print(f"\nchildren read before their parents first caught by seed {seed}:\n{outcome.summary()}")
    assert result(seed).ok, f"seed {seed} fails with the real rule too: {result(seed).summary()}"


def lanes_ignored(view: GroupView, me: str) -> OwnershipPlan:
    """A broken group rule: every member reads every lane (its lanes and the lanes' fallbacks left out)."""
    return plan_ownership(dataclasses.replace(view, member_lanes={}, lane_fallback={}), me)


def every_lane_falls_back_to_the_trunk(view: GroupView, me: str) -> OwnershipPlan:
    """A broken group rule: a lane with fallback "none" is read by the trunk's readers while it has none of its own."""
    return plan_ownership(dataclasses.replace(view, lane_fallback={}), me)


@pytest.mark.parametrize("rule", [lanes_ignored, every_lane_falls_back_to_the_trunk])
def test_a_group_that_breaks_its_members_lanes_is_caught_reading_the_wrong_lane(rule):
    for seed in range(START, START + SEEDS):
        outcome = run_seed(seed, ownership_rule=rule)
        if Kind.WRONG_LANE in {anomaly.kind for anomaly in outcome.anomalies}:
            break
    else:
        pytest.fail(f"no seed of {START}..{START + SEEDS - 1} caught {rule.__name__} reading the wrong lane")
    print(f"\n{rule.__name__}: wrong-lane reads first caught by seed {seed}:\n{outcome.summary()}")
    assert result(seed).ok, f"seed {seed} fails with the real rule too: {result(seed).summary()}"
