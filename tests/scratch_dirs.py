"""Scratch directories on a memory file system, for the property tests that write thousands of logs.

``memory_scratch()`` is ``tempfile.TemporaryDirectory()`` on tmpfs (``/dev/shm``) where the machine
has one, else in the usual temp directory. A log fsyncs its segment, indexes, checkpoint and
directory as it flushes and rolls: about 0.5 ms each on this machine's ext4, and the log recovery
tests made some 20,000 of them, most of their time. On tmpfs the same calls run and return at once.

What those tests check does not depend on durability: a crash there is a copy of the live
directory (which holds every write, fsynced or not) or descriptors closed without a flush, and
damage is written into the files by the test. Tests where the file system's own behaviour is
part of the check stay on disk: the power-loss tests count on ext4 handing a freed inode out
again, which tmpfs does not do.
"""

from __future__ import annotations

import os
import tempfile

MEMORY_FILE_SYSTEM = "/dev/shm"


def memory_scratch() -> tempfile.TemporaryDirectory:
    """A temporary directory on tmpfs if there is one (removed with its contents on exit)."""
    return tempfile.TemporaryDirectory(dir=MEMORY_FILE_SYSTEM if os.path.isdir(MEMORY_FILE_SYSTEM) else None)
