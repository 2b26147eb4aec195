"""Both ends of a client connection have TCP keepalive on, so a peer that vanishes without closing
(its host lost, the network cut) is found by the kernel, with no Python running for an idle
connection.

The server is a real ``ClientPortServer`` with the group handlers, hosting fake members
(``test_group_sessions``); the client is a real ``ClientConnection``.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time

import pytest

from mafka4.frontend.group_handlers import GroupHandlers
from mafka4.limits import PROTOCOL_KEEPALIVE_IDLE_S, PROTOCOL_KEEPALIVE_INTERVAL_S, PROTOCOL_KEEPALIVE_PROBES
from mafka4.protocol.connection import ClientConnection
from mafka4.protocol.server import ClientPortServer

from tests.unit.test_group_sessions import Clock, FakeMember, sessions_with

HOST = "127.0.0.1"
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


async def until(condition, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"not within {WAIT_S} s: {what}"
        await asyncio.sleep(0.005)


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
