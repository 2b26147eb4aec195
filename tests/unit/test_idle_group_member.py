"""What an idle group member sends, in both read modes: heartbeats and its fetches' long polls,
and no auto-commit of positions its coordinator already holds (``client.positions``); and what
still commits. The group's coordinator and the fetcher are stand-ins (no etcd, no Ray), except
in the metadata test, which reads a stand-in read node through a real ``VpFetcher``, and in the
heartbeat's, which runs a real ``GroupLink`` whose calls a stand-in answers."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time

import pytest

from mafka4.client import group_commits as commits_module
from mafka4.client import group_link as group_link_module
from mafka4.client import partition_consumer as partition_consumer_module
from mafka4.client import virtual_group_consumer as vp_consumer_module
from mafka4.client.bootstrap import Credential
from mafka4.client.cluster_access import ClusterAccess
from mafka4.client.group_link import GroupLink
from mafka4.client.message import Message
from mafka4.client.partition_consumer import PartitionConsumer
from mafka4.client.remote_member import MemberSync, RemoteMember
from mafka4.client.virtual_group_consumer import VirtualGroupConsumer
from mafka4.errors import UnknownMember
from mafka4.limits import GROUP_HEARTBEAT_WAIT_MS, PROTOCOL_ANSWER_MARGIN_S, ConsumerConfig, TopicConfig
from mafka4.log.epochs import NO_EPOCH
from mafka4.metadata.endpoints import HostPort
from mafka4.physical.partition_state import TopicMetadata
from mafka4.protocol.group_api import GroupHeartbeatAnswer, GroupJoinAnswer, GroupSyncAnswer

from tests.unit.stand_in_ports import TOPIC, LongPolling, vp_fetcher_against

INTERVAL_MS = 1_000


class WaitsRecorded(threading.Event):
    """A member's ``changed``: records how long each wait on it was allowed."""

    def __init__(self):
        super().__init__()
        self.waits_s: list[float] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.waits_s.append(timeout)
        return super().wait(timeout)


class Coordinator:
    """A ``RemoteMember`` stand-in: each sync claims ``claims`` (id -> committed offset) once,
    then changes nothing; commits are recorded and answered, losing nothing."""

    def __init__(self, claims: dict[int, int], sealed: dict[int, int] | None = None,
                 committed: dict[int, int] | None = None):
        self.claims, self.sealed, self.committed = claims, sealed, committed
        self.changed = WaitsRecorded()
        self.owned: set[int] = set()
        self.syncs = 0
        self.sync_positions: list[dict[int, tuple[int, int, int]]] = []  # what each sync carried
        self.commits: list[dict[int, tuple[int, int, int]]] = []
        self.member_id = "m0"

    def __call__(self, *args, **kwargs) -> "Coordinator":  # stands in for the class
        return self

    def woken(self) -> concurrent.futures.Future:
        return concurrent.futures.Future()

    def join(self) -> GroupJoinAnswer:
        self.changed.set()
        return GroupJoinAnswer("m0", True, ())

    def sync(self, positions) -> MemberSync:
        self.changed.clear()
        self.syncs += 1
        self.sync_positions.append(dict(positions))
        claimed, self.claims = self.claims, {}
        self.owned |= set(claimed)
        return MemberSync((), claimed, {}, tuple(sorted(self.owned)), None, self.sealed, self.committed, None)

    def commit(self, positions) -> tuple[set[int], set[int]]:
        mine = {id_: position for id_, position in positions.items() if id_ in self.owned}
        if mine:
            self.commits.append(dict(mine))
        return set(mine), set()

    def leave(self, positions) -> None:
        self.owned.clear()


