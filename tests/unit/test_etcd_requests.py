"""The etcd transactions that name every VP of a topic at once fit etcd's limits, at the topic bounds.

Four writes grow with a topic's VP count: the topic's creation (``TopicStore.create`` with
``read_path_values``, as ``control.topic_control.create_topic`` makes it), a one-member group's
claim of every VP (``VirtualGroupStore.claim``), that member's commit of every VP and its closing
commit, which writes every VP's offset and releases every owner key (``VirtualGroupStore.commit``
with ``release``). etcd refuses a transaction with more operations than its ``--max-txn-ops``
(``ETCD_TXN_OPS_MAX``) and a request larger than its ``--max-request-bytes``
(``ETCD_REQUEST_BYTES_MAX``). With everyday names each write is one transaction; with the longest
names and node ids the bounds allow, the creation and the commits go in runs of transactions
(``metadata.txn_runs``), the creation's config key in its last one. A Mafka3-mode group's commit
has the same shape over every physical partition of a topic, and is sent the same way.

The requests are the real code's, captured where the etcd client would send them: the store's
client builds each transaction as ``etcd3`` does and answers it as etcd would have, but nothing
is sent. The sizes depend on names (topic, group, member id, node ids); the everyday ones here
are those of a cloud VM's short hostname. What etcd itself does with runs (a creation that dies
between two, a claim and a commit against real keys): tests/integration/test_etcd_write_runs.py.
"""

from __future__ import annotations

import pytest
from etcd3 import etcdrpc

from mafka4.coordinator.control.placement import assign_replicas, plan_read_path
from mafka4.coordinator.groups.partition_groups import GroupStore
from mafka4.coordinator.groups.partition_protocol import TopicPartition
from mafka4.coordinator.groups.vp_groups import VirtualGroupStore, VpOffset
from mafka4.errors import CoordinatorUnavailable, TopicExists
from mafka4.limits import (ETCD_REQUEST_BYTES_MAX, ETCD_TXN_OPS_MAX, PARTITIONS_MAX, READ_REPLICAS_MAX,
                           REPLICATION_FACTOR_MAX, TOPIC_NAME_CHARS_MAX, VIRTUAL_PARTITIONS_MAX, KiB, ReadMode,
                           TopicConfig)
from mafka4.metadata import keys
from mafka4.metadata import store as metadata_store
from mafka4.metadata.store import prefix_range_end
from mafka4.physical.topics import TopicStore
from mafka4.runtime.node_identity import NODE_ID_CHARS_MAX
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


class Capturing:
    """A store (a group store, hence a metadata store) whose transactions are built as ``etcd3``
    builds them and kept in ``sent``, each answered as a success unless counted in ``refused``;
    nothing reaches etcd."""

    def __init__(self):
        super().__init__(NEVER_DIALED, CLUSTER)
        self.sent: list[etcdrpc.TxnRequest] = []
        client = self._client

        def transaction(compare, success=None, failure=None):
            request = etcdrpc.TxnRequest(compare=[c.build_message() for c in compare],
                                         success=client._ops_to_requests(success),
                                         failure=client._ops_to_requests(failure))
            self.sent.append(request)
            if len(self.sent) in self.refused:
                return False, []
            return True, [_answer(op, nested=False) for op in request.success]

        self.refused: set[int] = set()  # the transactions (counted from 1) answered as refused

        client.transaction = transaction

    def get_prefix(self, prefix: str):
        return []  # no committed offset yet (``commit`` reads them first)

    def get(self, key: str):
        return None  # a key never written (a refused creation asks whether its topic appeared)


class CapturingStore(Capturing, VirtualGroupStore):
    """Mafka4-mode groups' transactions, and (as a metadata store) a topic's."""


class CapturingMafka3Store(Capturing, GroupStore):
    """Mafka3-mode groups' transactions."""


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


