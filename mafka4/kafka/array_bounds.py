"""Every array of a Kafka request body fits in the body's bytes: checked before kio parses it.

Why. kio's native reader reserves room for an array's items from the count the bytes claim,
before it reads one item (kio 0.6.5, ``rust/src/schema.rs``: ``Vec::with_capacity(n)``). A
count of a few billion (5 bytes of a compact array's varint) asks for more memory than the
machine has, and a failed allocation in Rust aborts the whole process: one frame of a few bytes
would end a node. So ``check_arrays`` walks the body first, by the same kio schema, reading
only lengths and counts, and refuses a count larger than the bytes left after it (every item of
every Kafka request takes a byte at least) or than ``KAFKA_ARRAY_ITEMS_MAX``. kio then reserves
at most what the bytes could hold.

The walk reads what kio reads, in its order: the fields in declaration order, then, for flexible
versions, the tagged fields (count, then tag, size and value each; a tag the schema does not
name is refused, as kio refuses it). It checks lengths against the bytes, not values; kio does
that. Its plan of each class is built once, from kio's own field introspection.

Pure: bytes in, a position or a ``ValueError`` out.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, fields
from functools import lru_cache

from kio.serial._introspect import (EntityField, EntityTupleField, classify_field, get_field_tag,
                                    get_schema_field_type, is_optional)
from kio.serial.readers import read_unsigned_varint

from mafka4.limits import KAFKA_ARRAY_ITEMS_MAX

# Bytes of the fixed-size Kafka types as kio names them.
_FIXED_SIZES = {"int8": 1, "uint8": 1, "bool": 1, "int16": 2, "uint16": 2, "error_code": 2, "int32": 4, "uint32": 4,
                "timedelta_i32": 4, "int64": 8, "uint64": 8, "float64": 8, "timedelta_i64": 8, "datetime_i64": 8,
                "uuid": 16}
_INT8, _INT16, _INT32 = struct.Struct(">b"), struct.Struct(">h"), struct.Struct(">i")

# Step kinds: what a field takes on the wire.
FIXED, COMPACT_BYTES, LEGACY_STRING, LEGACY_BYTES, ENTITY, COMPACT_ARRAY, LEGACY_ARRAY = range(7)


@dataclass(frozen=True, slots=True)
class EntityPlan:
    """How to walk one kio entity class."""

    name: str
    steps: tuple[tuple, ...]  # the untagged fields, in order
    flexible: bool
    tagged: dict[int, tuple]  # tag -> step


def check_arrays(entity_class: type, view: memoryview, position: int) -> int:
    """Where the entity of ``entity_class`` at ``position`` of ``view`` ends; ``ValueError`` naming
    the problem for an array count beyond the bytes left or ``KAFKA_ARRAY_ITEMS_MAX``, a length
    past the end, or an unknown tag."""
    return _walk((ENTITY, plan_of(entity_class), False), view, position, len(view))


@lru_cache(maxsize=None)
def plan_of(entity_class: type) -> EntityPlan:
    steps, tagged = [], {}
    for field in fields(entity_class):
        tag = get_field_tag(field)
        step = _field_step(entity_class, field, tag is not None)
        if tag is not None:
            tagged[int(tag)] = step
        elif steps and step[0] == FIXED == steps[-1][0]:  # fixed fields in a row: one step
            steps[-1] = (FIXED, steps[-1][1] + step[1])
        else:
            steps.append(step)
    return EntityPlan(entity_class.__name__, tuple(steps), entity_class.__flexible__, tagged)


def _field_step(entity_class: type, field, is_tag: bool) -> tuple:
    """A field's step, as kio's reader builds it (``kio.serial._serialize.get_field_writer`` writes it)."""
    flexible = entity_class.__flexible__
    kind = classify_field(field)
    if isinstance(kind, (EntityField, EntityTupleField)):
        # An entity field may be null (KIP-893); array items and tagged fields never are.
        nullable = isinstance(kind, EntityField) and not is_tag and is_optional(field)
        item = (ENTITY, plan_of(kind.type_), nullable)
    else:
        item = _primitive_step(get_schema_field_type(field), flexible)
        if entity_class.__name__ == "RequestHeader" and field.name == "client_id":
            item = (LEGACY_STRING,)  # Kafka keeps the header's client id a legacy string in every version
    if kind.is_array:
        return (COMPACT_ARRAY if flexible else LEGACY_ARRAY, item)
    return item


def _primitive_step(kafka_type: str, flexible: bool) -> tuple:
    if kafka_type in _FIXED_SIZES:
        return (FIXED, _FIXED_SIZES[kafka_type])
    assert kafka_type in ("string", "bytes", "records"), kafka_type
    if flexible:
        return (COMPACT_BYTES,)
    return (LEGACY_STRING,) if kafka_type == "string" else (LEGACY_BYTES,)


def _walk(step: tuple, view: memoryview, position: int, end: int) -> int:
    """Where the value of ``step`` at ``position`` ends, within ``end``."""
    kind = step[0]
    if kind == FIXED:
        return _within(position + step[1], end)
    if kind == COMPACT_BYTES:
        length, size = _uvarint(view, position, end)
        return _within(position + size + max(length - 1, 0), end)  # 0 is null; n is n - 1 bytes
    if kind == LEGACY_STRING or kind == LEGACY_BYTES:
        prefix = _INT16 if kind == LEGACY_STRING else _INT32
        length = _fixed(prefix, view, position, end)
        if length < -1:
            raise ValueError(f"a length of {length} at byte {position}")
        return _within(position + prefix.size + max(length, 0), end)
    if kind == ENTITY:
        return _walk_entity(step[1], step[2], view, position, end)
    if kind == COMPACT_ARRAY:
        count, size = _uvarint(view, position, end)
        count -= 1  # 0 is null
    else:
        count, size = _fixed(_INT32, view, position, end), _INT32.size
        if count < -1:
            raise ValueError(f"an array count of {count} at byte {position}")
    position += size
    if count <= 0:
        return position
    _check_count(count, position, end)
    item = step[1]
    if item[0] == FIXED:
        return _within(position + count * item[1], end)
    for _ in range(count):
        position = _walk(item, view, position, end)
    return position


def _walk_entity(plan: EntityPlan, nullable: bool, view: memoryview, position: int, end: int) -> int:
    if nullable:
        marker = _fixed(_INT8, view, position, end)
        position += 1
        if marker == -1:
            return position
    for step in plan.steps:
        position = _walk(step, view, position, end)
    if not plan.flexible:
        return position
    tags, size = _uvarint(view, position, end)
    position += size
    if not tags:
        return position
    _check_count(tags, position, end)
    for _ in range(tags):
        tag, size = _uvarint(view, position, end)
        position += size
        length, size = _uvarint(view, position, end)
        position += size
        step = plan.tagged.get(tag)
        if step is None:
            raise ValueError(f"tagged field {tag} of {plan.name}, which its schema does not name")
        value_end = _within(position + length, end)
        if _walk(step, view, position, value_end) != value_end:
            raise ValueError(f"tagged field {tag} of {plan.name} is not the {length} bytes it claims")
        position = value_end
    return position


def _check_count(count: int, position: int, end: int) -> None:
    if count > end - position or count > KAFKA_ARRAY_ITEMS_MAX:
        raise ValueError(f"a count of {count} at byte {position}, where {end - position} bytes are left (and at "
                         f"most {KAFKA_ARRAY_ITEMS_MAX} items are taken)")


def _uvarint(view: memoryview, position: int, end: int) -> tuple[int, int]:
    if position < end and view[position] < 0x80:  # one byte: nearly every count, length and tag
        return view[position], 1
    value, size = read_unsigned_varint(view[:end], position)
    return value, size


def _fixed(prefix: struct.Struct, view: memoryview, position: int, end: int) -> int:
    _within(position + prefix.size, end)
    return prefix.unpack_from(view, position)[0]


def _within(position: int, end: int) -> int:
    if position > end:
        raise ValueError(f"a field ends at byte {position}, past the {end} bytes there are")
    return position
