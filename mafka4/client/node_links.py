"""A client's connections to the cluster's ports: one per address, and one kept to any node.

- ``connection(address)``: an authenticated connection to that port (a partition leader's, a
  read node's), opened on first use, once however many calls wait for it, and again after it
  broke; ``forget`` closes one whose peer is gone or moved.
- ``ask_any(request)``: a request any node answers (metadata), over a connection kept to the
  first node that answered. The nodes tried are the bootstrap nodes first, then every node an
  answer named (``learn``), so a client follows the cluster by the answers it gets; a kept
  connection that broke since its last use is replaced once before the call fails.

Everything here runs on one event loop (the client's loop thread). Imports neither ``ray`` nor ``etcd3``.
"""

from __future__ import annotations

import asyncio
from typing import Callable, Iterable

from mafka4.client.cluster_access import ClusterAccess
from mafka4.client.node_connection import connect_any, connect_to
from mafka4.errors import RequestTimedOut, StreamLost
from mafka4.limits import PROTOCOL_METADATA_TIMEOUT_S
from mafka4.metadata.endpoints import HostPort, parse_endpoints
from mafka4.protocol.connection import ClientConnection
from mafka4.protocol.metadata_api import NodeInfo

# Loop steps a cancelled call takes to end: the cancel, then ``wait_for`` cancelling its answer.
_CANCELLED_CALL_STEPS = 3


class NodeLinks:
    def __init__(self, access: ClusterAccess, on_open: Callable[[str], None] | None = None):
        """``on_open(address)`` is called as each connection ``connection`` opened is ready."""
        self.access = access
        self._on_open = on_open
        self._nodes: tuple[HostPort, ...] = access.nodes
        self._any: ClientConnection | None = None
        self._connections: dict[str, ClientConnection] = {}
        self._opening: dict[str, asyncio.Future] = {}

    async def connection(self, address: str) -> ClientConnection:
        """The open connection to ``address`` (host:port); ``StreamLost``/``RequestTimedOut`` if it does not answer."""
        connection = self._connections.get(address)
        if connection is not None and not connection.closed:
            return connection
        opening = self._opening.get(address)
        if opening is None:
            opening = self._opening[address] = asyncio.ensure_future(self._open(address))
            opening.add_done_callback(lambda _: self._opening.pop(address, None))
        return await asyncio.shield(opening)

    async def _open(self, address: str) -> ClientConnection:
        host_port = parse_endpoints(address, what="a node's client address")[0]
        connection = await connect_to(host_port, self.access.credential)
        self._connections[address] = connection
        if self._on_open is not None:
            self._on_open(address)
        return connection

    def forget(self, address: str) -> None:
        connection = self._connections.pop(address, None)
        if connection is not None:
            connection.close()

    async def ask_any(self, request: object) -> object:
        """The answer of any node to ``request``; see the module docstring."""
        for attempt in range(2):
            if self._any is None or self._any.closed:
                self._any = await connect_any(self._nodes, self.access.credential)
            try:
                answer, _ = await self._any.call(request, timeout_s=PROTOCOL_METADATA_TIMEOUT_S)
                return answer
            except (StreamLost, RequestTimedOut):
                self._any.close()
                self._any = None
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def learn(self, nodes: Iterable[NodeInfo]) -> None:
        """Remember the nodes an answer named, after the bootstrap nodes, for the next reconnect."""
        named = [parse_endpoints(node.address, what=f"the client address of {node.node_id}")[0]
                 for node in nodes if node.address]
        self._nodes = tuple(dict.fromkeys((*self.access.nodes, *named)))

    async def close_after_cancelled(self) -> None:
        """Close every connection once the calls cancelled just before (a fetcher's fetches out) ended, so
        that none of them fails with ``StreamLost`` after its caller stopped listening."""
        for _ in range(_CANCELLED_CALL_STEPS):
            await asyncio.sleep(0)
        self.close()

    def close(self) -> None:
        for address in list(self._connections):
            self.forget(address)
        if self._any is not None:
            self._any.close()
            self._any = None
