"""A group member's link to its coordinator: the calls of its session, and its heartbeat.

The coordinator of a group is the node ``FIND_COORDINATOR`` names (any node answers it). The
link keeps one connection to it; a call that finds the connection broken, or not answered in
``GROUP_CALL_TIMEOUT_S``, forgets the coordinator, so the next call finds it again (another
node, if it died: the member's session died with it, and the member joins again when told
``UnknownMember``, ``client.remote_member``).

The heartbeat runs on the client loop, not on a thread of its own. While the member has no sync
pending it is a long poll (``GROUP_HEARTBEAT`` waiting ``GROUP_HEARTBEAT_WAIT_MS``, 30 s),
answered as soon as the coordinator has a change for the member: then it sets ``changed``,
which the consumer's ``poll()`` reads. The coordinator counts the member alive while that poll
waits on an open connection (``frontend.group_sessions``), so the wait can be much longer than
the session timeout: an idle member sends a heartbeat every 30 s. A dead peer is noticed by its
connection, not by the wait: a coordinator process that dies closes it at once; a host that
vanished is found by TCP keepalive within ``PROTOCOL_PEER_SILENT_S_MAX`` (``protocol.connection``);
only a coordinator that hangs with its connections open is noticed by the call's timeout, the
wait plus ``PROTOCOL_ANSWER_MARGIN_S``. While a sync is pending (``changed`` set, the consumer
not polled yet) or under way (``syncing`` .. ``synced``), the coordinator would answer at once,
so the heartbeat only keeps the session alive, a bare one every third of the session timeout,
until the consumer's sync was answered (``synced``): a consumer that does not poll costs the
coordinator nothing but those. Not before the answer: the coordinator clears the member's
change only when the sync reaches it, so a long poll sent while the sync is on its way would be
answered "changed" for the very change that sync handles, and the consumer would sync twice
for each change, the second time on the poll that should have returned its first messages.
A change the coordinator sees once the sync began sets the change again there, and the long
poll sent after the answer returns at once. A failed heartbeat sets
``changed`` too: the consumer's next sync finds out what happened. After an ``UnknownMember``
(the session is gone) the heartbeat sends nothing and wakes for nothing until the consumer
joined again (``joined``).

Imports neither ``ray`` nor ``etcd3``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from typing import Callable

from mafka4.client.client_loop import client_loop
from mafka4.client.cluster_access import ClusterAccess
from mafka4.client.node_links import NodeLinks
from mafka4.clocks import wall_ms_fine
from mafka4.errors import MafkaError, RequestTimedOut, StreamLost, UnknownMember
from mafka4.limits import (GROUP_CALL_TIMEOUT_S, GROUP_HEARTBEAT_WAIT_MS, GROUP_RETRY_BACKOFF_S,
                           PROTOCOL_ANSWER_MARGIN_S)
from mafka4.protocol.group_api import FindCoordinatorAnswer, FindCoordinatorRequest, GroupHeartbeatRequest
from mafka4.waking_event import SetFuture


class GroupLink:
    def __init__(self, access: ClusterAccess, group: str, session_timeout_s: float, links: NodeLinks | None = None):
        """``links``: connections shared with the member's fetcher (its consumer closes them); else its own."""
        self.group = group
        self._changed = SetFuture()
        self.changed = self._changed.event
        self.member_id = ""  # the session's, once joined
        self._keep_alive_s = session_timeout_s / 3  # while a sync is pending; see the module docstring
        self._loop = client_loop()
        self._links = NodeLinks(access) if links is None else links
        self._owns_links = links is None
        self._coordinator: str | None = None
        self._heartbeats: concurrent.futures.Future | None = None
        self._synced = asyncio.Event()  # set when the consumer's sync was answered: see ``synced``
        self._syncing = False  # from ``syncing`` to ``synced`` (written by the consumer's thread)
        self._rejoined = asyncio.Event()  # set when the consumer joined again: see ``joined``
        self._closed = False
        self.found_ms = 0.0  # wall clock when FIND_COORDINATOR last answered (a join trace's stamp)

    def call(self, make_request: Callable[[str], object]) -> object:
        """The coordinator's answer to ``make_request(member_id)``, from the consumer's thread."""
        request = make_request(self.member_id)
        return self._loop.run(self._ask(request, GROUP_CALL_TIMEOUT_S), GROUP_CALL_TIMEOUT_S + PROTOCOL_ANSWER_MARGIN_S)

    def woken(self) -> concurrent.futures.Future:
        """A future done once ``changed`` is set: a consumer waits on it beside its fetches."""
        return self._changed.future()

    def joined(self, member_id: str) -> None:
        """The session is ``member_id``'s now: heartbeat for it (starting the heartbeats once)."""
        self.member_id = member_id
        if self._heartbeats is None:
            self._heartbeats = self._loop.submit(self._heartbeat())
        else:
            self._loop.call_soon(self._rejoined.set)

    def close(self) -> None:
        """Stop heartbeating and close the connections (the session is left or expires)."""
        self._closed = True
        self._loop.run(self._stop())

    async def _stop(self) -> None:
        if self._heartbeats is not None:
            self._heartbeats.cancel()
        if self._owns_links:
            self._links.close()

    async def _ask(self, request: object, timeout_s: float) -> object:
        address = self._coordinator or await self._find()
        try:
            connection = await self._links.connection(address)
            answer, _ = await connection.call(request, timeout_s=timeout_s)
        except (StreamLost, RequestTimedOut):
            self._links.forget(address)
            self._coordinator = None
            raise
        return answer

    async def _find(self) -> str:
        answer = await self._links.ask_any(FindCoordinatorRequest(self.group))
        assert isinstance(answer, FindCoordinatorAnswer)
        self._coordinator = answer.address
        self.found_ms = wall_ms_fine()
        return answer.address

    def syncing(self) -> None:
        """The consumer is about to clear ``changed`` and sync (from its thread): until ``synced``, the
        heartbeat sends no long poll (see the module docstring)."""
        self._syncing = True

    def synced(self) -> None:
        """The consumer's sync was answered, or failed (from its thread): the heartbeat long-polls again."""
        self._syncing = False
        self._loop.call_soon(self._synced.set)

    def _sync_due(self) -> bool:
        # ``syncing`` is set before ``changed`` is cleared, so from a change to its sync's answer
        # one of the two always holds.
        return self.changed.is_set() or self._syncing

    async def _heartbeat(self) -> None:
        while not self._closed:
            member_id = self.member_id
            wait_ms = GROUP_HEARTBEAT_WAIT_MS
            if self._sync_due():  # a sync pending or under way: only keep the session alive until answered
                self._synced.clear()
                if not self._sync_due():
                    continue
                try:
                    await asyncio.wait_for(self._synced.wait(), self._keep_alive_s)
                    continue
                except asyncio.TimeoutError:
                    wait_ms = 0
            try:
                answer = await self._ask(GroupHeartbeatRequest(self.group, member_id, wait_ms),
                                         wait_ms / 1000 + PROTOCOL_ANSWER_MARGIN_S)
            except UnknownMember:
                self.changed.set()
                await self._until_joined_again(member_id)
                continue
            except MafkaError:
                self.changed.set()
                await asyncio.sleep(GROUP_RETRY_BACKOFF_S)
                continue
            if answer.changed:
                self.changed.set()

    async def _until_joined_again(self, lost_member_id: str) -> None:
        """Until the consumer joined with a new member id (its next poll's sync does): a session
        that is gone has nothing to keep alive, and ``joined`` wakes this."""
        while True:
            self._rejoined.clear()  # before the check, so a join after it sets it again
            if self.member_id != lost_member_id or self._closed:
                return
            await self._rejoined.wait()
