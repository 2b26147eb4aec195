"""A flush of a log that runs on another thread while appends and reads go on.

The physical replica fsynced its log on its event loop once a second (``flush_interval_ms``).
Each fsync took 5-30 ms here (about 2 ms per MB written since the last one), and every produce,
replica fetch and consumer fetch of that replica waited behind it: a paced produce run at
10,000 msgs/s saw a 40-65 ms stall per partition per second, which set its p99 and p99.9. A
segment roll did the same: it fsynced the segment it closed before starting the next.

Splitting the flush in three keeps the loop free (``Log.start_flush``, ``PendingFlush.run``,
``Log.finish_flush``):

1. On the log's thread, ``Log.start_flush`` notes what the flush will make durable: the log end
   offset, and each file of every segment holding data above the recovery point (the active one,
   and those a roll closed since the last flush) with the bytes it holds now.
2. On any thread, ``run`` fsyncs those files, then the directory if a roll created a segment
   since the last flush (its entry must not vanish once the recovery point passes into it), then
   stages the raised recovery-point checkpoint if the flush makes a whole segment durable
   (``log.recovery_point``). It opens the files again by path, so nothing of the log's own
   (descriptors, segments) is touched off its thread, and a log that closes, rolls or truncates
   meanwhile loses nothing: the fsync then covers a file the log no longer appends to, or fails
   to find the file, which ``finish_flush`` treats as no flush.
3. On the log's thread, ``Log.finish_flush`` advances the recovery point to the noted end
   offset and puts the staged checkpoint in place, unless the log was truncated, closed or
   flushed past it meanwhile.

Bytes written before an fsync began are durable once it returns; bytes written during it may not
be. So the sizes noted in step 1, not the sizes at the end, are what became durable, and the
recovery point moves to the noted offset only.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from mafka4.log.recovery_point import RecoveryPoint, fsync_directory, stage_recovery_point


@dataclass(frozen=True, slots=True)
class FileToSync:
    """One file of the active segment as it stood when a flush began."""

    path: Path
    inode: int  # a file found under ``path`` with another inode is a replacement, not this file
    size: int  # bytes written before the flush began: what the fsync makes durable

    @classmethod
    def of(cls, path: Path, fd: int, size: int) -> "FileToSync":
        return cls(path, os.fstat(fd).st_ino, size)

    @classmethod
    def at(cls, path: Path, size: int) -> "FileToSync":
        """A file the log holds no descriptor of (an index of a segment a roll closed)."""
        return cls(path, os.stat(path).st_ino, size)

    def fsync(self) -> bool:
        """fsync this file; False if ``path`` no longer holds it (truncated away or replaced)."""
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return False
        try:
            if os.fstat(fd).st_ino != self.inode:
                return False
            os.fsync(fd)  # Linux fsyncs the file whatever the descriptor's access mode
            return True
        finally:
            os.close(fd)


@dataclass(slots=True)
class PendingFlush:
    """A flush begun by ``Log.start_flush``: ``run`` it on any thread, then hand it to ``Log.finish_flush``."""

    end_offset: int  # every batch below it was written before the flush began
    messages: int  # messages appended since the flush before, written below ``end_offset``
    truncations: int  # the log's truncation count at the start: a truncation since voids the flush
    files: tuple[FileToSync, ...]
    directory: Path
    sync_directory: bool = False  # a roll created a segment since the last flush
    sync_parent: bool = False  # the log's directory is new: its entry in the parent too
    checkpoint: RecoveryPoint | None = None  # to stage once the files are durable; None: unchanged
    synced: bool = False  # set by ``run``: every file was found and fsynced
    staged: Path | None = None  # set by ``run``: the staged ``checkpoint``, for ``finish_flush`` to commit

    def run(self) -> None:
        """fsync every file, then the directory (and its parent, for a new log), then stage the checkpoint (blocking; meant for a
        worker thread). An fsync error (EIO, ENOSPC) propagates and leaves ``synced`` False."""
        if not all([file.fsync() for file in self.files]):
            return
        if self.sync_directory:
            fsync_directory(self.directory)
        if self.sync_parent:
            fsync_directory(self.directory.parent)
        if self.checkpoint is not None:
            self.staged = stage_recovery_point(self.directory, self.checkpoint)
        self.synced = True
