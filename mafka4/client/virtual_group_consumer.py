"""``VirtualGroupConsumer``: a member of a consumer group of a mafka4-mode topic.

    consumer = Consumer("orders", group="billing", from_beginning=True)   # one of these
    for message in consumer.poll(timeout_ms=500): ...                      # message.partition: the VP id
    consumer.commit(); consumer.seek(vp, 1234); consumer.seek_to_time(ts); consumer.close()

The member owns virtual partitions (``coordinator.groups.vp_groups``; the rules are
``coordinator.groups.vp_ownership``), which the group's coordinator, a node of the cluster, runs
for it (``client.remote_member``), and reads only those, through the read nodes' ports
(``VpFetcher``). Group duties run inside ``poll()`` in the caller's thread, so a position never
moves while it is committed. Unlike
the Mafka3 eager rebalance, a change in the group never stops the VPs a member keeps: a
member releases only what the target moves away from it, and claims only free VPs.

Where a claimed VP starts: at its committed offset; else, for a VP opened by a split or
merge, at its start (the group read its parents to their sealed end, and the child continues
them); else by ``auto_offset_reset`` (earliest: the log start; latest: the high watermark).
A group that starts at the latest offsets is seeded on its first join with the ends of the
closed VPs and of the children (``RemoteMember.seed``), so it skips the history
instead of reading every child from its start.

Commits (``client.group_commits``, as a Mafka3-mode member's): every ``auto_commit_interval_ms``
(not again while the positions, and the high watermarks seen, have not moved since a commit the
coordinator answered: ``client.positions``), on ``commit()``, on release and on ``close()``. When
an owned closed VP has been read to its sealed end (which the parent's leader node records once
the parent is complete), the member syncs at once: the coordinator counts the position the sync
carries as the parent's commit, and releases the parent in a transaction that writes that commit
(``vp_groups``), so its children become readable (and claimable) without waiting, and without a
commit call first.

Metadata (the VP layout, leaders, RISRs) is read when the member starts, when it claims a VP
the metadata held does not name (a child born after the last read) and the sync's answer did
not carry it (a coordinator's sync answer that claims VPs carries the layout, their states and
the read nodes' addresses), when a claimed VP cannot be positioned yet, and when a fetch fails
or finds no live leader (``VpFetcher``); never on a timer (unlike ``VirtualConsumer``'s
``metadata_max_age_ms``), so an idle member sends only its heartbeats and its fetches' long
polls. A layout change reaches it as a sync.

Connections: the fetcher and the group link share one ``NodeLinks`` (the consumer closes it):
the coordinator is found over the connection the first metadata read opened, and a VP led by
the coordinator's node is fetched over the coordinator's connection. A member whose join
claimed nothing (it waits for a split's child, or the group has more members than VPs) opens
the connections to the read nodes leading the topic's VPs in the background
(``VpFetcher.connect_ahead``, up to ``VP_CONNECTIONS_AHEAD_MAX``), so the child's first fetch
does not wait for one. Never two fetchers: a
node keeps one ``VP_FETCH`` of a topic out per connection.

Splits: when the plan says this member splits a VP (it has the smallest id and the group
has more members than active VPs), its coordinator asks the controller for it (a split intent,
``frontend.hosted_members``), so the member's reading does not pause.

Delivery is at-least-once: messages returned but not committed are returned again to the next
owner after a crash or an expired session. A commit never moves an offset backwards: a position
behind the committed offset (after a seek back) is not committed, as in Mafka3-mode groups.
"""

from __future__ import annotations

import logging

