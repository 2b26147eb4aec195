"""The key hash: one stable 64-bit hash of a message key, used by every partitioner.

Python's ``hash()`` is salted per process, so it cannot place keys; BLAKE2b is stable,
well mixed and runs in C.
"""

from __future__ import annotations

import hashlib

KEY_HASH_BITS = 64
KEY_HASH_SPACE = 1 << KEY_HASH_BITS


def key_hash(key: bytes) -> int:
    """An unsigned 64-bit hash of ``key``, the same in every process and on every machine."""
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big")
