"""Where each log file stood at its last fsync, so that a chaos run can apply a power loss to real files.

A killed process loses nothing that it wrote: the page cache outlives it. A power loss keeps of
each file only what was fsynced. The simulator models that on its own disk
(``simulations/dst/disk.py``); this module gives a real cluster the same model. The log layer
calls ``fsync`` here instead of ``os.fsync``. In a process started with
``MAFKA4_RECORD_FSYNC_POINTS=1`` (chaos clusters set it; off by default, when ``fsync`` is
``os.fsync`` and one flag test) every fsync of a regular file is followed by a record of that
file's size, in a side file of its directory::

    fsync-points    one line per file:  <inode> <durable bytes> <name the file had when fsynced>

The side file is replaced by rename (no fsync of its own): it must outlive a killed process,
which the page cache ensures, not a power loss. It is rewritten after the fsync returned, so it
never claims more than is durable; a process killed in between leaves it claiming less, which is
what a power loss at that moment could leave too. ``Log.open`` records every file of its
directory at its size after recovery (``record_directory``): what a restarted process finds is
what survived, as the simulator's disk counts it after a crash.

``cut_to_fsync_points(directory)`` (after the process was killed) does what the power loss would
have done, by the simulator's rule at its harshest (a torn write that keeps nothing past the
durable size, and garbles nothing: the simulator and ``tests/fuzz`` cover garbled tails):

* a file recorded under its inode, with its present name or a tmp name of it (``renamed_from``:
  the atomic rename of checkpoints), is cut to its recorded size (files are never made longer);
* any other file was never fsynced since recording began: it is cut to 0 bytes. File creations,
  renames and deletions count as durable at once (directory entries never vanish), as in the
  simulator.

Durability is tracked per inode and name, and a file deleted and created again under the same
name often gets the freed inode back (a segment truncated away and written again). So the log
layer creates its files through ``create`` (or, for a file already open, ``created``), which
records the new file as durable at 0 bytes: without it, the new file would count as fsynced up
to the old file's recorded size.

Bound: a directory's records are pruned of files that no longer exist each time they double, so
they stay within twice the directory's file count (and ``FSYNC_POINTS_PRUNE_ENTRIES_MIN``).
"""

from __future__ import annotations

import contextlib
import os
import stat
import threading
from dataclasses import dataclass
from pathlib import Path

from mafka4.exported_variables import exported_variable
from mafka4.limits import FSYNC_POINTS_PRUNE_ENTRIES_MIN

RECORD_ENV = "MAFKA4_RECORD_FSYNC_POINTS"
FSYNC_POINTS_FILE = "fsync-points"
TMP_SUFFIX = ".tmp"  # of a file written to be renamed into place once fsynced

_recording = os.environ.get(RECORD_ENV, "") not in ("", "0")
# directory -> inode -> (name at the fsync, size at the fsync); and when to prune each directory
_points: dict[str, dict[int, tuple[str, int]]] = {}
_prune_at: dict[str, int] = {}
# A replica checkpoints its high watermark on a worker thread while its log records on the event
# loop's: the records and their side files change under this lock.
_lock = threading.Lock()


def set_recording(enabled: bool) -> None:
    """Start or stop recording in this process (tests; processes follow ``$MAFKA4_RECORD_FSYNC_POINTS``)."""
    global _recording
    _recording = enabled
    if not enabled:
        with _lock:
            _points.clear()
            _prune_at.clear()


def recording() -> bool:
    return _recording


def recording_fsync_points() -> contextlib.AbstractContextManager[None]:
    """Processes started meanwhile (a local cluster's nodes and their actors) record fsync points;
    this one does not change."""
    return exported_variable(RECORD_ENV, "1")


def fsync(fd: int) -> None:
    """``os.fsync``, then, when recording, the file's new durable size."""
    os.fsync(fd)
    if not _recording:
        return
    status = os.fstat(fd)
    if not stat.S_ISREG(status.st_mode):
        return  # a directory: its entries count as durable at once (see the module docstring)
    _record(fd, status.st_ino, status.st_size)