def created_topic(store: CapturingStore, name: str, node_chars: int) -> list[etcdrpc.TxnRequest]:
    """The transactions that record a topic of every bound: the most partitions, VPs and replicas."""
    config = TopicConfig(partitions=PARTITIONS_MAX, replication_factor=REPLICATION_FACTOR_MAX,
                         min_insync_replicas=REPLICATION_FACTOR_MAX, read_mode=ReadMode.MAFKA4,
                         virtual_partitions=VIRTUAL_PARTITIONS_MAX, read_replicas=READ_REPLICAS_MAX)
    write_nodes = [f"w{index}".rjust(node_chars, "n") for index in range(REPLICATION_FACTOR_MAX)]
    read_nodes = [f"r{index}".rjust(node_chars, "n") for index in range(READ_REPLICAS_MAX)]
    plan = plan_read_path(config, read_nodes)
    metadata = TopicStore.initial_metadata(name, config, assign_replicas(PARTITIONS_MAX, REPLICATION_FACTOR_MAX,
                                                                         write_nodes))
    first = len(store.sent)
    TopicStore(store, CLUSTER).create(metadata, read_path_values(CLUSTER, name, plan))
    return store.sent[first:]


def one_member_group(store: CapturingStore, topic: str, group: str, member_id: str
                     ) -> dict[str, list[etcdrpc.TxnRequest]]:
    """The transactions of a lone member's claim of every VP of ``topic``, its commit of all of them,
    and its closing commit."""
    vps = list(range(VIRTUAL_PARTITIONS_MAX))
    offsets = {vp: VpOffset(LAST_OFFSET, LAST_OFFSET, LAST_EPOCH) for vp in vps}
    sent = {}
    for what, write in (("claim", lambda: store.claim(group, member_id, topic, vps, lease=(1 << 63) - 1)),
                        ("commit", lambda: store.commit(group, member_id, topic, offsets)),
                        ("close", lambda: store.commit(group, member_id, topic, offsets, release=vps))):
        first = len(store.sent)
        write()
        sent[what] = store.sent[first:]
    return sent


def puts_of(request: etcdrpc.TxnRequest) -> set[bytes]:
    return {op.request_put.key for op in request.success if op.WhichOneof("request") == "request_put"}


def compared_absent(request: etcdrpc.TxnRequest) -> set[bytes]:
    return {c.key for c in request.compare
            if c.target == etcdrpc.Compare.VERSION and c.result == etcdrpc.Compare.EQUAL and c.version == 0}


def member_id(host: str) -> str:
    return f"{host}-4194304-0123abcd"  # client.message.new_member_id: host, pid (at most 7 digits), 4 random bytes


def test_etcds_op_check_counts_the_longest_list_and_what_a_nested_transaction_is_left():
    put = etcdrpc.RequestOp(request_put=etcdrpc.PutRequest(key=b"k"))
    flat = etcdrpc.TxnRequest(compare=[etcdrpc.Compare(key=b"k")] * 3, success=[put] * 2)
    assert not etcd_refuses_ops(flat, 3) and etcd_refuses_ops(flat, 2)
    nested = etcdrpc.TxnRequest(success=[etcdrpc.RequestOp(request_txn=etcdrpc.TxnRequest(success=[put] * 2))] * 3)
    assert not etcd_refuses_ops(nested, 5), "3 at the top leave 2 for each nested transaction"
    assert etcd_refuses_ops(nested, 4)


def test_the_store_sizes_a_transaction_as_the_client_encodes_it(store):
    txn = store._client.transactions
    compare = [txn.version("/a" * 300) == 0, txn.value("/m") == b"xyz" * 50]
    nested = txn.txn(compare=[txn.mod("k") == 5], success=[txn.put("k", b"v" * 3000)], failure=[])
    success = [txn.put("/k" * 100, b"v" * 200_000, lease=(1 << 63) - 1), txn.delete("/p", range_end=b"/q"),
               txn.get("/z"), txn.txn(compare=[txn.value("o") == b"x"], success=[nested], failure=[])]
    sized = store._txn_part(compare, success)
    store._transaction(compare, success)
    assert (sized.bytes, sized.compares, sized.operations) == (store.sent[-1].ByteSize(), 2, 4)


def test_creating_a_topic_at_every_bound_is_one_transaction_etcd_accepts(store):
    [request] = created_topic(store, "t" * EVERYDAY_NAME_CHARS, len(EVERYDAY_NODE_ID))
    assert len(request.success) == 2 + PARTITIONS_MAX + VIRTUAL_PARTITIONS_MAX
    assert not etcd_refuses_ops(request)
    assert request_bytes(request) <= ETCD_REQUEST_BYTES_MAX


