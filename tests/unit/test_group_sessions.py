"""A coordinator's member sessions (``frontend.group_sessions``) and its choice of coordinator.

The members are fakes standing in for the group protocol on etcd (which the integration tests
run): what is checked here is the session's life: calls in order, heartbeats, expiry, leaving.
"""

from __future__ import annotations

import asyncio
import threading

import pytest

from mafka4.errors import CoordinatorUnavailable, UnknownMember
from mafka4.frontend.group_handlers import coordinator_of
from mafka4.frontend.group_sessions import GroupSessions
from mafka4.limits import ConsumerConfig
from mafka4.protocol.group_api import GroupCommitAnswer, GroupJoinAnswer, GroupSyncAnswer


class FakeMember:
    def __init__(self, member_id: str, changed: threading.Event, leave_fails: bool = False):
        self.member_id, self.changed, self.calls, self._leave_fails = member_id, changed, [], leave_fails

    def join(self):
        self.calls.append("join")
        return GroupJoinAnswer(self.member_id, False, ())

    def sync(self, positions):
        self.calls.append("sync")
        self.changed.clear()
        return GroupSyncAnswer((), (), (), None, (), (), None)

    def commit(self, positions):
        self.calls.append("commit")
        return GroupCommitAnswer((), ())

    def leave(self, positions):
        self.calls.append(("leave", positions))
        if self._leave_fails:
            raise CoordinatorUnavailable("etcd is away")

    def seed(self, offsets):
        return True


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def sessions_with(members: list[FakeMember], clock: Clock | None = None, leave_fails: bool = False) -> GroupSessions:
    def host(group, info, config, changed):
        member = FakeMember(info.member_id, changed, leave_fails)
        members.append(member)
        return member

    return GroupSessions("127.0.0.1:1", "c", "n0", host=host, clock=clock or Clock())


def run(coroutine):
    return asyncio.run(coroutine)


CONFIG = ConsumerConfig(member_lease_ttl_s=10)


def test_a_member_joins_and_its_calls_run_on_its_session_in_order():
    members: list[FakeMember] = []

    async def scenario():
        sessions = sessions_with(members)
        joined = await sessions.join("alice", "g", "t", "range", CONFIG)
        await sessions.call("alice", "g", joined.member_id, lambda m: m.sync(()))
        await sessions.call("alice", "g", joined.member_id, lambda m: m.commit(()))
        await sessions.leave("alice", "g", joined.member_id, lambda m: m.leave(()))
        return joined, len(sessions)

    joined, left = run(scenario())
    assert joined.member_id == members[0].member_id
    assert members[0].calls == ["join", "sync", "commit", ("leave", ())]
    assert left == 0


def test_a_join_traced_sync_is_stamped_on_arrival_before_it_waits_for_the_members_previous_call():
    """``sync_arrived`` (``mafka4.join_trace``): a sync queued behind the member's running call is
    stamped when it reached the port, so a trace tells that wait from the step's own time."""
    from mafka4.join_trace import JOIN_TRACES

    members: list[FakeMember] = []
    running = threading.Event()
    go_on = threading.Event()

    def held_commit(member):
        running.set()
        go_on.wait(30)
        return member.commit(())

    async def scenario():
        sessions = sessions_with(members)
        joined = await sessions.join("alice", "g", "t", "range", CONFIG)
        JOIN_TRACES.take("t")  # the join's own rows
        commit = asyncio.ensure_future(sessions.call("alice", "g", joined.member_id, held_commit))
        await asyncio.get_running_loop().run_in_executor(None, running.wait, 30)
        sync = asyncio.ensure_future(sessions.call("alice", "g", joined.member_id, lambda m: m.sync(()),
                                                   arrived="sync_arrived"))
        await asyncio.sleep(0)
        rows = JOIN_TRACES.take("t")["rows"]
        go_on.set()
        await commit, await sync
        return joined.member_id, rows

    JOIN_TRACES.start("t")
    try:
        member_id, rows = run(scenario())
    finally:
        JOIN_TRACES.stop("t")
    assert [(hop, who) for hop, _, who, _ in rows] == [("sync_arrived", member_id)]
    assert members[0].calls == ["join", "commit", "sync"]


@pytest.mark.parametrize("principal, group, known", [("mallory", "g", True), ("alice", "other", True),
                                                     ("alice", "g", False)])
