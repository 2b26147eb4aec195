"""What the demo prints about the topic's virtual partitions and its group, from what the cluster reports.

``Narrator.look`` reads the group's description (``GroupAdmin.describe_group``: each VP's
status for the group, owner and committed offset), then the topic's split epochs and VP
states from etcd (``VirtualStore``: hash ranges, read node of each leader, sealed ends), and
prints what changed since its last look:

* a new split epoch: parent -> children, each with its hash range, its share of the key-hash
  space and its read node, and the cut (the physical offsets from which the children get
  the records);
* a closed VP that the group read to its sealed end and committed, which makes its children
  readable (parent before child);
* who owns which VP, with the VPs the group still drains or waits for.

The description is read before the layout, so the layout is never older than the
description it explains: every VP the description names has its state, and a closed VP the
group finished has its sealed end.

Nothing here is assumed from how the demo drives the group: a split made by the cluster
for another reason, or a merge, is printed the same way.
"""

from __future__ import annotations

import time
from typing import Callable

from mafka4.client.group_admin import GroupAdmin, GroupDescription, VpStatus
from mafka4.limits import TopicConfig
from mafka4.runtime.connect import Connection
from mafka4.virtual.layout import SplitEpoch, TopicLayout
from mafka4.virtual.ranges import HASH_SPACE, HashRange
from mafka4.virtual.vp_state import VirtualPartitionState
from mafka4.virtual.vp_store import VirtualStore

STATUS_NOTES = {
    VpStatus.CLOSED: "closed: its owner reads it to its sealed end",
    VpStatus.WAITING: "waiting for its parent",
}


class Narrator:
    def __init__(self, connection: Connection, groups: GroupAdmin, topic: str, config: TopicConfig, group: str,
                 say: Callable[[str], None]):
        self.names: dict[str, str] = {}  # member id -> the name the demo prints
        self._virtual = VirtualStore(connection.store, connection.cluster)
        self._groups = groups
        self._topic, self._config, self._group = topic, config, group
        self._say = say
        self._epochs_shown = 1  # epoch 0, the layout at creation, is in ``describe_layout``
        self._finished_shown: set[int] = set()
        self._owners_shown: tuple = ()

    def _layout(self) -> tuple[TopicLayout, dict[int, VirtualPartitionState]]:
        layout, states = self._virtual.layout_and_states(self._topic, self._config.partitions,
                                                         self._config.virtual_config())
        return layout, {vp: state for vp, (state, _) in states.items()}

    def describe_layout(self) -> str:
        """The topic's active VPs now, in one line."""
        layout, states = self._layout()
        vps = layout.current.ranges.vp_ids
        return f"{len(vps)} virtual partition{'s' if len(vps) > 1 else ''}: " + ", ".join(
            _vp(vp, layout.current.ranges.range_of(vp), states) for vp in vps)

    def follow(self, done: Callable[[GroupDescription], bool], wait_s: float, interval_s: float) -> bool:
        """Look every ``interval_s`` until ``done(the group's description)``; False if ``wait_s`` passed first."""
        deadline_s = time.monotonic() + wait_s
        while not done(self.look()):
            if time.monotonic() >= deadline_s:
                return False
            time.sleep(interval_s)
        return True

    def look(self) -> GroupDescription:
        """Print what changed since the last look; return the group's description."""
        description = self._groups.describe_group(self._group)
        layout, states = self._layout()
        for epoch in layout.epochs[self._epochs_shown:]:
            for line in _epoch_lines(epoch, layout.epochs[epoch.epoch - 1], states):
                self._say(line)
        self._epochs_shown = len(layout.epochs)
        for row in description.virtual_partitions:
            if row.status is VpStatus.READ and row.vp not in self._finished_shown:
                self._finished_shown.add(row.vp)
                children = next((e.children for e in layout.epochs if row.vp in e.parents), ())
                self._say(f"  v{row.vp} read to its sealed end (offset {states[row.vp].sealed_end_offset}) and "
                          f"committed: {' and '.join(f'v{child}' for child in children)} readable now")
        owners = tuple((row.vp, row.status, row.member_id) for row in description.virtual_partitions
                       if row.status is not VpStatus.READ)
        if owners != self._owners_shown:
            self._owners_shown = owners
            self._say("  owners: " + ", ".join(self._owner(vp, status, member_id, states)
                                               for vp, status, member_id in owners))
        return description

    def _owner(self, vp: int, status: VpStatus, member_id: str | None,
               states: dict[int, VirtualPartitionState]) -> str:
        owner = "nobody" if member_id is None else self.names.get(member_id, member_id)
        note = "" if status is VpStatus.ACTIVE else f" ({STATUS_NOTES[status]})"
        return f"v{vp} on {states[vp].leader} -> {owner}{note}"


def _share(hash_range: HashRange) -> str:
    return f"{100 * hash_range.width / HASH_SPACE:g}%"


def _vp(vp: int, hash_range: HashRange, states: dict[int, VirtualPartitionState]) -> str:
    return f"v{vp} {hash_range} ({_share(hash_range)} of the key hashes) on {states[vp].leader}"


def _epoch_lines(epoch: SplitEpoch, before: SplitEpoch, states: dict[int, VirtualPartitionState]) -> list[str]:
    kind = "split" if len(epoch.parents) == 1 else "merge"
    parents, children = (" + ".join(f"v{vp}" for vp in vps) for vps in (epoch.parents, epoch.children))
    cut = " ".join(f"p{partition}@{offset}" for partition, offset in enumerate(epoch.cut))
    lines = [f"  {kind} (epoch {epoch.epoch}): {parents} -> {children}, cut at the physical offsets {cut} "
             f"(the records before the cut stay in {parents})"]
    lines += [f"    {_vp(vp, before.ranges.range_of(vp), states)}" for vp in epoch.parents]
    lines += [f"    {_vp(vp, epoch.ranges.range_of(vp), states)}" for vp in epoch.children]
    return lines
