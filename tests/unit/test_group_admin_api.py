"""The group admin APIs (``protocol.group_admin_api``), their handlers and the thin ``GroupAdmin``, without a cluster.

Every message crosses a frame as sent; a description and a reset's result reach the client in
the Python shapes the node made them in (``read_loss`` keyed by partition, a reset keyed by
partition or VP); a bad reset target is refused by the client before it connects and by the
node whatever the client sent. The handlers run against a fake ``GroupReports`` (no etcd, no
Ray) and a fake port check, to show what each request needs and that a refusal reads nothing.
"""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from mafka4 import cli
from mafka4.client import group_admin
from mafka4.client.group_admin import GroupAdmin, GroupDescription, PartitionLag, VirtualPartitionLag, VpStatus
from mafka4.coordinator.groups.partition_protocol import MemberInfo
from mafka4.errors import InvalidConfig, InvalidGroupName, InvalidTopicName, NotAuthorized, ProtocolError
from mafka4.frontend import group_admin_handlers
from mafka4.frontend.group_admin_handlers import GroupAdminHandlers
from mafka4.limits import ReadMode, TopicConfig
from mafka4.physical.topics import TopicStore
from mafka4.protocol.frames import decode_frame, encode_frame
from mafka4.protocol.group_admin_api import (GroupDescribeAnswer, GroupDescribeRequest, GroupListAnswer,
                                             GroupListRequest, GroupResetOffsetsRequest,
                                             OffsetRange, OffsetReset, PartitionLoss, VirtualPartitionLagInfo,
                                             describe_answer, description_of, reset_answer, reset_request,
                                             reset_target, resets_of, visible_to)
from mafka4.protocol.messages import ApiKey, Kind, api_of
from mafka4.protocol.metadata_api import MetadataAnswer, MetadataRequest
from mafka4.protocol.metadata_topics import topic_info
from mafka4.protocol.session import Session
from mafka4.security.acl import Operation, ResourceType
from test_protocol_messages import through_the_wire

DESCRIPTION = GroupDescription(
    "billing", 3, "range", (MemberInfo("m-1", "orders", "range"), MemberInfo("m-2", "events", "virtual")),
    (PartitionLag("orders", 0, "m-1", 5, 9, 4, 2_250), PartitionLag("orders", 1, None, None, 7, None, None)),
    (VirtualPartitionLag("events", 0, VpStatus.READ, None, 10, 10, 0, 0),
     VirtualPartitionLag("events", 1, VpStatus.ACTIVE, "m-2", 3, 8, 5, 61_040),
     VirtualPartitionLag("events", 2, VpStatus.WAITING, None, None, None, None, None)),
    {"events": {0: [[0, 4], [10, 12]], 2: [[7, 8]]}})
RESETS = {0: (None, 0), 1: (12, 3), 4: (9, 9)}


def crossed(api: ApiKey, kind: Kind, message: object) -> object:
    """``message`` as a client port's reader decodes it from the bytes ``encode_frame`` made."""
    envelope = decode_frame(through_the_wire(encode_frame(api, 1, kind, message)))
    assert (envelope.api, envelope.kind) == (api, kind)
    return envelope.message


@pytest.mark.parametrize("api, kind, message", [
    (ApiKey.GROUP_LIST, Kind.REQUEST, GroupListRequest()),
    (ApiKey.GROUP_LIST, Kind.ANSWER, GroupListAnswer(("billing", "orders-audit"))),
    (ApiKey.GROUP_DESCRIBE, Kind.REQUEST, GroupDescribeRequest("billing")),
    (ApiKey.GROUP_DESCRIBE, Kind.ANSWER, describe_answer(DESCRIPTION)),
    (ApiKey.GROUP_DESCRIBE, Kind.ANSWER, describe_answer(GroupDescription("idle", None, None, (), ()))),
    (ApiKey.GROUP_RESET_OFFSETS, Kind.REQUEST, GroupResetOffsetsRequest("billing", "orders", "earliest", None)),
    (ApiKey.GROUP_RESET_OFFSETS, Kind.REQUEST, GroupResetOffsetsRequest("billing", "orders", "timestamp", -1)),
    (ApiKey.GROUP_RESET_OFFSETS, Kind.ANSWER, reset_answer(RESETS)),
])
def test_every_message_crosses_a_frame_as_sent(api, kind, message):
    assert crossed(api, kind, message) == message
    if kind is Kind.REQUEST:
        assert api_of(message) == api


