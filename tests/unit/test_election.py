"""The controller's pure decisions: partition leader election, replica replacement, campaigns."""

from __future__ import annotations

import dataclasses
import random

import pytest

from mafka4.coordinator.control.partition_decisions import Campaign, Standby, decide_campaign, decide_partition
from mafka4.limits import TopicConfig
from mafka4.physical.partition_state import PartitionState

CLEAN = TopicConfig(replication_factor=3)
UNCLEAN = TopicConfig(replication_factor=3, unclean_leader_election=True)
NODES = ("w0", "w1", "w2")


MIN_ISR_2 = TopicConfig(replication_factor=3, min_insync_replicas=2)


def state(leader="w0", epoch=4, replicas=("w0", "w1", "w2"), isr=None, partition=0, elr=()) -> PartitionState:
    return PartitionState(partition, leader, epoch, tuple(replicas), tuple(replicas if isr is None else isr), tuple(elr))


def test_a_healthy_partition_is_left_alone():
    decision = decide_partition(state(), {"w0", "w1", "w2"}, NODES, CLEAN)

    assert not decision.changed and decision.restart == () and not decision.offline


def test_a_dead_leader_is_replaced_by_the_first_live_isr_member_in_replica_order_with_a_new_epoch():
    old = state(leader="w0", replicas=("w0", "w1", "w2"), isr=("w2", "w1", "w0"))

    decision = decide_partition(old, {"w1", "w2"}, NODES, CLEAN)

    assert decision.state == PartitionState(0, "w1", 5, ("w0", "w1", "w2"), ("w1", "w2"))
    assert decision.restart == ("w0",), "its node is registered: restarted there as a follower"
    assert decision.add == decision.remove == () and decision.warning is None


def test_a_live_replica_outside_the_isr_never_leads_a_clean_election():
    old = state(leader="w0", isr=("w0", "w2"))

    decision = decide_partition(old, {"w1", "w2"}, NODES, CLEAN)

    assert decision.state.leader == "w2"
    assert decision.state.isr == ("w2",)


def test_a_dead_follower_outside_the_isr_is_restarted_in_place_without_a_new_epoch():
    decision = decide_partition(state(isr=("w0", "w2")), {"w0", "w2"}, NODES, CLEAN)

    assert not decision.changed, "same leader, same replica set, same ISR: the epoch stays"
    assert decision.restart == ("w1",)


def test_a_dead_isr_member_restarted_in_place_leaves_the_isr_in_a_new_epoch():
    # KIP-966: it may have lost its unflushed tail; listed in the ISR it could be elected.
    decision = decide_partition(state(), {"w0", "w2"}, NODES, CLEAN)

    assert decision.state == PartitionState(0, "w0", 5, ("w0", "w1", "w2"), ("w0", "w2"))
    assert decision.restart == ("w1",) and decision.add == decision.remove == ()
    again = decide_partition(decision.state, {"w0", "w2"}, NODES, CLEAN)
    assert not again.changed and again.restart == ("w1",), "restarting it again needs no further epoch"


def test_a_dead_follower_whose_node_is_gone_moves_to_a_free_node_and_bumps_the_epoch():
    decision = decide_partition(state(), {"w0", "w2"}, ("w0", "w2", "w3"), CLEAN)

    assert decision.state == PartitionState(0, "w0", 5, ("w0", "w3", "w2"), ("w0", "w2"))
    assert (decision.add, decision.remove, decision.restart) == (("w3",), ("w1",), ())


def test_a_dead_leader_on_a_gone_node_is_replaced_and_a_new_leader_elected_in_one_step():
    decision = decide_partition(state(), {"w1", "w2"}, ("w1", "w2", "w5"), CLEAN)

    assert decision.state == PartitionState(0, "w1", 5, ("w5", "w1", "w2"), ("w1", "w2"))
    assert decision.add == ("w5",) and decision.remove == ("w0",)


def test_without_a_free_node_a_dead_replica_stays_listed_and_nothing_changes_while_the_leader_lives():
    decision = decide_partition(state(), {"w0", "w2"}, ("w0", "w2"), CLEAN)

    assert not decision.changed and decision.restart == () and decision.add == ()


def test_replacements_spread_over_free_nodes_by_partition_number():
    nodes = ("w0", "w2", "w3", "w4", "w5")
    chosen = {
        decide_partition(state(partition=p), {"w0", "w2"}, nodes, CLEAN).add[0] for p in range(3)
    }

    assert chosen == {"w3", "w4", "w5"}
    again = {decide_partition(state(partition=p), {"w0", "w2"}, nodes, CLEAN).add[0] for p in range(3)}
    assert again == chosen, "deterministic"


