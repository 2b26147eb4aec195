"""Committed VP offsets carry the leader epoch of the record before them (Kafka's
``committed_leader_epoch``): on the wire (``protocol.group_api``, version 2), in etcd's offset keys
(``VpOffset``), and from a member's positions. A member that starts from a committed offset
names that epoch in its first fetch, so a VP whose log diverged since (a one-replica VP's power
loss) tells it where to read again; an offset committed without one is checked by length only.
"""

from __future__ import annotations

import pytest

from mafka4.client.remote_member import _positions
from mafka4.coordinator.groups.vp_groups import VpOffset
from mafka4.errors import ProtocolError
from mafka4.log.epochs import NO_EPOCH
from mafka4.protocol.group_api import Claimed, GroupCommitRequest, GroupSyncAnswer, MemberPosition
from mafka4.protocol.messages import from_body, to_body


def test_a_member_s_positions_travel_with_their_epochs():
    request = GroupCommitRequest("g", "m1", _positions({3: (40, 52, 7), 1: (9, 9, NO_EPOCH)}))
    assert request.positions == (MemberPosition(1, 9, 9, NO_EPOCH), MemberPosition(3, 40, 52, 7))
    assert from_body(GroupCommitRequest, to_body(request)) == request


def test_a_claimed_vp_comes_back_with_the_epoch_committed_with_its_offset():
    answer = GroupSyncAnswer((), (Claimed(2, 40, 7), Claimed(5, None, NO_EPOCH)), (2, 5), None, (), ())
    assert from_body(GroupSyncAnswer, to_body(answer)) == answer


@pytest.mark.parametrize("position, problem", [
    ({"id": 1, "offset": 9, "high_watermark": 9}, r"lacks \['leader_epoch'\]"),
    ({"id": 1, "offset": 9, "high_watermark": 9, "leader_epoch": None}, "leader_epoch: expected int, got NoneType"),
    ({"id": 1, "offset": 9, "high_watermark": 9, "leader_epoch": 1 << 64}, "does not fit in 64 bits"),
])
def test_a_position_s_epoch_is_typed_and_bounded(position, problem):
    body = {"group": "g", "member_id": "m1", "positions": (position,)}
    with pytest.raises(ProtocolError, match=problem):
        from_body(GroupCommitRequest, body)


def test_an_offset_key_written_before_commits_had_an_epoch_reads_as_no_epoch():
    assert VpOffset.from_json({"offset": 40, "member_id": "m1", "high_watermark": 52}) == VpOffset(40, 52, NO_EPOCH)
    assert VpOffset.from_json({"offset": 40}) == VpOffset(40, 40, NO_EPOCH), "older still: no high watermark either"
    assert VpOffset.from_json({"offset": 40, "high_watermark": 52, "leader_epoch": 7}) == VpOffset(40, 52, 7)