class Fetcher:
    """A ``VpFetcher`` / ``PartitionFetcher`` stand-in: nothing to read, unless ``next_read`` says
    how far the next fetch reads (partition -> new position); records each fetch's wait."""

    def __init__(self, *args, **kwargs):
        self.positions: dict[int, int] = {}
        self.fetching: set[int] = set()
        self.high_watermarks: dict[int, int] = {}
        self.states = {0: None, 1: None}
        self.layout = None
        self.refreshes = 0
        self.waits_s: list[float] = []
        self.next_read: dict[int, int] = {}
        self.connected_ahead: list[int] = []  # each ``connect_ahead``'s bound

    def __call__(self, *args, **kwargs) -> "Fetcher":  # stands in for the class
        return self

    def refresh(self) -> None:
        self.refreshes += 1

    def connect_ahead(self, nodes_max: int) -> None:
        self.connected_ahead.append(nodes_max)

    def seek(self, partition: int, offset: int, last_epoch: int = NO_EPOCH) -> None:
        self.positions[partition] = offset

    def position_epoch(self, partition: int) -> int:
        return NO_EPOCH

    def stop(self, partition: int) -> None:
        self.fetching.discard(partition)

    def list_offsets_many(self, partitions):
        return [(0, 0) for _ in partitions]

    def fetch(self, timeout_s: float, wake=None) -> list[Message]:
        self.waits_s.append(timeout_s)
        read, self.next_read = self.next_read, {}
        self.positions.update(read)
        self.high_watermarks.update(read)
        # One message ends the poll: the test looks at the wait the round was given.
        return [Message(TOPIC, p, o - 1, 0, None, b"", ()) for p, o in (read or {0: 1}).items()]

    def clear(self) -> None:
        pass

    def close(self) -> None:
        pass


@pytest.fixture
def clock(monkeypatch):
    now = [0.0]
    monkeypatch.setattr(commits_module, "_now_ms", lambda: now[0])
    return now


class Links:
    """The ``NodeLinks`` a member's fetcher and group link share, where both are stand-ins."""

    def __init__(self, *args, **kwargs):
        pass

    async def close_after_cancelled(self) -> None:
        pass


def vp_member(monkeypatch, coordinator: Coordinator, fetcher: Fetcher) -> VirtualGroupConsumer:
    monkeypatch.setattr(vp_consumer_module, "RemoteMember", coordinator)
    monkeypatch.setattr(vp_consumer_module, "VpFetcher", fetcher)
    monkeypatch.setattr(vp_consumer_module, "NodeLinks", Links)
    metadata = TopicMetadata(TOPIC, TopicConfig(partitions=1, read_mode="mafka4"), ())
    return VirtualGroupConsumer(metadata, "billing", None, ConsumerConfig(auto_commit_interval_ms=INTERVAL_MS))


def partition_member(monkeypatch, coordinator: Coordinator, fetcher: Fetcher) -> PartitionConsumer:
    monkeypatch.setattr(partition_consumer_module, "RemoteMember", coordinator)
    monkeypatch.setattr(partition_consumer_module, "PartitionFetcher", fetcher)
    return PartitionConsumer(TOPIC, "billing", None, ConsumerConfig(auto_commit_interval_ms=INTERVAL_MS), False)


MEMBERS = {"mafka4 mode": vp_member, "mafka3 mode": partition_member}


@pytest.mark.parametrize("make", MEMBERS.values(), ids=MEMBERS.keys())
def test_an_idle_member_commits_once_after_claiming_then_only_when_a_position_moves(monkeypatch, clock, make):
    coordinator, fetcher = Coordinator({0: 100, 1: 200}), Fetcher()
    member = make(monkeypatch, coordinator, fetcher)
    for clock[0] in range(0, 60_000, 250):  # a minute of polls that bring nothing
        member.poll(timeout_ms=0)
    assert [sorted(c.items()) for c in coordinator.commits] == [[(0, (100, 100, NO_EPOCH)), (1, (200, 200, NO_EPOCH))]]
    fetcher.next_read = {1: 205}
    member.poll(timeout_ms=0)
    clock[0] += INTERVAL_MS
    member.poll(timeout_ms=0)
    assert coordinator.commits[1:] == [{0: (100, 100, NO_EPOCH), 1: (205, 205, NO_EPOCH)}]