def test_a_description_reaches_the_client_in_the_shape_the_node_made_it():
    answer = describe_answer(DESCRIPTION)
    assert answer.read_loss == {"events": (PartitionLoss(0, (OffsetRange(0, 4), OffsetRange(10, 12))),
                                           PartitionLoss(2, (OffsetRange(7, 8),)))}
    assert answer.virtual_partitions[1] == VirtualPartitionLagInfo("events", 1, "active", "m-2", 3, 8, 5, 61_040)
    received = description_of(crossed(ApiKey.GROUP_DESCRIBE, Kind.ANSWER, answer))
    assert received == DESCRIPTION
    assert received.read_loss == {"events": {0: [[0, 4], [10, 12]], 2: [[7, 8]]}}
    assert [row.status for row in received.virtual_partitions] == [VpStatus.READ, VpStatus.ACTIVE, VpStatus.WAITING]
    assert received.total_lag is None, "a partition without a committed offset has no lag figure, nor has the group"
    # The READ and WAITING VPs count for nothing: the group reads neither now.
    assert dataclasses.replace(received, partitions=received.partitions[:1]).total_lag == 4 + 5


def test_a_vp_status_this_client_does_not_know_is_a_protocol_error():
    answer = describe_answer(DESCRIPTION)
    unknown = GroupDescribeAnswer(answer.group, answer.generation, answer.assignor, answer.members, answer.partitions,
                                  (VirtualPartitionLagInfo("events", 0, "paused", None, None, None, None, None),), {})
    with pytest.raises(ProtocolError, match="'paused' is none of"):
        description_of(unknown)


def test_a_reset_result_reaches_the_client_keyed_by_partition():
    answer = reset_answer(RESETS)
    assert answer.offsets == (OffsetReset(0, None, 0), OffsetReset(1, 12, 3), OffsetReset(4, 9, 9))
    assert resets_of(crossed(ApiKey.GROUP_RESET_OFFSETS, Kind.ANSWER, answer)) == RESETS


@pytest.mark.parametrize("to", ["earliest", "latest", 0, 1_700_000_000_000, -5])
def test_a_reset_target_reaches_the_node_as_the_client_gave_it(to):
    request = reset_request("billing", "orders", to)
    assert reset_target(crossed(ApiKey.GROUP_RESET_OFFSETS, Kind.REQUEST, request)) == to


@pytest.mark.parametrize("to", ["soon", "EARLIEST", "timestamp", True, 1.5, None, "2026-11-22"])
def test_the_client_refuses_a_bad_reset_target(to):
    with pytest.raises(InvalidConfig, match="use 'earliest', 'latest' or a timestamp in ms"):
        reset_request("billing", "orders", to)


@pytest.mark.parametrize("target, timestamp_ms", [("soon", None), ("timestamp", None), ("earliest", 5),
                                                  ("latest", 0), ("", None)])
def test_the_node_refuses_a_target_and_timestamp_that_do_not_go_together(target, timestamp_ms):
    with pytest.raises(InvalidConfig, match="is not valid: send 'earliest' or 'latest' without a timestamp"):
        reset_target(GroupResetOffsetsRequest("billing", "orders", target, timestamp_ms))


def test_the_node_checks_the_names_again():
    with pytest.raises(InvalidGroupName):
        reset_target(GroupResetOffsetsRequest("bad group!", "orders", "earliest", None))
    with pytest.raises(InvalidTopicName):
        reset_target(GroupResetOffsetsRequest("billing", "bad topic!", "earliest", None))


# --- the handlers ---------------------------------------------------------------------------

class FakeReports:
    """What ``GroupReports`` would answer, recording each call; made by the handlers on first use."""

    made: list["FakeReports"] = []

    def __init__(self, etcd_endpoint: str, cluster: str):
        self.where, self.calls, self.closed = (etcd_endpoint, cluster), [], False
        FakeReports.made.append(self)

    def list_groups(self) -> list[str]:
        self.calls.append(("list",))
        return ["audit", "billing", "billing-eu"]

    def describe_group(self, group: str) -> GroupDescription:
        self.calls.append(("describe", group))
        return DESCRIPTION

    def reset_offsets(self, group: str, topic: str, to):
        self.calls.append(("reset", group, topic, to))
        return RESETS

    def close(self) -> None:
        self.closed = True


