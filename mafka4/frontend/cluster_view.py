"""A node's watched view of its cluster's metadata: ``view_state.ViewState`` kept current from etcd.

Each prefix of ``view_state.Watched`` is read once with its revision R and watched from R + 1, so
the state sees every change in etcd's order. A watch that ends (etcd went away, its member died,
the revision was compacted) leaves the state as it was, and still answering, while a keeper
thread reads every prefix again and watches anew, retrying every
``METADATA_REWATCH_BACKOFF_S`` until etcd answers: clients keep being served from the last view
while etcd is away, as the design promises of the data path. Callers read through ``read``,
which holds the lock the watch threads write under; what they read is only as fresh as the
watches, which is how a Kafka broker's metadata cache behaves too.

A topic created a moment ago is the exception a client notices: ``Admin.create_topic`` returns
once etcd holds it, and the client's next request may reach a node whose watch has not brought it
yet. A handler that misses a topic asks ``topics_caught_up``: one etcd read of the topic's key,
and if it exists, a wait (at most ``METADATA_CATCH_UP_WAIT_S``) until the view has applied the
revision that wrote it. So a topic's creator reads its own write from every node, and a topic
that does not exist costs one etcd read to say so. Those reads and waits run on one thread of the
view's own (``CATCH_UP_THREADS``), never on the event loop's default executor, where a node runs
its fsyncs: misses while etcd is slow to answer wait for each other, not for the disk.

One view per serving process: it costs one etcd watch per prefix, however many clients connect.
A process that needs only some of the prefixes (a replica's port checks users and ACLs only)
names them, and is woken by nothing else.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterable, TypeVar

from mafka4.errors import CoordinatorUnavailable
from mafka4.frontend.view_state import ViewState, Watched, watched_prefix
from mafka4.limits import METADATA_CATCH_UP_WAIT_S, METADATA_REWATCH_BACKOFF_S
from mafka4.metadata import keys
from mafka4.metadata.store import MetadataStore, WatchEvent

logger = logging.getLogger(__name__)
T = TypeVar("T")
# Threads a view runs its catch-ups on (``topics_caught_up``), made on the first one.
CATCH_UP_THREADS = 1


class ClusterView:
    """The watched metadata of ``cluster`` in ``store``; see the module docstring."""

    def __init__(self, store: MetadataStore, cluster: str, kinds: tuple[Watched, ...] = tuple(Watched)):
        self._store, self._cluster, self._kinds = store, cluster, kinds
        self._state = ViewState(cluster)
        self._lock = threading.Lock()
        # The etcd revision each kind's state has applied (its load's, then its watch's events'),
        # and a condition on the lock for those who wait for one (``topics_caught_up``).
        self._applied = {kind: 0 for kind in kinds}
        self._advanced = threading.Condition(self._lock)
        self._catch_ups: ThreadPoolExecutor | None = None
        # Guards the watch ids and the closing: a keeper that reads again while the view closes
        # must not leave a watch behind (``_watching``, ``close``).
        self._watches_lock = threading.Lock()
        self._watch_ids: list[int] = []
        self._broken = threading.Event()
        self._closed = False
        self._keeper: threading.Thread | None = None

    def start(self) -> None:
        """Read and watch every prefix (blocks on etcd; if etcd does not answer the view starts
        empty and is read as soon as it does), then keep the watches going on a thread of their own."""
        assert self._keeper is None, "a cluster view is started once"
        try:
            self._load_and_watch()
        except CoordinatorUnavailable as error:  # a node starts while etcd is away: the keeper waits it out
            logger.warning("cluster view of %s: etcd did not answer (%s); reading it when it does", self._cluster,
                           error)
            self._broken.set()
        self._keeper = threading.Thread(target=self._keep, name="cluster-view", daemon=True)
        self._keeper.start()

    def read(self, reader: Callable[[ViewState], T]) -> T:
        """What ``reader`` makes of the state, read under the view's lock (keep it short)."""
        with self._lock:
            return reader(self._state)

    async def topics_caught_up(self, names: Iterable[str]) -> bool:
        """Whether any of the topics ``names`` exists in etcd; if one does, first waits (at most
        ``METADATA_CATCH_UP_WAIT_S``) until the view has applied the change that wrote it. False
        also when etcd does not answer: the view's answer then stands."""
        if self._catch_ups is None:
            self._catch_ups = ThreadPoolExecutor(CATCH_UP_THREADS, thread_name_prefix="view-catch-up")
        return await asyncio.get_running_loop().run_in_executor(self._catch_ups, self._topics_caught_up, tuple(names))

    def _topics_caught_up(self, names: tuple[str, ...]) -> bool:
        if Watched.TOPICS not in self._applied:  # a view of users and ACLs only knows no topic
            return False
        try:
            written = [self._store.get(keys.topic(self._cluster, name)) for name in names]
        except CoordinatorUnavailable:
            return False
        revisions = [found.mod_revision for found in written if found is not None]
        if not revisions:
            return False
        with self._advanced:
            self._advanced.wait_for(lambda: self._applied[Watched.TOPICS] >= max(revisions), METADATA_CATCH_UP_WAIT_S)
        return True

    async def topics_gone(self, names: Iterable[str]) -> None:
        """Waits (at most ``METADATA_CATCH_UP_WAIT_S``) until the view holds none of the topics
        ``names``: what a handler that just deleted them awaits, so that its client's next request
        to this node does not find them. On the view's catch-up thread, as ``topics_caught_up``."""
        if self._catch_ups is None:
            self._catch_ups = ThreadPoolExecutor(CATCH_UP_THREADS, thread_name_prefix="view-catch-up")
        await asyncio.get_running_loop().run_in_executor(self._catch_ups, self._topics_gone, tuple(names))

    def _topics_gone(self, names: tuple[str, ...]) -> None:
        with self._advanced:
            self._advanced.wait_for(lambda: all(self._state.topic(name) is None for name in names),
                                    METADATA_CATCH_UP_WAIT_S)

    def close(self) -> None:
        """Cancel the watches and end the keeper, also while it is reading again."""
        with self._watches_lock:
            self._closed = True
        self._broken.set()
        self._cancel_watches()
        if self._catch_ups is not None:
            self._catch_ups.shutdown(wait=False)

    def _load_and_watch(self) -> None:
        self._cancel_watches()
        self._broken.clear()
        for kind in self._kinds:
            if self._closed:
                break
            prefix = watched_prefix(self._cluster, kind)
            items, revision = self._store.get_prefix_at(prefix)
            with self._lock:
                self._state.load(kind, ((item.key, item.value) for item in items))
                self._advance(kind, revision)
            self._watching(self._store.watch_prefix(prefix, functools.partial(self._apply, kind), self._broken.set,
                                                    revision + 1))
        if self._closed:
            self._broken.set()  # closed after the clear above: the keeper must see it and end

    def _watching(self, watch_id: int) -> None:
        """Keep ``watch_id`` to cancel at close, or cancel it now if the view closed meanwhile."""
        with self._watches_lock:
            if not self._closed:
                self._watch_ids.append(watch_id)
                return
        self._store.cancel_watch(watch_id)

    def _apply(self, kind: Watched, events: list[WatchEvent]) -> None:
        with self._lock:
            self._state.apply((event.key, event.value) for event in events)
            if events:
                self._advance(kind, events[-1].mod_revision)

    def _advance(self, kind: Watched, revision: int) -> None:
        """Record that ``kind`` has applied ``revision`` (under the lock); never moves back."""
        if revision > self._applied[kind]:
            self._applied[kind] = revision
            self._advanced.notify_all()

    def _keep(self) -> None:
        while True:
            self._broken.wait()
            if self._closed:
                return
            try:
                self._load_and_watch()
                logger.info("cluster view of %s: watching again after a broken watch", self._cluster)
            except CoordinatorUnavailable as error:
                logger.warning("cluster view of %s: etcd did not answer (%s); serving the last view", self._cluster,
                               error)
                self._broken.set()
                time.sleep(METADATA_REWATCH_BACKOFF_S)

    def _cancel_watches(self) -> None:
        with self._watches_lock:
            watch_ids, self._watch_ids = self._watch_ids, []
        for watch_id in watch_ids:
            self._store.cancel_watch(watch_id)