def test_a_lone_member_claims_commits_and_releases_every_vp_in_transactions_etcd_accepts(store):
    requests = one_member_group(store, "t" * EVERYDAY_NAME_CHARS, "g" * EVERYDAY_NAME_CHARS,
                                member_id(EVERYDAY_NODE_ID))
    [claim], [close] = requests["claim"], requests["close"]
    assert len(claim.success) == 2 * VIRTUAL_PARTITIONS_MAX, "an owner written, an offset read per VP"
    assert len(close.success) == 2 * VIRTUAL_PARTITIONS_MAX, "an offset written, an owner released per VP"
    for what, [request] in requests.items():
        assert not etcd_refuses_ops(request), what
        assert request_bytes(request) <= ETCD_REQUEST_BYTES_MAX, what


def test_one_more_vp_per_topic_would_need_more_ops_than_etcd_is_given(store):
    """The op bound is tight: the closing commit's nesting takes two beyond its two ops per VP."""
    [close] = one_member_group(store, "t", "g", member_id(EVERYDAY_NODE_ID))["close"]
    assert not etcd_refuses_ops(close) and etcd_refuses_ops(close, ETCD_TXN_OPS_MAX - 1)


def test_with_the_longest_names_and_node_ids_every_request_still_fits(store):
    longest_topic, longest_group = "t" * TOPIC_NAME_CHARS_MAX, "g" * TOPIC_NAME_CHARS_MAX
    requests = {"create": created_topic(store, longest_topic, NODE_ID_CHARS_MAX),
                **one_member_group(store, longest_topic, longest_group, member_id("h" * 64))}
    too_large = {what: [request_bytes(request) for request in sent] for what, sent in requests.items()
                 if any(request_bytes(request) > ETCD_REQUEST_BYTES_MAX for request in sent)}
    assert not too_large
    assert not [what for what, sent in requests.items() if any(etcd_refuses_ops(request) for request in sent)]
    assert len(requests["create"]) > 2 and len(requests["close"]) > 1, "these no longer fit one transaction"


def test_a_topic_in_runs_appears_only_with_its_last_transaction_and_each_run_checks_it_is_still_absent(store):
    name = "t" * TOPIC_NAME_CHARS_MAX
    clear, *runs = created_topic(store, name, NODE_ID_CHARS_MAX)
    config_key = keys.topic(CLUSTER, name).encode()
    marker = keys.topic_creation(CLUSTER, name).encode()
    children = keys.topic_children_prefix(CLUSTER, name).encode()
    [deleted] = clear.success
    assert (deleted.request_delete_range.key, deleted.request_delete_range.range_end) == (
        children, prefix_range_end(children.decode())), "first what an earlier creation left below the topic"
    assert all(config_key in compared_absent(run) for run in [clear, *runs])
    assert [config_key in puts_of(run) for run in runs] == [False] * (len(runs) - 1) + [True]
    assert marker in puts_of(runs[0]) and marker in compared_absent(runs[0])
    assert all(any(c.key == marker and c.target == etcdrpc.Compare.VALUE for c in run.compare) for run in runs[1:])
    written = set().union(*map(puts_of, runs)) - {marker, config_key}
    assert len(written) == PARTITIONS_MAX + 1 + VIRTUAL_PARTITIONS_MAX, "every partition, split epoch 0, every VP"


def test_a_refused_run_of_a_creation_is_a_taken_name_when_the_topic_appeared_else_retriable(store):
    store.refused = {3}  # the clear, the first run, then the second run refused
    with pytest.raises(CoordinatorUnavailable, match="another creation"):
        created_topic(store, "t" * TOPIC_NAME_CHARS_MAX, NODE_ID_CHARS_MAX)
    store.sent.clear()
    store.refused = {1}
    with pytest.raises(TopicExists):  # the clear is refused only while the config key exists
        created_topic(store, "t" * TOPIC_NAME_CHARS_MAX, NODE_ID_CHARS_MAX)


