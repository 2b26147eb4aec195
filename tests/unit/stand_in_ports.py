"""Stand-in nodes on a real client port, for the tests of the clients' fetchers: no etcd, no Ray.

A stand-in node is an object with ``handlers()`` (the port's request handlers by ``ApiKey``) and
an ``address`` that ``stand_in_port`` sets once its port listens; user alice may connect to it.
What the fetcher tests share:

* ``stand_in_port``: the node on a port, with alice's ``ClusterAccess`` to it;
* ``client_of``: a client made on that access, closed at the end, and ``vp_fetcher_against``
  for the usual one, a ``VpFetcher`` of a Mafka4-mode topic;
* ``PairedLog``: the log of a node with a backlog of two-record batches, answering a fetch at
  once from its backlog or, past its end, after the fetch's wait; ``reads_come_to`` waits until
  such a node received a number of fetches (a fetch sent is received a moment later);
* ``LongPolling``: read node ``r1`` leading VPs 0 and 1 with nothing to read, holding each fetch;
* ``fetch_until``: polls a fetcher until the node saw what the test waits for.

Every wait is bounded (``WAIT_S``), generously: it is reached only when something is broken.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from typing import Callable, Iterator, TypeVar

from mafka4.client.bootstrap import Credential
from mafka4.client.cluster_access import ClusterAccess
from mafka4.client.loop_thread import LoopThread
from mafka4.client.vp_fetcher import VpFetcher
from mafka4.limits import ConsumerConfig, TopicConfig
from mafka4.metadata.endpoints import HostPort
from mafka4.physical.partition_state import TopicMetadata
from mafka4.protocol.messages import ApiKey
from mafka4.protocol.metadata_api import NodeInfo
from mafka4.protocol.server import ClientPortServer
from mafka4.protocol.vp_api import VpFetchAnswer, VpMetadataAnswer, VpReadAnswer, VpStateInfo
from mafka4.security.credentials import make_credential
from mafka4.security.scram import ScramServerExchange

TOPIC = "orders"
EPOCH = {"epoch": 0, "ranges": [[0, 1 << 64, 0]], "cut": [0], "parents": [], "children": [0]}
TWO_VPS = {"epoch": 0, "ranges": [[0, 1 << 63, 0], [1 << 63, 1 << 64, 1]], "cut": [0], "parents": [], "children": [0, 1]}
CREDENTIAL = make_credential("password-1", iterations=4096)
WAIT_S = 30

Client = TypeVar("Client")


def state(leader: str) -> str:
    """A VP state value led by ``leader``, its only replica."""
    return json.dumps({"range": [0, 1 << 64], "leader": leader, "leader_epoch": 1, "replicas": [leader],
                       "risr": [leader]})


async def _close_on_its_loop(server: ClientPortServer) -> None:
    server.close()


@contextlib.contextmanager
def stand_in_port(node) -> Iterator[tuple[ClientPortServer, ClusterAccess, LoopThread]]:
    """``node``'s handlers on a real client port (its ``address`` set), the access of user alice to
    it, and the port's loop; ``node.released``, if it has one, ends its waits at the end. The port
    is closed on its loop's thread (asyncio's ``Server`` is not thread-safe: closed from the test's,
    it raced the loop's own detaching of a closed connection), then the loop stops, its thread is
    joined and the loop is closed (``LoopThread.stop``)."""
    loop = LoopThread("test-port")
    try:
        server = ClientPortServer(node.handlers(), "stand-in read node r1", "r1", lambda mechanism: ScramServerExchange(
            lambda user: CREDENTIAL if user == "alice" else None))
        try:
            host, port = loop.run(server.start("127.0.0.1", 0))
            node.address = f"{host}:{port}"
            yield server, ClusterAccess((HostPort(host, port),), Credential("alice", "password-1")), loop
        finally:
            if hasattr(node, "released"):
                loop.call_soon(node.released.set)
            loop.run(_close_on_its_loop(server))
    finally:
        loop.stop()
        assert loop.loop.is_closed(), "the port's loop thread ended and its loop was closed"


@contextlib.contextmanager
def client_of(node, make: Callable[[ClusterAccess], Client]) -> Iterator[Client]:
    """The client ``make`` builds on alice's access to ``node`` (``stand_in_port``), closed at the end."""
    with stand_in_port(node) as (_, access, loop):
        client = make(access)
        try:
            yield client
        finally:
            client.close()
            loop.run(asyncio.sleep(0))  # the port's loop takes in the closed connections before it stops


