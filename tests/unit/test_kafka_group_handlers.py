"""The Kafka listener's group APIs (``kafka.group_handlers``) over a coordinator's real ``GroupSessions``.

The hosted members are stand-ins for the group protocol on etcd (the integration test
``test_kafka_groups`` runs the real one): each owns what the test says, and its ``changed`` is
the coordinator's wake. What is checked: how Kafka's requests of every served version drive a
session (join, sync, commit, heartbeat, leave), the generations, the error codes, and that a
commit at a parent's sealed end makes the member rejoin. Every answer is shaped to each served
version's kio class and encoded, as the listener sends it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import threading

import pytest
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment, ConsumerProtocolSubscription
from kio.index import load_request_schema, load_response_schema

from mafka4.errors import NotAuthorized
from mafka4.frontend.group_handlers import coordinator_of
from mafka4.frontend.group_sessions import GroupSessions
from mafka4.frontend.view_state import ViewState
from mafka4.kafka import error_codes, topology
from mafka4.kafka.group_handlers import KafkaGroupHandlers
from mafka4.kafka.listener import SERVED
from mafka4.kafka.shapes import shaped
from mafka4.kafka.wire import KafkaRequest, encode_response
from mafka4.limits import ReadMode, TopicConfig
from mafka4.physical.partition_state import config_to_json
from mafka4.protocol.group_api import GroupCommitAnswer, GroupJoinAnswer, GroupSyncAnswer, IdOffset
from mafka4.protocol.session import Session

TOPIC, GROUP = "orders", "billing"
ALICE = Session("alice", "10.0.0.9:5000")
NODES = {"r1": {"client": "10.0.0.1:7000", "kafka": "10.0.0.1:9092"},
         "r2": {"client": "10.0.0.2:7000", "kafka": "10.0.0.2:9092"}}
COORDINATOR = coordinator_of(GROUP, [(node, value["client"]) for node, value in sorted(NODES.items())])[0]
OTHER_NODE = next(node for node in NODES if node != COORDINATOR)


class Member:
    """A hosted member standing in for the protocol on etcd: it owns ``owned``; a sync clears ``changed``."""

    def __init__(self, member_id: str, changed: threading.Event):
        self.member_id, self.changed = member_id, changed
        self.owned: tuple[int, ...] = ()
        self.sealed: tuple[IdOffset, ...] = ()
        self.lost: tuple[int, ...] = ()
        self.calls: list = []

    def join(self):
        self.calls.append(("join",))
        return GroupJoinAnswer(self.member_id, False, ())

    def sync(self, positions):
        self.calls.append(("sync", positions))
        self.changed.clear()
        return GroupSyncAnswer((), (), self.owned, None, self.sealed, (), None)

    def commit(self, positions):
        self.calls.append(("commit", positions))
        return GroupCommitAnswer(tuple(p.id for p in positions if p.id not in self.lost), self.lost)

    def leave(self, positions):
        self.calls.append(("leave", positions))

    def seed(self, offsets):
        return True


class View:
    def __init__(self, read_mode: ReadMode = ReadMode.MAFKA4):
        config = TopicConfig(partitions=2, read_mode=read_mode, virtual_partitions=4 if read_mode is ReadMode.MAFKA4
                             else 0)
        self.state = ViewState("c", topic_configs={TOPIC: config_to_json(config)}, read_nodes=dict(NODES))

    def read(self, reader):
        return reader(self.state)


class Security:
    def __init__(self):
        self.denied: set[tuple[str, str]] = set()

    def check(self, session, operation, resource_type, name):
        if (resource_type.value, name) in self.denied:
            raise NotAuthorized(f"{session.principal} may not {operation.value} {resource_type.value} {name}")


class Stand:
    """Handlers of the coordinator's node over sessions of stand-in members."""

    def __init__(self, node: str = COORDINATOR, read_mode: ReadMode = ReadMode.MAFKA4):
        self.hosted: list[Member] = []
        self.assignors: list[str] = []

        def host(group, info, config, changed):
            self.assignors.append(info.assignor)
            member = Member(info.member_id, changed)
            self.hosted.append(member)
            return member

        self.sessions = GroupSessions("127.0.0.1:1", "c", node, host=host)
        self.security = Security()
        self.handlers = KafkaGroupHandlers(self.sessions, View(read_mode), self.security, None, node).handlers()

    async def ask(self, api_key: int, version: int, fields: dict, **nulls) -> object:
        """The handler's answer to a request of ``fields`` (``nulls``: fields set to None), shaped to
        ``version`` and encoded (as the listener does)."""
        request = dataclasses.replace(shaped(load_request_schema(api_key, version), fields), **nulls)
        described = await self.handlers[api_key](ALICE, request)
        answer = shaped(load_response_schema(api_key, version), described)
        encode_response(KafkaRequest(api_key, version, 1, "test", request), answer)
        return answer


