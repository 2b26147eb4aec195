"""The client's side of SASL SCRAM-SHA-256 (RFC 5802, RFC 7677), on the standard library alone.

A client command pays for every module it imports on each start; the SCRAM library the nodes
use (``mafka4.security.scram``) costs tens of milliseconds of a command's start, for TLS channel
binding and package metadata a client never needs. So the client speaks the exchange itself::

    client-first   n,,n=<user>,r=<client nonce>
    server-first   r=<client nonce + server nonce>,s=<salt>,i=<iterations>
    client-final   c=biws,r=<nonce>,p=<proof>          the client proves it knows the password
    server-final   v=<server signature>                 the server proves it holds the credential

Also owns what both sides share: the mechanism's name, a message's bounds and text
(``decoded_message``) and the password's SASLprep (RFC 4013, as the server applied it when it
made the credential).

Invariants:

- No channel binding (gs2 header ``n,,``), no authorization identity, no extensions sent. A user
  name is a valid one (``mafka4.security.principals``), so it holds no ',' or '=' and needs no
  escaping.
- The calls come in order: ``first``, ``respond``, ``finish``, each once. A call out of turn, a
  server message that is malformed, too long, carries an error (``e=``), or whose nonce does not
  extend ours, an iteration count outside ``SCRAM_ITERATIONS_DEFAULT..SCRAM_ITERATIONS_MAX``,
  or a server signature that does not match raises ``AuthenticationFailed`` and ends the
  exchange, never any other error.
- The server signature is compared in constant time (``hmac.compare_digest``).

The salted password (PBKDF2 of ``SCRAM_ITERATIONS_DEFAULT`` or more HMACs, a few ms) is derived
once per user, password, salt and iteration count in a process (``PasswordKeys``, at most
``SCRAM_CLIENT_KEYS_MAX`` kept), as the standard clients cache it: a client opens a connection
to each node it reads from, and a group member that joins opens several in a row. The keys are
no more secret than the password the process holds to derive them; a server that changed the
salt or the count (a password reset) simply misses the cache.

Pure apart from the client nonce, which must be unpredictable and comes from ``secrets``.
"""

from __future__ import annotations

import base64
import binascii
import enum
import hashlib
import hmac
import secrets
import stringprep
import unicodedata

from mafka4.errors import AuthenticationFailed, InvalidConfig
from mafka4.limits import (
    SCRAM_CLIENT_KEYS_MAX,
    SCRAM_ITERATIONS_DEFAULT,
    SCRAM_ITERATIONS_MAX,
    SCRAM_MESSAGE_BYTES_MAX,
)
from mafka4.security.principals import validate_user_name

MECHANISM = "SCRAM-SHA-256"
# No channel binding and no authorization identity; client-final's c= repeats this header in base64.
_GS2_HEADER = "n,,"
_CHANNEL_BINDING = base64.b64encode(_GS2_HEADER.encode()).decode()
# 24 random bytes: 192 bits, past guessing; in URL-safe base64, which never holds ',' (a nonce must not).
_NONCE_BYTES = 24

# SASLprep's prohibited output (RFC 4013 section 2.3, with unassigned code points refused as for
# a stored string), each with the reason a refusal names. Non-ASCII spaces (C.1.2) are mapped
# before NFKC, which yields none (nor any character of B.1) from any other code point.
_PROHIBITED = (
    (stringprep.in_table_a1, "an unassigned code point"),
    (stringprep.in_table_c21_c22, "a control character"),
    (stringprep.in_table_c3, "a private use character"),
    (stringprep.in_table_c4, "a non-character code point"),
    (stringprep.in_table_c5, "a surrogate code point"),
    (stringprep.in_table_c6, "a character inappropriate for plain text"),
    (stringprep.in_table_c7, "a character inappropriate for canonical representation"),
    (stringprep.in_table_c8, "a display-changing or deprecated character"),
    (stringprep.in_table_c9, "a tagging character"),
)


class _Stage(enum.Enum):
    """Where a client's exchange is: the call it expects next."""

    FIRST = "first()"
    RESPOND = "respond()"
    FINISH = "finish()"
    OVER = "no call: it is over"


class _ExchangeFailed(Exception):
    """Why one step of the exchange failed; ``ScramClientExchange`` turns it into ``AuthenticationFailed``."""