def vp_fetcher_against(node, config: ConsumerConfig) -> contextlib.AbstractContextManager[VpFetcher]:
    """A ``VpFetcher`` of user alice whose only node is ``node``."""
    metadata = TopicMetadata(TOPIC, TopicConfig(partitions=1, read_mode="mafka4"), ())
    return client_of(node, lambda access: VpFetcher(access, metadata, config, "reader-1"))


class PairedLog:
    """A node's log of ``batches`` batches of two records (offsets 0, 1, 2, ...). ``reads``: each
    fetch's offset, in the order they came. A subclass answers in its protocol around ``batch_at``."""

    def __init__(self, batches: int):
        self.address, self.reads, self.end = "", [], 2 * batches

    async def batch_at(self, offset: int, wait_ms_max: int) -> int | None:
        """Records a fetch from ``offset``: the base of the batch holding it, at once, or None past
        the end, after the fetch's wait (nothing more will come)."""
        self.reads.append(offset)
        if offset >= self.end:
            await asyncio.sleep(wait_ms_max / 1000)
            return None
        return offset - offset % 2

    def values(self, base: int) -> list[bytes]:
        """The values of the batch at ``base``: ``m-<offset>``."""
        return [b"m-%d" % (base + i) for i in range(2)]


def reads_come_to(node, count: int) -> None:
    """Wait (bounded) until ``node`` received ``count`` fetches: a fetch sent is received a moment later."""
    deadline = time.monotonic() + WAIT_S
    while len(node.reads) < count and time.monotonic() < deadline:
        time.sleep(0.005)


def fetch_until(fetcher, done: Callable[[], object], timeout_s: float = 0.05) -> None:
    """Poll ``fetcher`` (each poll waiting up to ``timeout_s``) until ``done()`` is true, bounded."""
    deadline = time.monotonic() + WAIT_S
    while not done() and time.monotonic() < deadline:
        fetcher.fetch(timeout_s)


class LongPolling:
    """Read node ``r1`` leading VPs 0 and 1, with nothing to read: a fetch waits until ``release``
    (or its wait bound). ``requests``: the VPs of each fetch received; ``reads``: their (VP,
    offset) pairs; ``waits_ms``: their waits; ``waiting``: fetches not answered yet."""

    def __init__(self):
        self.address, self.requests, self.reads, self.waits_ms, self.waiting = "", [], [], [], 0
        self.released = asyncio.Event()

    def handlers(self) -> dict:
        return {ApiKey.VP_METADATA: self._metadata, ApiKey.VP_FETCH: self._fetch}

    async def _metadata(self, session, request, _buffers):
        states = tuple(VpStateInfo(vp, state("r1")) for vp in (0, 1))
        return VpMetadataAnswer(TOPIC, (json.dumps(TWO_VPS),), states, (NodeInfo("r1", "read", self.address),)), ()

    async def _fetch(self, session, request, _buffers):
        self.waiting += 1
        self.requests.append(sorted(read.vp for read in request.reads))
        self.reads.append([(read.vp, read.offset) for read in request.reads])
        self.waits_ms.append(request.wait_ms_max)
        try:
            await asyncio.wait_for(self.released.wait(), request.wait_ms_max / 1000)
        except asyncio.TimeoutError:
            pass
        finally:
            self.waiting -= 1
        return VpFetchAnswer(tuple(VpReadAnswer(b"", 0, 0, 0, None, None) for _ in request.reads)), ()
