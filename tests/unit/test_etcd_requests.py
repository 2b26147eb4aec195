"""The etcd transactions that name every VP of a topic at once fit etcd's limits, at the topic bounds.

Three requests grow with a topic's VP count, each one transaction: the topic's creation
(``TopicStore.create`` with ``read_path_values``, as ``control.topic_control.create_topic`` makes
it), a one-member group's claim of every VP (``VirtualGroupStore.claim``) and that member's
closing commit, which writes every VP's offset and releases every owner key
(``VirtualGroupStore.commit`` with ``release``). etcd refuses a transaction with more operations
than its ``--max-txn-ops`` (``ETCD_TXN_OPS_MAX``) and a request larger than its
``--max-request-bytes`` (``ETCD_REQUEST_BYTES_MAX``). These bounds are what ``VIRTUAL_PARTITIONS_MAX``
stands on: raising it fails here until those transactions are split.

The requests are the real code's, captured where the etcd client would send them: the store's
client builds each transaction as ``etcd3`` does and answers it as etcd would have, but nothing
is sent. The sizes depend on names (topic, group, member id, node ids); the everyday ones here
are those of a cloud VM's short hostname.
"""

from __future__ import annotations

import pytest
from etcd3 import etcdrpc

from mafka4.coordinator.control.placement import assign_replicas, plan_read_path
from mafka4.coordinator.groups.vp_groups import VirtualGroupStore, VpOffset
from mafka4.limits import (ETCD_REQUEST_BYTES_MAX, ETCD_TXN_OPS_MAX, PARTITIONS_MAX, READ_REPLICAS_MAX,
                           REPLICATION_FACTOR_MAX, TOPIC_NAME_CHARS_MAX, VIRTUAL_PARTITIONS_MAX, ReadMode, TopicConfig)
from mafka4.physical.topics import TopicStore
from mafka4.runtime.node import NODE_ID_CHARS_MAX
from mafka4.virtual.vp_store import read_path_values

CLUSTER = "local"
NEVER_DIALED = "127.0.0.1:9"  # the store needs an endpoint; its client never calls it here
# etcd checks the request wrapped in its raft entry (``InternalRaftRequest``: the transaction and
# a header of an id and, with auth, a user name and revision): a few bytes more than the transaction.
RAFT_HEADER_BYTES = 64
EVERYDAY_NODE_ID = "ip-10-0-12-34"  # ``hostname -s`` of a cloud VM (ray_cluster.yaml's --node-id)
EVERYDAY_NAME_CHARS = 40
LAST_OFFSET = (1 << 63) - 1  # offsets and epochs at their largest: the most digits in a JSON value
LAST_EPOCH = (1 << 31) - 1


def _answer(op: etcdrpc.RequestOp, nested: bool):
    """What etcd answers ``op`` in a transaction that succeeded, as the ``etcd3`` client hands it on."""
    if op.WhichOneof("request") == "request_txn":
        return etcdrpc.ResponseOp(response_txn=etcdrpc.TxnResponse(
            succeeded=True, responses=[_answer(inner, nested=True) for inner in op.request_txn.success]))
    return etcdrpc.ResponseOp() if nested else []  # a get of a key never written: nothing found


class CapturingStore(VirtualGroupStore):
    """A group store (hence a metadata store) whose transactions are built as ``etcd3`` builds them
    and kept in ``sent``, each answered as a success; nothing reaches etcd."""

    def __init__(self):
        super().__init__(NEVER_DIALED, CLUSTER)
        self.sent: list[etcdrpc.TxnRequest] = []
        client = self._client

        def transaction(compare, success=None, failure=None):
            request = etcdrpc.TxnRequest(compare=[c.build_message() for c in compare],
                                         success=client._ops_to_requests(success),
                                         failure=client._ops_to_requests(failure))
            self.sent.append(request)
            return True, [_answer(op, nested=False) for op in request.success]

        client.transaction = transaction

    def get_prefix(self, prefix: str):
        return []  # no committed offset yet (``commit`` reads them first)


@pytest.fixture
def store():
    capturing = CapturingStore()
    yield capturing
    capturing.close()


def etcd_refuses_ops(request: etcdrpc.TxnRequest, ops_max: int = ETCD_TXN_OPS_MAX) -> bool:
    """etcd's op-count check of a transaction (``checkTxnRequest``): the longest of its compare,
    success and failure lists against ``ops_max``, and each nested transaction against what is left."""
    count = max(len(request.compare), len(request.success), len(request.failure))
    return count > ops_max or any(
        op.WhichOneof("request") == "request_txn" and etcd_refuses_ops(op.request_txn, ops_max - count)
        for op in (*request.success, *request.failure))


def request_bytes(request: etcdrpc.TxnRequest) -> int:
    return request.ByteSize() + RAFT_HEADER_BYTES


