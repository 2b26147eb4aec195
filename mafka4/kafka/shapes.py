"""Kafka messages of any version, built from one version-agnostic description (pure).

Kafka's schemas give every version of a message its own fields: a field is added in one version
and dropped in a later one, and ``kio`` (the message types, generated from Kafka's own schemas)
makes each version a class of its own. The Kafka listener's handlers describe an answer once,
as nested mappings of field names to values, and ``shaped(cls, values)`` builds the class of
the version the client asked for: each field of that version takes its value from the mapping
(a nested message or a list of them built the same way), or the schema's default, or the zero
of its Kafka type when the description does not name it. Names the version does not have are
left out, as Kafka leaves a field out of the versions that lack it.

A description may name a field that only some versions have; it may not name a value of the
wrong shape (a list for a single message): that is the handler's fault, an ``AssertionError``.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import uuid
from typing import Any, Mapping

from kio.schema.errors import ErrorCode
from kio.serial._introspect import EntityField, EntityTupleField, PrimitiveTupleField, classify_field, is_optional

_ZERO_OF_KAFKA_TYPE = {
    "bool": False, "int8": 0, "int16": 0, "int32": 0, "int64": 0, "uint16": 0, "uint32": 0, "uint64": 0,
    "float64": 0.0, "error_code": ErrorCode(0), "string": "", "bytes": b"", "uuid": uuid.UUID(int=0),
    "timedelta_i32": datetime.timedelta(0), "timedelta_i64": datetime.timedelta(0),
}


def shaped(cls: type, values: Mapping[str, Any]) -> Any:
    """An instance of the ``kio`` message class ``cls`` from ``values``; see the module docstring."""
    arguments = {}
    for field, kind in _fields_of(cls):
        if field.name in values:
            arguments[field.name] = _value(field, kind, values[field.name])
        elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            arguments[field.name] = _zero(field, kind)
    return cls(**arguments)


@functools.lru_cache(maxsize=None)
def _fields_of(cls: type) -> tuple:
    return tuple((field, classify_field(field)) for field in dataclasses.fields(cls))


def _value(field: dataclasses.Field, kind: object, value: Any) -> Any:
    if isinstance(kind, EntityTupleField):
        assert not isinstance(value, Mapping), f"a list of {kind.type_.__name__} was described as one"
        return tuple(shaped(kind.type_, item) for item in value)
    if isinstance(kind, EntityField):
        return None if value is None else shaped(kind.type_, value)
    if isinstance(kind, PrimitiveTupleField):
        return tuple(value)
    if field.metadata.get("kafka_type") == "error_code":
        return ErrorCode(value)  # an int code: kio writes its enum's value
    return value


def _zero(field: dataclasses.Field, kind: object) -> Any:
    if isinstance(kind, (EntityTupleField, PrimitiveTupleField)):
        return ()
    if is_optional(field):
        return None
    if isinstance(kind, EntityField):
        return shaped(kind.type_, {})
    return _ZERO_OF_KAFKA_TYPE.get(field.metadata.get("kafka_type"), None)