def run(coroutine):
    return asyncio.run(coroutine)


def subscription(*topics: str) -> bytes:
    return ConsumerProtocolSubscription(version=0, topics=list(topics), user_data=None).encode()


def join_fields(member_id: str = "", topics=(TOPIC,), protocols=("range", "roundrobin"),
                session_ms: int = 10_000) -> dict:
    return {"group_id": GROUP, "session_timeout": datetime.timedelta(milliseconds=session_ms),
            "rebalance_timeout": datetime.timedelta(seconds=60), "member_id": member_id, "protocol_type": "consumer",
            "protocols": [{"name": name, "metadata": subscription(*topics)} for name in protocols]}


def partitions_of(assignment: bytes) -> list[int]:
    return [tp.partition for tp in ConsumerProtocolAssignment.decode(assignment).partitions()]


def versions(api_key: int) -> range:
    low, high = SERVED[api_key]
    return range(low, high + 1)


async def joined_and_synced(stand: Stand, owned=(0, 1), join_version: int = 7, sync_version: int = 5):
    joined = await stand.ask(11, join_version, join_fields())
    assert joined.error_code == error_codes.NONE, joined
    stand.hosted[-1].owned = tuple(owned)
    synced = await stand.ask(14, sync_version, {"group_id": GROUP, "generation_id": joined.generation_id,
                                                "member_id": joined.member_id, "assignments": ()})
    assert synced.error_code == error_codes.NONE, synced
    return joined, synced


@pytest.mark.parametrize("version", versions(10))
def test_find_coordinator_names_the_node_the_group_hashes_to_as_its_kafka_broker(version):
    answer = run(Stand(OTHER_NODE).ask(10, version, {"key": GROUP, "key_type": 0, "coordinator_keys": [GROUP]}))
    found = answer.coordinators[0] if version >= 4 else answer
    assert (found.error_code, found.node_id, found.host, found.port) == (
        error_codes.NONE, topology.broker_id(COORDINATOR), *NODES[COORDINATOR]["kafka"].split(":")[:1],
        int(NODES[COORDINATOR]["kafka"].split(":")[1]))


def test_find_coordinator_refuses_transactional_ids_and_groups_the_principal_may_not_describe():
    stand = Stand()
    answer = run(stand.ask(10, 4, {"key_type": 1, "coordinator_keys": ["tx"]}))
    assert answer.coordinators[0].error_code == error_codes.INVALID_REQUEST
    stand.security.denied.add(("group", GROUP))
    answer = run(stand.ask(10, 3, {"key": GROUP, "key_type": 0}))
    assert answer.error_code == error_codes.GROUP_AUTHORIZATION_FAILED


@pytest.mark.parametrize("join_version", versions(11))
def test_a_member_joins_as_a_follower_and_syncs_to_what_its_session_owns(join_version):
    stand = Stand()

    async def scenario():
        joined = await stand.ask(11, join_version, join_fields(protocols=("cooperative-sticky", "range")))
        stand.hosted[0].owned = (1, 3)
        synced = await stand.ask(14, min(join_version, 5), {
            "group_id": GROUP, "generation_id": joined.generation_id, "member_id": joined.member_id,
            "protocol_type": "consumer", "protocol_name": "range",
            "assignments": [{"member_id": joined.member_id, "assignment": b"the leader's, ignored"}]})
        return joined, synced

    joined, synced = run(scenario())
    assert joined.error_code == error_codes.NONE
    assert joined.member_id == stand.hosted[0].member_id, "the Kafka member id is the session's"
    assert (joined.leader, joined.members, joined.protocol_name) == ("", (), "range"), "a follower, eager first"
    assert joined.generation_id == 1
    assert stand.assignors == ["virtual"], "a Mafka4-mode topic's member is a VP-ownership session"
    assert synced.error_code == error_codes.NONE
    assert partitions_of(synced.assignment) == [1, 3]


def test_a_mafka3_topics_member_is_a_partition_session():
    stand = Stand(read_mode=ReadMode.MAFKA3)
    run(joined_and_synced(stand))
    assert stand.assignors == ["range"]


