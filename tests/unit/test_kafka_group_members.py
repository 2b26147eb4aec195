"""A Kafka member's state as the listener keeps it (``kafka.group_members``): generations, rebalances, commits."""

from __future__ import annotations

import pytest

from mafka4.errors import UnknownMember
from mafka4.kafka import error_codes
from mafka4.kafka.group_members import CommitAsked, KafkaMember, KafkaMembers


def synced_member(owned=(0, 1), sealed=None) -> KafkaMember:
    member = KafkaMember("m1", "g", "t", "alice", "range")
    member.joined()
    member.synced(owned, sealed or {})
    return member


def test_each_join_is_a_new_generation_and_the_member_is_rebalancing_until_its_sync():
    member = KafkaMember("m1", "g", "t", "alice", "range")
    assert member.joined() == 1
    assert member.heartbeat_error(1, changed=False) == error_codes.REBALANCE_IN_PROGRESS
    assert member.synced([1, 0], {}) == (0, 1)
    assert member.heartbeat_error(1, changed=False) == error_codes.NONE
    assert member.heartbeat_error(1, changed=True) == error_codes.REBALANCE_IN_PROGRESS
    assert member.heartbeat_error(0, changed=False) == error_codes.ILLEGAL_GENERATION
    assert member.joined() == 2
    assert member.generation_error(1) == error_codes.ILLEGAL_GENERATION


def test_a_commit_is_refused_outside_the_generation_its_rebalance_and_its_assignment():
    member = synced_member(owned=(0, 1))
    refused, positions = member.commit_request(1, [CommitAsked(0, 5, 2), CommitAsked(3, 5)])
    assert refused == {3: error_codes.ILLEGAL_GENERATION}
    assert [(p.id, p.offset, p.leader_epoch) for p in positions] == [(0, 5, 2)]
    assert member.rejoin, "a client committing what it does not own holds a stale assignment"
    refused, positions = member.commit_request(7, [CommitAsked(0, 5)])
    assert (refused, positions) == ({0: error_codes.ILLEGAL_GENERATION}, ())
    member.joined()
    refused, positions = member.commit_request(2, [CommitAsked(0, 5)])
    assert (refused, positions) == ({0: error_codes.REBALANCE_IN_PROGRESS}, ())


def test_a_commit_reaching_a_sealed_end_asks_for_a_rejoin_and_the_next_sync_carries_it():
    member = synced_member(owned=(0, 1), sealed={0: 40})
    _, positions = member.commit_request(1, [CommitAsked(0, 39), CommitAsked(1, 8)])
    assert member.commit_answered(positions, lost=()) == {0: error_codes.NONE, 1: error_codes.NONE}
    assert not member.rejoin
    _, positions = member.commit_request(1, [CommitAsked(0, 40)])
    member.commit_answered(positions, lost=())
    assert member.heartbeat_error(1, changed=False) == error_codes.REBALANCE_IN_PROGRESS
    assert [(p.id, p.offset) for p in member.positions()] == [(0, 40), (1, 8)]
    member.joined()
    member.synced([1, 4], {})
    assert not member.rejoin
    assert [(p.id, p.offset) for p in member.positions()] == [(1, 8)], "the released parent is no position any more"


def test_a_commit_answered_lost_is_illegal_generation_and_a_commit_never_goes_back_here():
    member = synced_member(owned=(0, 1))
    _, positions = member.commit_request(1, [CommitAsked(0, 9), CommitAsked(1, 3)])
    assert member.commit_answered(positions, lost=[1]) == {0: error_codes.NONE, 1: error_codes.ILLEGAL_GENERATION}
    assert member.rejoin
    _, positions = member.commit_request(1, [CommitAsked(0, 4)])
    member.commit_answered(positions, lost=())
    assert [(p.id, p.offset) for p in member.positions()] == [(0, 9)]


def test_the_members_are_found_by_id_group_and_principal_and_pruned_once_their_session_ended():
    members = KafkaMembers()
    members.add(KafkaMember("m1", "g", "t", "alice", "range"))
    members.add(KafkaMember("m2", "g", "t", "alice", "range"))
    assert members.get("g", "m1", "alice").member_id == "m1"
    for group, principal in (("other", "alice"), ("g", "mallory")):
        with pytest.raises(UnknownMember):
            members.get(group, "m1", principal)
    assert members.prune(lambda member_id: member_id == "m2") == ["m1"]
    assert len(members) == 1