def test_a_claim_in_runs_keeps_the_vps_of_the_runs_before_a_refused_one(store, monkeypatch):
    monkeypatch.setattr(metadata_store, "ETCD_TXN_BYTES_MAX", 64 * KiB)
    vps = list(range(VIRTUAL_PARTITIONS_MAX))
    store.refused = {2}
    claimed = store.claim("g", member_id(EVERYDAY_NODE_ID), "t", vps, lease=1)
    first_run = len(store.sent[0].success) // 2
    assert len(store.sent) == 2 and 0 < first_run < len(vps)
    assert claimed == dict.fromkeys(vps[:first_run]), "claimed with no committed offset yet; none after the refusal"
    assert all(request_bytes(request) <= 64 * KiB + RAFT_HEADER_BYTES for request in store.sent)
    member_key = keys.group_member(CLUSTER, "g", member_id(EVERYDAY_NODE_ID)).encode()
    assert all(request.compare[0].key == member_key for request in store.sent), "every run only while I am a member"
    store.sent.clear()
    store.refused = {1}
    assert store.claim("g", member_id(EVERYDAY_NODE_ID), "t", vps, lease=1) is None


def test_a_commit_in_runs_writes_every_vp_once_each_with_its_own_checks(store, monkeypatch):
    monkeypatch.setattr(metadata_store, "ETCD_TXN_BYTES_MAX", 64 * KiB)
    vps = list(range(VIRTUAL_PARTITIONS_MAX))
    offsets = {vp: VpOffset(LAST_OFFSET, LAST_OFFSET, LAST_EPOCH) for vp in vps}
    written, lost = store.commit("g", member_id(EVERYDAY_NODE_ID), "t", offsets, release=vps)
    assert (written, lost) == (set(vps), set()) and len(store.sent) > 2
    ops = [op.request_txn for request in store.sent for op in request.success]
    assert len(ops) == 2 * len(vps), "a fenced offset write and a fenced release per VP, none twice"
    assert all(op.compare[0].target == etcdrpc.Compare.VALUE for op in ops), "each only while the owner key is mine"
    assert not any(request.compare for request in store.sent)


def test_a_release_given_the_offsets_its_sync_read_writes_against_their_revisions_without_reading_them(
        store, monkeypatch):
    """A sync's release commits against its snapshot's offsets (``committed_before``): one
    transaction, no read first, each write fenced by the revision the snapshot saw (or by absence)."""
    def no_read(prefix):
        raise AssertionError(f"read {prefix}: the sync read the committed offsets already")

    monkeypatch.setattr(store, "get_prefix", no_read)
    offsets = {0: VpOffset(60, 60), 1: VpOffset(5, 5)}
    written, lost = store.commit("g", "m1", "t", offsets, release=[0, 1],
                                 committed_before={0: (VpOffset(40, 50), 1234)})
    assert (written, lost) == ({0, 1}, set()) and len(store.sent) == 1
    fences = [op.request_txn.success[0].request_txn.compare[0] for op in store.sent[0].success[:2]]
    assert (fences[0].target, fences[0].mod_revision) == (etcdrpc.Compare.MOD, 1234), "as the sync read it"
    assert (fences[1].target, fences[1].version) == (etcdrpc.Compare.VERSION, 0), "absent when the sync read"


def test_a_lone_mafka3_member_commits_every_partition_with_the_longest_names_in_transactions_etcd_accepts():
    """A Mafka3-mode group's commit has the shape of a VP commit, over every physical partition."""
    store = CapturingMafka3Store()
    try:
        topic, group, member = "t" * TOPIC_NAME_CHARS_MAX, "g" * TOPIC_NAME_CHARS_MAX, member_id("h" * 64)
        partitions = [TopicPartition(topic, partition) for partition in range(PARTITIONS_MAX)]
        positions = dict.fromkeys(partitions, LAST_OFFSET)
        assert store.commit(group, member, LAST_EPOCH, positions) == (set(partitions), set())
        assert store.commit(group, member, LAST_EPOCH, positions, release=partitions) == (set(partitions), set())
        assert len(store.sent) > 2, "at least the closing commit no longer fits one transaction"
        assert all(request_bytes(request) <= ETCD_REQUEST_BYTES_MAX and not etcd_refuses_ops(request)
                   for request in store.sent)
        store.sent.clear()
        everyday = [TopicPartition("t" * EVERYDAY_NAME_CHARS, partition) for partition in range(PARTITIONS_MAX)]
        store.commit("g" * EVERYDAY_NAME_CHARS, member_id(EVERYDAY_NODE_ID), 1, dict.fromkeys(everyday, LAST_OFFSET),
                     release=everyday)
        [closing] = store.sent
        assert not etcd_refuses_ops(closing) and request_bytes(closing) <= ETCD_REQUEST_BYTES_MAX
    finally:
        store.close()
