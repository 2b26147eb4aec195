"""What a member of a mafka4-mode group last read, kept current by its watch events (``WatchedGroup``).

A member's sync reads its group and the topic's layout and VP states (``vp_groups``). Between
two syncs the member's watches deliver every write below those prefixes, in revision order per
watch. A ``WatchedGroup`` starts from a sync's read and applies each event, so it holds what a
fresh read would hold: the members, the topic's owner keys, the committed offsets (with the high
watermarks the committers saw, for lag), the split epochs (the layout) and each VP's
``VpMark``. From it ``view`` builds the ``GroupView`` that ``plan_ownership`` reads, and
``vp_wakes.asks_to_act`` decides whether the member must act, without a read of etcd.

Why applying events after the read gives what a read would: a key's last event is its value.
An event may be older than the read (it was in flight when the read ran); the events after it
follow in order, so once a watch's deliveries caught up, every key it changed holds its last
value. A picture built from a read therefore replays the events delivered since just before
that read (``VirtualGroupMember``): applied on top of the read, they leave it exact once the
watches caught up, and in between it may be briefly behind, which can only wake or quiet a
member for a moment: the last delivery is judged on the exact picture.

When the picture cannot follow, ``apply`` says so (``Applied.LOST``) and the member drops it
and wakes, syncing from a fresh read: a key below the watched prefixes that it does not know
(a Mafka3-mode owner or offset key, the group's generation, a new kind of topic key), an
unparsable value, a deleted split epoch (never written so), or a picture grown past
``GROUP_PICTURE_ENTRIES_MAX`` entries (members, owner keys, offsets, split epochs and VP marks
together). That bound keeps each event's planning cheap (``plan_ownership`` costs about members x
VPs) and a member's memory small; a group larger than it wakes its members by the rule of
``vp_wakes.WakeFilter`` alone, as before pictures.

Keys no plan reads are ``Applied.IGNORED``: feed positions, physical partition states,
feeder holds and read losses of the topic (``vp_wakes.quiet_topic_prefixes``), and owner and offset keys of
other topics.

Pure: no I/O. Not thread-safe: the caller serialises calls.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from mafka4.coordinator.groups.partition_protocol import MemberInfo
from mafka4.coordinator.groups.vp_ownership import GroupView, lane_fallbacks
from mafka4.coordinator.groups.vp_wakes import quiet_topic_prefixes
from mafka4.limits import GROUP_PICTURE_ENTRIES_MAX, VirtualConfig
from mafka4.metadata import keys
from mafka4.virtual.layout import TopicLayout
from mafka4.virtual.vp_state import SplitEpoch, VirtualPartitionState, epoch_from_json

if TYPE_CHECKING:
    from mafka4.metadata.store import WatchEvent

# What each parse of a watched value may raise on a value it cannot read.
_UNREADABLE = (AssertionError, AttributeError, IndexError, KeyError, TypeError, ValueError)
_TRUNK_READER = frozenset(("",))  # what a member that names no lane reads


class Applied(enum.Enum):
    CHANGED = "changed"  # a key a plan reads was written (perhaps to the value it had)
    IGNORED = "ignored"  # a key no plan reads
    LOST = "lost"  # the picture cannot follow this event: drop it and read again


class WatchedGroup:
    """One group's members and ownership of ``topic``, and the topic's layout and VP marks; see the module docstring."""

    def __init__(self, cluster: str, group: str, topic: str, partitions: int, config: VirtualConfig):
        self._topic, self._partitions, self._config = topic, partitions, config
        self._members_prefix = keys.group_members_prefix(cluster, group)
        self._owners_prefix = keys.group_vp_owners_prefix(cluster, group)
        self._offsets_prefix = keys.group_vp_offsets_prefix(cluster, group)
        self._group_prefix = keys.group_prefix(cluster, group)
        self._topic_prefix = keys.topic_children_prefix(cluster, topic)
        self._epochs_prefix = keys.split_epochs_prefix(cluster, topic)
        self._states_prefix = keys.virtual_partitions_prefix(cluster, topic)
        self._ignored_topic_prefixes = quiet_topic_prefixes(cluster, topic)
        self.members: dict[str, str] = {}  # member key -> member id
        self.member_reads: dict[str, frozenset[str]] = {}  # member key -> the lanes it reads (MemberInfo.reads)
        self.owners: dict[int, str] = {}  # VP -> member id of its owner key
        self.offsets: dict[int, tuple[int, int]] = {}  # VP -> (committed offset, high watermark seen)
        self.epochs: dict[int, SplitEpoch] = {}  # epoch number -> split epoch
        self.sealed_end_offsets: dict[int, int] = {}
        self.retired: set[int] = set()
        self._states: set[int] = set()  # VPs with a state key
        self.layout: TopicLayout | None = None

    def read(self, members: Iterable[MemberInfo], owners: Mapping[int, str], offsets: Mapping[int, tuple[int, int]],
             layout: TopicLayout, states: Mapping[int, VirtualPartitionState]) -> bool:
        """Start from a sync's read; False (and the picture is not to be used) if it is too large."""
        members = list(members)
        self.members = {f"{self._members_prefix}{member.member_id}": member.member_id for member in members}
        self.member_reads = {f"{self._members_prefix}{member.member_id}": member.reads for member in members}
        self.owners, self.offsets = dict(owners), dict(offsets)
        self.epochs = {epoch.epoch: epoch for epoch in layout.epochs}
        self.layout = layout
        self.sealed_end_offsets = {vp: s.sealed_end_offset for vp, s in states.items()
                                   if s.sealed_end_offset is not None}
        self.retired = {vp for vp, s in states.items() if s.retired}
        self._states = set(states)
        return self.entries() <= GROUP_PICTURE_ENTRIES_MAX

    def entries(self) -> int:
        return len(self.members) + len(self.owners) + len(self.offsets) + len(self.epochs) + len(self._states)

    def apply(self, event: WatchEvent) -> Applied:
        """Apply one watch event (a put, or a deletion when ``value`` is None)."""
        key, value = event.key, event.value
        if key.startswith(self._topic_prefix):
            if key.startswith(self._states_prefix):
                applied = self._apply_state(key[len(self._states_prefix):], value)
            elif key.startswith(self._epochs_prefix):
                applied = self._apply_epoch(value)
            elif key.startswith(self._ignored_topic_prefixes):
                return Applied.IGNORED
            else:
                return Applied.LOST
        elif key.startswith(self._members_prefix):
            applied = self._apply_member(key, value)
        elif (parsed := keys.parse_group_partition(self._owners_prefix, key)) is not None:
            applied = self._apply_owner(parsed, value)
        elif (parsed := keys.parse_group_partition(self._offsets_prefix, key)) is not None:
            applied = self._apply_offset(parsed, value)
        else:
            return Applied.LOST  # a key of the group this picture does not know
        if applied is Applied.CHANGED and self.entries() > GROUP_PICTURE_ENTRIES_MAX:
            return Applied.LOST
        return applied

    def view(self) -> GroupView:
        """What ``plan_ownership`` reads (``VirtualGroupSnapshot.view`` of a fresh read)."""
        assert self.layout is not None, "a picture is read before it is used"
        lag = {vp: max(high_watermark - offset, 0) for vp, (offset, high_watermark) in self.offsets.items()}
        return GroupView(tuple(sorted(set(self.members.values()))), self.layout, dict(self.sealed_end_offsets),
                         dict(self.owners), {vp: offset for vp, (offset, _) in self.offsets.items()}, lag,
                         frozenset(self.retired), member_lanes=self.member_lanes(),
                         lane_fallback=lane_fallbacks(self.layout))

    def member_lanes(self) -> dict[str, frozenset[str]]:
        """Member id -> the lanes it reads, for every live member."""
        return {member: self.member_reads.get(key, _TRUNK_READER) for key, member in self.members.items()}

    def _apply_member(self, key: str, value: Any) -> Applied:
        applied = _apply_member_id(self.members, key, value)
        if value is None:
            self.member_reads.pop(key, None)
        elif applied is Applied.CHANGED:
            lanes = value.get("lanes", [])
            if not (isinstance(lanes, (list, tuple)) and all(isinstance(lane, str) for lane in lanes)):
                return Applied.LOST
            self.member_reads[key] = frozenset(lanes) if lanes else _TRUNK_READER
        return applied

    def _apply_owner(self, parsed: tuple[str, int], value: Any) -> Applied:
        topic, vp = parsed
        if topic != self._topic:
            return Applied.IGNORED
        return _apply_member_id(self.owners, vp, value)

    def _apply_offset(self, parsed: tuple[str, int], value: Any) -> Applied:
        topic, vp = parsed
        if topic != self._topic:
            return Applied.IGNORED
        if value is None:
            self.offsets.pop(vp, None)
            return Applied.CHANGED
        try:
            offset = int(value["offset"])
            high_watermark = int(value.get("high_watermark", offset))
        except _UNREADABLE:
            return Applied.LOST
        self.offsets[vp] = (offset, high_watermark)
        return Applied.CHANGED

    def _apply_epoch(self, value: Any) -> Applied:
        if value is None:
            return Applied.LOST  # split epochs are never deleted while a group reads the topic
        try:
            epoch = epoch_from_json(value, self.epochs.get(int(value["epoch"]) - 1))
            epochs = {**self.epochs, epoch.epoch: epoch}
            layout = TopicLayout(self._partitions, sorted(epochs.values(), key=lambda e: e.epoch), self._config)
        except _UNREADABLE:
            return Applied.LOST
        self.epochs, self.layout = epochs, layout
        return Applied.CHANGED

    def _apply_state(self, vp_text: str, value: Any) -> Applied:
        if not vp_text.isdigit():
            return Applied.LOST  # not a VP state key as ``keys`` spells them
        vp = int(vp_text)
        self.sealed_end_offsets.pop(vp, None)
        self.retired.discard(vp)
        if value is None:
            self._states.discard(vp)
            return Applied.CHANGED
        try:
            state = VirtualPartitionState.from_json(vp, value)
        except _UNREADABLE:
            return Applied.LOST
        self._states.add(vp)
        if state.sealed_end_offset is not None:
            self.sealed_end_offsets[vp] = state.sealed_end_offset
        if state.retired:
            self.retired.add(vp)
        return Applied.CHANGED


def _apply_member_id(entries: dict[Any, str], entry: Any, value: Any) -> Applied:
    """Store the ``member_id`` of a member or owner key's ``value`` under ``entry``, or drop it on a deletion."""
    if value is None:
        entries.pop(entry, None)
        return Applied.CHANGED
    try:
        member_id = value["member_id"]
    except _UNREADABLE:
        return Applied.LOST
    if not isinstance(member_id, str):
        return Applied.LOST
    entries[entry] = member_id
    return Applied.CHANGED
