"""What a node's client port answers to the admin APIs of consumer groups (``protocol.group_admin_api``).

Read nodes' ports answer them, as they answer the other admin APIs; the work is
``frontend.group_reports``'s.
Before anything is read or written, in this order:

1. the request's shape: the group and topic names and the reset's target are checked again
   here (``reset_target``), whatever the client checked: ``InvalidGroupName``,
   ``InvalidTopicName``, ``InvalidConfig``;
2. the principal, through the port's own check (so a refusal is logged and counted), as in Kafka:
   DESCRIBE on the group to describe it, whose offsets are shown only for the topics the
   principal may DESCRIBE (``visible_to``, as Kafka's OffsetFetch); ALTER on the group and
   DESCRIBE on the topic to reset its offsets. A listing refuses no one: it leaves out the groups the principal may not
   DESCRIBE (the port's plain decision, nothing logged), as METADATA leaves out topics.

A refusal at any step reads and writes nothing. The etcd and Ray calls block, so they run on
threads, at most ``NODE_GROUP_ADMIN_REQUESTS_IN_FLIGHT_MAX`` at once (``frontend.thread_slots``).
"""

from __future__ import annotations

from typing import Callable, TypeVar

from mafka4.coordinator.groups.partition_protocol import validate_group_name
from mafka4.frontend.admin_handlers import Check
from mafka4.frontend.group_reports import GroupReports
from mafka4.frontend.thread_slots import ThreadSlots
from mafka4.frontend.topic_handlers import Allows
from mafka4.limits import NODE_GROUP_ADMIN_REQUESTS_IN_FLIGHT_MAX
from mafka4.protocol.group_admin_api import (GroupDescribeAnswer, GroupDescribeRequest, GroupListAnswer,
                                             GroupListRequest, GroupResetOffsetsAnswer, GroupResetOffsetsRequest,
                                             describe_answer, reset_answer, reset_target, visible_to)
from mafka4.protocol.messages import ApiKey
from mafka4.protocol.server import Handler
from mafka4.protocol.session import Session
from mafka4.security.acl import Operation, ResourceType

T = TypeVar("T")


class GroupAdminHandlers:
    """The handlers of the group admin APIs of ``cluster``, reading and writing etcd at ``etcd_endpoint``."""

    def __init__(self, etcd_endpoint: str, cluster: str, check: Check, allows: Allows):
        self._check, self._allows = check, allows
        self._reports = GroupReports(etcd_endpoint, cluster)  # etcd clients connect on their first call
        self._threads = ThreadSlots(NODE_GROUP_ADMIN_REQUESTS_IN_FLIGHT_MAX)

    def handlers(self) -> dict[ApiKey, Handler]:
        return {ApiKey.GROUP_LIST: self._list, ApiKey.GROUP_DESCRIBE: self._describe,
                ApiKey.GROUP_RESET_OFFSETS: self._reset_offsets}

    def close(self) -> None:
        """Close the reports' etcd clients."""
        self._reports.close()

    async def _list(self, session: Session, _request: GroupListRequest, _buffers) -> tuple[GroupListAnswer, tuple]:
        names = await self._on_thread(GroupReports.list_groups)
        return GroupListAnswer(tuple(name for name in names
                                     if self._allows(session, Operation.DESCRIBE, ResourceType.GROUP, name))), ()

    async def _describe(self, session: Session, request: GroupDescribeRequest,
                        _buffers) -> tuple[GroupDescribeAnswer, tuple]:
        validate_group_name(request.group)
        self._check(session, Operation.DESCRIBE, ResourceType.GROUP, request.group)
        description = await self._on_thread(GroupReports.describe_group, request.group)
        return describe_answer(visible_to(description, lambda topic: self._allows(
            session, Operation.DESCRIBE, ResourceType.TOPIC, topic))), ()

    async def _reset_offsets(self, session: Session, request: GroupResetOffsetsRequest,
                             _buffers) -> tuple[GroupResetOffsetsAnswer, tuple]:
        target = reset_target(request)
        self._check(session, Operation.ALTER, ResourceType.GROUP, request.group)
        self._check(session, Operation.DESCRIBE, ResourceType.TOPIC, request.topic)
        offsets = await self._on_thread(GroupReports.reset_offsets, request.group, request.topic, target)
        return reset_answer(offsets), ()

    async def _on_thread(self, call: Callable[..., T], *args) -> T:
        """``call(reports, *args)``, one of ``GroupReports``'s methods, on a thread."""
        return await self._threads.run(call, self._reports, *args)
