"""SASL SCRAM-SHA-256 (RFC 5802, RFC 7677): the stored credential and the server's side of the exchange.

The exchange's messages (one SASL_AUTHENTICATE step each) and the client's side are
``mafka4.security.scram_client``'s, so that clients import neither this module nor the SCRAM
library it runs on (nodes pay for that import once).

Invariants:

- etcd holds a ``StoredCredential`` (salt, StoredKey, ServerKey, iterations), never the password
  nor anything a client could log in with: the proof needs ClientKey, and StoredKey is its hash.
- An unknown user takes the path of a wrong password: the server answers its client-first with
  a *mock* credential (salt and keys derived from a secret key and the user name, so the same
  user always gets the same salt), the proof then fails at the same step, and both failures give
  the same ``AuthenticationFailed`` message. Nobody learns from an exchange whether a user
  exists. The mock key is this process's own unless the caller passes one that every node of
  the cluster shares (then an unknown user's salt is also the same on every node).
- ``ScramServerExchange.step`` is called exactly twice; a message out of turn, malformed, longer
  than ``SCRAM_MESSAGE_BYTES_MAX``, or a third step raises ``AuthenticationFailed`` and ends the
  exchange, never any other error. An error raised by ``lookup`` itself (etcd away:
  ``CoordinatorUnavailable``) passes through unchanged, since the client may retry it.
- ``principal`` is set only once the client's proof checked out.

Pure apart from the nonces and the process's mock key, which must be unpredictable and come from
``secrets`` (scramp makes the nonces).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from dataclasses import dataclass
from typing import Callable

from scramp import ScramException, ScramMechanism
from scramp.utils import ServerError

from mafka4.errors import AuthenticationFailed, InvalidConfig, MafkaError
from mafka4.limits import SCRAM_ITERATIONS_DEFAULT, SCRAM_ITERATIONS_MAX, SCRAM_SALT_BYTES_MAX
from mafka4.security.principals import user_name_problem
from mafka4.security.scram_client import MECHANISM, decoded_message

_SCRAM = ScramMechanism(MECHANISM)
# StoredKey and ServerKey are SHA-256 digests.
KEY_SIZE = hashlib.sha256().digest_size
# RFC 5802 leaves the salt's length open; scramp refuses less than this (its own salts have 32 bytes).
SHORTEST_SALT = 12
CREDENTIAL_FIELDS = ("salt", "stored_key", "server_key", "iterations")
# Keys the mock credentials of one process derive from, when its caller passes none.
_PROCESS_MOCK_KEY = secrets.token_bytes(32)


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
    try:
        salt, stored_key, server_key, _ = _SCRAM.make_auth_info(password, iteration_count=iterations)
    except ScramException as error:
        raise InvalidConfig(f"the password cannot be used for SCRAM ({error.args[0]}): choose another") from None
    return StoredCredential(salt, stored_key, server_key, iterations)


def _mock_credential(user: str, mock_key: bytes) -> StoredCredential:
    """The credential an unknown ``user`` seems to have: stable per (user, key), matched by no password."""

    def derive(label: bytes) -> bytes:
        return hmac.digest(mock_key, label + b"\0" + user.encode(), "sha256")

    return StoredCredential(derive(b"salt"), derive(b"stored_key"), derive(b"server_key"), SCRAM_ITERATIONS_DEFAULT)


class ScramServerExchange:
    """The server's side of one authentication: client-first in, server-first out; client-final
    in, server-final out (``step``). Satisfies the client port's ``ServerExchange``."""

    def __init__(self, lookup: Callable[[str], StoredCredential | None], *, mock_key: bytes | None = None):
        """``lookup(user)``: the user's credential, None if there is no such user. ``mock_key``:
        a secret the cluster's nodes share, for unknown users' credentials (default: this process's)."""
        self._lookup = lookup
        self._mock_key = _PROCESS_MOCK_KEY if mock_key is None else mock_key
        self._server = _SCRAM.make_server(self._auth_info)
        self._steps_taken = 0
        self._failed = False
        self._user: str | None = None
        self._principal: str | None = None

    @property
    def principal(self) -> str | None:
        """The user name, once the client proved it knows the password; None before and after a failure."""
        return self._principal

    def _auth_info(self, user: str) -> tuple[bytes, bytes, bytes, int]:
        self._user = user
        # An invalid name is no key to look up (and no user): the mock credential answers it.
        credential = self._lookup(user) if user_name_problem(user) is None else None
        if credential is None:
            credential = _mock_credential(user, self._mock_key)
        return credential.salt, credential.stored_key, credential.server_key, credential.iterations

    def step(self, client_message: bytes) -> bytes:
        """The answer to the client's next message; ``AuthenticationFailed`` if it fails."""
        if self._failed or self._steps_taken >= 2:
            self._failed = True
            raise AuthenticationFailed(f"{MECHANISM} authentication is over: "
                                       f"it takes two steps, and a failed one ends it; authenticate again")
        first = self._steps_taken == 0
        self._steps_taken += 1
        try:
            text = decoded_message(client_message, "client-first" if first else "client-final")
            if first:
                self._server.set_client_first(text)
                return self._server.get_server_first().encode()
            self._server.set_client_final(text)
            answer = self._server.get_server_final().encode()
        except (ScramException, ValueError, AuthenticationFailed) as error:
            self._failed = True
            cause = error.__cause__
            if isinstance(cause, MafkaError) and not isinstance(cause, AuthenticationFailed):
                raise cause from None  # lookup's own failure (etcd away): the client may retry it
            raise self._failure(error) from None
        self._principal = self._user
        return answer

    def _failure(self, error: Exception) -> AuthenticationFailed:
        if isinstance(error, AuthenticationFailed):
            return error
        if isinstance(error, ScramException) and error.server_error is ServerError.INVALID_PROOF:
            # A wrong proof, and an unknown user's proof, end here alike: one message for both.
            return AuthenticationFailed(f"user {self._user!r} failed {MECHANISM} authentication: wrong password or "
                                        f"unknown user; check the credential (mafka4 user add)")
        reason = error.args[0] if error.args else type(error).__name__
        return AuthenticationFailed(f"{MECHANISM} authentication failed: the client's message is malformed ({reason}); "
                                    f"use a {MECHANISM} client")


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
