"""RISR: read-replica states, the VP high watermark, who serves reads, who may lead, routing.

The last part drives ``RisrState`` with a model of three VP replicas' logs and a controller
through seeded random histories (appends, fetches, stalls, ticks, late RISR writes, leader
changes, flushes, power losses of the leader) and checks that no reader ever sees a record that
a later leader lacks.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest

from mafka4.errors import InvalidConfig, NotLeader
from mafka4.risr.state import (
    FetchRoute,
    NoReadReplica,
    ReplicaStatus,
    RisrConfig,
    RisrState,
    pick_leader,
    route_fetch,
)

LAG_MS = 1_000
CONFIG = RisrConfig(read_replica_lag_ms_max=LAG_MS, feed_lag_ms_max=500, catch_up_lag_records_min=100)
ALL = ("r0", "r1", "r2")


def leader(risr=ALL, log_end_offset=0, high_watermark=0, now_ms=0) -> RisrState:
    return RisrState("orders/v3", CONFIG, "r0", ALL, risr, log_end_offset, high_watermark, now_ms,
                     flushed_offset=log_end_offset)


def statuses(state: RisrState) -> dict[str, str]:
    return {replica: state.status(replica).value for replica in ALL}


# --- high watermark ---------------------------------------------------------------------------


def test_vp_high_watermark_is_the_smallest_log_end_offset_of_the_risr():
    state = leader()
    state.leader_appended(10)
    assert state.high_watermark == 0  # follower LEOs not known yet
    state.on_replica_fetch("r1", 10, now_ms=5)
    assert state.high_watermark == 0
    assert state.on_replica_fetch("r2", 4, now_ms=5).high_watermark == 4
    state.on_replica_fetch("r2", 10, now_ms=6)
    assert state.high_watermark == 10


def test_a_leader_alone_in_the_risr_exposes_what_it_appended_once_flushed():
    state = leader(risr=("r0",))
    state.leader_appended(7)
    assert state.leader_alone and state.flush_needed and state.high_watermark == 0
    state.leader_flushed(7)
    assert state.high_watermark == 7 and state.risr == {"r0"} and not state.flush_needed


# --- the lone leader: its flushed offset bounds the HW ----------------------------------------


def test_a_lone_leader_never_lets_readers_past_what_it_flushed():
    """A power loss cuts a log at its flushed offset; the coordinator re-elects a lone leader
    after one, so readers must never have seen more than that."""
    state = leader(risr=("r0",), log_end_offset=10, high_watermark=4)
    assert state.high_watermark == 10, "a recovered log is flushed to its end: all of it is served"
    state.leader_appended(15)
    assert state.flush_needed and state.high_watermark == 10
    state.leader_flushed(12)
    assert state.flush_needed and state.high_watermark == 12
    state.leader_flushed(15)
    assert not state.flush_needed and state.high_watermark == 15


def test_a_vp_with_one_replica_serves_what_it_appended_without_flushing():
    """Not covered by the rule: after a power loss it feeds the lost tail again in a new epoch,
    and its readers learn of it from their fetches' epochs (``VpReplicaCore.reader_divergence``)."""
    state = RisrState("orders/v1", CONFIG, "r0", ("r0",), ("r0",), 0, 0, 0, flushed_offset=0)
    state.leader_appended(9)
    assert state.high_watermark == 9 and not state.leader_alone and not state.flush_needed


def test_the_flushed_offset_does_not_bound_the_high_watermark_while_a_follower_may_be_elected():
    state = leader(risr=("r0", "r1"))
    state.on_replica_fetch("r1", 0, now_ms=0)
    state.leader_appended(6)
    state.on_replica_fetch("r1", 6, now_ms=1)
    assert state.high_watermark == 6 and not state.leader_alone and not state.flush_needed


def test_a_leader_left_alone_flushes_at_once_and_then_after_every_append():
    state = leader(risr=("r0", "r1"))
    state.leader_appended(6)
    state.on_replica_fetch("r1", 6, now_ms=0)
    assert state.high_watermark == 6 and not state.flush_needed  # r1 holds 0..5: no flush needed
    assert state.tick(LAG_MS + 1) and state.risr == {"r0"}  # r1 went quiet
    # r0 must flush before the RISR {r0} can reach the coordinator: readers saw 0..5.
    assert state.leader_alone and state.flush_needed
    state.leader_flushed(6)
    state.risr_committed({"r0"})
    state.leader_appended(8)
    assert state.flush_needed and state.high_watermark == 6
    state.leader_flushed(8)
    assert state.high_watermark == 8