def saslprep(text: str) -> str:
    """``text`` prepared by SASLprep (RFC 4013): spaces mapped, B.1 dropped, NFKC (Unicode 3.2),
    then prohibited characters and bidirectional rules checked; ``ValueError`` saying why not."""
    mapped = "".join(" " if stringprep.in_table_c12(c) else c for c in text if not stringprep.in_table_b1(c))
    prepared = unicodedata.ucd_3_2_0.normalize("NFKC", mapped)
    for position, character in enumerate(prepared):
        for prohibited, what in _PROHIBITED:
            if prohibited(character):
                raise ValueError(f"it has {what}, U+{ord(character):04X}, at position {position}")
    # RFC 3454 section 6: text holding a right-to-left character holds no left-to-right one and
    # starts and ends with a right-to-left one (C.8 is refused above).
    right_to_left = [stringprep.in_table_d1(c) for c in prepared]
    if any(right_to_left):
        if not (right_to_left[0] and right_to_left[-1]):
            raise ValueError("it has right-to-left characters but does not start and end with one")
        if any(stringprep.in_table_d2(c) for c in prepared):
            raise ValueError("it mixes right-to-left and left-to-right characters")
    return prepared


def decoded_message(message: bytes, what: str) -> str:
    """A SCRAM message as text; ``AuthenticationFailed`` if it is too long, not bytes or not UTF-8."""
    if not isinstance(message, (bytes, bytearray, memoryview)):
        raise AuthenticationFailed(f"the {what} message of {MECHANISM} must be bytes, not {type(message).__name__}")
    if len(message) > SCRAM_MESSAGE_BYTES_MAX:
        raise AuthenticationFailed(f"the {what} message of {MECHANISM} has {len(message)} bytes, "
                                   f"more than {SCRAM_MESSAGE_BYTES_MAX}")
    try:
        return bytes(message).decode("utf-8")
    except UnicodeDecodeError:
        raise AuthenticationFailed(f"the {what} message of {MECHANISM} is not UTF-8") from None


class PasswordKeys:
    """ClientKey and ServerKey per (user, SASLprepped password, salt, iterations), derived once
    each; at most ``keys_max`` kept, the oldest forgotten first (see the module docstring)."""

    __slots__ = ("keys_max", "derivations", "_keys")

    def __init__(self, keys_max: int = SCRAM_CLIENT_KEYS_MAX):
        self.keys_max = keys_max
        self.derivations = 0  # PBKDF2 runs so far
        self._keys: dict[tuple[str, bytes, bytes, int], tuple[bytes, bytes]] = {}

    def of(self, user: str, prepared_password: bytes, salt: bytes, iterations: int) -> tuple[bytes, bytes]:
        found = (user, prepared_password, salt, iterations)
        keys = self._keys.get(found)
        if keys is None:
            # Two connections opening at once may both derive: the same keys, written twice.
            keys = password_keys(prepared_password, salt, iterations)
            self.derivations += 1
            while len(self._keys) >= self.keys_max:
                self._keys.pop(next(iter(self._keys)), None)
            self._keys[found] = keys
        return keys


