"""etcd compacts its history, and no watch of mafka4 loses changes for it (one real etcd).

Every member mafka4 starts runs with periodic auto-compaction (``limits.ETCD_HISTORY_RETENTION_S``),
so revisions older than that are gone. What a user relies on: a watch set up before a compaction
keeps delivering changes, and a watch asked to start at a compacted revision (the controller
watches from the revision of a read) ends as a broken one, at once and without an error, so that
its owner does what it does after any break: read again and watch from there. The tests compact
explicitly, to the present, instead of waiting an hour.
"""

from __future__ import annotations

import queue
import threading
from pathlib import Path

import etcd3
import pytest

from mafka4.coordinator.control.watches import Watches
from mafka4.limits import ETCD_HISTORY_RETENTION_S
from mafka4.metadata.store import MetadataStore, WatchEvent
from mafka4.runtime.etcd_server import start_etcd, stop_etcd
from mafka4.runtime.ports import LOOPBACK

from wait_helpers import WAIT_S, wait_until

PREFIX = "/compaction-test/"


@pytest.fixture
def etcd(tmp_path):
    server = start_etcd(tmp_path / "etcd")
    store = MetadataStore(server.endpoint)
    admin = etcd3.client(LOOPBACK, server.client_port)  # compaction is no call of mafka4's own
    try:
        yield server, store, admin
    finally:
        admin.close()
        store.close()
        stop_etcd(server)


class Recorder:
    """A watch's callbacks: the events it delivered, and whether it ended."""

    def __init__(self):
        self.events: list[WatchEvent] = []
        self.broken = threading.Event()

    def on_events(self, events: list[WatchEvent]) -> None:
        self.events += events

    def keys(self) -> list[str]:
        return [event.key for event in self.events]


def change_and_compact(store: MetadataStore, admin) -> None:
    """Change a key, then compact away every revision up to that change (etcd keeps from the
    compaction revision on, so one more write is compacted at)."""
    store.put(PREFIX + "missed", {"n": 0})
    admin.compact(store.put(PREFIX + "compacted-at", {}), physical=True)


def test_every_member_starts_with_periodic_compaction_at_the_retention(etcd):
    server, _, _ = etcd
    command = Path(f"/proc/{server.pid}/cmdline").read_bytes().decode().split("\0")
    flags = dict(zip(command, command[1:]))
    assert flags["--auto-compaction-mode"] == "periodic"
    assert flags["--auto-compaction-retention"] == f"{ETCD_HISTORY_RETENTION_S}s"


def test_a_watch_set_up_before_a_compaction_sees_later_changes(etcd):
    _, store, admin = etcd
    _, read_revision = store.get_prefix_at(PREFIX)
    watch = Recorder()
    store.watch_prefix(PREFIX, watch.on_events, watch.broken.set, read_revision + 1)
    change_and_compact(store, admin)
    store.put(PREFIX + "after", {"n": 1})
    assert wait_until(lambda: PREFIX + "after" in watch.keys(), WAIT_S), watch.keys()
    assert not watch.broken.is_set()


def test_a_watch_from_a_compacted_revision_ends_as_broken_and_a_fresh_start_sees_later_changes(etcd):
    _, store, admin = etcd
    _, old_revision = store.get_prefix_at(PREFIX)
    change_and_compact(store, admin)

    stale = Recorder()
    store.watch_prefix(PREFIX, stale.on_events, stale.broken.set, old_revision + 1)  # no error raised
    assert stale.broken.wait(WAIT_S), "a watch from a compacted revision must end, or its owner waits forever"
    assert stale.events == []

    # What every owner does after a break: read again, and watch from that read.
    items, revision = store.get_prefix_at(PREFIX)
    assert PREFIX + "missed" in [item.key for item in items]  # the read has what the watch could not replay
    fresh = Recorder()
    store.watch_prefix(PREFIX, fresh.on_events, fresh.broken.set, revision + 1)
    store.put(PREFIX + "after", {"n": 1})
    assert wait_until(lambda: fresh.keys() == [PREFIX + "after"], WAIT_S), fresh.keys()
    assert not fresh.broken.is_set()


def test_the_controller_s_watch_from_a_compacted_revision_is_marked_broken_so_it_reconciles(etcd):
    """``Controller._serve`` reconciles in full (a read, then watches from it) once its watches are broken."""
    server, store, admin = etcd
    _, old_revision = store.get_prefix_at(PREFIX)
    change_and_compact(store, admin)
    events: queue.Queue = queue.Queue()
    watches = Watches(MetadataStore(server.endpoint), events)
    try:
        watches.start(PREFIX, old_revision + 1, "liveness")
        assert events.get(timeout=WAIT_S) == ("broken", [])
        assert watches.broken and not watches.watching
    finally:
        watches.close()