@pytest.mark.parametrize("make", MEMBERS.values(), ids=MEMBERS.keys())
def test_an_idle_members_poll_does_not_wake_for_an_auto_commit_it_would_skip(monkeypatch, clock, make):
    coordinator, fetcher = Coordinator({0: 100}), Fetcher()
    member = make(monkeypatch, coordinator, fetcher)
    clock[0] = INTERVAL_MS
    member.poll(timeout_ms=0)  # commits what was claimed
    fetcher.waits_s.clear()
    clock[0] = 2 * INTERVAL_MS - 50  # the next auto-commit would be due in 50 ms
    member.poll(timeout_ms=30_000)
    assert fetcher.waits_s[0] > 29, "the fetch waits the poll's whole timeout"


@pytest.mark.parametrize("make", MEMBERS.values(), ids=MEMBERS.keys())
def test_a_member_that_owns_nothing_waits_for_its_group_not_for_auto_commits(monkeypatch, clock, make):
    coordinator, fetcher = Coordinator({}), Fetcher()
    member = make(monkeypatch, coordinator, fetcher)
    clock[0] = INTERVAL_MS
    member.poll(timeout_ms=0)
    coordinator.changed.waits_s.clear()
    clock[0] = 2 * INTERVAL_MS - 50
    member.poll(timeout_ms=200)
    assert coordinator.changed.waits_s[0] > 0.1 and coordinator.commits == []


@pytest.mark.parametrize("make", MEMBERS.values(), ids=MEMBERS.keys())
def test_after_a_sync_the_next_auto_commit_writes_the_same_positions_again(monkeypatch, clock, make):
    coordinator, fetcher = Coordinator({0: 100}), Fetcher()
    member = make(monkeypatch, coordinator, fetcher)
    clock[0] = INTERVAL_MS
    member.poll(timeout_ms=0)
    coordinator.changed.set()  # the group changed; this member keeps what it owns
    clock[0] = 1.5 * INTERVAL_MS
    member.poll(timeout_ms=0)
    assert coordinator.syncs == 2 and len(coordinator.commits) == 1
    clock[0] = 2 * INTERVAL_MS
    member.poll(timeout_ms=0)
    assert coordinator.commits == [{0: (100, 100, NO_EPOCH)}] * 2


@pytest.mark.parametrize("make", MEMBERS.values(), ids=MEMBERS.keys())
def test_commit_writes_positions_the_coordinator_already_holds(monkeypatch, clock, make):
    coordinator, fetcher = Coordinator({0: 100}), Fetcher()
    member = make(monkeypatch, coordinator, fetcher)
    assert member.commit() == {0: 100}
    assert member.commit() == {0: 100}
    assert len(coordinator.commits) == 2


def test_a_parent_vp_read_to_its_sealed_end_syncs_at_once_with_its_position_and_no_commit_call(monkeypatch, clock):
    # The sync carries the drained position; the coordinator commits it as it releases the parent (vp_groups).
    coordinator, fetcher = Coordinator({0: 100, 1: 40}, sealed={0: 120}, committed={0: 100, 1: 40}), Fetcher()
    member = vp_member(monkeypatch, coordinator, fetcher)
    clock[0] = INTERVAL_MS
    member.poll(timeout_ms=0)
    assert len(coordinator.commits) == 1
    fetcher.next_read = {0: 120}  # the parent's last messages
    member.poll(timeout_ms=0)
    clock[0] += 10  # far from the next auto-commit
    member.poll(timeout_ms=0)
    assert coordinator.syncs == 2, "the member syncs at once, so its group sees the parent drained"
    assert coordinator.sync_positions[-1][0][0] == 120
    assert len(coordinator.commits) == 1, "no commit call of its own"


def test_a_parent_read_to_its_end_before_the_member_learns_the_sealed_end_syncs_without_waiting_for_a_fetch(
        monkeypatch, clock):
    """An empty parent backlog: the member read the parent to the cut before its leader sealed it.
    The sync that tells the sealed end leaves the member due to sync again at once (``changed``),
    so its next round releases the parent instead of waiting on a fetch's long poll first."""
    coordinator, fetcher = Coordinator({0: 100, 1: 40}, sealed={}, committed={0: 100, 1: 40}), Fetcher()
    member = vp_member(monkeypatch, coordinator, fetcher)
    fetcher.next_read = {0: 120}  # everything the parent will ever hold
    member.poll(timeout_ms=0)
    coordinator.sealed = {0: 120}  # its leader sealed it there: the group wakes the member
    coordinator.changed.set()
    member.poll(timeout_ms=0)
    assert coordinator.changed.is_set(), "due to sync again, so the next fetch does not wait"
    member.poll(timeout_ms=0)
    assert coordinator.syncs == 3 and coordinator.sync_positions[-1][0][0] == 120
    assert not coordinator.changed.is_set(), "once: a parent the coordinator did not release yet does not spin"