def test_a_leader_stays_bound_by_its_flushed_offset_until_a_wider_risr_is_confirmed():
    """Once the RISR was the leader alone, the coordinator may hold it until a wider one is confirmed."""
    state = leader(risr=("r0",), log_end_offset=4)
    state.on_replica_fetch("r1", 4, now_ms=0)  # r1 caught up: the RISR grows to {r0, r1}
    assert state.risr == {"r0", "r1"} and state.leader_alone
    state.leader_appended(9)
    state.on_replica_fetch("r1", 9, now_ms=1)
    assert state.flush_needed and state.high_watermark == 4, "the coordinator may still hold {r0}"
    state.risr_committed({"r0", "r1"})
    assert not state.leader_alone and state.high_watermark == 9


def test_a_risr_of_the_leader_alone_written_since_the_last_confirmation_still_binds():
    state = leader(risr=("r0", "r1"))
    state.on_replica_fetch("r1", 0, now_ms=0)
    assert state.tick(LAG_MS + 1) and state.risr == {"r0"}  # {r0} is written...
    state.on_replica_fetch("r1", 0, now_ms=LAG_MS + 2)  # ...and r1 is back: {r0, r1} is written after it
    assert state.risr == {"r0", "r1"}
    state.leader_appended(5)
    state.on_replica_fetch("r1", 5, now_ms=LAG_MS + 3)
    assert state.leader_alone and state.high_watermark == 0, "the coordinator may hold {r0}"
    state.risr_committed({"r0"})
    assert state.leader_alone and state.high_watermark == 0
    state.risr_committed({"r0", "r1"})
    assert not state.leader_alone and state.high_watermark == 5


def test_after_a_risr_write_equal_to_the_risr_every_member_still_bounds_the_high_watermark():
    """The written RISR and the RISR are then one set (the usual case of a VP being fed): a
    member's log end bounds the HW of every later append as before."""
    state = leader()
    for replica in ("r1", "r2"):
        state.on_replica_fetch(replica, 0, now_ms=0)
    state.risr_committed(set(state.risr))
    assert state.committed_risr == state.risr == set(ALL)
    for end in range(1, 6):
        state.leader_appended(end)
        state.on_replica_fetch("r1", end, now_ms=end)
        assert state.high_watermark == 0, "r2 has fetched nothing past 0"
    state.on_replica_fetch("r2", 3, now_ms=6)
    assert state.high_watermark == 3


# --- lagging replicas leave and return ----------------------------------------------------------


def test_a_lagging_replica_leaves_the_risr_stops_serving_and_returns_once_caught_up():
    state = leader(now_ms=0)
    for replica in ("r1", "r2"):
        state.on_replica_fetch(replica, 0, now_ms=0)
    state.leader_appended(5)
    state.on_replica_fetch("r1", 5, now_ms=100)  # r2 stops fetching
    assert not state.tick(LAG_MS)
    assert state.tick(LAG_MS + 1)
    assert statuses(state) == {"r0": "in_sync", "r1": "in_sync", "r2": "lagging"}
    assert not state.can_serve_reads("r2")
    assert state.high_watermark == 0, "a removed replica bounds the HW until the coordinator holds the new RISR"
    state.risr_committed(state.risr)
    assert state.high_watermark == 5
    state.leader_appended(9)
    decision = state.on_replica_fetch("r2", 5, now_ms=1_200)  # behind: still lagging
    assert not decision.serving and not decision.risr_changed
    decision = state.on_replica_fetch("r2", 9, now_ms=1_300)
    assert decision.serving and decision.risr_changed
    assert state.status("r2") is ReplicaStatus.IN_SYNC and state.can_serve_reads("r2")


def test_a_new_replica_joins_catches_up_and_enters_the_risr():
    state = leader(risr=("r0",), log_end_offset=50, high_watermark=40)
    assert state.status("r2") is ReplicaStatus.JOINING
    assert not state.on_replica_fetch("r2", 0, now_ms=10).serving
    assert state.status("r2") is ReplicaStatus.CATCHING_UP
    assert not state.tick(10 * LAG_MS)  # never in the RISR: nothing to remove
    assert state.on_replica_fetch("r2", 50, now_ms=20 * LAG_MS).risr_changed
    assert state.status("r2") is ReplicaStatus.IN_SYNC