def test_no_live_isr_member_means_offline_and_the_dead_isr_members_are_restarted():
    old = state(leader="w0", isr=("w0", "w1"))

    decision = decide_partition(old, {"w2"}, NODES, CLEAN)

    assert decision.offline and not decision.changed
    assert decision.restart == ("w0", "w1")
    assert "offline" in decision.warning and "unclean_leader_election" in decision.warning


def test_unclean_election_lets_a_live_out_of_sync_replica_lead_and_says_so():
    old = state(leader="w0", isr=("w0", "w1"))

    decision = decide_partition(old, {"w2"}, ("w2",), UNCLEAN)

    assert decision.state == PartitionState(0, "w2", 5, ("w0", "w1", "w2"), ("w2",))
    assert "unclean" in decision.warning and "lost" in decision.warning


def test_with_no_live_replica_even_unclean_election_is_offline():
    decision = decide_partition(state(), set(), (), UNCLEAN)

    assert decision.offline and not decision.changed and decision.restart == ()


def test_a_fresh_leader_is_elected_again_in_a_new_epoch_and_fresh_followers_leave_the_isr():
    # Both were restarted by the controller after every ISR member had died.
    old = state(leader="w0", isr=("w0", "w1"))

    decision = decide_partition(old, {"w0", "w1"}, NODES, CLEAN, fresh={"w0", "w1"})

    assert decision.state == PartitionState(0, "w0", 5, ("w0", "w1", "w2"), ("w0",))
    assert decision.restart == ("w2",)


def test_a_restarted_leader_leads_again_only_in_a_new_epoch():
    # A replica refuses to lead an epoch it already knows, so the same leader needs epoch + 1.
    decision = decide_partition(state(isr=("w0",)), {"w0"}, ("w0",), CLEAN, fresh={"w0"})

    assert decision.state == PartitionState(0, "w0", 5, ("w0", "w1", "w2"), ("w0",))


def test_fresh_must_be_live():
    with pytest.raises(AssertionError):
        decide_partition(state(), {"w1"}, NODES, CLEAN, fresh={"w0"})


# --- eligible leader replicas (KIP-966) ----------------------------------------------------


def test_replicas_the_leader_removes_below_min_insync_replicas_become_eligible_leader_replicas():
    full = state(isr=("w0", "w1", "w2"))

    assert full.with_isr(("w0", "w1"), 2).elr == (), "the ISR still has min_insync_replicas members"
    alone = full.with_isr(("w0",), 2)
    assert (alone.isr, alone.elr) == (("w0",), ("w1", "w2"))
    assert alone.with_isr(("w0", "w2"), 3).elr == ("w1",), "a replica back in the ISR leaves the ELR"
    assert alone.with_isr(("w0", "w2"), 2).elr == (), "batches commit without the ELR again: it is emptied"
    assert state(isr=("w0", "w1"), elr=("w2",)).with_isr(("w0",), 3).elr == ("w1", "w2")


def test_a_partition_state_without_an_elr_field_reads_as_an_empty_elr():
    old_json = {"leader": "w0", "leader_epoch": 4, "replicas": ["w0", "w1", "w2"], "isr": ["w0"]}

    assert PartitionState.from_json(0, old_json) == state(isr=("w0",))
    with_elr = state(isr=("w0",), elr=("w1", "w2"))
    assert PartitionState.from_json(0, with_elr.to_json()) == with_elr


def test_with_no_live_isr_member_a_live_eligible_leader_replica_leads_and_joins_the_isr():
    # w0 shrank the ISR to itself, then lost power: restarted, it lacks its unflushed tail.
    old = state(isr=("w0",), elr=("w1", "w2"))

    decision = decide_partition(old, {"w1", "w2"}, NODES, MIN_ISR_2)

    assert decision.state == PartitionState(0, "w1", 5, ("w0", "w1", "w2"), ("w1",), ("w2",))
    assert decision.restart == ("w0",) and decision.warning is None


def test_a_live_isr_member_is_preferred_to_an_eligible_leader_replica():
    old = state(isr=("w0", "w2"), elr=("w1",))

    decision = decide_partition(old, {"w1", "w2"}, NODES, TopicConfig(replication_factor=3, min_insync_replicas=3))

    assert decision.state.leader == "w2" and decision.state.elr == ("w1",)


def test_a_fresh_eligible_leader_replica_never_leads():
    old = state(isr=("w0",), elr=("w1",))

    decision = decide_partition(old, {"w1"}, ("w1", "w2"), MIN_ISR_2, fresh={"w1"})

    assert decision.offline and decision.state.elr == () and decision.state.leader == "w0"


