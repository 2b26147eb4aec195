"""A replica's client port against a real etcd: PRODUCE, FETCH and LIST_OFFSETS reach the replica
only for an authorized principal and for the replica's own partition; METADATA is answered too.

No Ray: the replica is a stand-in that records what the port hands it (the real one is
``physical.actor.PhysicalPartition``, which the integration suite runs).
"""

from __future__ import annotations

import asyncio
import threading
import time
from types import SimpleNamespace

import pytest

from mafka4.errors import InvalidConfig, NotAuthorized, NotLeader
from mafka4.frontend.cluster_view import ClusterView
from mafka4.frontend.replica_port import ReplicaPort
from mafka4.limits import PROTOCOL_FETCH_BYTES_MAX, Acks
from mafka4.metadata import keys
from mafka4.metadata.store import MetadataStore
from mafka4.protocol.connection import ClientConnection
from mafka4.protocol.data_api import FetchRequest, ListOffsetsRequest, ProduceRequest
from mafka4.protocol.metadata_api import MetadataRequest
from mafka4.runtime.etcd_member import etcd_endpoint
from mafka4.runtime.etcd_server import start_etcd, stop_etcd
from mafka4.security.scram_client import ScramClientExchange
from mafka4.security.user_store import UserStore

CLUSTER = "c"
PASSWORD = "password-1"


@pytest.fixture(scope="module")
def etcd(tmp_path_factory):
    server = start_etcd(tmp_path_factory.mktemp("etcd"))
    endpoint = etcd_endpoint([server])
    store = MetadataStore(endpoint)
    UserStore(store, CLUSTER).add("admin", PASSWORD)
    UserStore(store, CLUSTER).add("bob", PASSWORD)  # no ACL: bob may do nothing
    store.put(keys.topic(CLUSTER, "orders"), {"partitions": 2, "read_mode": "mafka3"})
    for partition in (0, 1):
        store.put(keys.physical_partition(CLUSTER, "orders", partition),
                  {"leader": "w0", "leader_epoch": 1, "replicas": ["w0"], "isr": ["w0"]})
    store.put(keys.replica_liveness(CLUSTER, "orders", 0, "w0"), {"replica_id": "w0", "client": "127.0.0.1:7"})
    yield endpoint
    store.close()
    stop_etcd(server)


class Replica:
    """What the port hands a replica, recorded."""

    def __init__(self):
        self.produced: list[tuple[bytes, Acks, int]] = []

    async def produce(self, batch, acks, timeout_ms):
        self.produced.append((bytes(batch), acks, timeout_ms))
        return 40

    async def fetch(self, offset, bytes_max, wait_ms_max, from_follower):
        return SimpleNamespace(data=b"batches", high_watermark=9, log_start_offset=0, log_end_offset=10)

    async def list_offsets(self):
        return 0, 9

    async def offset_for_timestamp(self, timestamp_ms):
        return 5


async def serve(endpoint: str, user: str, requests):
    """Each request's answer (or the error it raised), asked as ``user`` of a port of replica w0 of orders-0."""
    replica = Replica()
    port = ReplicaPort(endpoint, CLUSTER, "orders", 0, "w0", replica)
    await asyncio.to_thread(port.start_view)
    try:
        host, _, number = (await port.start("127.0.0.1")).rpartition(":")
        connection = await ClientConnection.open(host, int(number), ScramClientExchange(user, PASSWORD))
        answers = []
        for request in requests:
            try:
                answers.append((await connection.call(request, timeout_s=30))[0])
            except Exception as error:  # noqa: BLE001 - the test looks at each request's error
                answers.append(error)
        connection.close()
        return replica, answers
    finally:
        port.close()


def test_a_produce_reaches_the_replica_with_its_batch_and_the_base_offset_comes_back(etcd):
    replica, [answer] = asyncio.run(serve(etcd, "admin", [ProduceRequest("orders", 0, "all", 3000, b"a batch")]))
    assert answer.base_offset == 40
    assert replica.produced == [(b"a batch", Acks.ALL, 3000)]


def test_a_request_for_another_partition_is_not_leader_and_reaches_nothing(etcd):
    replica, [answer] = asyncio.run(serve(etcd, "admin", [ProduceRequest("orders", 1, "all", 3000, b"x")]))
    assert isinstance(answer, NotLeader) and answer.retriable
    assert replica.produced == []


def test_a_principal_without_an_acl_is_refused_naming_the_operation_and_nothing_is_written(etcd):
    replica, answers = asyncio.run(serve(etcd, "bob", [ProduceRequest("orders", 0, "all", 3000, b"x"),
                                                       FetchRequest("orders", 0, 0, 1024, 0, False)]))
    assert [type(answer) for answer in answers] == [NotAuthorized, NotAuthorized]
    assert "bob" in answers[0].message and "produce" in answers[0].message and "orders" in answers[0].message
    assert "consume" in answers[1].message
    assert replica.produced == []


def test_fetch_list_offsets_and_metadata_are_answered(etcd):
    _, (fetched, offsets, metadata) = asyncio.run(serve(etcd, "admin", [
        FetchRequest("orders", 0, 0, 1024, 0, False), ListOffsetsRequest("orders", 0, 1_000),
        MetadataRequest(("orders",))]))
    assert (bytes(fetched.data), fetched.high_watermark) == (b"batches", 9)
    assert (offsets.log_start_offset, offsets.high_watermark, offsets.timestamp_offset) == (0, 9, 5)
    [topic] = metadata.topics
    assert [p.leader_address for p in topic.partitions] == ["127.0.0.1:7", None]


def test_bad_acks_and_fetch_bounds_are_refused_naming_the_field(etcd):
    _, answers = asyncio.run(serve(etcd, "admin", [ProduceRequest("orders", 0, "2", 3000, b"x"),
                                                   FetchRequest("orders", 0, 0, PROTOCOL_FETCH_BYTES_MAX + 1, 0, False)]))
    assert [type(answer) for answer in answers] == [InvalidConfig, InvalidConfig]
    assert "acks='2'" in answers[0].message and "bytes_max" in answers[1].message


def test_a_metadata_view_still_starting_when_the_port_closes_is_closed_once_started(etcd, monkeypatch):
    """The first METADATA starts a view of everything on a thread; a port closed meanwhile must
    not leave it watching etcd."""
    starting, release, closed = threading.Event(), threading.Event(), []
    start, close = ClusterView.start, ClusterView.close

    async def body():
        port = ReplicaPort(etcd, CLUSTER, "orders", 0, "w0", Replica())
        await asyncio.to_thread(port.start_view)
        host, _, number = (await port.start("127.0.0.1")).rpartition(":")
        monkeypatch.setattr(ClusterView, "start", lambda view: (starting.set(), release.wait(30), start(view)))
        monkeypatch.setattr(ClusterView, "close", lambda view: (closed.append(view), close(view)))
        connection = await ClientConnection.open(host, int(number), ScramClientExchange("admin", PASSWORD))
        asked = asyncio.ensure_future(connection.call(MetadataRequest(("orders",)), timeout_s=30))
        await asyncio.to_thread(starting.wait, 30)
        port.close()
        assert len(closed) == 1, "the port closed its own view; the one starting is not made yet"
        release.set()
        deadline = time.monotonic() + 30
        while len(closed) < 2 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        connection.close()
        asked.cancel()
        await asyncio.gather(asked, return_exceptions=True)

    asyncio.run(body())
    assert len(closed) == 2, "the view of everything was closed once it had started"
