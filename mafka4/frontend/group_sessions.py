"""A coordinator's member sessions: the consumer groups' members it hosts, their heartbeats and expiry.

Every node's port can coordinate groups (``FIND_COORDINATOR`` sends each group's members to one
node, ``frontend.group_handlers``). A member joins with ``join`` and gets a session, named by its
member id; the group protocol's steps then run here, in the coordinator's process, against etcd
(``frontend.hosted_members``), no longer in the consumer's.

- **One call at a time per member.** A session's steps run off the event loop on a small pool
  of threads (they block on etcd), one after another (the session's lock), as they ran in the
  consumer's thread before.
- **Heartbeats.** ``heartbeat`` is a long poll: it returns as soon as the member's ``changed``
  is set (by the group's watch, a lost race, the hub's lease thread after a watch broke) or
  after ``wait`` (an idle member asks for ``GROUP_HEARTBEAT_WAIT_MS``, 30 s). While it waits it
  is a request in progress, and a session is never expired under one: a member is alive while
  its heartbeat waits on an open connection, as a consumer is while its connection is, in
  Pulsar and RocketMQ. The wait only paces idle members. Every request refreshes the session.
- **Expiry.** A session ends its session timeout after its last request ended, with none in
  progress: its member leaves without committing (the member is gone; delivery stays
  at-least-once), which releases what it owned at once. This covers a member that sends
  nothing, and a dead one: when the connection a heartbeat waits on is lost (the member's
  process died and its kernel closed the socket, or TCP keepalive found its host gone, within
  ``PROTOCOL_PEER_SILENT_S_MAX``), the port cancels the heartbeat, which ends as any request
  does, so the timeout runs from the loss. Not at once: a member that lives (a connection reset,
  or closed by the member because a call of its own timed out) connects again within the
  timeout and keeps its session and what it owns. A member that stops syncing after a change
  is dropped from the group by the protocol's own rebalance timeout, as before.
- **Closing** the port ends every session, leaving the group for each (bounded in time: a
  member whose leave does not finish loses its lease when the lease's TTL runs out).

``UnknownMember`` answers a request for a session that is not here, or that another principal
opened: the member joins again.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Callable, TypeVar

from mafka4.clocks import wall_ms_fine
from mafka4.coordinator.groups.partition_protocol import MemberInfo
from mafka4.errors import MafkaError, UnknownMember
from mafka4.frontend.hosted_members import GroupStores, HostedMember, hosted_member
from mafka4.join_trace import JOIN_TRACES
from mafka4.limits import GROUP_SESSION_CLOSE_WAIT_S, GROUP_SESSION_THREADS, ConsumerConfig
from mafka4.waking_event import WakingEvent

logger = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(eq=False)
class MemberSession:
    group: str
    principal: str
    timeout_s: float
    topic: str = ""  # the member's: its join trace's rows name it (``mafka4.join_trace``)
    member: HostedMember | None = None  # set once joined
    seen_at: float = field(default_factory=time.monotonic)
    # Requests in progress: a session is never expired under one. Each ends, by its answer or
    # cancelled with its connection, before the session's timeout starts again.
    calls: int = 0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    # The member's heartbeat while it waits for the member to have to sync. A bare future and a
    # timer, not asyncio.wait_for on an Event: a thousand idle members send 300 heartbeats a
    # second, and wait_for's task per call was a fifth of a coordinator's work for each.
    parked: asyncio.Future | None = None

    def expired(self, now: float) -> bool:
        return self.calls == 0 and now - self.seen_at > self.timeout_s

    def wake(self) -> None:
        """The member should sync: its parked heartbeat answers now (on the loop)."""
        _answer(self.parked)

    async def park(self, wait_s: float) -> None:
        """Until ``wake`` or ``wait_s`` passed."""
        loop = asyncio.get_running_loop()
        parked = self.parked = loop.create_future()
        timer = loop.call_later(wait_s, _answer, parked)
        try:
            await parked
        finally:
            timer.cancel()
            if self.parked is parked:
                self.parked = None


def _answer(parked: asyncio.Future | None) -> None:
    if parked is not None and not parked.done():
        parked.set_result(None)


# Makes the host of a joining member: (group, member, config, its ``changed`` event) -> the member.
HostFactory = Callable[[str, MemberInfo, ConsumerConfig, threading.Event], HostedMember]


class GroupSessions:
    """The member sessions this node coordinates; see the module docstring.

    ``host`` makes each member's host (a test's own; by default the group protocol on the
    cluster's etcd at ``etcd_endpoint``)."""

    def __init__(self, etcd_endpoint: str, cluster: str, name: str, host: HostFactory | None = None,
                 clock: Callable[[], float] = time.monotonic):
        """``name``: the node's, for logs."""
        self._stores = GroupStores(etcd_endpoint, cluster, name)
        self._host: HostFactory = host or (lambda group, info, config, changed: hosted_member(
            self._stores, group, info, config, changed))
        self._clock = clock
        self._sessions: dict[str, MemberSession] = {}
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._reaper: asyncio.Task | None = None

    def __len__(self) -> int:
        return len(self._sessions)

    def hosts(self, member_id: str) -> bool:
        """Whether the session of ``member_id`` is here (joined, not left nor expired)."""
        return member_id in self._sessions

    async def join(self, principal: str, group: str, topic: str, assignor: str, config: ConsumerConfig,
                   lanes: tuple[str, ...] = ()):
        """A new session in ``group`` reading ``lanes`` (checked: ``names.validate_reader_lanes``); the
        member's ``GroupJoinAnswer``."""
        received_ms = wall_ms_fine()
        self._start_reaper()
        loop = asyncio.get_running_loop()
        member_id = uuid.uuid4().hex[:12]
        session = MemberSession(group, principal, config.member_lease_ttl_s, topic)

        def wake() -> None:
            JOIN_TRACES.record(topic, "woken", member_id)
            loop.call_soon_threadsafe(session.wake)

        changed = WakingEvent(wake)
        info = MemberInfo(member_id, topic, assignor, lanes)

        def join():
            member = self._host(group, info, config, changed)
            try:
                return member, member.join()
            except BaseException:
                _leave_quietly(member)
                raise

        session.calls += 1
        try:
            session.member, answer = await self._run(join)
        finally:
            session.calls -= 1
        JOIN_TRACES.record(topic, "join_received", member_id, ms=received_ms)
        JOIN_TRACES.record(topic, "coordinator_join", member_id)
        session.seen_at = self._clock()
        self._sessions[member_id] = session
        logger.info("group %s: member %s of %s joined (%s, topic %s)", group, member_id, principal, assignor, topic)
        return answer

    async def call(self, principal: str, group: str, member_id: str, step: Callable[[HostedMember], T],
                   arrived: str | None = None) -> T:
        """``step`` of the member's session, run off the loop after the member's previous call.
        ``arrived``: the join trace's row stamped now, before the step waits for that call and a thread."""
        session = self._session(principal, group, member_id)
        if arrived is not None:
            JOIN_TRACES.record(session.topic, arrived, member_id)
        session.calls += 1
        try:
            async with session.lock:
                return await self._run(lambda: step(session.member))
        finally:
            session.calls -= 1
            session.seen_at = self._clock()

    async def leave(self, principal: str, group: str, member_id: str, step: Callable[[HostedMember], None]) -> None:
        """Run ``step`` (the member's leave) and end the session, even if the step failed."""
        try:
            await self.call(principal, group, member_id, step)
        finally:
            self._sessions.pop(member_id, None)
            logger.info("group %s: member %s left", group, member_id)

    async def heartbeat(self, principal: str, group: str, member_id: str, wait_s: float) -> bool:
        """Whether the member should sync: at once if so, else once it should or ``wait_s`` passed.
        Cancelled (its connection lost), it ends as an answered one does: the timeout runs from then."""
        session = self._session(principal, group, member_id)
        session.calls += 1
        try:
            assert session.member is not None
            if not session.member.changed.is_set():
                # A wake queued on the loop before this line runs after it, and answers at once.
                await session.park(wait_s)
            return session.member.changed.is_set()
        finally:
            session.calls -= 1
            session.seen_at = self._clock()

    def _session(self, principal: str, group: str, member_id: str) -> MemberSession:
        session = self._sessions.get(member_id)
        if session is None or session.group != group or session.principal != principal:
            raise UnknownMember(f"group {group!r} has no session of member {member_id!r} on this coordinator (it "
                                f"expired, or the coordinator restarted): join the group again")
        session.seen_at = self._clock()
        return session

    async def _run(self, work: Callable[[], T]) -> T:
        if self._executor is None:
            self._executor = concurrent.futures.ThreadPoolExecutor(GROUP_SESSION_THREADS, "group-sessions")
        return await asyncio.get_running_loop().run_in_executor(self._executor, work)

    # --- expiry ---------------------------------------------------------------------------------

    def _start_reaper(self) -> None:
        if self._reaper is None or self._reaper.done():
            self._reaper = asyncio.get_running_loop().create_task(self._reap())

    async def _reap(self) -> None:
        while self._sessions:
            await asyncio.sleep(1.0)
            await self.expire()

    async def expire(self) -> list[str]:
        """End the sessions without a request for their timeout (each leaves without a commit); their ids."""
        now = self._clock()
        expired = [(member_id, s) for member_id, s in self._sessions.items() if s.expired(now)]
        for member_id, session in expired:
            del self._sessions[member_id]
            logger.warning("group %s: member %s sent nothing for %.0f s; its session ended and what it owned is "
                           "released", session.group, member_id, session.timeout_s)
            member = session.member
            assert member is not None
            try:
                await self._run(lambda: member.leave(()))
            except MafkaError as error:  # etcd away: the member's lease runs out instead
                logger.warning("group %s: member %s did not leave cleanly: %s", session.group, member_id, error)
        return [member_id for member_id, _ in expired]

    def close(self) -> None:
        """End every session (each member leaves the group without a commit), within a bounded wait."""
        if self._reaper is not None:
            self._reaper.cancel()
        sessions, self._sessions = list(self._sessions.values()), {}
        members = [s.member for s in sessions if s.member is not None]
        if members:
            closing = concurrent.futures.ThreadPoolExecutor(len(members), "group-sessions-close")
            done, not_done = concurrent.futures.wait([closing.submit(_leave_quietly, m) for m in members],
                                                     GROUP_SESSION_CLOSE_WAIT_S)
            if not_done:
                logger.warning("%d group members did not leave within %.0f s; their leases run out instead",
                               len(not_done), GROUP_SESSION_CLOSE_WAIT_S)
            closing.shutdown(wait=False)
        if self._executor is not None:
            self._executor.shutdown(wait=False)
        self._stores.close()


def _leave_quietly(member: HostedMember) -> None:
    try:
        member.leave(())
    except MafkaError as error:
        logger.warning("member %s did not leave cleanly: %s", member.member_id, error)
