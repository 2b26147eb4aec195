"""``GroupAdmin``: list consumer groups, describe them with lag, and reset their offsets.

    with GroupAdmin() as admin:
        description = admin.describe_group("billing")   # members, owners, committed offsets, lag
        admin.reset_offsets("billing", "orders", to="earliest")   # only while the group is empty

Lag of a partition is its high watermark (the end of what consumers may read) minus the
group's committed offset; a partition without a committed offset has no lag figure. Its lag in
time (``lag_ms``) is the age of the oldest message the group has not committed: now minus the
timestamp of the first record at or after the committed offset (0 when caught up;
``metrics.group_lag``, the rule the leaders' Prometheus metrics follow too). This is what
``mafka4 group describe`` prints. A group of a mafka4-mode topic is described per
virtual partition (``virtual_partitions``): every VP of the topic's layout with its status
for the group (``VpStatus``), owner, committed offset, VP high watermark and lag.
``reset_offsets`` resets a Mafka3-mode topic's offsets per physical partition and a
mafka4-mode topic's per virtual partition (every VP of its layout, closed ones included, so
that "earliest" reads parents again before their children).

Each call is one request to any node's client port (``protocol.group_admin_api``), which reads
etcd and asks the leaders (``frontend.group_reports``): listing shows the groups the user may
describe; describing needs DESCRIBE on the group (and shows the offsets of the topics the user
may describe only); resetting ALTER on the group and DESCRIBE on
the topic (the admin user has all). ``where`` names the cluster as ``client.cluster_access``
reads it (None: the environment's or the local cluster; a home; a ``ClusterAccess``; a driver's
``Connection`` or a test's cluster). Names and reset targets are checked here first, so bad
input is reported as such before any connection is made. Imports neither ``ray`` nor ``etcd3``.
"""

from __future__ import annotations

from mafka4.client.node_connection import call_once
from mafka4.coordinator.groups.partition_protocol import validate_group_name
from mafka4.limits import ReadMode
from mafka4.names import validate_topic_name
from mafka4.protocol.group_admin_api import (GroupDescribeRequest, GroupDescription, GroupListRequest, PartitionLag,
                                             VirtualPartitionLag, VpStatus, description_of, reset_request, resets_of)
from mafka4.protocol.metadata_api import MetadataRequest
from mafka4.protocol.metadata_topics import topic_of

__all__ = ["GroupAdmin", "GroupDescription", "PartitionLag", "VirtualPartitionLag", "VpStatus"]


class GroupAdmin:
    """Consumer groups of the cluster ``where`` names; see the module docstring."""

    def __init__(self, where: object = None):
        self._where = where

    def list_groups(self) -> list[str]:
        """The names of the groups the user may describe, sorted."""
        return list(call_once(GroupListRequest(), self._where).groups)

    def describe_group(self, group: str) -> GroupDescription:
        """Members, generation, and per partition (per VP) owner, committed offset, high watermark
        and lag; ``UnknownGroup`` for a group with no members and no committed offsets."""
        return description_of(call_once(GroupDescribeRequest(validate_group_name(group)), self._where))

    def reset_offsets(self, group: str, topic: str, to: str | int) -> dict[int, tuple[int | None, int]]:
        """Set the committed offset of every partition of ``topic`` to ``to``: "earliest" (log start),
        "latest" (high watermark) or a timestamp in ms (first message at or after it, else the high
        watermark). Refused with ``GroupNotEmpty`` while the group has members. Returns, per
        partition (per virtual partition for a mafka4-mode topic), (committed offset before, after)."""
        return resets_of(call_once(reset_request(group, topic, to), self._where))

    def is_virtual(self, topic: str) -> bool:
        """True if ``topic`` is read by virtual partitions (mafka4 mode): its offsets are per VP."""
        answer = call_once(MetadataRequest((validate_topic_name(topic),)), self._where)
        return topic_of(answer.topics[0]).config.read_mode is ReadMode.MAFKA4

    def close(self) -> None:
        """Nothing to release: each call opens and closes its own connection."""

    def __enter__(self) -> "GroupAdmin":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