def create(path: str | os.PathLike, flags: int = 0) -> int:
    """``os.open(path, O_WRONLY | O_CREAT | O_TRUNC | flags, 0o644)``: a new, empty file (or one
    emptied), recorded as durable at 0 bytes when recording."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | flags, 0o644)
    created(fd)
    return fd


def created(fd: int) -> None:
    """When recording, take the empty file open as ``fd`` as durable at 0 bytes (its creation is
    durable at once), replacing any record left by a deleted file that had its inode."""
    if not _recording:
        return
    status = os.fstat(fd)
    assert status.st_size == 0, f"created() on a file of {status.st_size} bytes"
    _record(fd, status.st_ino, 0)


def record_synced(path: str | os.PathLike, inode: int, size: int) -> None:
    """When recording, take the file at ``path`` as durable at ``size`` bytes: an fsync of it that
    began when it held ``size`` bytes returned (``log.pending_flush``). Nothing is recorded if
    ``path`` now holds another file (``inode`` differs) or none."""
    if not _recording:
        return
    path = os.path.realpath(path)
    try:
        if os.stat(path).st_ino != inode:
            return
    except FileNotFoundError:
        return
    _record_at(*os.path.split(path), inode, size)


def _record(fd: int, inode: int, size: int) -> None:
    _record_at(*os.path.split(os.readlink(f"/proc/self/fd/{fd}")), inode, size)


def _record_at(directory: str, name: str, inode: int, size: int) -> None:
    with _lock:
        points = _points.setdefault(directory, {})
        points[inode] = (name, size)
        if len(points) >= _prune_at.get(directory, FSYNC_POINTS_PRUNE_ENTRIES_MIN):
            _prune(directory, points)
        _write(directory, points)


def record_directory(directory: str | os.PathLike) -> None:
    """When recording, take every file in ``directory`` as durable at its present size."""
    if not _recording:
        return
    directory = os.path.realpath(directory)
    points = {}
    with os.scandir(directory) as entries:
        for entry in entries:
            if entry.name != FSYNC_POINTS_FILE and entry.is_file(follow_symlinks=False):
                status = entry.stat(follow_symlinks=False)
                points[status.st_ino] = (entry.name, status.st_size)
    with _lock:
        _points[directory] = points
        _prune_at[directory] = max(FSYNC_POINTS_PRUNE_ENTRIES_MIN, 2 * len(points))
        _write(directory, points)


def renamed_from(recorded_name: str, name: str) -> bool:
    """Whether a file fsynced as ``recorded_name`` and now named ``name`` kept what was fsynced:
    the same name, or a tmp name of it (the atomic-rename pattern: ``name.tmp``, or
    ``name.<writer>.tmp`` where two writers stage beside each other). Works on paths as on names."""
    return recorded_name == name or (recorded_name.startswith(name + ".") and recorded_name.endswith(TMP_SUFFIX))


def _prune(directory: str, points: dict[int, tuple[str, int]]) -> None:
    with os.scandir(directory) as entries:
        present = {entry.inode(): entry.name for entry in entries}
    for inode, (name, _) in list(points.items()):
        if inode not in present or not renamed_from(name, present[inode]):
            del points[inode]
    _prune_at[directory] = max(FSYNC_POINTS_PRUNE_ENTRIES_MIN, 2 * len(points))


def _write(directory: str, points: dict[int, tuple[str, int]]) -> None:
    text = "".join(f"{inode} {size} {name}\n" for inode, (name, size) in points.items())
    target = os.path.join(directory, FSYNC_POINTS_FILE)
    tmp = target + TMP_SUFFIX
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)
    os.replace(tmp, target)


def read_fsync_points(directory: str | os.PathLike) -> dict[int, tuple[str, int]] | None:
    """The records of ``directory`` (inode -> (name, durable bytes)), or None if it has none."""
    try:
        text = (Path(directory) / FSYNC_POINTS_FILE).read_text()
    except FileNotFoundError:
        return None
    points = {}
    for line in text.splitlines():
        inode, size, name = line.split(" ", 2)
        points[int(inode)] = (name, int(size))
    return points


@dataclass(frozen=True, slots=True)
class Cut:
    """What ``cut_to_fsync_points`` did to one directory."""

    files_cut: int
    bytes_lost: int


def cut_to_fsync_points(directory: str | os.PathLike) -> Cut:
    """Cut every file of ``directory`` back to its last fsync point (see the module docstring).

    Call it only while no process has the directory open. Raises ``FileNotFoundError`` if the
    directory has no records (its process did not record fsync points).
    """
    directory = Path(directory)
    points = read_fsync_points(directory)
    if points is None:
        raise FileNotFoundError(f"{directory / FSYNC_POINTS_FILE}: this log was not opened by a process "
                                f"recording fsync points (${RECORD_ENV}=1)")
    files_cut = bytes_lost = 0
    for path in sorted(directory.iterdir()):
        if path.name in (FSYNC_POINTS_FILE, FSYNC_POINTS_FILE + TMP_SUFFIX) or not path.is_file():
            continue
        status = path.stat()
        name, durable = points.get(status.st_ino, ("", 0))
        if not renamed_from(name, path.name):
            durable = 0
        if status.st_size > durable:
            os.truncate(path, durable)
            files_cut += 1
            bytes_lost += status.st_size - durable
    return Cut(files_cut, bytes_lost)


def cut_tree_to_fsync_points(root: str | os.PathLike) -> Cut:
    """``cut_to_fsync_points`` on every directory under ``root`` (included) that has records: the
    log directories of one node."""
    files_cut = bytes_lost = 0
    for directory, _, names in os.walk(root):
        if FSYNC_POINTS_FILE in names:
            cut = cut_to_fsync_points(directory)
            files_cut += cut.files_cut
            bytes_lost += cut.bytes_lost
    return Cut(files_cut, bytes_lost)
