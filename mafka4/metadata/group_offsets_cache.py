"""``GroupOffsetsCache``: every group's committed offsets, read from etcd at most every few seconds,
for a node's group lag metrics (``metrics.group_lag``).

A partition's leader (a read node for its VPs, a replica for its physical partition) serves its
groups' lag to Prometheus; the committed offsets live in etcd, written by whoever commits. The
node reads them when scraped, never on a timer (an idle node costs nothing between scrapes:
issue 37), and at most once every ``GROUP_OFFSETS_MAX_AGE_MS`` whatever the scrape rate: one
range read of ``keys.groups_prefix`` (every group's keys; the offsets are picked out of them), so a
scrape's cost in etcd is bounded by the groups' keys, not by the partitions the node leads.

The read runs in the loop's default executor (etcd calls block). A scrape waits for it at most
``GROUP_OFFSETS_READ_WAIT_S``; past that, or when etcd does not answer (``CoordinatorUnavailable``,
logged), the scrape gets the offsets read before (none before the first read) and the read is
tried again once the interval passed. One read is in flight at a time.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Callable

from mafka4.errors import CoordinatorUnavailable
from mafka4.limits import GROUP_OFFSETS_MAX_AGE_MS, GROUP_OFFSETS_READ_WAIT_S
from mafka4.metadata import keys
from mafka4.metadata.store import MetadataStore
from mafka4.metrics.group_lag import CommittedOffsets, committed_offsets

logger = logging.getLogger(__name__)


class GroupOffsetsCache:
    """``cluster``'s committed offsets, read through ``store()``; see the module docstring."""

    def __init__(self, store: Callable[[], MetadataStore], cluster: str, name: str,
                 max_age_ms: int = GROUP_OFFSETS_MAX_AGE_MS, wait_s: float = GROUP_OFFSETS_READ_WAIT_S):
        self._store, self._cluster, self._name = store, cluster, name
        self._max_age_ms, self._wait_s = max_age_ms, wait_s
        self._offsets = CommittedOffsets()
        self._read_ms: int | None = None  # when the last read started (monotonic ms)
        self._reading: asyncio.Task | None = None

    async def offsets(self, now_ms: int) -> CommittedOffsets:
        """The committed offsets, read again first if the last read is ``max_age_ms`` old (``now_ms``:
        a monotonic clock); call it on the node's event loop."""
        if (self._reading is None or self._reading.done()) and (
                self._read_ms is None or now_ms - self._read_ms >= self._max_age_ms):
            self._read_ms = now_ms
            self._reading = asyncio.get_running_loop().create_task(self._read())
        if self._reading is not None and not self._reading.done():
            await asyncio.wait({self._reading}, timeout=self._wait_s)
        return self._offsets

    async def _read(self) -> None:
        try:
            items = await asyncio.to_thread(self._store().get_prefix, keys.groups_prefix(self._cluster))
        except CoordinatorUnavailable as error:
            logger.warning("%s: the groups' committed offsets were not read (%s); the group lag metrics show the "
                           "offsets read before", self._name, error.message)
            return
        except Exception:  # a defect must not fail the scrapes: they show the offsets read before
            logger.exception("%s: the groups' committed offsets were not read", self._name)
            return
        self._offsets = committed_offsets(self._cluster, [(item.key, item.value) for item in items])

    def close(self) -> None:
        if self._reading is not None:
            self._reading.cancel()
