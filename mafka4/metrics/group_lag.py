"""A consumer group's lag behind one partition (a VP, or a physical partition), in messages and in
time, and the groups' committed offsets it is measured from (pure).

The one rule, for ``mafka4 group describe`` (``frontend.group_reports``) and for the metrics a
partition's leader serves (``metrics.families``: ``mafka4_group_lag_messages`` and
``mafka4_group_lag_seconds``), so that both show the same figures:

* **in messages**: the partition's high watermark (HW) minus the group's committed offset (0 when
  the offset is at or past the HW). Messages retention deleted below the log start count, as
  Kafka counts them.
* **in time**: now minus the timestamp of the first record at or after the committed offset that
  is below the HW: the age of the oldest message the group has not read. 0 when caught up. The
  timestamp is that of the batch holding that record (its first record's: ``Log.timestamp_at``
  reads one batch header, never a record), so a committed offset inside a batch reads up to the
  batch's time span more. Record timestamps are the producers' wall clocks (``now_ms`` is the
  node's), so clock skew between them shows here; a timestamp ahead of ``now_ms`` gives 0. None
  (unknown) while messages are lagged but none of them is left below the HW (retention deleted
  them all).

A group's committed offsets are read from etcd (``keys.group_offset``, ``keys.group_vp_offset``) by
``committed_offsets`` from the items of one read of ``keys.groups_prefix``; the node that serves
them reads again at most every ``GROUP_OFFSETS_MAX_AGE_MS`` (``metadata.group_offsets_cache``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, NamedTuple

from mafka4.metadata import keys


class GroupLag(NamedTuple):
    """A group's lag behind one partition: messages (None: nothing committed) and ms (None: unknown)."""

    messages: int | None
    ms: int | None


def group_lag(committed_offset: int | None, high_watermark: int | None, first_unread_timestamp_ms: int | None,
              now_ms: int) -> GroupLag:
    """The lag (see the module docstring) of a group at ``committed_offset`` behind a partition at
    ``high_watermark``, whose first record at or after the offset below the HW has the timestamp
    ``first_unread_timestamp_ms`` (None: no such record)."""
    if committed_offset is None or high_watermark is None:
        return GroupLag(None, None)
    messages = max(high_watermark - committed_offset, 0)
    if messages == 0:
        return GroupLag(0, 0)
    if first_unread_timestamp_ms is None:
        return GroupLag(messages, None)
    return GroupLag(messages, max(now_ms - first_unread_timestamp_ms, 0))


@dataclass(frozen=True, slots=True)
class CommittedOffsets:
    """Every group's committed offsets: per (topic, VP) of mafka4-mode groups and per (topic,
    partition) of Mafka3-mode groups, {group: offset}."""

    vps: dict[tuple[str, int], dict[str, int]] = field(default_factory=dict)
    partitions: dict[tuple[str, int], dict[str, int]] = field(default_factory=dict)


def committed_offsets(cluster: str, items: Iterable[tuple[str, object]]) -> CommittedOffsets:
    """The committed offsets among ``items`` (key, JSON value) read below ``keys.groups_prefix``;
    the groups' other keys (members, owners, generations) and values without an int ``offset`` are
    skipped."""
    found = CommittedOffsets()
    for key, value in items:
        parsed = keys.parse_group_offset(cluster, key)
        if parsed is None or not isinstance(value, dict):
            continue
        offset = value.get("offset")
        if type(offset) is not int:
            continue
        group, virtual, topic, number = parsed
        (found.vps if virtual else found.partitions).setdefault((topic, number), {})[group] = offset
    return found
