"""The client protocol's typed messages: API keys, a strict codec, and the registry of messages.

A message is a frozen slotted dataclass. ``to_body`` makes the msgpack-ready map of one (its
field names as keys) and ``from_body`` the message back from a decoded map, refusing anything
the class does not declare. Field types:

    int, float, str, bool          a bool is never an int, nor an int a bool; an int may be given
                                   for a float when encoding (msgpack sends it as a float)
    bytes                          inline, up to PROTOCOL_BIN_BYTES_MAX
    T | None                       None, or a T
    tuple[T, ...], dict[str, T]    up to PROTOCOL_ITEMS_MAX items
    a message dataclass            nested, as a map
    Buffer                         bytes-like that travel as one of the frame's out-of-band buffers:
                                   the body holds the buffer's index; it arrives as a bytearray

Unknown keys, missing keys, wrong types and values beyond the bounds raise ``ProtocolError``
naming the message and the field. Every str is at most PROTOCOL_STR_BYTES_MAX bytes of UTF-8.

The registry maps an ``ApiKey`` to its request and answer classes; ``register`` is the one call
that adds an API. Numbers are fixed forever once released: 0-2 are the connection's own (below);
reserved for the data and admin APIs: 3 METADATA, 4 PRODUCE, 5 FETCH, 6 LIST_OFFSETS, 7-9 the
virtual partitions' metadata, fetch and list offsets, 10-16 the groups' APIs, 17-19 the groups'
admin APIs (list, describe, reset offsets), 20-29 the admin APIs (20-23 topic create, delete,
describe and scale; 24-29 users and ACLs). An error of any API travels as an ``ErrorAnswer``.

Pure: values in, values out.
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from dataclasses import dataclass
from typing import Annotated, Any, Callable

from mafka4.errors import ProtocolError
from mafka4.limits import PROTOCOL_BIN_BYTES_MAX, PROTOCOL_ITEMS_MAX, PROTOCOL_STR_BYTES_MAX

# msgpack's integers: int64 and uint64.
_WIRE_INT_MIN, _WIRE_INT_LIMIT = -(1 << 63), 1 << 64


class ApiKey(enum.IntEnum):
    """What a request asks for; a frame's ``api``."""

    API_VERSIONS = 0
    SASL_HANDSHAKE = 1
    SASL_AUTHENTICATE = 2
    METADATA = 3  # protocol.metadata_api
    PRODUCE = 4  # protocol.data_api, as the next two
    FETCH = 5
    LIST_OFFSETS = 6
    VP_METADATA = 7  # protocol.vp_api, as the next two
    VP_FETCH = 8
    VP_LIST_OFFSETS = 9
    FIND_COORDINATOR = 10  # protocol.group_api, as the next six
    GROUP_JOIN = 11
    GROUP_SYNC = 12
    GROUP_COMMIT = 13
    GROUP_LEAVE = 14
    GROUP_HEARTBEAT = 15
    GROUP_SEED = 16
    GROUP_LIST = 17  # protocol.group_admin_api, as the next two
    GROUP_DESCRIBE = 18
    GROUP_RESET_OFFSETS = 19
    TOPIC_CREATE = 20  # protocol.topic_admin_api, as the next three
    TOPIC_DELETE = 21
    TOPIC_DESCRIBE = 22
    TOPIC_SCALE = 23
    USER_ADD = 24  # protocol.admin_api, as the rest
    USER_REMOVE = 25
    USER_LIST = 26
    ACL_ADD = 27
    ACL_REMOVE = 28
    ACL_LIST = 29
    LANE_OPEN = 30  # protocol.topic_admin_api


class Kind(enum.Enum):
    """A frame's ``kind``: a request, its answer, or the error that answers it instead."""

    REQUEST = "request"
    ANSWER = "answer"
    ERROR = "error"


class _OutOfBand:
    """The mark of a ``Buffer`` field."""


Buffer = Annotated[bytes | bytearray | memoryview, _OutOfBand]