def test_steady_traffic_keeps_a_follower_that_reaches_the_previous_leader_end_in_sync():
    state = leader()
    for step in range(1, 50):
        state.leader_appended(step * 10)
        state.on_replica_fetch("r1", (step - 1) * 10, now_ms=step * 400)  # always one append behind
        state.on_replica_fetch("r2", step * 10, now_ms=step * 400)
        assert not state.tick(step * 400)
    assert state.risr == set(ALL)


def test_an_in_sync_replica_that_lost_data_below_the_high_watermark_leaves_at_once():
    state = leader()
    state.leader_appended(8)
    state.on_replica_fetch("r1", 8, now_ms=1)
    state.on_replica_fetch("r2", 8, now_ms=1)
    assert state.high_watermark == 8
    decision = state.on_replica_fetch("r2", 3, now_ms=2)  # restarted without its unflushed tail
    assert decision.risr_changed and not decision.serving
    assert state.status("r2") is ReplicaStatus.LAGGING and state.high_watermark == 8


def test_the_high_watermark_never_passes_a_member_and_never_goes_back():
    state = leader()
    state.leader_appended(20)
    seen = 0
    for now_ms, (r1, r2) in enumerate([(3, 9), (12, 9), (20, 15), (20, 20)]):
        state.on_replica_fetch("r1", r1, now_ms)
        state.on_replica_fetch("r2", r2, now_ms)
        assert seen <= state.high_watermark <= min(r1, r2)
        seen = state.high_watermark
    assert seen == 20


def test_illegal_transitions_and_impossible_fetches_are_bugs():
    state = leader(risr=("r0",), log_end_offset=5)
    state.on_replica_fetch("r1", 0, now_ms=0)
    with pytest.raises(AssertionError, match="illegal RISR transition of r1 in orders/v3: catching_up -> lagging"):
        state._move("r1", state._followers["r1"], ReplicaStatus.LAGGING)
    with pytest.raises(AssertionError, match="must truncate"):
        state.on_replica_fetch("r1", 6, now_ms=0)


def test_a_fetch_from_a_replica_that_is_not_assigned_is_refused():
    with pytest.raises(NotLeader, match="replica r9 fetched virtual partition orders/v3 from leader r0") as error:
        leader().on_replica_fetch("r9", 0, now_ms=0)
    assert error.value.retriable


# --- the leader's own feed ------------------------------------------------------------------------


def test_a_leader_whose_feed_lags_the_physical_high_watermarks_is_flagged():
    state = leader()
    state.on_feed({0: 100, 1: 40}, {0: 100, 1: 50}, now_ms=0)
    assert state.feed_lagging_partitions(500) == ()
    state.on_feed({0: 160, 1: 45}, {0: 160, 1: 60}, now_ms=400)  # 1 has not reached even the HW of time 0
    assert state.feed_lagging_partitions(501) == (1,)
    assert state.describe(501)["feed_lagging_partitions"] == [1]
    assert state.risr == set(ALL), "the leader stays in the RISR: followers are no fresher"
    state.on_feed({0: 160, 1: 60}, {0: 170, 1: 70}, now_ms=600)  # both reached the HWs of time 400
    assert state.feed_lagging_partitions(900) == ()
    assert state.feed_lagging_partitions(901) == (0, 1)


def test_a_partition_whose_last_report_reached_its_high_watermark_is_idle_not_lagging():
    """Streams send an idle VP nothing on a timer, so an old caught-up report must not read as a stall."""
    state = leader()
    state.on_feed({0: 100}, {0: 100}, now_ms=0)
    assert state.feed_lagging_partitions(10**9) == ()
    # The partition moves and the stream falls behind: after a silence it first says where the VP
    # still stood (``partition_feed._report``), then the news.
    state.on_feed({0: 100}, {0: 100}, now_ms=10**9)
    state.on_feed({0: 120}, {0: 150}, now_ms=10**9)
    assert state.feed_lagging_partitions(10**9 + 500) == ()
    assert state.feed_lagging_partitions(10**9 + 501) == (0,)
    state.on_feed({0: 150}, {0: 150}, now_ms=10**9 + 600)
    assert state.feed_lagging_partitions(10**10) == ()