class MetadataCounted(LongPolling):
    """``LongPolling``'s read node, counting the VP metadata requests it answers."""

    def __init__(self):
        super().__init__()
        self.metadata_reads = 0

    async def _metadata(self, session, request, buffers):
        self.metadata_reads += 1
        return await super()._metadata(session, request, buffers)


def test_an_idle_vp_member_reads_the_vp_metadata_once_not_on_a_timer(monkeypatch):
    """Layout changes reach a member through its coordinator (a sync), and a failed fetch asks
    again (``VpFetcher``): an idle member reads the metadata when it starts, and not again."""
    node = MetadataCounted()
    config = ConsumerConfig(fetch_wait_ms_max=10, fetch_idle_wait_ms_max=20, auto_commit_interval_ms=50,
                            metadata_max_age_ms=50)
    with vp_fetcher_against(node, config) as fetcher:
        coordinator = Coordinator({0: 0, 1: 0})
        monkeypatch.setattr(vp_consumer_module, "RemoteMember", coordinator)
        monkeypatch.setattr(vp_consumer_module, "VpFetcher", lambda *args: fetcher)
        monkeypatch.setattr(vp_consumer_module, "NodeLinks", Links)
        metadata = TopicMetadata(TOPIC, TopicConfig(partitions=1, read_mode="mafka4"), ())
        member = VirtualGroupConsumer(metadata, "billing", None, config)
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            member.poll(timeout_ms=100)
        assert len(node.requests) >= 20, "the member kept fetching"
        assert node.metadata_reads == 1
        assert len(coordinator.commits) == 1


def test_a_heartbeat_told_its_session_is_gone_waits_for_the_join_again_not_on_a_timer(monkeypatch):
    """It sends nothing until the consumer joined again, and heartbeats for the new session at once."""
    monkeypatch.setattr(group_link_module, "GROUP_RETRY_BACKOFF_S", 60.0)  # a timer would show
    link = GroupLink(ClusterAccess((HostPort("127.0.0.1", 9),), Credential("alice", "password-1")), "billing",
                     session_timeout_s=0.3)
    asked: list[str] = []

    async def ask(request, timeout_s: float):
        asked.append(request.member_id)
        if request.member_id == "m1":
            raise UnknownMember("group 'billing' has no session of member 'm1'")
        await asyncio.sleep(request.wait_ms / 1000)
        return GroupHeartbeatAnswer(False)

    monkeypatch.setattr(link, "_ask", ask)
    try:
        link.joined("m1")
        assert link.changed.wait(5), "the lost session is the consumer's to find out"
        time.sleep(0.3)
        assert asked == ["m1"]
        link.joined("m2")
        deadline = time.monotonic() + 5
        while "m2" not in asked and time.monotonic() < deadline:
            time.sleep(0.01)
        assert "m2" in asked and time.monotonic() < deadline - 3, f"heartbeats after the join again: {asked}"
    finally:
        link.close()


