"""``LogDirBudget``: the byte bound of one node's log directory (``log_dir_bytes_max``).

A full disk, without filling a disk: every ``Log`` of a node (a read node's VP logs, a write
node's replica logs) asks the node's budget before it writes an append, and past the bound the
append fails as a full disk would fail it, with ``OSError(errno.ENOSPC)``, before a byte is
written (``Log`` checks a whole append at once, so a refused append leaves the log at its last
batch boundary). Only appends are refused: index entries, checkpoints and new segment files are
a few bytes each, and on a real full disk they would fail too, which this does not model.

The directory's size is the sum of its regular files' sizes (``directory_bytes``), measured at
most every ``LOG_DIR_SCAN_INTERVAL_MS``; in between the budget adds what its own logs appended.
Logs in other processes (each write-node replica is a process of its own) show at the next
measurement, so the bound is exact within one process (a read node) and may be passed by up to a
second of the other processes' appends on a write node, as a quota checked in the background
would be. Without a bound (None, the default) nothing is measured and every append passes.

Used from one thread (the event loop of the actor that owns the logs).
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from mafka4.errors import InvalidConfig
from mafka4.limits import LOG_DIR_SCAN_INTERVAL_MS


def directory_bytes(root: str | os.PathLike) -> int:
    """Total size of the regular files under ``root`` (0 if it does not exist)."""
    total = 0
    for directory, _, names in os.walk(root):
        for name in names:
            try:
                total += os.stat(os.path.join(directory, name), follow_symlinks=False).st_size
            except FileNotFoundError:
                pass  # deleted while walking (retention, a tmp file renamed)
    return total


class LogDirBudget:
    """The bound of the log directory ``root``, shared by every log under it in this process."""

    def __init__(self, root: str | os.PathLike, bytes_max: int | None = None):
        self.root = Path(root)
        self._bytes_max: int | None = None
        self._measured_bytes = 0
        self._measured_ms: int | None = None
        self._appended_since_bytes = 0
        self.set_bytes_max(bytes_max)

    @property
    def bytes_max(self) -> int | None:
        return self._bytes_max

    def set_bytes_max(self, bytes_max: int | None) -> None:
        """Change the bound (None: no bound); the next append measures the directory afresh."""
        if bytes_max is not None and (isinstance(bytes_max, bool) or not isinstance(bytes_max, int) or bytes_max < 0):
            raise InvalidConfig(f"log_dir_bytes_max={bytes_max!r} must be a byte count >= 0, or None for no bound")
        self._bytes_max = bytes_max
        self._measured_ms = None

    def used_bytes(self, now_ms: int) -> int:
        """The directory's size as the budget knows it (measured again when the last measure is old)."""
        if self._measured_ms is None or now_ms - self._measured_ms >= LOG_DIR_SCAN_INTERVAL_MS:
            self._measured_bytes, self._measured_ms = directory_bytes(self.root), now_ms
            self._appended_since_bytes = 0
        return self._measured_bytes + self._appended_since_bytes

    def reserve(self, append_bytes: int, now_ms: int) -> None:
        """Let an append of ``append_bytes`` through, or raise ENOSPC if it would pass the bound."""
        if self._bytes_max is None:
            return
        used = self.used_bytes(now_ms)
        if used + append_bytes > self._bytes_max:
            raise OSError(errno.ENOSPC, f"No space left on device: an append of {append_bytes} bytes to a log "
                                        f"directory holding {used} of log_dir_bytes_max={self._bytes_max}", str(self.root))
        self._appended_since_bytes += append_bytes

    def describe(self, now_ms: int) -> dict:
        return {"log_dir": str(self.root), "log_dir_bytes_max": self._bytes_max,
                "log_dir_bytes": self.used_bytes(now_ms) if self._bytes_max is not None else None}


def is_disk_full(error: OSError) -> bool:
    """Whether ``error`` is a full disk (or quota): what ``reserve`` raises, and what a real disk raises."""
    return error.errno in (errno.ENOSPC, errno.EDQUOT)