class FakePort:
    """The port's check and plain decision: ``allowed`` holds (operation, resource type, name)."""

    def __init__(self, *allowed: tuple[Operation, ResourceType, str]):
        self.allowed, self.checks, self.refusals = set(allowed), [], 0

    def allows(self, _session, operation, resource_type, name) -> bool:
        return (operation, resource_type, name) in self.allowed

    def check(self, session, operation, resource_type, name) -> None:
        self.checks.append((operation, resource_type, name))
        if not self.allows(session, operation, resource_type, name):
            self.refusals += 1
            raise NotAuthorized(f"principal {session.principal!r} may not {operation.value} "
                                f"{resource_type.value} {name!r}")


@pytest.fixture
def reports(monkeypatch):
    FakeReports.made = []
    monkeypatch.setattr(group_admin_handlers, "GroupReports", FakeReports)
    return FakeReports.made


def answer(port: FakePort, request) -> object:
    async def ask():
        handlers = GroupAdminHandlers("127.0.0.1:2379", "c1", port.check, port.allows)
        try:
            found, buffers = await handlers.handlers()[api_of(request)](Session("bob", "peer"), request, ())
        finally:
            handlers.close()
        assert buffers == ()
        return found
    return asyncio.run(ask())


def test_the_handlers_serve_the_three_apis():
    handlers = GroupAdminHandlers("127.0.0.1:2379", "c1", FakePort().check, FakePort().allows).handlers()
    assert set(handlers) == {ApiKey.GROUP_LIST, ApiKey.GROUP_DESCRIBE, ApiKey.GROUP_RESET_OFFSETS}


def test_a_listing_shows_only_the_groups_the_principal_may_describe_and_refuses_no_one(reports):
    port = FakePort((Operation.DESCRIBE, ResourceType.GROUP, "billing"),
                    (Operation.DESCRIBE, ResourceType.TOPIC, "audit"))
    assert answer(port, GroupListRequest()) == GroupListAnswer(("billing",))
    assert port.refusals == 0 and port.checks == []
    assert [made.where for made in reports] == [("127.0.0.1:2379", "c1")] and reports[0].closed


def test_a_description_needs_describe_on_the_group(reports):
    refused = FakePort((Operation.DESCRIBE, ResourceType.GROUP, "billing-eu"))
    with pytest.raises(NotAuthorized, match="may not describe group 'billing'"):
        answer(refused, GroupDescribeRequest("billing"))
    assert all(made.calls == [] for made in reports), "a refused request reads nothing"
    allowed = FakePort((Operation.DESCRIBE, ResourceType.GROUP, "billing"), (Operation.DESCRIBE, ResourceType.TOPIC, "orders"),
                       (Operation.DESCRIBE, ResourceType.TOPIC, "events"))
    assert description_of(answer(allowed, GroupDescribeRequest("billing"))) == DESCRIPTION
    assert reports[-1].calls == [("describe", "billing")]


def test_a_description_holds_the_offsets_of_the_topics_the_principal_may_describe_only(reports):
    """As Kafka's OffsetFetch: a topic's lag tells of its traffic. The members stay, and nothing is refused."""
    port = FakePort((Operation.DESCRIBE, ResourceType.GROUP, "billing"), (Operation.DESCRIBE, ResourceType.TOPIC, "orders"))
    shown = description_of(answer(port, GroupDescribeRequest("billing")))
    assert shown.members == DESCRIPTION.members and shown.partitions == DESCRIPTION.partitions
    assert shown.virtual_partitions == () and shown.read_loss == {}, "nothing of 'events'"
    assert shown.total_lag is None and port.refusals == 0
    assert visible_to(DESCRIPTION, lambda topic: True) is DESCRIPTION


def test_a_reset_needs_alter_on_the_group_and_describe_on_the_topic(reports):
    alter = (Operation.ALTER, ResourceType.GROUP, "billing")
    describe = (Operation.DESCRIBE, ResourceType.TOPIC, "orders")
    request = reset_request("billing", "orders", 1_700_000_000_000)
    for port in (FakePort(), FakePort(alter), FakePort(describe)):
        with pytest.raises(NotAuthorized):
            answer(port, request)
        assert port.refusals == 1
    assert all(made.calls == [] for made in reports), "a refused reset reads and writes nothing"
    port = FakePort(alter, describe)
    assert resets_of(answer(port, request)) == RESETS
    assert port.checks == [alter, describe]
    assert reports[-1].calls == [("reset", "billing", "orders", 1_700_000_000_000)]