_Encode = Callable[[Any, list, str], Any]
_Decode = Callable[[Any, tuple, str], Any]


def _refuse(where: str, expected: str, value: object) -> ProtocolError:
    return ProtocolError(f"{where}: expected {expected}, got {type(value).__name__} {value!r:.80}")


def _exact(kind: type, name: str) -> tuple[_Encode, _Decode]:
    def check(value, _buffers, where):
        if type(value) is not kind:
            raise _refuse(where, name, value)
        if kind is int and not _WIRE_INT_MIN <= value < _WIRE_INT_LIMIT:
            raise ProtocolError(f"{where}: {value} does not fit in 64 bits")
        return value
    return check, check


def _float() -> tuple[_Encode, _Decode]:
    def encode(value, _buffers, where):
        if type(value) is not int and type(value) is not float:
            raise _refuse(where, "float", value)
        return float(value)

    def decode(value, _buffers, where):
        if type(value) is not float:
            raise _refuse(where, "float", value)
        return value
    return encode, decode


def _check_str(value: object, where: str) -> str:
    if type(value) is not str:
        raise _refuse(where, "str", value)
    # A str's UTF-8 takes at most 4 bytes a character: only a long one needs encoding to be measured.
    if len(value) * 4 > PROTOCOL_STR_BYTES_MAX and len(value.encode("utf-8", "surrogatepass")) > PROTOCOL_STR_BYTES_MAX:
        raise ProtocolError(f"{where}: a str of {len(value)} characters exceeds PROTOCOL_STR_BYTES_MAX "
                            f"({PROTOCOL_STR_BYTES_MAX} bytes)")
    return value


def _str() -> tuple[_Encode, _Decode]:
    def check(value, _buffers, where):
        return _check_str(value, where)
    return check, check


def _bytes() -> tuple[_Encode, _Decode]:
    def encode(value, _buffers, where):
        if not isinstance(value, (bytes, bytearray, memoryview)):
            raise _refuse(where, "bytes", value)
        return decode(bytes(value), _buffers, where)

    def decode(value, _buffers, where):
        if type(value) is not bytes:
            raise _refuse(where, "bytes", value)
        if len(value) > PROTOCOL_BIN_BYTES_MAX:
            raise ProtocolError(f"{where}: {len(value)} inline bytes exceed PROTOCOL_BIN_BYTES_MAX "
                                f"({PROTOCOL_BIN_BYTES_MAX}); send bulk data as a Buffer field")
        return value
    return encode, decode


def _buffer() -> tuple[_Encode, _Decode]:
    def encode(value, buffers, where):
        if not isinstance(value, (bytes, bytearray, memoryview)):
            raise _refuse(where, "a bytes-like Buffer", value)
        buffers.append(value.cast("B") if type(value) is memoryview else value)  # len() must count bytes
        return len(buffers) - 1

    def decode(value, buffers, where):
        if type(value) is not int or not 0 <= value < len(buffers):
            raise ProtocolError(f"{where}: refers to buffer {value!r:.40}; the frame has {len(buffers)}")
        return buffers[value]
    return encode, decode


def _optional(inner: tuple[_Encode, _Decode]) -> tuple[_Encode, _Decode]:
    inner_encode, inner_decode = inner
    return ((lambda value, buffers, where: None if value is None else inner_encode(value, buffers, where)),
            (lambda value, buffers, where: None if value is None else inner_decode(value, buffers, where)))


def _check_count(value, where: str) -> None:
    if len(value) > PROTOCOL_ITEMS_MAX:
        raise ProtocolError(f"{where}: {len(value)} items exceed PROTOCOL_ITEMS_MAX ({PROTOCOL_ITEMS_MAX})")


def _tuple(inner: tuple[_Encode, _Decode]) -> tuple[_Encode, _Decode]:
    def convert(inner_convert):
        def convert_all(value, buffers, where):
            if type(value) is not tuple and type(value) is not list:
                raise _refuse(where, "a tuple", value)
            _check_count(value, where)
            return tuple(inner_convert(item, buffers, f"{where}[{index}]") for index, item in enumerate(value))
        return convert_all
    return convert(inner[0]), convert(inner[1])


