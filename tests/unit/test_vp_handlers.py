"""A read node's answers to the virtual partitions' APIs, on a real port against a real etcd.

No Ray: the node's hosted VPs are a stand-in; each VP's error travels in its own answer.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from mafka4.errors import FetchReplaced, InvalidConfig, NotAuthorized, ProtocolError, ReadReplicaNotInSync, UnknownTopic
from mafka4.frontend.node_port import NodePort
from mafka4.metadata import keys
from mafka4.metadata.store import MetadataStore
from mafka4.protocol.connection import ClientConnection
from mafka4.protocol.error_codes import raised_error
from mafka4.protocol.messages import from_body, to_body
from mafka4.protocol.vp_api import (VpDiverging, VpFetchRequest, VpListOffsetsRequest, VpMetadataRequest, VpOffset,
                                    VpReadAnswer)
from mafka4.runtime.etcd_member import etcd_endpoint
from mafka4.runtime.etcd_server import start_etcd, stop_etcd
from mafka4.security.scram_client import ScramClientExchange
from mafka4.security.user_store import UserStore
from mafka4.virtual.consumer_reads import ConsumerAnswer
from mafka4.virtual.hosted_vp import VpRead

CLUSTER = "c"
PASSWORD = "password-1"
EPOCH = {"epoch": 0, "starts": [0], "vps": [0, 1]}
STATE = {"range": [0, 1 << 32], "leader": "r0", "leader_epoch": 1, "replicas": ["r0"], "risr": ["r0"]}


@pytest.fixture(scope="module")
def etcd(tmp_path_factory):
    server = start_etcd(tmp_path_factory.mktemp("etcd"))
    endpoint = etcd_endpoint([server])
    store = MetadataStore(endpoint)
    UserStore(store, CLUSTER).add("admin", PASSWORD)
    UserStore(store, CLUSTER).add("bob", PASSWORD)
    store.put(keys.topic(CLUSTER, "orders"), {"partitions": 1, "read_mode": "mafka4"})
    store.put(keys.split_epoch(CLUSTER, "orders", 0), EPOCH)
    store.put(keys.virtual_partition(CLUSTER, "orders", 1), STATE)
    store.put(keys.virtual_partition(CLUSTER, "orders", 0), STATE)
    store.put(keys.read_node_liveness(CLUSTER, "r0"), {"node_id": "r0", "client": "127.0.0.1:3"})
    yield endpoint
    store.close()
    stop_etcd(server)


class HostedVps:
    """VP 0 is hosted here with data; VP 1 is not; VP 2 lost a tail (power loss) that a reader of
    epoch 4 read: it answers "diverging" (epoch 4 ends at 5)."""

    async def fetch(self, reads, bytes_max, wait_ms_max):
        return [ConsumerAnswer(VpRead(b"vp0 batches", 7, 0, 7)) if read.vp_id.vp == 0
                else ConsumerAnswer(VpRead(b"", 9, 0, 9, (4, 5)) if read.last_epoch == 4 else VpRead(b"vp2", 9, 0, 9))
                if read.vp_id.vp == 2
                else ConsumerAnswer(None, ReadReplicaNotInSync(f"{read.vp_id} is not hosted here")) for read in reads]

    async def list_offsets(self, vp_ids):
        return [(0, 7) if vp_id.vp == 0 else ReadReplicaNotInSync("not hosted") for vp_id in vp_ids]

    async def offsets_for_time(self, vp_ids, timestamp_ms):
        return [3 if vp_id.vp == 0 else ReadReplicaNotInSync("not hosted") for vp_id in vp_ids]


class NothingNew(HostedVps):
    """Every fetch parks for its whole wait: nothing new is ever fed."""

    def __init__(self):
        self.parked = 0

    async def fetch(self, reads, bytes_max, wait_ms_max):
        self.parked += 1
        try:
            await asyncio.sleep(wait_ms_max / 1000)
        finally:
            self.parked -= 1
        return await super().fetch(reads, bytes_max, wait_ms_max)

    async def until_parked(self, count: int) -> None:
        while self.parked < count:
            await asyncio.sleep(0.01)


async def served_port(endpoint: str, vps) -> tuple[NodePort, str, int]:
    port = NodePort(endpoint, CLUSTER, "r0", vps)
    await asyncio.to_thread(port.start_view)
    host, _, number = (await port.start("127.0.0.1", 0)).rpartition(":")
    return port, host, int(number)


async def ask(endpoint: str, user: str, requests):
    port, host, number = await served_port(endpoint, HostedVps())
    try:
        connection = await ClientConnection.open(host, number, ScramClientExchange(user, PASSWORD))
        answers = []
        for request in requests:
            try:
                answers.append((await connection.call(request, timeout_s=30))[0])
            except Exception as error:  # noqa: BLE001 - the test looks at each request's error
                answers.append(error)
        connection.close()
        return answers
    finally:
        port.close()


def test_vp_metadata_carries_the_layout_the_states_and_the_read_nodes_from_the_view(etcd):
    [answer, unknown] = asyncio.run(ask(etcd, "admin", [VpMetadataRequest("orders"), VpMetadataRequest("nope")]))
    assert [json.loads(epoch) for epoch in answer.split_epochs_json] == [EPOCH]
    assert [(info.vp, json.loads(info.state_json)) for info in answer.vps] == [(0, STATE), (1, STATE)]
    assert [(node.node_id, node.address) for node in answer.nodes] == [("r0", "127.0.0.1:3")]
    assert isinstance(unknown, UnknownTopic)


def test_a_fetch_answers_each_vp_with_its_data_or_its_own_error(etcd):
    [answer] = asyncio.run(ask(etcd, "admin", [VpFetchRequest("orders", (VpOffset(0, 0, -1), VpOffset(1, 0, -1)), 1024, 0)]))
    hosted, missing = answer.answers
    assert (bytes(hosted.data), hosted.high_watermark, hosted.error) == (b"vp0 batches", 7, None)
    assert isinstance(raised_error(missing.error), ReadReplicaNotInSync) and missing.error.retriable


def test_a_fetch_carries_each_reads_last_epoch_and_a_diverged_log_answers_where_to_move_back(etcd):
    [answer] = asyncio.run(ask(etcd, "admin", [VpFetchRequest("orders", (VpOffset(2, 8, 4), VpOffset(2, 8, 5)), 1024, 0)]))
    diverged, fine = answer.answers
    assert (bytes(diverged.data), diverged.diverging, diverged.error) == (b"", VpDiverging(4, 5), None)
    assert (bytes(fine.data), fine.diverging) == (b"vp2", None)


@pytest.mark.parametrize("read, problem", [(VpOffset(0, 0, -2), "after leader epoch -2"),
                                           (VpOffset(0, -1, 3), "at offset -1")])
def test_a_fetch_with_a_bad_offset_or_epoch_is_refused_naming_it(etcd, read, problem):
    [answer] = asyncio.run(ask(etcd, "admin", [VpFetchRequest("orders", (read,), 1024, 0)]))
    assert isinstance(answer, InvalidConfig) and problem in answer.message and "at least" in answer.message


def test_the_epoch_fields_are_typed_and_bounded_on_the_wire():
    """Protocol version 2: a VP read names its last epoch, an answer may carry ``diverging``."""
    body = to_body(VpFetchRequest("orders", (VpOffset(0, 8, 4),), 1024, 0))
    assert body["reads"] == ({"vp": 0, "offset": 8, "last_epoch": 4},)
    assert from_body(VpFetchRequest, body) == VpFetchRequest("orders", (VpOffset(0, 8, 4),), 1024, 0)
    for bad, problem in [({"vp": 0, "offset": 8}, r"lacks \['last_epoch'\]"),
                         ({"vp": 0, "offset": 8, "last_epoch": "4"}, "last_epoch: expected int, got str"),
                         ({"vp": 0, "offset": 8, "last_epoch": 1 << 64}, "does not fit in 64 bits")]:
        with pytest.raises(ProtocolError, match=problem):
            from_body(VpFetchRequest, {**body, "reads": (bad,)})
    buffers: list = []
    answer = VpReadAnswer(b"", 9, 0, 9, None, VpDiverging(4, 5))
    assert from_body(VpReadAnswer, to_body(answer, buffers), tuple(buffers)) == answer
    with pytest.raises(ProtocolError, match="VpDiverging.end_offset: expected int"):
        from_body(VpDiverging, {"epoch": 4, "end_offset": None})


def test_list_offsets_answers_each_vp_and_the_offset_at_a_time(etcd):
    [answer] = asyncio.run(ask(etcd, "admin", [VpListOffsetsRequest("orders", (0, 1), 1_000)]))
    hosted, missing = answer.offsets
    assert (hosted.log_start_offset, hosted.high_watermark, hosted.timestamp_offset) == (0, 7, 3)
    assert missing.error is not None


def test_a_principal_without_an_acl_gets_nothing(etcd):
    answers = asyncio.run(ask(etcd, "bob", [VpMetadataRequest("orders"),
                                             VpFetchRequest("orders", (VpOffset(0, 0, -1),), 1024, 0)]))
    assert [type(answer) for answer in answers] == [NotAuthorized, NotAuthorized]
    assert "describe" in answers[0].message and "consume" in answers[1].message


def test_a_newer_fetch_on_a_connection_replaces_the_one_out_and_other_connections_keep_theirs(etcd):
    """A consumer that changes what it reads sends its fetch again; the long poll it left must not
    stay parked, holding one of the connection's request slots, until its wait ends."""
    async def run():
        vps = NothingNew()
        port, host, number = await served_port(etcd, vps)
        first, other = [await ClientConnection.open(host, number, ScramClientExchange("admin", PASSWORD))
                        for _ in range(2)]
        try:
            def long_poll(connection, wait_ms: int):
                request = VpFetchRequest("orders", (VpOffset(0, 0, -1),), 1024, wait_ms)
                return asyncio.ensure_future(connection.call(request, timeout_s=60))
            replaced, kept = long_poll(first, 30_000), long_poll(other, 300)
            await vps.until_parked(2)
            newest = await long_poll(first, 0)
            with pytest.raises(FetchReplaced, match="replaced this one"):
                await asyncio.wait_for(replaced, 10)
            answer, _ = await kept
            return newest[0], answer
        finally:
            first.close()
            other.close()
            port.close()

    newest, kept = asyncio.run(run())
    assert bytes(newest.answers[0].data) == b"vp0 batches" and bytes(kept.answers[0].data) == b"vp0 batches"
