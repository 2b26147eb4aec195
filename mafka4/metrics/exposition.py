"""``MetricsServer``: one process's Prometheus metrics served over HTTP (a shell).

A node process (a physical replica actor, a read node) serves its metrics on a port of its own,
named in its liveness key beside its client port (``metrics_address``), where ``mafka4 status``
finds it for Prometheus (``metrics.targets``). The server is prometheus_client's
(``start_http_server``: a daemon thread answering each scrape in a thread of its own), given a
private ``CollectorRegistry`` holding one collector: nothing is registered globally, so any number
of servers live in one process (tests, the simulator) and none exposes another's metrics.

Each scrape takes a fresh snapshot and builds the families from it (``metrics.families``): no
metric is kept between scrapes, and an idle node pays nothing between them.

Threads. The snapshot function is called on the server's scrape thread, while the process's
state belongs to its event loop (the actors' counters and describes are plain dicts and ints
changed by the loop, without locks). So the actors hand ``on_loop(loop, describe)``: the scrape
thread schedules the coroutine on the loop (``run_coroutine_threadsafe``) and waits for its result,
so the snapshot is taken between two steps of the loop, like any other request, and what the
scrape thread then reads is the snapshot's own copy. A loop that does not take the snapshot within
``METRICS_SNAPSHOT_TIMEOUT_S`` fails the scrape (HTTP 500: Prometheus shows the target down)
rather than reporting stale figures.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Awaitable, Callable, Iterator

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.metrics_core import Metric

from mafka4.limits import METRICS_SNAPSHOT_TIMEOUT_S

logger = logging.getLogger(__name__)

Snapshot = Callable[[], dict]
Families = Callable[[dict], list[Metric]]


def on_loop(loop: asyncio.AbstractEventLoop, take: Callable[[], Awaitable[dict]],
            timeout_s: float = METRICS_SNAPSHOT_TIMEOUT_S) -> Snapshot:
    """A snapshot function for another thread: it runs ``take()`` on ``loop`` and waits at most
    ``timeout_s`` for its result (``TimeoutError`` after that)."""
    def snapshot() -> dict:
        if loop.is_closed():
            raise RuntimeError("the process's event loop is closed: it serves no metrics")
        future = asyncio.run_coroutine_threadsafe(take(), loop)
        try:
            return future.result(timeout_s)
        except TimeoutError:
            future.cancel()
            raise TimeoutError(f"the event loop took no metrics snapshot within {timeout_s} s") from None
    return snapshot


class _SnapshotCollector:
    """A collector that builds its families from a new snapshot on every scrape."""

    def __init__(self, name: str, families: Families, snapshot: Snapshot):
        self._name, self._families, self._snapshot = name, families, snapshot

    def collect(self) -> Iterator[Metric]:
        try:
            snapshot = self._snapshot()
        except Exception as error:
            logger.warning("%s: a scrape failed, no snapshot: %s: %s", self._name, type(error).__name__, error)
            raise
        yield from self._families(snapshot)


class MetricsServer:
    """Serves ``families(snapshot())`` of process ``name`` to Prometheus; see the module docstring."""

    def __init__(self, name: str, families: Families, snapshot: Snapshot):
        self._name = name
        self.registry = CollectorRegistry(auto_describe=False)  # private: see the module docstring
        self.registry.register(_SnapshotCollector(name, families, snapshot))
        self._server = None
        self._thread: threading.Thread | None = None
        self.address: str | None = None

    def start(self, host: str, port: int = 0) -> str:
        """Serve on ``host``:``port`` (0: a free port); the address, ``host:port``. Idempotent."""
        if self._server is None:
            self._server, self._thread = start_http_server(port, host, registry=self.registry)
            bound_host, bound_port = self._server.server_address[:2]
            self.address = f"{bound_host}:{bound_port}"
            logger.info("%s serves metrics on http://%s/metrics", self._name, self.address)
        return self.address

    def stop(self) -> None:
        """Stop serving and close the port (waits for the server's thread: up to half a second,
        its poll interval, so an event loop calls it off the loop). Idempotent."""
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is not None:
            server.shutdown()
            server.server_close()
            thread.join()


def start_on_loop(name: str, families: Families, take: Callable[[], Awaitable[dict]],
                  host: str) -> MetricsServer | None:
    """A ``MetricsServer`` of the process whose event loop runs this, taking ``take()`` on that loop
    (``on_loop``), serving on a free port of ``host``; None (logged) if it could not start: the
    process serves everything else regardless."""
    server = MetricsServer(name, families, on_loop(asyncio.get_running_loop(), take))
    try:
        server.start(host)
    except OSError:
        logger.exception("%s serves no metrics: its metrics server did not start on %s", name, host)
        return None
    return server
