"""``PeerHandles``: a read node finds its peers by name once, forgets a read node on failure, and
gates every call. Peers are fakes of Ray actor handles; no Ray runs."""

from __future__ import annotations

import asyncio

import pytest

from mafka4.errors import StreamLost
from mafka4.partition_gate import CallLost, NetworkFault
from mafka4.virtual import peer_handles
from mafka4.virtual.peer_handles import PeerHandles

CLUSTER, NODE = "test", "r0"


class Remote:
    def __init__(self, answer):
        self._answer = answer

    def remote(self, *args):
        async def answer():
            return self._answer
        return answer()


class FakeActor:
    """A Ray actor handle as the read node uses one: Ray calls answer at once."""

    def __init__(self):
        self.list_offsets = Remote((0, 10))


class Lookups:
    """Stands in for the lookups of ``physical.handles`` and ``virtual.handles``; counts them."""

    def __init__(self, running: set[str]):
        self.running = running
        self.asked: list[str] = []

    def read_node(self, cluster: str, node_id: str):
        return self._find(node_id)

    def replica(self, cluster: str, topic: str, partition: int, replica_id: str):
        return self._find(f"{topic}/{partition}/{replica_id}")

    def _find(self, name: str):
        self.asked.append(name)
        return FakeActor() if name in self.running else None


@pytest.fixture
def lookups(monkeypatch) -> Lookups:
    found = Lookups(set())
    monkeypatch.setattr(peer_handles, "read_node_handle", found.read_node)
    monkeypatch.setattr(peer_handles, "replica_handle", found.replica)
    return found


def test_a_peer_that_is_not_running_fails_the_call_and_is_looked_up_again_next_time(lookups):
    peers = PeerHandles(CLUSTER, NODE)
    with pytest.raises(StreamLost, match="read node r1 is not running"):
        peers.read_node("r1")
    with pytest.raises(StreamLost, match="replica w0 of orders-2 is not running"):
        peers.replica("orders", 2, "w0")
    lookups.running |= {"r1", "orders/2/w0"}
    assert asyncio.run(peers.replica("orders", 2, "w0").list_offsets.remote()) == (0, 10)
    peers.read_node("r1")
    assert lookups.asked == ["r1", "orders/2/w0", "orders/2/w0", "r1"]
    peers.close()


def test_a_read_node_is_looked_up_once_until_it_is_forgotten_and_a_replica_for_the_nodes_life(lookups):
    lookups.running |= {"r1", "orders/0/w1"}
    peers = PeerHandles(CLUSTER, NODE)
    for _ in range(3):
        peers.read_node("r1")
        peers.replica("orders", 0, "w1")
    assert lookups.asked == ["r1", "orders/0/w1"]
    peers.forget_read_node("r1")
    peers.forget_read_node("r2")  # never looked up: nothing to forget
    peers.read_node("r1")
    peers.replica("orders", 0, "w1")
    assert lookups.asked == ["r1", "orders/0/w1", "r1"]
    peers.close()


def test_every_call_to_a_peer_passes_the_nodes_network_gate(lookups):
    lookups.running |= {"r1", "orders/0/w1"}
    peers = PeerHandles(CLUSTER, NODE)
    peers.gate.set(NetworkFault.between([NODE], ["w1"], lost_after_ms=1))

    async def calls():
        with pytest.raises(CallLost):
            await peers.replica("orders", 0, "w1").list_offsets.remote()
        return await peers.read_node("r1").list_offsets.remote()  # not cut off

    assert asyncio.run(calls()) == (0, 10)
    peers.close()