@pytest.mark.parametrize("fields, code", [
    (join_fields(topics=(TOPIC, "refunds")), error_codes.INCONSISTENT_GROUP_PROTOCOL),
    ({**join_fields(), "protocol_type": "connect"}, error_codes.INCONSISTENT_GROUP_PROTOCOL),
    ({**join_fields(), "protocols": [{"name": "range", "metadata": b"\x00"}]}, error_codes.INCONSISTENT_GROUP_PROTOCOL),
    (join_fields(member_id="never-joined"), error_codes.UNKNOWN_MEMBER_ID),
    (join_fields(session_ms=500), error_codes.INVALID_SESSION_TIMEOUT),
    (join_fields(topics=("missing",)), error_codes.UNKNOWN_TOPIC_OR_PARTITION),
    ({**join_fields(), "group_id": "no spaces"}, error_codes.INVALID_GROUP_ID),
])
def test_a_join_mafka4_cannot_serve_is_refused_with_kafkas_code(fields, code):
    stand = Stand()
    answer = run(stand.ask(11, 7, fields))
    assert answer.error_code == code
    assert stand.hosted == [], "no session was opened"


def test_a_join_at_a_node_that_does_not_coordinate_the_group_is_not_coordinator():
    assert run(Stand(OTHER_NODE).ask(11, 5, join_fields())).error_code == error_codes.NOT_COORDINATOR


def test_a_join_refused_by_the_acls_is_a_group_or_topic_authorization_failure():
    stand = Stand()
    stand.security.denied.add(("topic", TOPIC))
    assert run(stand.ask(11, 7, join_fields())).error_code == error_codes.TOPIC_AUTHORIZATION_FAILED
    stand.security.denied.add(("group", GROUP))
    assert run(stand.ask(11, 7, join_fields())).error_code == error_codes.GROUP_AUTHORIZATION_FAILED


@pytest.mark.parametrize("version", versions(12))
def test_heartbeats_ask_for_a_rejoin_when_the_session_must_sync_and_a_rejoin_keeps_the_session(version):
    stand = Stand()

    async def scenario():
        joined, _ = await joined_and_synced(stand)
        beat = {"group_id": GROUP, "generation_id": joined.generation_id, "member_id": joined.member_id}
        quiet = await stand.ask(12, version, beat)
        stand.hosted[0].changed.set()  # the coordinator's wake: a joiner, a split, ...
        woken = await stand.ask(12, version, beat)
        stale = await stand.ask(12, version, {**beat, "generation_id": joined.generation_id + 5})
        again = await stand.ask(11, 7, join_fields(member_id=joined.member_id))
        between = await stand.ask(12, version, {**beat, "generation_id": again.generation_id})
        stand.hosted[0].owned = (2,)
        synced = await stand.ask(14, 5, {"group_id": GROUP, "generation_id": again.generation_id,
                                         "member_id": joined.member_id})
        settled = await stand.ask(12, version, {**beat, "generation_id": again.generation_id})
        return quiet, woken, stale, again, between, synced, settled

    quiet, woken, stale, again, between, synced, settled = run(scenario())
    assert quiet.error_code == error_codes.NONE
    assert woken.error_code == error_codes.REBALANCE_IN_PROGRESS
    assert stale.error_code == error_codes.ILLEGAL_GENERATION
    assert (again.error_code, again.generation_id) == (error_codes.NONE, 2)
    assert len(stand.hosted) == 1, "a rejoin is the same session"
    assert between.error_code == error_codes.REBALANCE_IN_PROGRESS, "between a join and its sync"
    assert partitions_of(synced.assignment) == [2]
    assert settled.error_code == error_codes.NONE


def test_a_sync_of_another_generation_is_illegal_generation():
    stand = Stand()

    async def scenario():
        joined = await stand.ask(11, 7, join_fields())
        return await stand.ask(14, 5, {"group_id": GROUP, "generation_id": joined.generation_id + 1,
                                       "member_id": joined.member_id})

    assert run(scenario()).error_code == error_codes.ILLEGAL_GENERATION


@pytest.mark.parametrize("version", versions(8))
def test_commits_of_assigned_vps_go_to_the_session_with_the_clients_leader_epoch(version):
    stand = Stand()

    async def scenario():
        joined, _ = await joined_and_synced(stand, owned=(0, 1))
        return joined, await stand.ask(8, version, {
            "group_id": GROUP, "generation_id_or_member_epoch": joined.generation_id, "member_id": joined.member_id,
            "topics": [{"name": TOPIC, "partitions": [
                {"partition_index": 0, "committed_offset": 10, "committed_leader_epoch": 3},
                {"partition_index": 2, "committed_offset": 5}]}]})

    joined, answer = run(scenario())
    codes = {p.partition_index: p.error_code for p in answer.topics[0].partitions}
    assert codes == {0: error_codes.NONE, 2: error_codes.ILLEGAL_GENERATION}, "VP 2 was not assigned"
    (commit,) = [call for call in stand.hosted[0].calls if call[0] == "commit"]
    ((position,),) = commit[1:]
    assert (position.id, position.offset) == (0, 10)
    assert position.leader_epoch == (3 if version >= 6 else -1)


