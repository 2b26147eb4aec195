"""A group sync that claims VPs carries what the member needs to fetch them (the layout, their
states, the read nodes' addresses), so a joiner takes a newly born child without a VP_METADATA
round trip: built from the sync's own snapshot, typed and bounded on the wire, taken by the
fetcher on top of what it knew."""

from __future__ import annotations

import asyncio
import json

import pytest

from mafka4.coordinator.groups.partition_protocol import VIRTUAL_ASSIGNOR, MemberInfo
from mafka4.coordinator.groups.vp_groups import VirtualGroupSnapshot
from mafka4.errors import NotAuthorized, ProtocolError
from mafka4.frontend.group_handlers import GroupHandlers
from mafka4.frontend.hosted_members import claimed_vp_metadata
from mafka4.frontend.view_state import ViewState
from mafka4.limits import PROTOCOL_ITEMS_MAX, ConsumerConfig
from mafka4.log.epochs import NO_EPOCH
from mafka4.protocol.group_api import Claimed, GroupSyncAnswer, GroupSyncRequest, IdOffset
from mafka4.protocol.messages import ApiKey, from_body, to_body
from mafka4.protocol.metadata_api import NodeInfo
from mafka4.protocol.session import Session
from mafka4.protocol.vp_api import VpMetadataAnswer, VpStateInfo
from mafka4.security.acl import Operation
from mafka4.virtual.layout import TopicLayout
from mafka4.virtual.ranges import HashRange
from mafka4.virtual.vp_state import VirtualPartitionState, epoch_from_json
from tests.unit.stand_in_ports import TOPIC, TWO_VPS, LongPolling, reads_come_to, state, vp_fetcher_against


def _split_snapshot() -> VirtualGroupSnapshot:
    """Two VPs; VP 0 split into 2 and 3 at cut 40."""
    initial = TopicLayout.initial(1, 2)
    layout = TopicLayout(1, (*initial.epochs, initial.plan_split(0, [40], [40])))
    states = {vp: VirtualPartitionState(vp, HashRange(0, 1 << 62), "r1", 1, ("r1",), ("r1",)) for vp in (0, 1, 2, 3)}
    return VirtualGroupSnapshot((MemberInfo("m0", TOPIC, VIRTUAL_ASSIGNOR),), {}, {}, layout, states)


def test_a_claiming_sync_carries_the_layout_and_the_claimed_vps_states_it_read():
    snapshot = _split_snapshot()
    metadata = claimed_vp_metadata(TOPIC, snapshot, [3])
    assert [epoch_from_json(json.loads(epoch)) for epoch in metadata.split_epochs_json] == list(snapshot.layout.epochs)
    assert [info.vp for info in metadata.vps] == [3]
    assert VirtualPartitionState.from_json(3, json.loads(metadata.vps[0].state_json)) == snapshot.states[3]
    assert metadata.nodes == ()  # the port adds where the nodes serve clients, from its view


def _answer(metadata: VpMetadataAnswer | None) -> GroupSyncAnswer:
    return GroupSyncAnswer((0,), (Claimed(3, None, NO_EPOCH),), (3,), None, (IdOffset(0, 40),), (IdOffset(0, 40),),
                           metadata)


def test_the_sync_answer_with_or_without_metadata_travels_typed_and_bounded():
    metadata = VpMetadataAnswer(TOPIC, (json.dumps(TWO_VPS),), (VpStateInfo(3, state("r2")),),
                                (NodeInfo("r2", "read", "127.0.0.1:9"), NodeInfo("r3", "read", None)))
    for answer in (_answer(metadata), _answer(None)):
        assert from_body(GroupSyncAnswer, to_body(answer)) == answer
    too_many = VpMetadataAnswer(TOPIC, (), tuple(VpStateInfo(vp, "{}") for vp in range(PROTOCOL_ITEMS_MAX + 1)), ())
    with pytest.raises(ProtocolError, match=r"VpMetadataAnswer\.vps: \d+ items exceed PROTOCOL_ITEMS_MAX"):
        to_body(_answer(too_many))
    old = to_body(_answer(None))
    del old["vp_metadata"]  # a version-1 coordinator's answer: refused naming the field (and the frame's version)
    with pytest.raises(ProtocolError, match=r"lacks \['vp_metadata'\]"):
        from_body(GroupSyncAnswer, old)


def test_the_fetcher_takes_a_claimed_childs_state_and_node_without_asking_and_never_an_older_layout():
    node = LongPolling()
    with vp_fetcher_against(node, ConsumerConfig()) as fetcher:
        split = _split_snapshot()
        metadata = claimed_vp_metadata(TOPIC, split, [3])
        fetcher.learn(VpMetadataAnswer(TOPIC, metadata.split_epochs_json, metadata.vps,
                                       (NodeInfo("r1", "read", node.address),)))
        assert fetcher.layout.epochs == split.layout.epochs and fetcher.layout.opening_epoch(3).epoch == 1
        assert sorted(fetcher.states) == [0, 1, 3] and fetcher.states[3].leader == "r1"
        fetcher.learn(VpMetadataAnswer(TOPIC, (json.dumps(TWO_VPS),), (), ()))  # older than the layout held
        assert len(fetcher.layout.epochs) == 2 and sorted(fetcher.states) == [0, 1, 3]
        fetcher.seek(3, 0)
        fetcher.fetching.add(3)
        fetcher.fetch(0.05)
        reads_come_to(node, 1)  # sent by now, received a moment later
        assert [3] in node.requests, "the child is fetched from the node the sync named"


class _Sessions:
    """``GroupSessions`` whose every sync answers ``answer``."""

    def __init__(self, answer: GroupSyncAnswer):
        self.answer = answer

    async def call(self, principal, group, member_id, step, arrived=None):
        return self.answer


class _View:
    def read(self, reader):
        return reader(ViewState("local", read_nodes={"r1": {"client": "10.0.0.1:9092"}, "r2": {}}))


def _sync_as(principal: str, answer: GroupSyncAnswer) -> GroupSyncAnswer:
    def check(session, operation, resource_type, name):
        if session.principal == "mallory" and operation is Operation.DESCRIBE:
            raise NotAuthorized(f"{session.principal} may not describe {name}")

    async def view():
        return _View()

    handlers = GroupHandlers(_Sessions(answer), view, check)
    request = GroupSyncRequest("billing", "m0", ())
    found, _ = asyncio.run(handlers.handlers()[ApiKey.GROUP_SYNC](Session(principal, "peer"), request, ()))
    return found


def test_the_coordinators_port_adds_where_the_read_nodes_serve_and_only_for_who_may_describe_the_topic():
    answer = _answer(claimed_vp_metadata(TOPIC, _split_snapshot(), [3]))
    sent = _sync_as("alice", answer)
    assert sent.vp_metadata.nodes == (NodeInfo("r1", "read", "10.0.0.1:9092"), NodeInfo("r2", "read", None))
    assert sent.vp_metadata.vps == answer.vp_metadata.vps
    assert _sync_as("mallory", answer).vp_metadata is None, "denied DESCRIBE: it asks VP_METADATA, and is refused"
    assert _sync_as("alice", _answer(None)).vp_metadata is None