def test_a_restarted_eligible_leader_replica_leaves_the_elr_even_while_the_partition_is_offline():
    old = state(isr=("w0",), elr=("w1", "w2"))

    decision = decide_partition(old, set(), NODES, MIN_ISR_2)

    assert decision.offline and decision.restart == ("w0", "w1", "w2")
    assert decision.state == PartitionState(0, "w0", 5, ("w0", "w1", "w2"), ("w0",), ())
    again = decide_partition(decision.state, {"w0", "w1", "w2"}, NODES, MIN_ISR_2, fresh={"w0", "w1", "w2"})
    assert again.state == PartitionState(0, "w0", 6, ("w0", "w1", "w2"), ("w0",), ())


def test_a_restarted_eligible_leader_replica_leaves_the_elr_in_a_new_epoch_under_the_same_leader():
    decision = decide_partition(state(isr=("w0",), elr=("w1", "w2")), {"w0", "w2"}, NODES, MIN_ISR_2)

    assert decision.state == PartitionState(0, "w0", 5, ("w0", "w1", "w2"), ("w0",), ("w2",))
    assert decision.restart == ("w1",)


def test_an_eligible_leader_replica_on_a_replaced_node_leaves_the_elr():
    decision = decide_partition(state(isr=("w0",), elr=("w1", "w2")), {"w0", "w2"}, ("w0", "w2", "w3"), MIN_ISR_2)

    assert decision.state == PartitionState(0, "w0", 5, ("w0", "w3", "w2"), ("w0",), ("w2",))


def test_unclean_election_stays_the_last_resort_after_the_elr():
    old = state(isr=("w0",), elr=("w1",))
    config = TopicConfig(replication_factor=3, min_insync_replicas=2, unclean_leader_election=True)

    assert decide_partition(old, {"w1", "w2"}, ("w1", "w2"), config).state.leader == "w1"
    unclean = decide_partition(old, {"w2"}, ("w2",), config)
    assert unclean.state.leader == "w2" and "unclean" in unclean.warning


@pytest.mark.parametrize("seed", range(300))
def test_random_decisions_keep_the_invariants(seed):
    rng = random.Random(seed)
    nodes = [f"w{i}" for i in range(rng.randint(1, 6))]
    replicas = rng.sample(nodes, rng.randint(1, len(nodes)))
    isr = [r for r in replicas if rng.random() < 0.7]
    leader = rng.choice(isr or replicas)
    isr = isr if leader in isr else [leader] + isr
    elr = [r for r in replicas if r not in isr and rng.random() < 0.5]
    old = PartitionState(rng.randint(0, 9), leader, rng.randint(0, 9), tuple(replicas), tuple(isr), tuple(elr))
    live = {r for r in replicas if rng.random() < 0.6}
    fresh = {r for r in live if rng.random() < 0.2}
    registered = [n for n in nodes + ["w8", "w9"] if rng.random() < 0.7]
    config = TopicConfig(replication_factor=len(replicas), min_insync_replicas=rng.randint(1, len(replicas)),
                         unclean_leader_election=rng.random() < 0.3)

    decision = decide_partition(old, live, registered, config, fresh)

    assert set(decision.restart) == {r for r in replicas if r not in live and r in registered} or decision.offline
    if decision.offline:
        assert not any(r in live for r in isr) and not (config.unclean_leader_election and live)
        assert not any(r in live and r not in fresh for r in elr)
        if decision.changed:  # only restarted or fresh replicas left the ELR
            assert decision.state == dataclasses.replace(old, leader_epoch=old.leader_epoch + 1, elr=decision.state.elr)
            assert set(decision.state.elr) == set(elr) - set(decision.restart) - fresh != set(elr)
        return
    if not decision.changed:
        assert old.leader in live and old.leader not in fresh
        return
    new = decision.state
    assert new.leader_epoch == old.leader_epoch + 1
    assert len(set(new.replicas)) == len(new.replicas) == len(old.replicas)
    assert new.leader in live and new.leader in new.isr and set(new.isr) <= set(new.replicas)
    if decision.warning is None:
        assert new.leader in old.isr or new.leader in old.elr, "a clean election picks an in-sync or eligible replica"
    assert set(new.isr) - {new.leader} <= (set(old.isr) & live) - fresh
    assert set(new.elr) <= set(elr) - set(new.isr) - set(decision.restart) - fresh
    assert not new.elr or len(new.isr) < config.min_insync_replicas
    assert set(decision.add) <= set(registered) - set(old.replicas)
    assert set(new.replicas) == (set(old.replicas) - set(decision.remove)) | set(decision.add)


def test_campaign_only_while_no_controller_holds_the_key_with_an_epoch_above_every_earlier_one():
    assert decide_campaign(None, None) == Campaign(0)
    assert decide_campaign(None, 6) == Campaign(7)
    assert decide_campaign({"controller_id": "c1", "controller_epoch": 6}, 6) == Standby("c1", 6)
