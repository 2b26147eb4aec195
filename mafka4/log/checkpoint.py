"""Small text checkpoint files (high watermark, leader epochs) written atomically.

A checkpoint is written to ``<name>.tmp``, fsynced, then renamed over ``<name>``, so a
crash leaves either the old or the new content, never a mix.
"""

from __future__ import annotations

import os
from pathlib import Path

from mafka4.log.fsync_points import create, fsync


def write_checkpoint(path: str | os.PathLike, text: str) -> None:
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with os.fdopen(create(tmp), "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        fsync(handle.fileno())
    os.replace(tmp, path)


def read_checkpoint(path: str | os.PathLike) -> str | None:
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