def created_topic(store: CapturingStore, name: str, node_chars: int) -> etcdrpc.TxnRequest:
    """The transaction that records a topic of every bound at once: the most partitions, VPs and replicas."""
    config = TopicConfig(partitions=PARTITIONS_MAX, replication_factor=REPLICATION_FACTOR_MAX,
                         min_insync_replicas=REPLICATION_FACTOR_MAX, read_mode=ReadMode.MAFKA4,
                         virtual_partitions=VIRTUAL_PARTITIONS_MAX, read_replicas=READ_REPLICAS_MAX)
    write_nodes = [f"w{index}".rjust(node_chars, "n") for index in range(REPLICATION_FACTOR_MAX)]
    read_nodes = [f"r{index}".rjust(node_chars, "n") for index in range(READ_REPLICAS_MAX)]
    plan = plan_read_path(config, read_nodes)
    metadata = TopicStore.initial_metadata(name, config, assign_replicas(PARTITIONS_MAX, REPLICATION_FACTOR_MAX,
                                                                         write_nodes))
    TopicStore(store, CLUSTER).create(metadata, read_path_values(CLUSTER, name, plan))
    return store.sent[-1]


def one_member_group(store: CapturingStore, topic: str, group: str, member_id: str) -> dict[str, etcdrpc.TxnRequest]:
    """A lone member's claim of every VP of ``topic``, its commit of all of them, and its closing commit."""
    vps = list(range(VIRTUAL_PARTITIONS_MAX))
    offsets = {vp: VpOffset(LAST_OFFSET, LAST_OFFSET, LAST_EPOCH) for vp in vps}
    store.claim(group, member_id, topic, vps, lease=(1 << 63) - 1)
    store.commit(group, member_id, topic, offsets)
    store.commit(group, member_id, topic, offsets, release=vps)
    return dict(zip(("claim", "commit", "close"), store.sent[-3:]))


def member_id(host: str) -> str:
    return f"{host}-4194304-0123abcd"  # client.message.new_member_id: host, pid (at most 7 digits), 4 random bytes


def test_etcds_op_check_counts_the_longest_list_and_what_a_nested_transaction_is_left():
    put = etcdrpc.RequestOp(request_put=etcdrpc.PutRequest(key=b"k"))
    flat = etcdrpc.TxnRequest(compare=[etcdrpc.Compare(key=b"k")] * 3, success=[put] * 2)
    assert not etcd_refuses_ops(flat, 3) and etcd_refuses_ops(flat, 2)
    nested = etcdrpc.TxnRequest(success=[etcdrpc.RequestOp(request_txn=etcdrpc.TxnRequest(success=[put] * 2))] * 3)
    assert not etcd_refuses_ops(nested, 5), "3 at the top leave 2 for each nested transaction"
    assert etcd_refuses_ops(nested, 4)


def test_creating_a_topic_at_every_bound_is_one_transaction_etcd_accepts(store):
    request = created_topic(store, "t" * EVERYDAY_NAME_CHARS, len(EVERYDAY_NODE_ID))
    assert len(request.success) == 2 + PARTITIONS_MAX + VIRTUAL_PARTITIONS_MAX
    assert not etcd_refuses_ops(request)
    assert request_bytes(request) <= ETCD_REQUEST_BYTES_MAX


def test_a_lone_member_claims_commits_and_releases_every_vp_in_transactions_etcd_accepts(store):
    requests = one_member_group(store, "t" * EVERYDAY_NAME_CHARS, "g" * EVERYDAY_NAME_CHARS,
                                member_id(EVERYDAY_NODE_ID))
    assert len(requests["claim"].success) == 2 * VIRTUAL_PARTITIONS_MAX, "an owner written, an offset read per VP"
    assert len(requests["close"].success) == 2 * VIRTUAL_PARTITIONS_MAX, "an offset written, an owner released per VP"
    for what, request in requests.items():
        assert not etcd_refuses_ops(request), what
        assert request_bytes(request) <= ETCD_REQUEST_BYTES_MAX, what


def test_one_more_vp_per_topic_would_need_more_ops_than_etcd_is_given(store):
    """The op bound is tight: the closing commit's nesting takes two beyond its two ops per VP."""
    requests = one_member_group(store, "t", "g", member_id(EVERYDAY_NODE_ID))
    assert not etcd_refuses_ops(requests["close"]) and etcd_refuses_ops(requests["close"], ETCD_TXN_OPS_MAX - 1)


@pytest.mark.xfail(strict=True, reason="known gap: with the longest names and node ids the bounds allow, the "
                   "creation (~3.2 MB) and the closing commit (~2.7 MB) pass etcd's 1.5 MiB; they need splitting")
def test_with_the_longest_names_and_node_ids_every_request_still_fits(store):
    longest_topic, longest_group = "t" * TOPIC_NAME_CHARS_MAX, "g" * TOPIC_NAME_CHARS_MAX
    requests = {"create": created_topic(store, longest_topic, NODE_ID_CHARS_MAX),
                **one_member_group(store, longest_topic, longest_group, member_id("h" * 64))}
    too_large = {what: request_bytes(request) for what, request in requests.items()
                 if request_bytes(request) > ETCD_REQUEST_BYTES_MAX}
    assert not too_large