def test_next_tick_is_when_the_first_in_sync_follower_may_pass_the_lag_bound():
    state = leader(now_ms=0)
    assert state.next_tick_ms() == LAG_MS + 1
    assert not state.tick(LAG_MS), "nothing moves before next_tick_ms"
    state.leader_appended(10)
    state.on_replica_fetch("r1", 10, now_ms=400)
    state.on_replica_fetch("r2", 10, now_ms=700)
    assert state.next_tick_ms() == 400 + LAG_MS + 1
    assert not state.tick(400 + LAG_MS)
    assert state.tick(400 + LAG_MS + 1) and statuses(state)["r1"] == "lagging"
    assert state.next_tick_ms() == 700 + LAG_MS + 1, "only in-sync followers can lag out"
    assert state.tick(10**9) and state.next_tick_ms() is None
    assert leader(risr=("r0",)).next_tick_ms() is None, "no follower in sync: no tick can change anything"


# --- leader choice ------------------------------------------------------------------------------


def test_only_a_live_risr_member_may_become_leader_in_preferred_order():
    assert pick_leader(ALL, {"r0", "r1", "r2"}, ALL) == "r0"
    assert pick_leader(ALL, {"r0", "r2"}, {"r1", "r2"}) == "r2"
    assert pick_leader(ALL, {"r0", "r2"}, ALL, exclude={"r0"}) == "r2"
    assert pick_leader(ALL, {"r0"}, {"r1", "r2"}) is None, "a replica outside the RISR must not lead"


# --- fetch routing --------------------------------------------------------------------------------


def test_with_one_read_replica_everyone_reads_from_it():
    assert route_fetch("g1", 0, 10_000, {"r0"}, "r0", CONFIG) == FetchRoute("r0", True)
    assert route_fetch("g1", 10_000, 10_000, {"r0"}, "r0", CONFIG) == FetchRoute("r0", False)


def test_catch_up_readers_are_kept_away_from_the_replica_serving_real_time_readers():
    members = {"r0", "r1"}
    for reader in (f"group-{i}" for i in range(20)):
        assert route_fetch(reader, 995, 1_000, members, "r0", CONFIG) == FetchRoute("r0", False)
        assert route_fetch(reader, 0, 1_000, members, "r0", CONFIG) == FetchRoute("r1", True)


def test_readers_spread_over_three_replicas_and_stay_on_one():
    real_time = {route_fetch(f"group-{i}", 1_000, 1_000, set(ALL), "r1", CONFIG).replica_id for i in range(40)}
    catch_up = {route_fetch(f"group-{i}", 0, 1_000, set(ALL), "r1", CONFIG).replica_id for i in range(40)}
    assert real_time == {"r0", "r1"} and catch_up == {"r2"}
    assert len({route_fetch("group-7", 1_000, 1_000, set(ALL), "r1", CONFIG) for _ in range(5)}) == 1


def test_a_vp_without_in_sync_replicas_answers_a_retriable_error():
    with pytest.raises(NoReadReplica, match="orders/v3 has no in-sync read replica") as error:
        route_fetch("g", 0, 0, set(), "r0", CONFIG, "orders/v3")
    assert error.value.retriable


def test_the_leader_routes_only_to_risr_members():
    state = leader(risr=("r0", "r2"))
    routes = {state.route_fetch(f"g{i}", 0).replica_id for i in range(20)}
    assert routes <= {"r0", "r2"}


def test_config_bounds_are_validated():
    with pytest.raises(InvalidConfig, match="read_replica_lag_ms_max=0"):
        RisrConfig(read_replica_lag_ms_max=0)


# --- random histories -----------------------------------------------------------------------------


@dataclass
class Node:
    log: list[int] = field(default_factory=list)
    high_watermark: int = 0
    alive: bool = True
    flushed: int = 0  # a power loss cuts the log here


