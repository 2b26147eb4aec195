"""``MetadataStore.prefix_changes`` against a real etcd: what a topic view's probe relies on (one real etcd).

A read node's topic view reads a topic's metadata again only if the probe says some key of it
changed (``virtual.topic_view``): a write after the given revision shows as a changed key, a
deletion as a smaller count (etcd counts the whole range, before the revision filter), and an
unchanged prefix as (its key count, 0).
"""

from __future__ import annotations

import pytest

from mafka4.metadata.store import MetadataStore
from mafka4.runtime.etcd_server import start_etcd, stop_etcd

PREFIX = "/prefix-changes-test/"
OTHER = "/prefix-changes-other/"


@pytest.fixture
def store(tmp_path):
    server = start_etcd(tmp_path / "etcd")
    store = MetadataStore(server.endpoint)
    try:
        yield store
    finally:
        store.close()
        stop_etcd(server)


def test_a_probe_sees_writes_after_its_revision_and_deletions_as_a_smaller_count(store):
    for name in ("a", "b", "c"):
        store.put(PREFIX + name, {"n": 1})
    changes, revision = store.prefix_changes([PREFIX, OTHER], 1 << 62)
    assert changes == {PREFIX: (3, 0), OTHER: (0, 0)}, "a probe past every revision only counts"
    assert store.prefix_changes([PREFIX, OTHER], revision)[0] == {PREFIX: (3, 0), OTHER: (0, 0)}

    store.put(PREFIX + "b", {"n": 2})
    changes, later = store.prefix_changes([PREFIX, OTHER], revision)
    assert changes == {PREFIX: (3, 1), OTHER: (0, 0)} and later > revision
    assert store.prefix_changes([PREFIX], later)[0] == {PREFIX: (3, 0)}

    store.delete(PREFIX + "c")
    assert store.prefix_changes([PREFIX], later)[0] == {PREFIX: (2, 0)}, "a deletion: one key fewer"