class ScramClientExchange:
    """The client's side of one authentication. Satisfies the client port's ``ClientExchange``."""

    mechanism = MECHANISM

    def __init__(self, user: str, password: str, keys: PasswordKeys | None = None):
        """``InvalidConfig`` if ``user`` is no valid user name or SASLprep refuses ``password``.
        ``keys``: where derived keys are kept (by default the process's, ``PROCESS_PASSWORD_KEYS``)."""
        self._keys = PROCESS_PASSWORD_KEYS if keys is None else keys
        self._user = validate_user_name(user)
        if not isinstance(password, str):
            raise InvalidConfig(f"the password of user {user!r} must be a string, not {type(password).__name__}")
        try:
            self._password = saslprep(password).encode()
        except ValueError as error:
            raise InvalidConfig(f"the password of user {user!r} cannot be used for SCRAM ({error})") from None
        self._nonce = secrets.token_urlsafe(_NONCE_BYTES)
        self._client_first_bare = f"n={user},r={self._nonce}"
        self._server_signature = b""
        self._stage = _Stage.FIRST

    def first(self) -> bytes:
        """client-first."""
        self._enter(_Stage.FIRST, "start")
        self._stage = _Stage.RESPOND
        return (_GS2_HEADER + self._client_first_bare).encode()

    def respond(self, server_first: bytes) -> bytes:
        """client-final, the answer to ``server_first``: costs the server's iteration count of HMACs."""
        what = "answer the server's first message"
        self._enter(_Stage.RESPOND, what)
        text = decoded_message(server_first, "server-first")
        try:
            nonce, salt, iterations = self._server_first_fields(text)
        except _ExchangeFailed as error:
            raise self._failure(what, str(error)) from None
        if iterations > SCRAM_ITERATIONS_MAX:
            raise AuthenticationFailed(
                f"the server asks {iterations} {MECHANISM} iterations, more than the "
                f"{SCRAM_ITERATIONS_MAX} a client computes: it is no mafka4 node; check the bootstrap addresses")
        client_key, server_key = self._keys.of(self._user, self._password, salt, iterations)
        without_proof = f"c={_CHANNEL_BINDING},r={nonce}"
        auth_message = f"{self._client_first_bare},{text},{without_proof}".encode()
        client_signature = _hmac(hashlib.sha256(client_key).digest(), auth_message)
        proof = bytes(key ^ signature for key, signature in zip(client_key, client_signature))
        self._server_signature = _hmac(server_key, auth_message)
        self._stage = _Stage.FINISH
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def finish(self, server_final: bytes) -> None:
        """Check the server's proof; ``AuthenticationFailed`` if it does not hold the user's credential."""
        what = "check the server's proof"
        self._enter(_Stage.FINISH, what)
        try:
            attributes = _attributes(decoded_message(server_final, "server-final"), "server-final")
            _refuse_server_error(attributes)
            if attributes[0][0] != "v":
                raise _ExchangeFailed(f"server-final starts with {attributes[0][0]!r}=, not v=")
            if not hmac.compare_digest(_unbase64(attributes[0][1], "server signature"), self._server_signature):
                raise _ExchangeFailed("the server signature does not match")
        except _ExchangeFailed as error:
            raise self._failure(what, str(error)) from None

    def _enter(self, stage: _Stage, what: str) -> None:
        """Check that ``stage``'s call is the one expected. The exchange is over until the call
        succeeds and names the next stage, so any failure ends it."""
        expected, self._stage = self._stage, _Stage.OVER
        if expected is not stage:
            raise self._failure(what, f"called out of turn: the exchange expected {expected.value}")

    def _server_first_fields(self, text: str) -> tuple[str, bytes, int]:
        """(nonce, salt, iterations) of server-first; ``_ExchangeFailed`` saying what is wrong."""
        attributes = _attributes(text, "server-first")
        _refuse_server_error(attributes)
        names = "".join(name for name, _ in attributes[:3])
        if names != "rsi":
            raise _ExchangeFailed(f"server-first must start with r=, s=, i=, not {names!r}")
        nonce, salt, iterations = (value for _, value in attributes[:3])
        if not nonce.startswith(self._nonce) or len(nonce) == len(self._nonce):
            raise _ExchangeFailed("the server's nonce does not extend the client's")
        if not all("!" <= c <= "~" for c in nonce):
            raise _ExchangeFailed("the server's nonce holds characters other than printable ASCII")
        if not (iterations.isascii() and iterations.isdigit()) or iterations.startswith("0"):
            raise _ExchangeFailed(f"the iteration count {iterations!r} is no positive whole number")
        if int(iterations) < SCRAM_ITERATIONS_DEFAULT:
            raise _ExchangeFailed(f"the server asks {iterations} iterations, fewer than the "
                                  f"{SCRAM_ITERATIONS_DEFAULT} of RFC 7677")
        return nonce, _unbase64(salt, "salt"), int(iterations)

    def _failure(self, what: str, reason: str) -> AuthenticationFailed:
        return AuthenticationFailed(
            f"user {self._user!r} could not {what} in {MECHANISM} authentication ({reason}): the server "
            f"did not prove it holds the user's credential, or the exchange ran out of turn; check the bootstrap "
            f"addresses and the credential")


def _attributes(text: str, what: str) -> list[tuple[str, str]]:
    """The ``name=value`` attributes of a message, in order; ``_ExchangeFailed`` if one is malformed
    or is the mandatory extension ``m`` (RFC 5802: a client that does not know it must fail)."""
    attributes = []
    for part in text.split(","):
        name, equals, value = part[:1], part[1:2], part[2:]
        if not (name.isascii() and name.isalpha()) or equals != "=" or not value:
            raise _ExchangeFailed(f"{what} has the malformed attribute {part[:40]!r}")
        if name == "m":
            raise _ExchangeFailed(f"{what} has a mandatory extension, which {MECHANISM} clients refuse")
        attributes.append((name, value))
    return attributes


def _refuse_server_error(attributes: list[tuple[str, str]]) -> None:
    name, value = attributes[0]
    if name == "e":
        raise _ExchangeFailed(f"the server answered with the error {value[:80]!r}")


def _unbase64(value: str, what: str) -> bytes:
    try:
        return base64.b64decode(value, validate=True)
    except (ValueError, binascii.Error):
        raise _ExchangeFailed(f"the {what} is not base64") from None


def password_keys(prepared_password: bytes, salt: bytes, iterations: int) -> tuple[bytes, bytes]:
    """RFC 5802's ClientKey and ServerKey of a SASLprepped password (SaltedPassword is PBKDF2 of it):
    the client proves with the first; a stored credential keeps the hash of the first and the second."""
    salted_password = hashlib.pbkdf2_hmac("sha256", prepared_password, salt, iterations)
    return _hmac(salted_password, b"Client Key"), _hmac(salted_password, b"Server Key")


def _hmac(key: bytes, message: bytes) -> bytes:
    return hmac.digest(key, message, "sha256")


# The keys every exchange of this process derives, by default (see the module docstring).
PROCESS_PASSWORD_KEYS = PasswordKeys()
