"""The simulated disk: what survives a crash is exactly what the real code fsynced.

The real ``Log`` (``mafka4.log.log``) writes real files, here in a temporary directory
(on tmpfs when there is one). While a run is active, ``SimDisk`` replaces ``os.fsync``: the
call records how many bytes of that file are durable (its size at the fsync) and skips the
syscall. ``crash(directory)`` is a power loss of the machine owning ``directory``:

* every descriptor open into it is closed (the process died);
* every file larger than its durable size loses part of its unflushed tail: it is cut at a
  random length between its durable size and its size (a torn write) and, sometimes, part of
  what is kept past the durable size is overwritten with random bytes (sectors written in
  part). A process crash without power loss (nothing lost) is the case where the cut keeps
  everything.

Simplifications, stated so a reader can judge the results: file creations, renames and
deletions are durable at once (directory entries never vanish; note that
``log.checkpoint.write_checkpoint``, ``IndexFile.save`` and a background flush's recovery
point do not fsync the directory after their rename, and a log flushing in the background
fsyncs it after a roll only with its next flush); a file's bytes below its durable size are
never damaged (no bit rot: ``tests/fuzz`` covers damaged segments); durability is tracked per
inode and the path it had when fsynced (or a tmp path of it, ``fsync_points.renamed_from``:
the atomic-rename pattern), so a file at another path reusing a freed inode counts as never
fsynced. A file created again at the *same* path
that got the freed inode back would count as fsynced up to the old file's size; the disk lives
on tmpfs (``/dev/shm``) where possible, which does not hand freed inode numbers back soon.
(Real clusters' ``mafka4.log.fsync_points`` records each creation instead.)
"""

from __future__ import annotations

import os
import random
import shutil
import stat
import tempfile
from pathlib import Path

from mafka4.log import fsync_points
from mafka4.log.fsync_points import renamed_from

# A torn write garbles at most this many bytes: enough to break a header or a CRC.
GARBLE_BYTES_MAX = 64


class SimDisk:
    def __init__(self, rng: random.Random):
        self._rng = rng
        shm = Path("/dev/shm")
        base = str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None
        self.root = Path(tempfile.mkdtemp(prefix="mafka4-dst-", dir=base))
        self._durable: dict[tuple[int, int], tuple[str, int]] = {}  # (dev, inode) -> (path, size)
        self._real_fsync = None
        self._was_recording = False
        self.torn_files_total = 0
        self.lost_bytes_total = 0

    def __enter__(self) -> "SimDisk":
        assert self._real_fsync is None, "SimDisk is already active"
        self._real_fsync = os.fsync
        os.fsync = self._fsync
        # This disk tracks durability itself. A process started with $MAFKA4_RECORD_FSYNC_POINTS
        # (a replay started by a test while the integration session's cluster records them) would
        # also write the real clusters' fsync-points files into the logs' directories; a crash
        # tears those too, drawing from the run's random stream, and the seed's history changes.
        self._was_recording = fsync_points.recording()
        fsync_points.set_recording(False)
        return self

    def __exit__(self, *exc) -> None:
        os.fsync = self._real_fsync
        self._real_fsync = None
        fsync_points.set_recording(self._was_recording)
        _close_descriptors_into(self.root)  # the logs still open at the end of the run
        shutil.rmtree(self.root, ignore_errors=True)

    def directory(self, *parts: str) -> Path:
        return self.root.joinpath(*parts)

    def _fsync(self, fd: int) -> None:
        status = os.fstat(fd)
        if stat.S_ISREG(status.st_mode):
            path = os.readlink(f"/proc/self/fd/{fd}")
            self._durable[(status.st_dev, status.st_ino)] = (path, status.st_size)

    def _durable_size(self, path: Path, status: os.stat_result) -> int:
        recorded = self._durable.get((status.st_dev, status.st_ino))
        if recorded is None or not renamed_from(recorded[0], str(path)):
            return 0
        return recorded[1]

    def crash(self, directory: Path, lose_unflushed: bool) -> int:
        """Power loss (``lose_unflushed``) or process death of the machine owning ``directory``;
        how many bytes its files lost."""
        _close_descriptors_into(directory)
        if not directory.exists():
            return 0
        lost_bytes = 0
        for path in sorted(p for p in directory.rglob("*") if p.is_file()):
            status = path.stat()
            if lose_unflushed:
                lost_bytes += self._tear(path, status.st_size, self._durable_size(path, status))
            status = path.stat()
            self._durable[(status.st_dev, status.st_ino)] = (str(path), status.st_size)
        return lost_bytes

    def _tear(self, path: Path, size: int, durable: int) -> int:
        if size <= durable:
            return 0
        kept = self._rng.randint(durable, size)
        with open(path, "r+b") as handle:
            if kept > durable and self._rng.random() < 0.3:
                start = self._rng.randint(durable, kept - 1)
                length = min(kept - start, self._rng.randint(1, GARBLE_BYTES_MAX))
                handle.seek(start)
                handle.write(self._rng.randbytes(length))
            handle.truncate(kept)
        self.torn_files_total += 1
        self.lost_bytes_total += size - kept
        return size - kept


def _close_descriptors_into(directory: Path) -> None:
    """Close every descriptor of this process open on a file under ``directory`` (Linux /proc)."""
    prefix = str(directory) + os.sep
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue  # the descriptor of the listing itself, already closed
        if target.startswith(prefix):
            os.close(int(name))
