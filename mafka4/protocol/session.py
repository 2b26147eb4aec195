"""What a client connection may ask, as it authenticates: the state machine of one connection.

    AWAITING_AUTH --SASL_HANDSHAKE (a mechanism offered)--> AUTHENTICATING
    AUTHENTICATING --SASL_AUTHENTICATE (the exchange succeeded)--> AUTHENTICATED(principal)
    any --authentication failed--> FAILED (the server answers the error, then closes)

    AWAITING_AUTH    API_VERSIONS, SASL_HANDSHAKE
    AUTHENTICATING   SASL_AUTHENTICATE (each step of the exchange)
    AUTHENTICATED    API_VERSIONS and every other registered API, never the handshake again
    FAILED           nothing

A server built without authentication starts each connection AUTHENTICATED as ``ANONYMOUS``.
A request out of turn is refused with an error naming what the connection must do first; it
does not change the state. Transitions the server should never ask for are asserts.

Pure: the server (``protocol.server``) feeds it requests and exchange outcomes.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from mafka4.errors import AuthenticationFailed, MafkaError, NotAuthenticated
from mafka4.protocol.messages import ApiKey, api_name

ANONYMOUS = "ANONYMOUS"

_AUTHENTICATION_APIS = frozenset({ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})


class AuthState(enum.Enum):
    AWAITING_AUTH = "awaiting authentication"
    AUTHENTICATING = "authenticating"
    AUTHENTICATED = "authenticated"
    FAILED = "failed authentication"


@dataclass(frozen=True, slots=True)
class Session:
    """Who sent a request, as a handler sees it: the authenticated principal and the peer's address."""

    principal: str
    peer: str


class SessionMachine:
    """The authentication state of one connection from ``peer``."""

    def __init__(self, peer: str, authenticating: bool):
        self.peer = peer
        self.state = AuthState.AWAITING_AUTH if authenticating else AuthState.AUTHENTICATED
        self.principal: str | None = None if authenticating else ANONYMOUS
        self.mechanism: str | None = None

    def refusal(self, api: int) -> MafkaError | None:
        """Why ``api`` may not be asked now, or None if it may."""
        state = self.state
        if state is AuthState.AWAITING_AUTH and api not in (ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE):
            return NotAuthenticated(f"{self.peer} asked for {api_name(api)} before authenticating: a connection "
                                    f"starts with SASL_HANDSHAKE and SASL_AUTHENTICATE (open it with a credential)")
        if state is AuthState.AUTHENTICATING and api != ApiKey.SASL_AUTHENTICATE:
            return NotAuthenticated(f"{self.peer} asked for {api_name(api)} in the middle of its {self.mechanism} "
                                    f"exchange: finish it with SASL_AUTHENTICATE first")
        if state is AuthState.AUTHENTICATED and api in _AUTHENTICATION_APIS:
            return NotAuthenticated(f"{self.peer} asked for {api_name(api)} but is authenticated already "
                                    f"(as {self.principal!r}): a connection authenticates once")
        if state is AuthState.FAILED:
            return NotAuthenticated(f"{self.peer} failed authentication; open a new connection")
        return None

    def handshake(self, mechanism: str, offered: tuple[str, ...]) -> AuthenticationFailed | None:
        """The client chose ``mechanism``: None when it is offered (the exchange begins), else the
        failure to answer (and the connection closes)."""
        assert self.state is AuthState.AWAITING_AUTH, self.state
        if mechanism not in offered:
            self.state = AuthState.FAILED
            return AuthenticationFailed(f"{self.peer} asked for SASL mechanism {mechanism!r:.60}; this server offers "
                                        f"{list(offered)}")
        self.state, self.mechanism = AuthState.AUTHENTICATING, mechanism
        return None

    def authenticated(self, principal: str) -> None:
        assert self.state is AuthState.AUTHENTICATING, self.state
        self.state, self.principal = AuthState.AUTHENTICATED, principal

    def failed(self) -> None:
        self.state = AuthState.FAILED

    def session(self) -> Session:
        assert self.state is AuthState.AUTHENTICATED, self.state
        return Session(self.principal, self.peer)