def _dict(inner: tuple[_Encode, _Decode]) -> tuple[_Encode, _Decode]:
    def convert(inner_convert):
        def convert_all(value, buffers, where):
            if type(value) is not dict:
                raise _refuse(where, "a dict", value)
            _check_count(value, where)
            return {_check_str(key, f"{where} key"): inner_convert(item, buffers, f"{where}[{key!r:.40}]")
                    for key, item in value.items()}
        return convert_all
    return convert(inner[0]), convert(inner[1])


def _nested(cls: type) -> tuple[_Encode, _Decode]:
    def encode(value, buffers, where):
        if type(value) is not cls:
            raise _refuse(where, cls.__name__, value)
        return _to_body(value, buffers)

    def decode(value, buffers, where):
        return _from_body(cls, value, buffers, where)
    return encode, decode


def _codec(hint: object, where: str) -> tuple[_Encode, _Decode]:
    """How a field of type ``hint`` travels; ``TypeError`` for a type the protocol does not carry."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Annotated and _OutOfBand in hint.__metadata__:
        return _buffer()
    if hint in (int, bool):
        return _exact(hint, hint.__name__)
    if hint is float:
        return _float()
    if hint is str:
        return _str()
    if hint is bytes:
        return _bytes()
    if origin in (types.UnionType, typing.Union) and len(args) == 2 and type(None) in args:
        return _optional(_codec(next(arg for arg in args if arg is not type(None)), where))
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return _tuple(_codec(args[0], where))
    if origin is dict and args and args[0] is str:
        return _dict(_codec(args[1], where))
    if dataclasses.is_dataclass(hint):
        return _nested(hint)
    raise TypeError(f"{where}: the client protocol does not carry fields of type {hint!r}")


_PLANS: dict[type, tuple[tuple[str, _Encode, _Decode], ...]] = {}


def _plan(cls: type) -> tuple[tuple[str, _Encode, _Decode], ...]:
    """Each field of ``cls`` with how it travels, made once per class."""
    plan = _PLANS.get(cls)
    if plan is None:
        params = getattr(cls, "__dataclass_params__", None)
        assert params is not None and params.frozen, f"{cls!r}: a message is a frozen dataclass"
        hints = typing.get_type_hints(cls, include_extras=True)
        plan = _PLANS[cls] = tuple((field.name, *_codec(hints[field.name], f"{cls.__name__}.{field.name}"))
                                   for field in dataclasses.fields(cls))
    return plan


def to_body(message: object, buffers: list | None = None) -> dict:
    """The msgpack-ready map of ``message``; its ``Buffer`` fields are appended to ``buffers`` (and
    the map holds their indexes). ``ProtocolError`` naming the field for a value its type refuses."""
    appended: list = [] if buffers is None else buffers
    body = _to_body(message, appended)
    if buffers is None and appended:
        raise ProtocolError(f"{type(message).__name__} has Buffer fields: pass the frame's buffers to to_body")
    return body


def _to_body(message: object, buffers: list) -> dict:
    name = type(message).__name__
    return {field: encode(getattr(message, field), buffers, f"{name}.{field}")
            for field, encode, _ in _plan(type(message))}


def from_body(cls: type, body: object, buffers: tuple = ()) -> object:
    """The ``cls`` message whose map is ``body`` (its ``Buffer`` fields taken from ``buffers``);
    ``ProtocolError`` naming the message and the field for anything ``cls`` does not declare."""
    return _from_body(cls, body, buffers, cls.__name__)


def _from_body(cls: type, body: object, buffers: tuple, where: str) -> object:
    plan = _plan(cls)
    if type(body) is not dict:
        raise _refuse(where, f"a map of {cls.__name__}", body)
    if len(body) != len(plan) or any(field not in body for field, _, _ in plan):
        names = [field for field, _, _ in plan]
        unknown = sorted(repr(key)[:40] for key in body if key not in names)
        missing = [field for field in names if field not in body]
        raise ProtocolError(f"{where}: {cls.__name__} has the fields {names}; this one lacks {missing} "
                            f"and has unknown {unknown}")
    return cls(**{field: decode(body[field], buffers, f"{where}.{field}") for field, _, decode in plan})


@dataclass(frozen=True, slots=True)
class _Api:
    request: type
    answer: type


_APIS: dict[int, _Api] = {}
_API_OF_REQUEST: dict[type, int] = {}


def register(api: int, request: type, answer: type) -> None:
    """Make ``request`` and ``answer`` the messages of ``api`` (once per API, at import). The
    product's APIs are ``ApiKey`` members; a test may register a number of its own."""
    assert type(api) is ApiKey or (type(api) is int and api not in ApiKey.__members__.values()), api
    assert 0 <= api < 1 << 32, api
    assert api not in _APIS and request not in _API_OF_REQUEST, f"{api!r} is registered already"
    _plan(request)  # a field type the protocol cannot carry fails here, at import, not on the first call
    _plan(answer)
    _APIS[api] = _Api(request, answer)
    _API_OF_REQUEST[request] = api


