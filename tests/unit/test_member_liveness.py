"""A group member's liveness on a real client port: its connection's, not its heartbeats' count.

A member is alive while its heartbeat waits on an open connection, however long it waits; when
that connection is lost (the member's process died and its kernel closed the socket, or TCP
keepalive found its host gone) the port cancels the heartbeat and the session ends its timeout
later. A member that sends nothing at all still expires. Both ends of a client connection have
TCP keepalive on, so a peer that vanishes without closing is found by the kernel.

The coordinator is a real ``ClientPortServer`` with the group handlers, hosting fake members
(``test_group_sessions``) on a clock the test moves; the member is a real ``ClientConnection``.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import time

import pytest

from mafka4.errors import StreamLost, UnknownMember
from mafka4.frontend.group_handlers import GroupHandlers
from mafka4.limits import (GROUP_HEARTBEAT_WAIT_MS, PROTOCOL_KEEPALIVE_IDLE_S, PROTOCOL_KEEPALIVE_INTERVAL_S,
                           PROTOCOL_KEEPALIVE_PROBES)
from mafka4.protocol.connection import ClientConnection
from mafka4.protocol.group_api import GroupHeartbeatRequest, GroupJoinRequest
from mafka4.protocol.server import ClientPortServer

from tests.unit.test_group_sessions import Clock, FakeMember, sessions_with

HOST = "127.0.0.1"
SESSION_TIMEOUT_S = 10
WAIT_S = 10  # a safety net for a test that would otherwise hang; nothing waits this long when it passes


@contextlib.asynccontextmanager
async def coordinator(clock: Clock, members: list[FakeMember]):
    sessions = sessions_with(members, clock)

    async def no_view():
        raise AssertionError("FIND_COORDINATOR is not asked here")

    server = ClientPortServer(GroupHandlers(sessions, no_view, lambda *check: None).handlers(), "coordinator", "r0",
                              None)
    _, port = await server.start(HOST)
    try:
        yield server, sessions, port
    finally:
        server.close()
        sessions.close()


async def joined(port: int) -> tuple[ClientConnection, str]:
    connection = await ClientConnection.open(HOST, port, None)
    answer, _ = await connection.call(GroupJoinRequest("g", "t", "range", SESSION_TIMEOUT_S * 1000, 60_000))
    return connection, answer.member_id


async def until(condition, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"not within {WAIT_S} s: {what}"
        await asyncio.sleep(0.005)


def drop(connection: ClientConnection, how: str) -> None:
    """End ``connection`` as a process that dies does: its kernel closes the socket (``fin``), or
    resets it (``reset``: data unread, or a linger of 0)."""
    transport = connection._protocol._transport
    if how == "reset":
        transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()


@pytest.mark.parametrize("how", ["fin", "reset"])
def test_a_waiting_heartbeat_keeps_its_session_until_its_connection_is_lost_then_the_timeout_runs(how):
    clock, members = Clock(), []

    async def scenario():
        async with coordinator(clock, members) as (server, sessions, port):
            connection, member_id = await joined(port)
            heartbeat = asyncio.ensure_future(connection.call(GroupHeartbeatRequest("g", member_id,
                                                                                    GROUP_HEARTBEAT_WAIT_MS)))
            session = sessions._sessions[member_id]
            await until(lambda: session.calls == 1, "the heartbeat waits at the coordinator")
            clock.now += 6 * SESSION_TIMEOUT_S
            assert await sessions.expire() == [], "a member is alive while its heartbeat waits"
            drop(connection, how)
            await until(lambda: server.counters["connections_open"] == 0, "the coordinator saw the connection lost")
            await until(lambda: session.calls == 0, "the cancelled heartbeat ended")
            clock.now += SESSION_TIMEOUT_S - 1
            kept = await sessions.expire()
            clock.now += 2
            ended = await sessions.expire()
            with pytest.raises(StreamLost):
                await heartbeat
            return member_id, kept, ended

    member_id, kept, ended = asyncio.run(scenario())
    assert kept == [], "a member whose connection broke may connect again within its session timeout"
    assert ended == [member_id]
    assert members[0].calls == ["join", ("leave", ())], "released without a commit"


def test_a_member_that_sends_nothing_expires_though_its_connection_stays_open():
    clock, members = Clock(), []

    async def scenario():
        async with coordinator(clock, members) as (server, sessions, port):
            connection, member_id = await joined(port)
            clock.now += SESSION_TIMEOUT_S + 1
            ended = await sessions.expire()
            with pytest.raises(UnknownMember, match="join the group again"):
                await connection.call(GroupHeartbeatRequest("g", member_id, 0))
            connection.close()
            return member_id, ended

    member_id, ended = asyncio.run(scenario())
    assert ended == [member_id]


def keepalive_of(sock) -> tuple[int, ...]:
    return (sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) != 0,
            sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE),
            sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL),
            sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT))


@pytest.mark.skipif(not hasattr(socket, "TCP_KEEPIDLE"), reason="the keepalive times are Linux's options")
def test_both_ends_of_a_client_connection_have_tcp_keepalive_within_the_stated_bound():
    async def scenario():
        async with coordinator(Clock(), []) as (server, sessions, port):
            connection = await ClientConnection.open(HOST, port, None)
            await until(lambda: server._connections, "the coordinator accepted the connection")
            served, = server._connections
            ends = (keepalive_of(connection._protocol._transport.get_extra_info("socket")),
                    keepalive_of(served.protocol._transport.get_extra_info("socket")))
            connection.close()
            return ends

    expected = (True, PROTOCOL_KEEPALIVE_IDLE_S, PROTOCOL_KEEPALIVE_INTERVAL_S, PROTOCOL_KEEPALIVE_PROBES)
    assert asyncio.run(scenario()) == (expected, expected)
