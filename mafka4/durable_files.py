"""Files replaced whole and durably, for a file that must survive a crash whole or not at all
(the admin's credential file, event logs).

``replace_file`` writes a temporary file beside the target (a fresh name, created with mode 0600
by ``mkstemp`` and set to ``mode`` before anything is written), fsyncs it, renames it over the
target and fsyncs the directory. A reader sees the old file or the new one, never part of one;
after a crash the disk holds one of them whole (a temporary file may be left beside it); and
the file is never readable by more than ``mode`` allows, not even for a moment, whatever the
umask. The log layer stages its own checkpoints (``log.recovery_point``) but syncs directories
with ``fsync_directory`` too.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import BinaryIO, Callable


def fsync_directory(directory: Path) -> None:
    """Make file creations, renames and deletions in ``directory`` durable."""
    descriptor = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def replace_file(path: Path, write: Callable[[BinaryIO], None], mode: int) -> Path:
    """Replace ``path`` by what ``write`` writes to the binary file it is given; returns ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(descriptor, mode)
        with os.fdopen(descriptor, "wb") as file:
            write(file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    fsync_directory(path.parent)
    return path