@pytest.mark.parametrize("request_, error", [
    (GroupDescribeRequest("bad group!"), InvalidGroupName),
    (GroupResetOffsetsRequest("bad group!", "orders", "earliest", None), InvalidGroupName),
    (GroupResetOffsetsRequest("billing", "..", "earliest", None), InvalidTopicName),
    (GroupResetOffsetsRequest("billing", "orders", "timestamp", None), InvalidConfig),
    (GroupResetOffsetsRequest("billing", "orders", "yesterday", None), InvalidConfig),
])
def test_a_bad_request_is_refused_before_the_principal_is_checked_or_anything_read(reports, request_, error):
    port = FakePort((Operation.DESCRIBE, ResourceType.GROUP, "bad group!"),
                    (Operation.ALTER, ResourceType.GROUP, "billing"),
                    (Operation.DESCRIBE, ResourceType.TOPIC, "orders"))
    with pytest.raises(error):
        answer(port, request_)
    assert port.checks == [] and all(made.calls == [] for made in reports)


# --- the thin client ------------------------------------------------------------------------

def test_the_client_sends_one_request_per_call_and_answers_in_python_shapes(monkeypatch):
    sent = []

    def call_once(request, where):
        sent.append((request, where))
        api = api_of(request)
        assert crossed(api, Kind.REQUEST, request) == request
        found = {GroupListRequest: GroupListAnswer(("billing",)), GroupDescribeRequest: describe_answer(DESCRIPTION),
                 GroupResetOffsetsRequest: reset_answer(RESETS)}[type(request)]
        return crossed(api, Kind.ANSWER, found)

    monkeypatch.setattr(group_admin, "call_once", call_once)
    cluster = object()
    with GroupAdmin(cluster) as admin:
        assert admin.list_groups() == ["billing"]
        assert admin.describe_group("billing") == DESCRIPTION
        assert admin.reset_offsets("billing", "orders", "latest") == RESETS
    assert [request for request, _ in sent] == [GroupListRequest(), GroupDescribeRequest("billing"),
                                                GroupResetOffsetsRequest("billing", "orders", "latest", None)]
    assert all(where is cluster for _, where in sent)


def test_the_group_commands_print_what_the_node_answered(monkeypatch, capsys):
    events = TopicStore.initial_metadata("events", TopicConfig(read_mode=ReadMode.MAFKA4), [["w0"]])
    answers = {GroupDescribeRequest: describe_answer(DESCRIPTION), GroupResetOffsetsRequest: reset_answer(RESETS),
               MetadataRequest: MetadataAnswer("c1", (), (topic_info(events),))}
    monkeypatch.setattr(group_admin, "call_once", lambda request, _where: answers[type(request)])
    assert cli.main(["group", "describe", "billing"]) == 0
    described = capsys.readouterr().out.splitlines()
    assert described[0] == "group billing  generation=3  assignor=range  members=2  total_lag=-"
    assert described[4].split() == ["orders", "0", "m-1", "5", "9", "4", "2.2"], "lag_s: seconds to the tenth"
    assert described[5].split() == ["orders", "1", "-", "-", "7", "-", "-"]
    assert described[8].split() == ["events", "1", "active", "m-2", "3", "8", "5", "61.0"]
    assert described[-1].startswith("LOST events partition 2: offsets [7, 8) were deleted by retention")
    assert cli.main(["group", "reset-offsets", "billing", "--topic", "events", "--to-earliest"]) == 0
    assert capsys.readouterr().out.splitlines() == ["events vp 0: - -> 0", "events vp 1: 12 -> 3",
                                                    "events vp 4: 9 -> 9"]


@pytest.mark.parametrize("call, error", [
    (lambda admin: admin.reset_offsets("billing", "orders", "soon"), InvalidConfig),
    (lambda admin: admin.reset_offsets("bad group!", "orders", "earliest"), InvalidGroupName),
    (lambda admin: admin.reset_offsets("billing", "bad topic!", "earliest"), InvalidTopicName),
    (lambda admin: admin.describe_group("bad group!"), InvalidGroupName),
    (lambda admin: admin.is_virtual("bad topic!"), InvalidTopicName),
])
def test_bad_input_is_reported_as_such_without_a_cluster(tmp_path, monkeypatch, call, error):
    monkeypatch.setenv("MAFKA4_HOME", str(tmp_path))  # no local cluster there
    for name in ("MAFKA4_BOOTSTRAP", "MAFKA4_USER", "MAFKA4_PASSWORD"):
        monkeypatch.delenv(name, raising=False)
    with GroupAdmin() as admin, pytest.raises(error):
        call(admin)