def message_class(api: int, kind: Kind) -> type:
    """The class of ``api``'s messages of ``kind``; ``ProtocolError`` for an API not registered."""
    if kind is Kind.ERROR:
        return ErrorAnswer
    registered = _APIS.get(api)
    if registered is None:
        raise ProtocolError(f"unknown api {api!r:.40}; this mafka4 knows {sorted(int(key) for key in _APIS)}")
    return registered.request if kind is Kind.REQUEST else registered.answer


def api_of(request: object) -> int:
    """The API whose request ``request`` is; ``ProtocolError`` if its class is none's."""
    api = _API_OF_REQUEST.get(type(request))
    if api is None:
        raise ProtocolError(f"{type(request).__name__} is not the request of any registered api")
    return api


def registered_apis() -> tuple[int, ...]:
    return tuple(sorted(_APIS))


def api_name(api: int) -> str:
    """``api``'s name, for messages."""
    return ApiKey(api).name if api in ApiKey.__members__.values() else f"api {api}"


@dataclass(frozen=True, slots=True)
class ErrorAnswer:
    """What answers a request that failed: the ``mafka4.errors`` class name, its message, whether
    retrying can succeed (``protocol.error_codes`` makes it and raises it again)."""

    error: str
    message: str
    retriable: bool


@dataclass(frozen=True, slots=True)
class ApiVersionsRequest:
    """The connection's first request: who the client is."""

    client: str


@dataclass(frozen=True, slots=True)
class ApiVersionsAnswer:
    """The protocol versions this node speaks, the APIs it serves, the SASL mechanisms it offers
    (none: it needs no authentication) and its node id."""

    versions: tuple[int, ...]
    api_keys: tuple[int, ...]
    mechanisms: tuple[str, ...]
    node_id: str


@dataclass(frozen=True, slots=True)
class SaslHandshakeRequest:
    mechanism: str


@dataclass(frozen=True, slots=True)
class SaslHandshakeAnswer:
    """The mechanisms offered (the requested one among them, or the handshake failed)."""

    mechanisms: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class SaslAuthenticateRequest:
    """One step of the exchange: the client's message of the mechanism."""

    message: bytes


@dataclass(frozen=True, slots=True)
class SaslAuthenticateAnswer:
    """The server's message of the step; ``principal`` is set on the last, once authenticated."""

    message: bytes
    principal: str | None


register(ApiKey.API_VERSIONS, ApiVersionsRequest, ApiVersionsAnswer)
register(ApiKey.SASL_HANDSHAKE, SaslHandshakeRequest, SaslHandshakeAnswer)
register(ApiKey.SASL_AUTHENTICATE, SaslAuthenticateRequest, SaslAuthenticateAnswer)