class RisrSimulation:
    """Three VP replicas, a controller holding the committed RISR, and seeded chaos, including
    power losses of the leader (only while every follower runs: one failure at a time)."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.now_ms = 0
        self.nodes = {replica: Node() for replica in ALL}
        self.leader_id = "r0"
        self.controller_risr = frozenset(ALL)
        self.state = RisrState("orders/v0", CONFIG, "r0", ALL, ALL, 0, 0, 0, flushed_offset=0)
        self.exposed: list[int] = []  # every record a reader could have read, in VP offset order
        self.next_record = 0
        self.leader_changes = 0
        self.power_losses = 0

    def step(self) -> None:
        self.now_ms += self.rng.choice((0, 10, 50, 200))
        action = self.rng.choices(
            [self.append, self.fetch, self.tick, self.commit, self.toggle_alive, self.change_leader, self.flush,
             self.leader_loses_power],
            weights=[5, 10, 3, 2, 1, 2, 2, 1],
        )[0]
        action()
        if self.state.flush_needed:  # the shell's part of the lone-leader rule
            self.flush(self.leader_id)
        self.check()

    def append(self) -> None:
        node = self.nodes[self.leader_id]
        if node.alive:
            for _ in range(self.rng.randint(1, 4)):
                node.log.append(self.next_record)
                self.next_record += 1
            self.state.leader_appended(len(node.log))

    def flush(self, replica_id: str | None = None) -> None:
        """A replica fsyncs its log (by its flush policy, or the leader asked by the rule)."""
        replica_id = replica_id or self.rng.choice(ALL)
        node = self.nodes[replica_id]
        node.flushed = len(node.log)
        if replica_id == self.leader_id:
            self.state.leader_flushed(node.flushed)

    def leader_loses_power(self) -> None:
        """The leader's log is cut at its flushed offset; the controller fails over as
        ``virtual.failover`` does: a running RISR member, else the restarted leader itself."""
        if not all(node.alive for node in self.nodes.values()):
            return
        node = self.nodes[self.leader_id]
        del node.log[node.flushed:]
        node.high_watermark = min(node.high_watermark, len(node.log))
        self.power_losses += 1
        new = pick_leader(ALL, self.controller_risr, ALL, exclude={self.leader_id}) or self.leader_id
        self.controller_risr = frozenset(r for r in self.controller_risr if r != self.leader_id or r == new)
        self._lead(new)

    def fetch(self) -> None:
        follower_id = self.rng.choice([r for r in ALL if r != self.leader_id])
        follower, source = self.nodes[follower_id], self.nodes[self.leader_id]
        if not (follower.alive and source.alive):
            return
        # Epoch-based truncation, modelled by its outcome: keep the prefix shared with the leader.
        common = 0
        while common < min(len(follower.log), len(source.log)) and follower.log[common] == source.log[common]:
            common += 1
        del follower.log[common:]
        follower.flushed = min(follower.flushed, common)
        decision = self.state.on_replica_fetch(follower_id, len(follower.log), self.now_ms)
        follower.log.extend(source.log[len(follower.log):len(follower.log) + self.rng.choice((0, 3, 1_000))])
        follower.high_watermark = max(follower.high_watermark, min(decision.high_watermark, len(follower.log)))
        if decision.risr_changed:
            self.commit()

    def tick(self) -> None:
        if self.state.tick(self.now_ms):
            self.commit()

    def commit(self) -> None:
        """The leader's RISR write to the coordinator; sometimes late."""
        if self.rng.random() < 0.6:
            self.controller_risr = self.state.risr
            self.state.risr_committed(self.controller_risr)

    def toggle_alive(self) -> None:
        node = self.nodes[self.rng.choice(ALL)]
        node.alive = not node.alive

    def change_leader(self) -> None:
        alive = [r for r in ALL if self.nodes[r].alive]
        new = pick_leader(ALL, self.controller_risr, alive, exclude={self.leader_id})
        if new is None:
            return
        assert new in self.controller_risr
        self._lead(new)

    def _lead(self, new: str) -> None:
        node = self.nodes[new]
        self.leader_id = new
        self.leader_changes += 1
        self.state = RisrState("orders/v0", CONFIG, new, ALL, self.controller_risr, len(node.log),
                               min(node.high_watermark, len(node.log)), self.now_ms, flushed_offset=node.flushed)

    def run(self) -> int:
        """At least 400 steps and one leader change (at most 2,000 steps); the power losses."""
        for steps in range(2_000):
            self.step()
            if steps >= 400 and self.leader_changes:
                break
        return self.power_losses

    def check(self) -> None:
        leader_log = self.nodes[self.leader_id].log
        high_watermark = self.state.high_watermark
        assert leader_log[:len(self.exposed)] == self.exposed, "a record readers saw is gone from the leader"
        if high_watermark > len(self.exposed):
            self.exposed = leader_log[:high_watermark]
        for member in self.state.risr:
            assert len(self.nodes[member].log) >= high_watermark, f"HW {high_watermark} passed RISR member {member}"
            assert self.nodes[member].log[:high_watermark] == leader_log[:high_watermark]


@pytest.mark.parametrize("seed", range(60))
def test_random_histories_never_lose_what_readers_saw(seed):
    simulation = RisrSimulation(seed)
    simulation.run()
    assert simulation.exposed, f"seed {seed} exposed nothing"
    assert simulation.leader_changes, f"seed {seed} changed no leader"


def test_random_histories_cut_logs_by_power_losses():
    """The histories above exercise what the lone-leader rule is for."""
    assert sum(RisrSimulation(seed).run() for seed in range(60)) > 0