def test_an_idle_heartbeat_waits_long_at_the_coordinator_and_a_pending_sync_only_keeps_the_session(monkeypatch):
    """Idle, a heartbeat asks to wait GROUP_HEARTBEAT_WAIT_MS, far beyond the session timeout (the
    coordinator counts a waiting heartbeat as the member alive), and its call is given that plus
    the answer margin. Told to sync, it sends bare heartbeats (no wait), a third of the session timeout apart,
    until the consumer synced, then waits long again."""
    link = GroupLink(ClusterAccess((HostPort("127.0.0.1", 9),), Credential("alice", "password-1")), "billing",
                     session_timeout_s=0.3)
    asked: list[tuple[int, float]] = []

    async def ask(request, timeout_s: float):
        asked.append((request.wait_ms, timeout_s))
        if len(asked) == 1:
            return GroupHeartbeatAnswer(True)  # the group changed: the member must sync
        await asyncio.sleep(request.wait_ms / 1000)
        return GroupHeartbeatAnswer(False)

    monkeypatch.setattr(link, "_ask", ask)
    long_wait = (GROUP_HEARTBEAT_WAIT_MS, GROUP_HEARTBEAT_WAIT_MS / 1000 + PROTOCOL_ANSWER_MARGIN_S)
    try:
        link.joined("m1")
        assert link.changed.wait(5)
        deadline = time.monotonic() + 5
        while len(asked) < 3 and time.monotonic() < deadline:  # the consumer has not polled yet
            time.sleep(0.01)
        link.changed.clear()
        link.synced()
        deadline = time.monotonic() + 5
        while asked[-1] != long_wait and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        link.close()
    assert GROUP_HEARTBEAT_WAIT_MS > ConsumerConfig().member_lease_ttl_s * 1000, "longer than the session timeout"
    assert asked[0] == long_wait
    bare = asked[1:-1]
    assert len(bare) >= 2 and set(bare) == {(0, PROTOCOL_ANSWER_MARGIN_S)}, asked
    assert asked[-1] == long_wait


def test_a_change_wakes_one_sync_not_a_second_from_a_heartbeat_sent_while_the_sync_was_on_its_way(monkeypatch):
    """The coordinator clears a member's change when its sync arrives, not when the member sends it.
    A long poll sent in between would be answered "changed" for the change that sync handles, and
    the member would sync again, on the poll that should return its first messages of a claimed
    VP. The heartbeat long-polls again only once the sync was answered (``GroupLink.syncing``)."""
    member = RemoteMember(ClusterAccess((HostPort("127.0.0.1", 9),), Credential("alice", "password-1")), "billing",
                          TOPIC, "virtual", ConsumerConfig())
    coordinator_changed = threading.Event()  # the member's change, as its coordinator holds it
    coordinator_changed.set()
    asked: list[tuple[int, bool]] = []  # (wait asked, whether the coordinator held a change then)

    async def ask(request, timeout_s: float):
        asked.append((request.wait_ms, coordinator_changed.is_set()))
        if coordinator_changed.is_set():
            return GroupHeartbeatAnswer(True)
        await asyncio.sleep(request.wait_ms / 1000)
        return GroupHeartbeatAnswer(False)

    def sync_on_its_way(positions):
        time.sleep(0.2)  # the request travels and waits for a group thread
        coordinator_changed.clear()  # it arrived: the coordinator's sync clears the change, then reads
        return GroupSyncAnswer((), (), (), None, (), (), None)

    monkeypatch.setattr(member._link, "_ask", ask)
    monkeypatch.setattr(member, "_sync", sync_on_its_way)
    try:
        member._link.joined("m1")
        assert member.changed.wait(5), "the heartbeat told the member to sync"
        member.sync({})
        deadline = time.monotonic() + 5
        while asked[-1][0] != GROUP_HEARTBEAT_WAIT_MS and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.05)  # an answer "changed" to that long poll would have come by now
    finally:
        member._link.close()
    assert asked[-1] == (GROUP_HEARTBEAT_WAIT_MS, False), asked
    assert not member.changed.is_set(), "one change, one sync"
    assert [wait for wait, held in asked if held] == [GROUP_HEARTBEAT_WAIT_MS], "no heartbeat asked during the sync"


def test_a_join_traced_members_every_sync_is_a_sent_and_an_answered_row(monkeypatch, clock):
    """``sync_sent`` / ``synced`` (``mafka4.join_trace``): how often a join makes each member sync."""
    from mafka4.join_trace import JOIN_TRACES

    coordinator, fetcher = Coordinator({0: 100}), Fetcher()
    member = vp_member(monkeypatch, coordinator, fetcher)  # its join synced once, untraced
    JOIN_TRACES.start(TOPIC)  # as a bench starts it on its members just before a join
    try:
        for _ in range(2):
            coordinator.changed.set()  # the group changed: the next poll syncs
            member.poll(timeout_ms=0)
        rows = JOIN_TRACES.take(TOPIC)["rows"]
    finally:
        JOIN_TRACES.stop(TOPIC)
    assert coordinator.syncs == 3
    assert [(hop, who) for hop, _, who, _ in rows] == [("sync_sent", "m0"), ("synced", "m0")] * 2
    assert all(sent[1] <= answered[1] for sent, answered in zip(rows[::2], rows[1::2]))


