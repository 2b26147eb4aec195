"""The controller's etcd watches: the standby's on the controller key, the active loop's on liveness and nodes.

``Watches`` keeps them on a client of their own, because a failed call on a client ends every
watch on it. Callbacks run on etcd's thread and only queue ``(kind, events)`` for the
controller's loop; when the queue is full they set ``overflowed`` and the loop reconciles in
full instead. A watch that ends (etcd went away, or its start revision was compacted) queues
``("broken", [])`` and sets ``broken``: its owner reads again and watches from there.
Cancelling drops the events the cancelled watches had already queued.
"""

from __future__ import annotations

import queue

from mafka4.metadata.store import MetadataStore


class Watches:
    """The watches of one controller; see the module docstring."""

    def __init__(self, store: MetadataStore, events: "queue.Queue"):
        self._store, self._events = store, events
        self._ids: list[int] = []
        self.broken = False
        self.overflowed = False

    def start(self, prefix: str, start_revision: int | None, kind: str) -> None:
        self._ids.append(self._store.watch_prefix(
            prefix, lambda events: self._push((kind, events)), self._on_broken, start_revision))

    @property
    def watching(self) -> bool:
        return bool(self._ids) and not self.broken

    def _push(self, item) -> None:
        try:
            self._events.put_nowait(item)
        except queue.Full:
            self.overflowed = True

    def _on_broken(self) -> None:
        self.broken = True
        self._push(("broken", []))

    def cancel_all(self) -> None:
        for watch_id in self._ids:
            self._store.cancel_watch(watch_id)
        self._ids.clear()
        self.broken = self.overflowed = False
        while not self._events.empty():  # events of cancelled watches
            self._events.get_nowait()

    def close(self) -> None:
        self.cancel_all()
        self._store.close()
