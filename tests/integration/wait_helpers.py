"""Waiting for a state in the integration tests: the one polling loop they share.

A test that needs the cluster to reach a state by itself (a leader elected, an ISR full again,
every message read) polls for it with ``wait_until``. The bound is generous, because the 2-core
machine is shared and noisy: it is reached only when something is broken, so a passing test
never waits it out.
"""

from __future__ import annotations

import time
from typing import Callable, TypeVar

from mafka4.errors import CoordinatorUnavailable

T = TypeVar("T")

# The default bound of a wait; modules whose waits span a lease expiry and a restart pass a longer one.
WAIT_S = 60
POLL_INTERVAL_S = 0.1


def wait_until(predicate: Callable[[], T], timeout_s: float = WAIT_S, interval_s: float = POLL_INTERVAL_S) -> T | None:
    """The first true value of ``predicate``, or its last (false) value once ``timeout_s`` passed.

    etcd not answering (``CoordinatorUnavailable``) counts as false: several tests stop or freeze
    etcd, and most states are read from it. ``predicate`` runs at least once, and once more after
    the bound, so a wait never gives up on a state that holds by then.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            value = predicate()
        except CoordinatorUnavailable:
            value = None
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(interval_s)
