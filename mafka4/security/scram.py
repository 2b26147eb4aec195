"""SASL SCRAM-SHA-256 (RFC 5802, RFC 7677): the server's side of the exchange.

The stored credential is ``mafka4.security.credentials``'; the exchange's messages (one
SASL_AUTHENTICATE step each) and the client's side are ``mafka4.security.scram_client``'s, so that clients import neither this module nor the SCRAM
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
- The client-final message's nonce must be the server-first's (RFC 5802 5.1), or that nonce
  behind the client's own nonce once more: librdkafka before 2.6.1 (Debian's kcat links 2.0.2)
  sends the latter (confluentinc/librdkafka#4895), and Kafka brokers 3.8.1-3.9 accepted it. That
  form still holds the server's nonce whole, so it replays nothing; the proof is checked over the
  message as the client sent it, as for any client.

Pure apart from the nonces and the process's mock key, which must be unpredictable and come from
``secrets`` (scramp makes the nonces).
"""

from __future__ import annotations

import hmac
import secrets
from typing import Callable

from scramp import ScramException, ScramMechanism
from scramp.utils import ServerError

from mafka4.errors import AuthenticationFailed, MafkaError
from mafka4.limits import SCRAM_ITERATIONS_DEFAULT
from mafka4.security.credentials import StoredCredential
from mafka4.security.principals import user_name_problem
from mafka4.security.scram_client import MECHANISM, decoded_message

_SCRAM = ScramMechanism(MECHANISM)
# Keys the mock credentials of one process derive from, when its caller passes none.
_PROCESS_MOCK_KEY = secrets.token_bytes(32)


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
        self._client_nonce: str | None = None

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
                self._client_nonce = _attribute(text.partition(",")[2].partition(",")[2], "r")
                return self._server.get_server_first().encode()
            self._accept_the_doubled_client_nonce(text)
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

    def _accept_the_doubled_client_nonce(self, client_final: str) -> None:
        """Expect librdkafka's nonce (before 2.6.1) if the client sent exactly that; see the module docstring."""
        expected = self._server.nonce
        sent = _attribute(client_final, "r")
        if self._client_nonce and sent == self._client_nonce + str(expected):
            self._server.nonce = type(expected)(sent)

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


def _attribute(message: str, name: str) -> str | None:
    """The value of attribute ``name`` in a SCRAM message's ``k=v,k=v`` list; None if absent."""
    for part in message.split(","):
        if part.startswith(name + "="):
            return part[len(name) + 1:]
    return None
