"""The log's recovery-point checkpoint: how far recovery may trust the segments without a scan.

One ASCII line in ``recovery-point``: ``1 <offset> clean|dirty``. Every segment ending at or
below ``offset`` was fsynced with its indexes; ``clean`` says the log was closed cleanly.

The log writes it on its own thread when recovery must not trust more than it did (on open, on
truncation, lowered first) and on close: tmp file, fsync, rename, fsync of the directory
(``write_recovery_point``). A background flush (``log.pending_flush``) that makes a whole
segment durable raises it from a worker thread in two steps instead: the thread writes and
fsyncs a tmp file of its own (``stage_recovery_point``: the log's thread may write
``recovery-point.tmp`` meanwhile, for a truncation or a close), and the log's thread renames it
into place (``commit_recovery_point``) only if nothing it did meanwhile voids it. The rename is
not followed by an fsync of the directory: until the next one, a power loss may bring back the
checkpoint before it, whose offset is lower, so recovery only scans more.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from mafka4.durable_files import fsync_directory
from mafka4.log.fsync_points import TMP_SUFFIX, create, fsync

RECOVERY_POINT_FILE = "recovery-point"
# Where a background flush stages a raised checkpoint (see the module docstring).
STAGED_RECOVERY_POINT_FILE = RECOVERY_POINT_FILE + ".flush" + TMP_SUFFIX
_VERSION = "1"


@dataclass(frozen=True, slots=True)
class RecoveryPoint:
    offset: int  # every segment ending at or below this offset is fsynced
    clean_shutdown: bool


def read_recovery_point(directory: Path) -> RecoveryPoint:
    """The checkpoint, or "nothing known" (0, dirty) when it is missing or unreadable."""
    try:
        fields = (directory / RECOVERY_POINT_FILE).read_text("ascii").split()
    except (FileNotFoundError, UnicodeDecodeError):
        return RecoveryPoint(0, False)
    if len(fields) != 3 or fields[0] != _VERSION or not fields[1].isdigit():
        return RecoveryPoint(0, False)
    if fields[2] not in ("clean", "dirty"):
        return RecoveryPoint(0, False)
    return RecoveryPoint(int(fields[1]), fields[2] == "clean")


def write_recovery_point(directory: Path, point: RecoveryPoint) -> None:
    """Replace the checkpoint durably before returning."""
    _write_fsynced(directory / (RECOVERY_POINT_FILE + TMP_SUFFIX), point)
    os.replace(directory / (RECOVERY_POINT_FILE + TMP_SUFFIX), directory / RECOVERY_POINT_FILE)
    fsync_directory(directory)


def stage_recovery_point(directory: Path, point: RecoveryPoint) -> Path:
    """Write ``point`` to the staging file and fsync it (any thread); returns the file's path."""
    staged = directory / STAGED_RECOVERY_POINT_FILE
    _write_fsynced(staged, point)
    return staged


def commit_recovery_point(staged: Path) -> None:
    """Put a ``stage_recovery_point``'s file in place (the log's thread; see the module docstring)."""
    os.replace(staged, staged.with_name(RECOVERY_POINT_FILE))


def _write_fsynced(path: Path, point: RecoveryPoint) -> None:
    text = f"{_VERSION} {point.offset} {'clean' if point.clean_shutdown else 'dirty'}\n"
    fd = create(path)
    try:
        os.write(fd, text.encode("ascii"))
        fsync(fd)
    finally:
        os.close(fd)