def test_a_commit_at_a_parents_sealed_end_makes_the_member_rejoin_and_its_sync_carries_the_position():
    stand = Stand()

    async def scenario():
        joined = await stand.ask(11, 7, join_fields())
        member = stand.hosted[0]
        member.owned, member.sealed = (0, 1), (IdOffset(0, 40),)
        await stand.ask(14, 5, {"group_id": GROUP, "generation_id": joined.generation_id,
                                "member_id": joined.member_id})
        commit = {"group_id": GROUP, "generation_id_or_member_epoch": joined.generation_id,
                  "member_id": joined.member_id}
        beat = {"group_id": GROUP, "generation_id": joined.generation_id, "member_id": joined.member_id}
        await stand.ask(8, 8, {**commit, "topics": [{"name": TOPIC, "partitions": [
            {"partition_index": 0, "committed_offset": 39}]}]})
        before = await stand.ask(12, 4, beat)
        await stand.ask(8, 8, {**commit, "topics": [{"name": TOPIC, "partitions": [
            {"partition_index": 0, "committed_offset": 40}]}]})
        drained = await stand.ask(12, 4, beat)
        again = await stand.ask(11, 7, join_fields(member_id=joined.member_id))
        member.owned, member.sealed = (1, 4), ()  # the sync released the parent and claimed a child
        synced = await stand.ask(14, 5, {"group_id": GROUP, "generation_id": again.generation_id,
                                         "member_id": joined.member_id})
        after = await stand.ask(12, 4, {**beat, "generation_id": again.generation_id})
        return before, drained, synced, after

    before, drained, synced, after = run(scenario())
    assert before.error_code == error_codes.NONE, "the parent is not read to its end yet"
    assert drained.error_code == error_codes.REBALANCE_IN_PROGRESS
    last_sync = [call for call in stand.hosted[0].calls if call[0] == "sync"][-1]
    assert [(p.id, p.offset) for p in last_sync[1]] == [(0, 40)], "the rejoin's sync carries the parent's end"
    assert partitions_of(synced.assignment) == [1, 4]
    assert after.error_code == error_codes.NONE


def test_a_commit_of_a_vp_lost_meanwhile_is_illegal_generation_and_asks_for_a_rejoin():
    stand = Stand()

    async def scenario():
        joined, _ = await joined_and_synced(stand, owned=(0, 1))
        stand.hosted[0].lost = (1,)
        answer = await stand.ask(8, 8, {"group_id": GROUP, "generation_id_or_member_epoch": joined.generation_id,
                                        "member_id": joined.member_id, "topics": [{"name": TOPIC, "partitions": [
                                            {"partition_index": 0, "committed_offset": 3},
                                            {"partition_index": 1, "committed_offset": 3}]}]})
        beat = await stand.ask(12, 4, {"group_id": GROUP, "generation_id": joined.generation_id,
                                       "member_id": joined.member_id})
        return answer, beat

    answer, beat = run(scenario())
    assert [p.error_code for p in answer.topics[0].partitions] == [error_codes.NONE, error_codes.ILLEGAL_GENERATION]
    assert beat.error_code == error_codes.REBALANCE_IN_PROGRESS


def test_a_commit_of_an_unknown_member_is_unknown_member_id_on_every_partition():
    answer = run(Stand().ask(8, 8, {"group_id": GROUP, "generation_id_or_member_epoch": 1, "member_id": "gone",
                                    "topics": [{"name": TOPIC, "partitions": [
                                        {"partition_index": 0, "committed_offset": 3}]}]}))
    assert answer.topics[0].partitions[0].error_code == error_codes.UNKNOWN_MEMBER_ID