def test_a_join_traced_member_stamps_when_it_learned_a_sealed_end_and_when_it_read_its_vp_to_it(monkeypatch, clock):
    """``sealed_learned`` / ``drained`` (``mafka4.join_trace``): of the wait between a parent's seal and
    its release, the part that was the member's backlog, and when it asked to release."""
    from mafka4.join_trace import JOIN_TRACES

    coordinator, fetcher = Coordinator({0: 100, 1: 40}, sealed={}, committed={0: 100, 1: 40}), Fetcher()
    member = vp_member(monkeypatch, coordinator, fetcher)
    JOIN_TRACES.start(TOPIC)
    try:
        coordinator.sealed = {0: 120}  # the parent's leader sealed it at 120; the member read to 100
        coordinator.changed.set()
        member.poll(timeout_ms=0)
        fetcher.next_read = {0: 120}  # its backlog
        member.poll(timeout_ms=0)
        member.poll(timeout_ms=0)
        rows = [(hop, detail) for hop, _, _, detail in JOIN_TRACES.take(TOPIC)["rows"]
                if hop not in ("sync_sent", "synced")]
    finally:
        JOIN_TRACES.stop(TOPIC)
    assert rows == [("sealed_learned", "0 sealed at 120, read to 100"), ("drained", "0")]


def test_a_member_whose_join_claimed_nothing_connects_ahead_to_the_read_nodes_and_one_that_claimed_does_not(
        monkeypatch, clock):
    from mafka4.limits import VP_CONNECTIONS_AHEAD_MAX

    waiting, fetcher = Coordinator({}), Fetcher()
    vp_member(monkeypatch, waiting, fetcher)
    assert fetcher.connected_ahead == [VP_CONNECTIONS_AHEAD_MAX], "a joiner waiting for its child"
    claiming, fetcher = Coordinator({0: 100}), Fetcher()
    vp_member(monkeypatch, claiming, fetcher)
    assert fetcher.connected_ahead == [], "its fetches open what it needs"


def test_a_sealed_end_learned_by_the_sync_that_released_its_vp_at_once_is_stamped_too(monkeypatch, clock):
    """An empty parent backlog: the first sync after the seal carries a position at the sealed end,
    and the coordinator releases the parent in it (revoked): the row says it was read to its end."""
    from mafka4.join_trace import JOIN_TRACES

    class Releasing(Coordinator):
        def sync(self, positions) -> MemberSync:
            synced = super().sync(positions)
            if self.sealed and positions.get(0, (0,))[0] >= self.sealed[0]:
                self.owned.discard(0)
                return MemberSync((0,), synced.claimed, {}, tuple(sorted(self.owned)), None, self.sealed,
                                  {**self.committed, 0: self.sealed[0]}, None)
            return synced

    coordinator, fetcher = Releasing({0: 100, 1: 40}, sealed={}, committed={0: 100, 1: 40}), Fetcher()
    member = vp_member(monkeypatch, coordinator, fetcher)
    fetcher.next_read = {0: 120}  # read to the cut before the seal
    member.poll(timeout_ms=0)
    JOIN_TRACES.start(TOPIC)
    try:
        coordinator.sealed = {0: 120}
        coordinator.changed.set()
        member.poll(timeout_ms=0)
        rows = [(hop, detail) for hop, _, _, detail in JOIN_TRACES.take(TOPIC)["rows"]
                if hop not in ("sync_sent", "synced")]
    finally:
        JOIN_TRACES.stop(TOPIC)
    assert member.assignment() == [1]
    assert rows == [("sealed_learned", "0 sealed at 120, read to 120")]
