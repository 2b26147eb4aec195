"""A read node's Kafka listener: Kafka's wire protocol, served beside the node's own client port.

Why on the read node, in its process, and not in a gateway of its own: the read node already
holds everything a Kafka broker answers from. It watches the cluster's metadata (topics, VP
layouts, users, ACLs), it authenticates with SCRAM and checks ACLs (``frontend.port_security``,
the same object its client port uses, so both ports follow the same rules), it hosts the VPs
that Kafka consumers read, and it reaches the physical leaders over the cluster's own streams
to forward produce requests. A gateway would need all of that again, plus the users' stored
SCRAM keys (a client's password never reaches the server, so a gateway could not log in to the
cluster as the client), and would add a hop to every fetch.

**Connections.** Each connection reads one request at a time and answers it before reading the
next, as a Kafka broker does: Kafka clients expect answers in the order they asked, and a
produce request's appends keep the order of the requests. A frame is a 4-byte size and the
request; frames are bounded (``KAFKA_UNAUTHENTICATED_FRAME_BYTES_MAX`` until the connection has
authenticated, then ``KAFKA_FRAME_BYTES_MAX``).

**Authentication** is Kafka's SASL: ``SaslHandshake`` names the mechanism, then the steps of a
SCRAM-SHA-256 exchange (the same exchange the client port runs against the same users) come in
``SaslAuthenticate`` requests (after a v1 handshake) or as bare size-prefixed tokens answered in
kind (after a v0 one, as Kafka 0.10 clients send them; librdkafka will not authenticate with a
broker that does not offer v0). Before it succeeds a connection may ask ``ApiVersions``, and
nothing else; a connection that has not authenticated within ``auth_timeout_s`` is closed.
A failed exchange gets ``SASL_AUTHENTICATION_FAILED`` with a message, then the close.

**Failures stay on their connection.** A frame that cannot be read (bad size, truncated, an API
key or version the listener does not serve, a body that does not parse) gets an error answer
when its header could be read (``kafka.wire.error_response``: for ``ApiVersions`` Kafka's own
downgrade answer), then the connection is closed; the listener goes on serving the others. A
handler's failure is answered in its request's error codes (``kafka.error_codes``).

Served APIs and versions: ``SERVED`` (each a range the handlers implement for every version in
it; ``ApiVersions`` advertises exactly these).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Awaitable, Callable, Mapping

from kio.index import load_response_schema

from mafka4.errors import AuthenticationFailed, KafkaWireError
from mafka4.frontend.port_security import MECHANISMS, PortSecurity
from mafka4.kafka import error_codes
from mafka4.kafka.shapes import shaped
from mafka4.kafka.wire import UNSUPPORTED_VERSION, KafkaRequest, api_versions_body, encode_response, error_response, frame_size, read_request
from mafka4.limits import KAFKA_FRAME_BYTES_MAX, KAFKA_UNAUTHENTICATED_FRAME_BYTES_MAX
from mafka4.limits.servers import ClientPortConfig
from mafka4.protocol.session import Session

logger = logging.getLogger(__name__)

API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36
SERVED: Mapping[int, tuple[int, int]] = {
    0: (3, 9),    # Produce: record-batch v2 from v3; v10+ adds fields for KIP-951 leader discovery
    1: (4, 12),   # Fetch: v13+ names topics by id
    2: (1, 7),    # ListOffsets
    3: (1, 12),   # Metadata: v0's empty list meant "every topic"; v13 adds nothing served here
    8: (2, 8),    # OffsetCommit: v9+ carries KIP-848 member epochs
    9: (1, 7),    # OffsetFetch: v8+ batches groups
    10: (0, 4),   # FindCoordinator: v5+ answers KIP-890's transaction errors, v6 share groups
    11: (0, 7),   # JoinGroup: v8 adds a reason, v9 skip_assignment (KIP-814)
    12: (0, 4),   # Heartbeat
    13: (0, 4),   # LeaveGroup: v5 adds a reason
    14: (0, 5),   # SyncGroup
    19: (2, 7),   # CreateTopics: v2 is the first with throttle_time; v5+ answers the topic's configs
    20: (1, 6),   # DeleteTopics: v6 names topics by name or id (ids are refused: mafka4 has none)
    17: (0, 1),   # SaslHandshake: after v0 the exchange's tokens come as bare frames, after v1 in SaslAuthenticate
    18: (0, 3),   # ApiVersions
    22: (0, 4),   # InitProducerId: idempotent producers; v5 (KIP-890) is transactions' only
    36: (0, 2),   # SaslAuthenticate
}

Handler = Callable[[Session, object], Awaitable[dict | None]]


class KafkaListener:
    """Serves ``handlers`` (by API key; each returns the answer's description, or None for no
    answer) to Kafka clients; see the module docstring."""

    def __init__(self, handlers: Mapping[int, Handler], security: PortSecurity, name: str,
                 config: ClientPortConfig = ClientPortConfig()):
        assert set(handlers) | {API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE} == set(SERVED), (
            "every served API has a handler, and only those")
        self._handlers, self._security, self._name, self._config = dict(handlers), security, name, config
        self._server: asyncio.base_events.Server | None = None
        self._connections: set[asyncio.Task] = set()
        self.counters = dict.fromkeys(("connections", "connections_refused", "requests", "bad_frames",
                                       "auth_failures", "errors"), 0)

    async def start(self, host: str, port: int = 0) -> str:
        """Listen on ``host``:``port`` (0: a free port); the address ``host:port``. Idempotent."""
        if self._server is None:
            self._server = await asyncio.start_server(self._accept, host, port)
        bound_host, bound_port = self._server.sockets[0].getsockname()[:2]
        return f"{bound_host}:{bound_port}"

    def close(self) -> None:
        """Stop listening and drop every connection."""
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = "{}:{}".format(*writer.get_extra_info("peername")[:2])
        if len(self._connections) >= self._config.connections_max:
            self.counters["connections_refused"] += 1
            logger.info("%s: closed a connection from %s: %d are open (connections_max)", self._name, peer,
                        self._config.connections_max)
            writer.close()
            return
        self.counters["connections"] += 1
        task = asyncio.current_task()
        self._connections.add(task)
        connection = _Connection(self, peer, writer)
        try:
            await connection.serve(reader)
        except asyncio.CancelledError:
            pass
        finally:
            self._connections.discard(task)
            connection.end()


class _Connection:
    """One Kafka client's connection: its authentication, and its requests one at a time."""

    def __init__(self, listener: KafkaListener, peer: str, writer: asyncio.StreamWriter):
        self._listener, self._peer, self._writer = listener, peer, writer
        self._principal: str | None = None
        self._exchange = None
        self._bare_tokens = False  # after a v0 handshake: the exchange's tokens come as bare frames
        self._timer = asyncio.get_running_loop().call_later(listener._config.auth_timeout_s, self._auth_timed_out)

    def end(self) -> None:
        self._timer.cancel()
        self._writer.close()

    def _auth_timed_out(self) -> None:
        if self._principal is None:
            self._listener.counters["auth_failures"] += 1
            logger.info("%s: closed the connection from %s: not authenticated within auth_timeout_s (%s s)",
                        self._listener._name, self._peer, self._listener._config.auth_timeout_s)
            self._writer.close()

    async def serve(self, reader: asyncio.StreamReader) -> None:
        counters = self._listener.counters
        while True:
            try:
                prefix = await reader.readexactly(4)
                bytes_max = KAFKA_FRAME_BYTES_MAX if self._principal else KAFKA_UNAUTHENTICATED_FRAME_BYTES_MAX
                frame = await reader.readexactly(frame_size(prefix, bytes_max))
            except (asyncio.IncompleteReadError, ConnectionError):
                return  # the client closed the connection (or it broke): nobody waits for an answer
            except KafkaWireError as error:
                counters["bad_frames"] += 1
                logger.info("%s: closing the connection from %s after a bad frame size: %s", self._listener._name,
                            self._peer, error)
                return
            if self._bare_tokens:
                answer = self._bare_step(frame)
                if answer is None or not await self._write(answer):
                    return
                continue
            counters["requests"] += 1
            try:
                request = read_request(frame, SERVED)
            except KafkaWireError as error:
                counters["bad_frames"] += 1
                logger.info("%s: a request from %s it cannot serve: %s", self._listener._name, self._peer, error)
                if error.correlation_id is None or error.api_key is None or error.api_version is None:
                    return
                answered = await self._write(error_response(error.api_key, error.api_version, error.correlation_id,
                                                            error.error_code, SERVED))
                if not (answered and error.api_key == API_VERSIONS and error.error_code == UNSUPPORTED_VERSION):
                    return
                # A client asking a newer ApiVersions than served reads the versions in the answer and
                # asks again, on this connection (KIP-511): it stays open, as a Kafka broker's does.
                continue
            answer, keep_open = await self._answer(request)
            if answer is not None and not await self._write(answer):
                return
            if not keep_open:
                return

    async def _write(self, frame: bytes) -> bool:
        try:
            self._writer.write(frame)
            await self._writer.drain()
            return True
        except ConnectionError:
            return False

    async def _answer(self, request: KafkaRequest) -> tuple[bytes | None, bool]:
        """The request's answer frame (None: no answer) and whether the connection stays open."""
        api = request.api_key
        if api == API_VERSIONS:
            return encode_response(request, api_versions_body(SERVED, request.api_version)), True
        if api == SASL_HANDSHAKE:
            return self._handshake(request)
        if api == SASL_AUTHENTICATE:
            return self._authenticate(request)
        if self._principal is None:
            self._listener.counters["auth_failures"] += 1
            logger.info("%s: closing the connection from %s: it asked for API %d before authenticating (SASL "
                        "SCRAM-SHA-256 is required)", self._listener._name, self._peer, api)
            return None, False
        try:
            description = await self._listener._handlers[api](Session(self._principal, self._peer), request.body)
            if description is None:
                return None, True
            return encode_response(request, shaped(load_response_schema(api, request.api_version), description)), True
        except asyncio.CancelledError:
            raise
        except Exception:  # the handlers answer failures in error codes: this one is a fault of ours
            self._listener.counters["errors"] += 1
            logger.exception("%s: the handler of API %d v%d failed on a request of %s; closing its connection",
                             self._listener._name, api, request.api_version, self._peer)
            return None, False

    def _handshake(self, request: KafkaRequest) -> tuple[bytes, bool]:
        mechanism = request.body.mechanism
        if self._principal is not None or self._exchange is not None:
            return self._sasl_answer(request, {"error_code": error_codes.ILLEGAL_SASL_STATE,
                                               "mechanisms": MECHANISMS}), False
        if mechanism not in MECHANISMS:
            self._listener.counters["auth_failures"] += 1
            logger.info("%s: %s asked for SASL mechanism %r; only %s is served", self._listener._name, self._peer,
                        mechanism, MECHANISMS)
            return self._sasl_answer(request, {"error_code": error_codes.UNSUPPORTED_SASL_MECHANISM,
                                               "mechanisms": MECHANISMS}), False
        self._exchange = self._listener._security.exchange(mechanism)
        self._bare_tokens = request.api_version == 0
        return self._sasl_answer(request, {"error_code": error_codes.NONE, "mechanisms": MECHANISMS}), True

    def _authenticate(self, request: KafkaRequest) -> tuple[bytes, bool]:
        if self._exchange is None or self._principal is not None:
            return self._sasl_answer(request, {"error_code": error_codes.ILLEGAL_SASL_STATE,
                                               "error_message": "SaslAuthenticate comes after a SaslHandshake, "
                                                                "once per connection"}), False
        try:
            answer = self._step(bytes(request.body.auth_bytes))
        except AuthenticationFailed as failure:
            return self._sasl_answer(request, {"error_code": error_codes.SASL_AUTHENTICATION_FAILED,
                                               "error_message": str(failure), "auth_bytes": b""}), False
        return self._sasl_answer(request, {"error_code": error_codes.NONE, "auth_bytes": answer,
                                           "session_lifetime_ms": 0}), True

    def _bare_step(self, token: bytes) -> bytes | None:
        """The answer to a bare token (after a v0 handshake), size-prefixed; None: it failed (Kafka
        then closes the connection without an answer)."""
        try:
            answer = self._step(bytes(token))
        except AuthenticationFailed:
            return None
        if self._principal is not None:
            self._bare_tokens = False
        return len(answer).to_bytes(4, "big") + answer

    def _step(self, client_message: bytes) -> bytes:
        """The exchange's answer to the client's next message; ``AuthenticationFailed`` (logged and
        counted) if the exchange failed."""
        try:
            answer = self._exchange.step(client_message)
            principal = self._exchange.principal
        except Exception as error:  # an exchange that chokes on a client's message fails that client only
            failure = error if isinstance(error, AuthenticationFailed) else AuthenticationFailed(
                f"the SCRAM exchange with {self._peer} failed ({type(error).__name__}: {error})")
            self._listener.counters["auth_failures"] += 1
            logger.info("%s: authentication of %s failed: %s", self._listener._name, self._peer, failure)
            raise failure from None
        if principal is not None:
            self._principal = principal
            self._timer.cancel()
        return answer

    @staticmethod
    def _sasl_answer(request: KafkaRequest, description: dict) -> bytes:
        return encode_response(request, shaped(load_response_schema(request.api_key, request.api_version),
                                               description))