def test_a_session_answers_only_its_principal_its_group_and_its_id(principal, group, known):
    members: list[FakeMember] = []

    async def scenario():
        sessions = sessions_with(members)
        joined = await sessions.join("alice", "g", "t", "range", CONFIG)
        member_id = joined.member_id if known else "not-a-member"
        with pytest.raises(UnknownMember, match="join the group again"):
            await sessions.call(principal, group, member_id, lambda m: m.sync(()))

    run(scenario())
    assert members[0].calls == ["join"]


def test_a_heartbeat_answers_at_once_when_the_member_should_sync_and_waits_otherwise():
    members: list[FakeMember] = []

    async def scenario():
        sessions = sessions_with(members)
        joined = await sessions.join("alice", "g", "t", "range", CONFIG)
        quiet = await sessions.heartbeat("alice", "g", joined.member_id, 0.01)
        members[0].changed.set()
        at_once = await sessions.heartbeat("alice", "g", joined.member_id, 60)
        await sessions.call("alice", "g", joined.member_id, lambda m: m.sync(()))
        # A change from another thread (a watch, the lease thread) ends a waiting heartbeat.
        threading.Timer(0.05, members[0].changed.set).start()
        woken = await asyncio.wait_for(sessions.heartbeat("alice", "g", joined.member_id, 60), 30)
        return quiet, at_once, woken

    assert run(scenario()) == (False, True, True)


def test_a_session_without_requests_for_its_timeout_ends_releasing_without_a_commit():
    members: list[FakeMember] = []
    clock = Clock()

    async def scenario():
        sessions = sessions_with(members, clock)
        joined = await sessions.join("alice", "g", "t", "range", CONFIG)
        clock.now += 9
        kept = await sessions.expire()
        clock.now += 2  # 11 s since the last request: more than the 10 s session timeout
        ended = await sessions.expire()
        with pytest.raises(UnknownMember):
            await sessions.heartbeat("alice", "g", joined.member_id, 0)
        return joined.member_id, kept, ended

    member_id, kept, ended = run(scenario())
    assert (kept, ended) == ([], [member_id])
    assert members[0].calls == ["join", ("leave", ())]


def test_a_session_is_not_ended_while_a_heartbeat_waits_on_it():
    members: list[FakeMember] = []
    clock = Clock()

    async def scenario():
        sessions = sessions_with(members, clock)
        joined = await sessions.join("alice", "g", "t", "range", CONFIG)
        waiting = asyncio.ensure_future(sessions.heartbeat("alice", "g", joined.member_id, 60))
        await asyncio.sleep(0.01)
        clock.now += 60
        ended = await sessions.expire()
        members[0].changed.set()
        return ended, await asyncio.wait_for(waiting, 30), len(sessions)

    assert run(scenario()) == ([], True, 1)


def test_a_leave_that_fails_still_ends_the_session_and_closing_leaves_for_every_member():
    members: list[FakeMember] = []

    async def scenario():
        sessions = sessions_with(members, leave_fails=True)
        first = await sessions.join("alice", "g", "t", "range", CONFIG)
        await sessions.join("bob", "g", "t", "range", CONFIG)
        with pytest.raises(CoordinatorUnavailable):
            await sessions.leave("alice", "g", first.member_id, lambda m: m.leave(()))
        remaining = len(sessions)
        sessions.close()
        return remaining, len(sessions)

    assert run(scenario()) == (1, 0)
    assert [m.calls[-1] for m in members] == [("leave", ()), ("leave", ())]


def test_a_group_s_coordinator_is_one_of_the_candidates_and_moves_only_with_its_node():
    nodes = [(f"node-{i}", f"127.0.0.1:{9000 + i}") for i in range(5)]
    groups = [f"group-{i}" for i in range(200)]
    before = {group: coordinator_of(group, nodes) for group in groups}
    assert set(before.values()) == set(nodes)  # 200 groups spread over all five
    assert before == {group: coordinator_of(group, list(reversed(nodes))) for group in groups}
    after = {group: coordinator_of(group, nodes[1:]) for group in groups}
    moved = {group for group in groups if after[group] != before[group]}
    assert moved == {group for group in groups if before[group] == nodes[0]}
    assert coordinator_of("g", []) is None
