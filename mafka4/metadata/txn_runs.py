"""How a long list of etcd writes is cut into transactions etcd accepts. Pure: sizes in, runs out.

etcd refuses a request larger than its ``--max-request-bytes`` and a transaction with more
operations than its ``--max-txn-ops``, counting the longest of its compare and success lists;
it checks a nested transaction against that bound less its parent's count, so a run must leave
what its parts' nested transactions take (``nesting_ops``). A write that names every
partition or VP of a topic with long names and node ids passes the first (the topic's creation,
a group member's commit of every VP), so its store sends it in *runs*: consecutive parts, each
part kept whole in one transaction, each run with the compares and operations every transaction
of the list carries (``shared``).

Invariant: every run, with ``shared``, is within both bounds; runs cover every part once, in order.
A part that cannot fit even alone is a defect of the bounds (limits.py), not an input to handle.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True, slots=True)
class TxnPart:
    """What one part adds to a transaction: its encoded bytes and its compares and operations."""

    bytes: int
    compares: int = 0
    operations: int = 0


def runs_within(parts: Sequence[TxnPart], shared: TxnPart, bytes_max: int, ops_max: int,
                nesting_ops: int = 0) -> list[range]:
    """The fewest consecutive runs of ``parts`` filled in order: each run with ``shared`` takes at
    most ``bytes_max`` bytes and at most ``ops_max - nesting_ops`` compares and as many operations."""
    ops_left = ops_max - nesting_ops
    runs: list[range] = []
    start, run_bytes, compares, operations = 0, shared.bytes, shared.compares, shared.operations
    for index, part in enumerate(parts):
        assert shared.bytes + part.bytes <= bytes_max and max(shared.compares + part.compares,
                                                              shared.operations + part.operations) <= ops_left, (
            f"one part of {part.bytes} bytes and {part.operations} operations cannot fit a transaction")
        if (run_bytes + part.bytes > bytes_max or compares + part.compares > ops_left
                or operations + part.operations > ops_left):
            runs.append(range(start, index))
            start, run_bytes, compares, operations = index, shared.bytes, shared.compares, shared.operations
        run_bytes += part.bytes
        compares += part.compares
        operations += part.operations
    if start < len(parts):
        runs.append(range(start, len(parts)))
    return runs


def field_bytes(payload_bytes: int) -> int:
    """The bytes one element of a repeated protobuf message field takes: its tag (fields below 16
    take one byte), the varint of its length, and the payload."""
    return 1 + varint_bytes(payload_bytes) + payload_bytes


def varint_bytes(value: int) -> int:
    assert value >= 0
    return max(1, (value.bit_length() + 6) // 7)
