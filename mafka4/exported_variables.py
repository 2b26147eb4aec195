"""Environment variables set for the length of a ``with`` block, for the processes started in it.

Several switches reach a throwaway cluster's processes (its daemon, Ray raylets and actor
workers) only through their environment, which they inherit when they start: the planted bug,
fsync-point recording, the cluster's home. Each is set with ``exported_variable`` around the
code that starts them, and put back afterwards so that nothing leaks into later clusters or
tests. This process's own reading of a switch does not change: a module that read its variable
at import keeps the value it read (``planted_bugs.planted`` and ``fsync_points.set_recording``
change this process).
"""

from __future__ import annotations

import contextlib
import os
from typing import Iterator


@contextlib.contextmanager
def exported_variable(name: str, value: str | None) -> Iterator[None]:
    """``$name`` is ``value`` meanwhile (None: unset); afterwards, also when the block raised, it
    is what it was before (unset if it was)."""
    previous = os.environ.get(name)
    _assign(name, value)
    try:
        yield
    finally:
        _assign(name, previous)


def _assign(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value
