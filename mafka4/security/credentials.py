"""What the cluster keeps of a user's password: a SCRAM-SHA-256 ``StoredCredential``, and how one is made.

RFC 5802: SaltedPassword = PBKDF2(SASLprep(password), salt, iterations); the credential keeps the
salt, the iterations, StoredKey = H(ClientKey) and ServerKey, never the password nor anything a
client could log in with (the proof needs ClientKey itself). ``make_credential`` runs on the
standard library alone (``scram_client``'s SASLprep and key derivation), so that ``mafka4 user
add`` derives the credential on the client, and the password never leaves it, without the
server's SCRAM library. A credential is validated on construction, since a client may send one.
Pure apart from the salt, which must be unpredictable and comes from ``secrets``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import secrets
from dataclasses import dataclass

from mafka4.errors import InvalidConfig
from mafka4.limits import SCRAM_ITERATIONS_DEFAULT, SCRAM_ITERATIONS_MAX, SCRAM_SALT_BYTES, SCRAM_SALT_BYTES_MAX
from mafka4.security.scram_client import password_keys, saslprep

# StoredKey and ServerKey are SHA-256 digests.
KEY_SIZE = hashlib.sha256().digest_size
# RFC 5802 leaves the salt's length open; scramp refuses less than this (its own salts have 32 bytes).
SHORTEST_SALT = 12
CREDENTIAL_FIELDS = ("salt", "stored_key", "server_key", "iterations")

@dataclass(frozen=True, slots=True)
class StoredCredential:
    """What the cluster keeps of a user's password (RFC 5802's SaltedPassword-derived keys);
    validated on construction (``InvalidConfig`` naming the bad field), since a client may send one
    (``mafka4 user add`` makes it on the client, so the password never leaves it)."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def __post_init__(self) -> None:
        for field in ("salt", "stored_key", "server_key"):
            if type(getattr(self, field)) is not bytes:
                raise InvalidConfig(f"stored credential field {field!r} must be bytes, "
                                    f"not {type(getattr(self, field)).__name__}")
        if not SHORTEST_SALT <= len(self.salt) <= SCRAM_SALT_BYTES_MAX:
            raise InvalidConfig(f"stored credential field 'salt' has {len(self.salt)} bytes, needs "
                                f"{SHORTEST_SALT} to {SCRAM_SALT_BYTES_MAX}")
        for field in ("stored_key", "server_key"):
            if len(getattr(self, field)) != KEY_SIZE:
                raise InvalidConfig(f"stored credential field {field!r} has {len(getattr(self, field))} bytes, "
                                    f"a SHA-256 key has {KEY_SIZE}")
        _iterations(self.iterations, "stored credential field 'iterations'")

    def to_json(self) -> dict:
        """The etcd value: the three byte strings in base64, the iterations as a number."""
        return {"salt": _b64(self.salt), "stored_key": _b64(self.stored_key), "server_key": _b64(self.server_key),
                "iterations": self.iterations}

    @classmethod
    def from_json(cls, value: dict) -> "StoredCredential":
        """The credential of a ``to_json`` value; ``InvalidConfig`` naming the first bad field."""
        if not isinstance(value, dict) or set(value) != set(CREDENTIAL_FIELDS):
            fields = sorted(value) if isinstance(value, dict) else type(value).__name__
            raise InvalidConfig(f"a stored credential must have exactly the fields {list(CREDENTIAL_FIELDS)}, "
                                f"not {fields}: add the user again (mafka4 user add NAME --replace)")
        return cls(_unb64(value, "salt"), _unb64(value, "stored_key"), _unb64(value, "server_key"),
                   value["iterations"])


def make_credential(password: str, iterations: int = SCRAM_ITERATIONS_DEFAULT) -> StoredCredential:
    """A new credential for ``password`` with a fresh random salt; ``InvalidConfig`` if SASLprep
    refuses the password (control characters, ...) or ``iterations`` is out of bounds."""
    iterations = _iterations(iterations, "iterations")
    if not isinstance(password, str):
        raise InvalidConfig(f"a password must be a string, not {type(password).__name__}")
    try:
        prepared = saslprep(password)
    except ValueError as error:
        raise InvalidConfig(f"the password cannot be used for SCRAM ({error}): choose another") from None
    salt = secrets.token_bytes(SCRAM_SALT_BYTES)
    client_key, server_key = password_keys(prepared.encode(), salt, iterations)
    return StoredCredential(salt, hashlib.sha256(client_key).digest(), server_key, iterations)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(value: dict, field: str) -> bytes:
    try:
        return base64.b64decode(value[field], validate=True)
    except (TypeError, ValueError, binascii.Error):
        raise InvalidConfig(f"stored credential field {field!r} must be base64 text, not {value[field]!r}") from None


def _iterations(value: object, what: str) -> int:
    if type(value) is not int or not SCRAM_ITERATIONS_DEFAULT <= value <= SCRAM_ITERATIONS_MAX:
        raise InvalidConfig(f"{what} must be a whole number from {SCRAM_ITERATIONS_DEFAULT} (RFC 7677's least) "
                            f"to {SCRAM_ITERATIONS_MAX}, not {value!r}")
    return value