@pytest.mark.parametrize("version", versions(13))
def test_a_member_leaves_with_its_commits_and_its_session_ends(version):
    stand = Stand()

    async def scenario():
        joined, _ = await joined_and_synced(stand, owned=(0,))
        await stand.ask(8, 8, {"group_id": GROUP, "generation_id_or_member_epoch": joined.generation_id,
                               "member_id": joined.member_id, "topics": [{"name": TOPIC, "partitions": [
                                   {"partition_index": 0, "committed_offset": 7}]}]})
        left = await stand.ask(13, version, {"group_id": GROUP, "member_id": joined.member_id,
                                             "members": [{"member_id": joined.member_id}]})
        beat = await stand.ask(12, 4, {"group_id": GROUP, "generation_id": joined.generation_id,
                                       "member_id": joined.member_id})
        return left, beat

    left, beat = run(scenario())
    assert left.error_code == error_codes.NONE
    if version >= 3:
        assert [m.error_code for m in left.members] == [error_codes.NONE]
    leave = stand.hosted[0].calls[-1]
    assert leave[0] == "leave" and [(p.id, p.offset) for p in leave[1]] == [(0, 7)]
    assert len(stand.sessions) == 0
    assert beat.error_code == error_codes.UNKNOWN_MEMBER_ID


def test_an_expired_session_is_unknown_member_id_and_the_member_is_forgotten():
    stand = Stand()

    async def scenario():
        joined, _ = await joined_and_synced(stand)
        await stand.sessions.leave("alice", GROUP, joined.member_id, lambda hosted: hosted.leave(()))  # as an expiry
        beat = await stand.ask(12, 4, {"group_id": GROUP, "generation_id": joined.generation_id,
                                       "member_id": joined.member_id})
        return beat

    assert run(scenario()).error_code == error_codes.UNKNOWN_MEMBER_ID
    assert len(stand.handlers[11].__self__.members) == 0


class Offsets:
    """Committed offsets standing in for ``KafkaGroupOffsets`` (etcd)."""

    def __init__(self, committed: dict[str, dict[int, int]]):
        self.committed_by_topic = committed

    async def committed(self, group, topic):
        return dict(self.committed_by_topic.get(topic.name, {}))

    async def topics(self, group):
        return sorted(self.committed_by_topic)


@pytest.mark.parametrize("version", versions(9))
def test_offset_fetch_answers_the_groups_commits_minus_one_elsewhere_and_no_leader_epoch(version):
    stand = Stand()
    stand.handlers = KafkaGroupHandlers(stand.sessions, View(), stand.security, Offsets({TOPIC: {0: 12, 4: 0}}),
                                        COORDINATOR).handlers()
    named = run(stand.ask(9, version, {"group_id": GROUP, "topics": [
        {"name": TOPIC, "partition_indexes": [0, 1, 4]}, {"name": "missing", "partition_indexes": [0]}]}))
    rows = {(t.name, p.partition_index): (p.committed_offset, p.error_code) for t in named.topics for p in t.partitions}
    assert rows == {(TOPIC, 0): (12, 0), (TOPIC, 1): (-1, 0), (TOPIC, 4): (0, 0),
                    ("missing", 0): (-1, error_codes.UNKNOWN_TOPIC_OR_PARTITION)}
    if version >= 5:
        assert {p.committed_leader_epoch for t in named.topics for p in t.partitions} == {-1}
    if version >= 2:
        every = run(stand.ask(9, version, {"group_id": GROUP}, topics=None))
        assert [(t.name, [p.partition_index for p in t.partitions]) for t in every.topics] == [(TOPIC, [0, 4])]


def test_offset_fetch_of_a_group_the_principal_may_not_describe_is_refused():
    stand = Stand()
    stand.security.denied.add(("group", GROUP))
    answer = run(stand.ask(9, 7, {"group_id": GROUP, "topics": [{"name": TOPIC, "partition_indexes": [0]}]}))
    assert answer.error_code == error_codes.GROUP_AUTHORIZATION_FAILED


def test_a_sync_the_coordinator_asks_again_is_synced_again_before_syncgroup_answers():
    """The target gives the joiner a VP another member still owns: its sync claims it once freed."""
    stand = Stand()

    async def scenario():
        joined = await stand.ask(11, 7, join_fields())
        member = stand.hosted[0]
        syncs = []

        def sync(positions):
            syncs.append(positions)
            if len(syncs) < 3:
                member.changed.set()  # waiting for another member's release
                return GroupSyncAnswer((), (), (), None, (), (), None)
            member.changed.clear()
            return GroupSyncAnswer((), (), (2,), None, (), (), None)

        member.sync = sync
        synced = await stand.ask(14, 5, {"group_id": GROUP, "generation_id": joined.generation_id,
                                         "member_id": joined.member_id})
        return syncs, synced

    syncs, synced = run(scenario())
    assert len(syncs) == 3
    assert partitions_of(synced.assignment) == [2]