from mafka4.client.client_loop import client_loop
from mafka4.client.cluster_access import ClusterAccess
from mafka4.client.group_commits import GroupCommits
from mafka4.client.message import Message, new_member_id
from mafka4.client.node_links import NodeLinks
from mafka4.client.positions import Positions, start_offset
from mafka4.client.reading import poll_until, seek_to_time
from mafka4.client.remote_member import MemberSync, RemoteMember
from mafka4.client.vp_fetcher import VpFetcher
from mafka4.clocks import wall_ms_fine
from mafka4.coordinator.groups.partition_protocol import VIRTUAL_ASSIGNOR
from mafka4.errors import CommitFailed, MafkaError, PartitionNotAssigned
from mafka4.join_trace import JOIN_TRACES, vps_detail
from mafka4.limits import CLAIMED_START_RETRY_S, VP_CONNECTIONS_AHEAD_MAX, ConsumerConfig, OffsetReset
from mafka4.log.epochs import NO_EPOCH
from mafka4.physical.partition_state import TopicMetadata
from mafka4.protocol.group_api import GroupJoinAnswer

logger = logging.getLogger(__name__)


class VirtualGroupConsumer:
    def __init__(self, metadata: TopicMetadata, group: str, access: ClusterAccess, config: ConsumerConfig,
                 lanes: tuple[str, ...] = ()):
        """``access``: the cluster's ports, which the VPs and the group's coordinator answer on; ``lanes``:
        those this member reads (() the trunk alone; the group's ownership rules: ``vp_ownership``)."""
        self.topic, self.group, self.config = metadata.name, group, config
        # One set of connections for the fetcher and the group link: FIND_COORDINATOR goes over
        # the connection the first metadata read opened, and a VP led by the coordinator's node
        # is fetched over the coordinator's connection (the link sends no VP_FETCH).
        self._links = NodeLinks(access, self._opened)
        self._fetcher = VpFetcher(access, metadata, config, new_member_id(), self._links)
        self._member = RemoteMember(access, group, metadata.name, VIRTUAL_ASSIGNOR, config, self._links, lanes)
        # What the last sync said of closed VPs' sealed ends and of the group's committed offsets.
        self._sealed: dict[int, int] = {}
        self._committed: dict[int, int] = {}
        self._unstarted: dict[int, int | None] = {}  # claimed VPs whose start position is not known yet
        self._claimed_epochs: dict[int, int] = {}  # their committed offsets' leader epochs, checked by the first fetch
        self._commits = GroupCommits(group, config.auto_commit_interval_ms, self._offsets, self._write_commit, "VPs")
        try:
            sent_ms = wall_ms_fine()
            joined = self._member.join()
            if JOIN_TRACES.on(self.topic):
                self._trace_join(sent_ms)
            if config.auto_offset_reset is OffsetReset.LATEST and not joined.offsets_committed:
                self._seed_latest(joined)
            self._sync()
            if not self._fetcher.fetching and not self._unstarted:
                # A joiner waiting for its VP (the split that makes its child): its first fetch
                # should not open a connection first (see ``VP_CONNECTIONS_AHEAD_MAX``).
                self._fetcher.connect_ahead(VP_CONNECTIONS_AHEAD_MAX)
        except BaseException:
            self._member.leave({})
            self._fetcher.close()
            self._close_links()
            raise

    @property
    def member_id(self) -> str:
        return self._member.member_id

    def _trace_join(self, sent_ms: float) -> None:
        """The join's rows of a join-traced topic (``mafka4.join_trace``); the fetcher's rows name this member."""
        self._fetcher.traced_as = self.member_id
        JOIN_TRACES.record(self.topic, "join_sent", self.member_id, ms=sent_ms)
        JOIN_TRACES.record(self.topic, "coordinator_found", self.member_id, ms=self._member.coordinator_found_ms)
        JOIN_TRACES.record(self.topic, "join_answered", self.member_id)

    # --- positions ------------------------------------------------------------------------

    def assignment(self) -> list[int]:
        """The VPs this member reads now."""
        return sorted(self._fetcher.fetching)

    def position(self, vp: int) -> int:
        return self._fetcher.positions[vp]

    def seek(self, vp: int, offset: int) -> None:
        if vp not in self._fetcher.fetching:
            raise PartitionNotAssigned(
                f"virtual partition {vp} of {self.topic!r} is not owned by this member (owned: {self.assignment()}); "
                f"poll() until assignment() lists it")
        self._fetcher.seek(vp, offset)

    def hold(self, vp: int, held: bool) -> None:
        """Fetch nothing of ``vp`` while ``held`` (an ordered retry, ``client.retrying``)."""
        self._fetcher.hold(vp, held)

    def seek_to_time(self, timestamp_ms: int) -> None:
        """Move every owned VP to its first message at or after ``timestamp_ms`` (or its end)."""
        seek_to_time(self._fetcher, self.assignment(), timestamp_ms)

    def _offsets(self) -> Positions:
        fetcher = self._fetcher
        return {vp: (fetcher.positions[vp], max(fetcher.high_watermarks.get(vp, 0), fetcher.positions[vp]),
                     fetcher.position_epoch(vp)) for vp in fetcher.fetching}

    # --- polling ----------------------------------------------------------------------------

    def poll(self, timeout_ms: int = 1000) -> list[Message]:
        """Messages that arrived, up to ``poll_messages_max``; waits at most ``timeout_ms`` for some."""
        return poll_until(timeout_ms, self._group_duties, self._fetch)

    def _fetch(self, remaining_s: float) -> list[Message]:
        """Fetch (or, owning nothing, wait) until data comes, the group changes, an auto-commit is due,
        a claimed VP is to be started again, or ``remaining_s`` passed."""
        wait_s = min(remaining_s, self._commits.seconds_until_due(),
                     CLAIMED_START_RETRY_S if self._unstarted else remaining_s)
        if not self._fetcher.fetching:
            self._member.changed.wait(wait_s)
            return []
        return self._fetcher.fetch(wait_s, self._member.woken())

    # --- group duties ---------------------------------------------------------------------

    def _group_duties(self) -> None:
        self._sync_drained_parents()  # first, so this round's sync carries the drained position
        if self._member.changed.is_set():
            self._sync()
        if self._unstarted:
            self._start_claimed()
        self._commits.if_due()

    def _sync(self) -> None:
        JOIN_TRACES.record(self.topic, "sync_sent", self.member_id)
        result: MemberSync = self._member.sync(self._offsets())
        JOIN_TRACES.record(self.topic, "synced", self.member_id)
        self._commits.forget()
        for vp in result.revoked:
            self._fetcher.stop(vp)
            self._unstarted.pop(vp, None)
            self._claimed_epochs.pop(vp, None)
        self._unstarted.update(result.claimed)
        self._claimed_epochs.update(result.claimed_epochs)
        if result.vp_metadata is not None:
            self._fetcher.learn(result.vp_metadata)  # so a child claimed here needs no metadata read
        if result.claimed and JOIN_TRACES.on(self.topic):
            JOIN_TRACES.record(self.topic, "assigned", self.member_id, vps_detail(result.claimed))
        known = self._sealed
        if result.sealed_end_offsets is not None and result.committed_offsets is not None:
            self._sealed, self._committed = dict(result.sealed_end_offsets), dict(result.committed_offsets)
        else:  # not synced: it is retried when the coordinator can, and a drained parent does not ask it sooner
            self._sealed = {}
        if JOIN_TRACES.on(self.topic):
            self._trace_sealed_ends(self._sealed.keys() - known.keys(), result.revoked)
        if self._sealed.keys() - known.keys():
            # A sealed end learned now may be one this member read to already (an empty parent
            # backlog): sync again at once, not after the next fetch's long poll, for the children
            # wait for it. Once per sealed end learned, so a parent not released cannot spin.
            self._sync_drained_parents()
        if self._unstarted:
            self._start_claimed()

    def _start_claimed(self) -> None:
        """Position claimed VPs (see the module docstring) and start fetching them."""
        fetcher = self._fetcher
        vps = sorted(self._unstarted)
        if any(vp not in fetcher.states for vp in vps):
            fetcher.refresh()  # a child born after the last metadata read
        without = [vp for vp in vps if self._unstarted[vp] is None]
        try:
            ranges = dict(zip(without, fetcher.list_offsets_many(without)))
            if without and JOIN_TRACES.on(self.topic):
                JOIN_TRACES.record(self.topic, "offsets_listed", self.member_id, vps_detail(without))
        except MafkaError as error:  # a leader not started yet, a failover: retry later
            logger.warning("group %s: cannot position %s yet (%s); retrying", self.group, without, error)
            fetcher.refresh()
            return
        layout = fetcher.layout
        for vp in vps:
            committed, committed_epoch = self._unstarted.pop(vp), self._claimed_epochs.pop(vp, NO_EPOCH)
            if committed is not None:
                fetcher.seek(vp, committed, committed_epoch)
            else:
                child = layout.opening_epoch(vp).epoch > 0
                earliest = child or self.config.auto_offset_reset is OffsetReset.EARLIEST
                fetcher.seek(vp, start_offset(None, ranges[vp], earliest))
                fetcher.high_watermarks[vp] = ranges[vp][1]
            fetcher.fetching.add(vp)
            if JOIN_TRACES.on(self.topic):
                fetcher.trace_first_data(vp)

    def _sync_drained_parents(self) -> None:
        """Sync at once when an owned closed VP was read to its sealed end: its children wait for the
        sync, which commits it there as it releases it (see the module docstring)."""
        sealed, committed = self._sealed, self._committed
        drained = [vp for vp in self._fetcher.fetching if vp in sealed and self._fetcher.positions[vp] >= sealed[vp]
                   and (vp not in committed or committed[vp] < sealed[vp])]
        if drained:
            JOIN_TRACES.record(self.topic, "drained", self.member_id, vps_detail(drained))
            self._member.changed.set()

    def _trace_sealed_ends(self, learned, revoked) -> None:
        """A ``sealed_learned`` row per sealed end this sync told of a VP this member read (a
        join-traced topic; one the sync released at once included): its detail is the VP, its
        sealed end and the position read then, so a trace shows the backlog the member still had
        to read before it could release it (none, if released by this very sync)."""
        positions = self._fetcher.positions
        for vp in sorted(learned):
            if vp in self._fetcher.fetching or vp in revoked:
                JOIN_TRACES.record(self.topic, "sealed_learned", self.member_id,
                                   f"{vp} sealed at {self._sealed[vp]}, read to {positions[vp]}")

    def _seed_latest(self, joined: GroupJoinAnswer) -> None:
        """A new group at the latest offsets: closed VPs count as read to their end, children from their end now."""
        layout = self._fetcher.layout
        offsets = {o.id: o.offset for o in joined.sealed_end_offsets}
        children = [vp for vp in layout.current.vp_ids if layout.opening_epoch(vp).epoch > 0]
        for vp, (_, high_watermark) in zip(children, self._fetcher.list_offsets_many(children)):
            offsets[vp] = high_watermark
        if offsets:
            self._member.seed(offsets)

    # --- commits and leaving ----------------------------------------------------------------

    def _write_commit(self, offsets: Positions) -> tuple[dict[int, int], set[int]]:
        committed, lost = self._member.commit(offsets)
        return {vp: offsets[vp][0] for vp in committed}, lost

    def commit(self) -> dict[int, int]:
        """Commit the positions of every owned VP now; returns the offsets written.

        Raises ``CommitFailed`` if a VP was taken away first (its new owner starts from the
        last committed offset).
        """
        written, lost = self._commits.now()
        if lost:
            raise CommitFailed(
                f"group {self.group!r}: virtual partitions {sorted(lost)} of {self.topic!r} changed owner before the "
                f"commit; poll() again to read the VPs owned now")
        return written

    def close(self) -> None:
        """Commit and release every owned VP, leave the group, and stop fetching."""
        positions = self._offsets()
        self._fetcher.clear()
        try:
            self._member.leave(positions)
        finally:
            self._fetcher.fetching.clear()
            self._fetcher.close()
            self._close_links()

    def _close_links(self) -> None:
        client_loop().run(self._links.close_after_cancelled())

    def _opened(self, address: str) -> None:
        JOIN_TRACES.record(self.topic, "connected", self._member.member_id, address)
