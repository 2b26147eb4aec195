"""A group's committed offsets as Kafka's OffsetFetch reads them, and the commits of consumers outside any group.

The offsets are the ones mafka4's groups keep in etcd (``coordinator.groups``): a Mafka3-mode
topic's per physical partition, a Mafka4-mode topic's per VP. Read through etcd clients of this
object's own (they watch nothing), on threads (``frontend.thread_slots``): every call blocks.

- ``committed``: a topic's committed offsets in one group. A VP without one that is a child
  (opened by a split or a merge) and readable for the group (its parents were consumed to their
  sealed ends) starts at its log's start, offset 0, as mafka4's own members start it
  (``client.virtual_group_consumer``): the child continues its parents, and a client told -1
  would start it by its ``auto.offset.reset``, which for "latest" would skip its first records.
  Any other partition without one is -1 (the client's ``auto.offset.reset`` decides).
- ``topics``: the topics the group has committed offsets of (OffsetFetch naming no topic).
- ``commit_when_empty``: a commit of a consumer that is no member (generation -1: it assigned
  its partitions itself), written only while the group has no member, in any direction: Kafka's
  rule for groups that only store offsets. Otherwise Kafka answers ``UNKNOWN_MEMBER_ID``.
"""

from __future__ import annotations

from typing import Mapping

from mafka4.coordinator.groups.partition_groups import GroupStore
from mafka4.coordinator.groups.partition_protocol import TopicPartition
from mafka4.coordinator.groups.vp_groups import VirtualGroupStore
from mafka4.limits import NODE_GROUP_ADMIN_REQUESTS_IN_FLIGHT_MAX, ReadMode
from mafka4.metadata import keys
from mafka4.physical.partition_state import TopicMetadata
from mafka4.frontend.thread_slots import ThreadSlots

NOT_COMMITTED = -1


class KafkaGroupOffsets:
    def __init__(self, etcd_endpoint: str, cluster: str):
        self._cluster = cluster
        self._groups = GroupStore(etcd_endpoint, cluster)  # etcd clients connect on their first call
        self._virtual = VirtualGroupStore(etcd_endpoint, cluster)
        self._threads = ThreadSlots(NODE_GROUP_ADMIN_REQUESTS_IN_FLIGHT_MAX)

    def close(self) -> None:
        self._groups.close()
        self._virtual.close()

    async def committed(self, group: str, topic: TopicMetadata) -> dict[int, int]:
        """Partition (VP) -> committed offset of ``topic`` in ``group``; see the module docstring."""
        return await self._threads.run(self._committed, group, topic)

    async def topics(self, group: str) -> list[str]:
        return await self._threads.run(self._topics, group)

    async def commit_when_empty(self, group: str, topic: TopicMetadata, offsets: Mapping[int, int]) -> bool:
        """Write ``offsets`` if ``group`` has no member; False if it has one."""
        return await self._threads.run(self._commit_when_empty, group, topic, dict(offsets))

    def _committed(self, group: str, topic: TopicMetadata) -> dict[int, int]:
        if topic.config.read_mode is not ReadMode.MAFKA4:
            offsets = self._groups.snapshot(group).offsets
            return {tp.partition: committed.offset for tp, committed in offsets.items() if tp.topic == topic.name}
        snapshot = self._virtual.snapshot(group, topic.name, topic.config)
        found = {vp: offset.offset for vp, offset in snapshot.offsets.items()}
        view = snapshot.view()
        for vp in view.readable():
            if vp not in found and snapshot.layout.opening_epoch(vp).epoch > 0:
                found[vp] = 0
        return found

    def _topics(self, group: str) -> list[str]:
        names = {tp.topic for tp in self._groups.snapshot(group).offsets}
        prefix = keys.group_vp_offsets_prefix(self._cluster, group)
        for item in self._virtual.get_prefix(prefix):
            parsed = keys.parse_group_partition(prefix, item.key)
            if parsed is not None:
                names.add(parsed[0])
        return sorted(names)

    def _commit_when_empty(self, group: str, topic: TopicMetadata, offsets: dict[int, int]) -> bool:
        if topic.config.read_mode is ReadMode.MAFKA4:
            return self._virtual.reset_offsets(group, topic.name, offsets)
        return self._groups.reset_offsets(group, {TopicPartition(topic.name, p): o for p, o in offsets.items()})
