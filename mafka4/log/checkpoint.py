"""Small text checkpoint files (high watermark, leader epochs) written atomically.

A checkpoint is written to ``<name>.tmp``, fsynced, then renamed over ``<name>``, so a
crash leaves either the old or the new content, never a mix. The first two steps can run on a
worker thread (``stage_checkpoint``) and the rename on the owner's (``commit_checkpoint``), so
that an owner closed meanwhile never puts a late checkpoint in place.
"""

from __future__ import annotations

import os
from pathlib import Path

from mafka4.log.fsync_points import create, fsync


def write_checkpoint(path: str | os.PathLike, text: str) -> None:
    commit_checkpoint(stage_checkpoint(path, text), path)


def stage_checkpoint(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` to the tmp file beside ``path`` and fsync it; returns the tmp file's path."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with os.fdopen(create(tmp), "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        fsync(handle.fileno())
    return tmp


def commit_checkpoint(staged: Path, path: str | os.PathLike) -> None:
    """Put a ``stage_checkpoint``'s file in place at ``path``."""
    os.replace(staged, path)


def read_checkpoint(path: str | os.PathLike) -> str | None:
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
