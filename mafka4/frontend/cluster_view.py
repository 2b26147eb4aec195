"""A node's watched view of its cluster's metadata: ``view_state.ViewState`` kept current from etcd.

Each prefix of ``view_state.Watched`` is read once with its revision R and watched from R + 1, so
the state sees every change in etcd's order. A watch that ends (etcd went away, its member died,
the revision was compacted) leaves the state as it was, and still answering, while a keeper
thread reads every prefix again and watches anew, retrying every
``METADATA_REWATCH_BACKOFF_S`` until etcd answers: clients keep being served from the last view
while etcd is away, as the design promises of the data path. Callers read through ``read``,
which holds the lock the watch threads write under; what they read is only as fresh as the
watches, which is how a Kafka broker's metadata cache behaves too.

One view per serving process: it costs one etcd watch per prefix, however many clients connect.
A process that needs only some of the prefixes (a replica's port checks users and ACLs only)
names them, and is woken by nothing else.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable, TypeVar

from mafka4.errors import CoordinatorUnavailable
from mafka4.frontend.view_state import ViewState, Watched, watched_prefix
from mafka4.limits import METADATA_REWATCH_BACKOFF_S
from mafka4.metadata.store import MetadataStore, WatchEvent

logger = logging.getLogger(__name__)
T = TypeVar("T")


class ClusterView:
    """The watched metadata of ``cluster`` in ``store``; see the module docstring."""

    def __init__(self, store: MetadataStore, cluster: str, kinds: tuple[Watched, ...] = tuple(Watched)):
        self._store, self._cluster, self._kinds = store, cluster, kinds
        self._state = ViewState(cluster)
        self._lock = threading.Lock()
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

    def close(self) -> None:
        """Cancel the watches and end the keeper, also while it is reading again."""
        with self._watches_lock:
            self._closed = True
        self._broken.set()
        self._cancel_watches()

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
            self._watching(self._store.watch_prefix(prefix, self._apply, self._broken.set, revision + 1))
        if self._closed:
            self._broken.set()  # closed after the clear above: the keeper must see it and end

    def _watching(self, watch_id: int) -> None:
        """Keep ``watch_id`` to cancel at close, or cancel it now if the view closed meanwhile."""
        with self._watches_lock:
            if not self._closed:
                self._watch_ids.append(watch_id)
                return
        self._store.cancel_watch(watch_id)

    def _apply(self, events: list[WatchEvent]) -> None:
        with self._lock:
            self._state.apply((event.key, event.value) for event in events)

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
