"""What every consumer returns (``Message``) and how consumers name themselves (``new_member_id``)."""

from __future__ import annotations

import os
import secrets
import socket
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Message:
    """One message as a consumer sees it; ``partition`` is the VP id when read from virtual partitions."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes], ...]


def new_member_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(4)}".replace("/", "_")
