"""The demo's verdict: what a consumer group read, judged against what the producer had acknowledged.

The demo's producer numbers each key's messages 0, 1, 2, ... (the value is that number), so
``(key, sequence)`` names one message; each acknowledgement (``Acknowledged``) says at which
physical ``(partition, offset)`` it was written. Group members record every message a poll
returned (``Delivery``), in one delivery order across all members. Two promises are judged:

* **exactly once**: every acknowledged message was read by the group once: none missing,
  none read twice, and none read that was never acknowledged;
* **per key in production order**: each key's messages were written to one physical
  partition at ascending offsets in sequence order, and the group read them in that order.
  The delivery order spans members, so this holds across every split of the VP a key lived
  in: its parent's messages were read before any of its children's.

A failed promise names its first few offending messages (``EXAMPLES_SHOWN``), enough to look
them up with ``mafka4 topic describe`` and ``mafka4 group describe``.

Pure: values in, a ``Verdict`` out.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Sequence

EXAMPLES_SHOWN = 3


@dataclass(frozen=True, slots=True)
class Acknowledged:
    """The producer's acknowledgement of message ``sequence`` of ``key``."""

    key: bytes
    sequence: int
    partition: int
    offset: int


@dataclass(frozen=True, slots=True)
class Delivery:
    """Message ``sequence`` of ``key`` as one poll of ``member`` returned it, from VP ``vp`` at ``offset``."""

    member: str
    vp: int
    offset: int
    key: bytes
    sequence: int


@dataclass(frozen=True, slots=True)
class Verdict:
    acknowledged: int
    read: int
    keys: int
    missing: int
    read_twice: int
    never_acknowledged: int
    # What broke a promise, in words, at most EXAMPLES_SHOWN each.
    exactly_once_examples: tuple[str, ...]
    order_breaks: tuple[str, ...]

    @property
    def exactly_once(self) -> bool:
        return self.missing == self.read_twice == self.never_acknowledged == 0

    @property
    def in_order(self) -> bool:
        return not self.order_breaks

    @property
    def passed(self) -> bool:
        return self.acknowledged > 0 and self.exactly_once and self.in_order

    def lines(self) -> list[str]:
        once = (f"{self.acknowledged:,} acknowledged messages, each read once by the group" if self.exactly_once else
                f"FAILED: {self.missing:,} acknowledged but never read, {self.read_twice:,} read more than once, "
                f"{self.never_acknowledged:,} read but never acknowledged: {'; '.join(self.exactly_once_examples)}")
        order = (f"{self.keys} keys, each written at ascending offsets of one partition and read in production order"
                 if self.in_order else f"FAILED: {'; '.join(self.order_breaks)}")
        return [f"verdict: exactly once: {once}", f"verdict: per-key order: {order}",
                f"verdict: {'PASSED' if self.passed else 'FAILED'}"]


def _name(key: bytes, sequence: int) -> str:
    return f"{key.decode(errors='replace')}#{sequence}"


def judge(acknowledged: Sequence[Acknowledged], deliveries: Sequence[Delivery]) -> Verdict:
    """The verdict on ``deliveries`` (in delivery order) against ``acknowledged``."""
    acked = {(ack.key, ack.sequence) for ack in acknowledged}
    reads = Counter((delivery.key, delivery.sequence) for delivery in deliveries)
    missing = sorted(acked - set(reads))
    twice = sorted(message for message, count in reads.items() if count > 1)
    strangers = sorted(set(reads) - acked)
    examples = ([f"{_name(*m)} never read" for m in missing[:EXAMPLES_SHOWN]]
                + [f"{_name(*m)} read {reads[m]} times" for m in twice[:EXAMPLES_SHOWN]]
                + [f"{_name(*m)} never acknowledged" for m in strangers[:EXAMPLES_SHOWN]])
    breaks = (_write_order_breaks(acknowledged) + _read_order_breaks(deliveries))[:EXAMPLES_SHOWN]
    return Verdict(len(acked), sum(reads.values()), len({key for key, _ in acked}), len(missing), len(twice),
                   len(strangers), tuple(examples), tuple(breaks))


def _write_order_breaks(acknowledged: Sequence[Acknowledged]) -> list[str]:
    """Keys whose messages, in sequence order, are not at ascending offsets of one partition."""
    by_key: dict[bytes, list[Acknowledged]] = defaultdict(list)
    for ack in acknowledged:
        by_key[ack.key].append(ack)
    breaks = []
    for key, acks in sorted(by_key.items()):
        acks.sort(key=lambda ack: ack.sequence)
        for earlier, later in zip(acks, acks[1:]):
            if later.partition != earlier.partition or later.offset <= earlier.offset:
                breaks.append(f"{_name(key, later.sequence)} written at p{later.partition}@{later.offset}, not after "
                              f"{_name(key, earlier.sequence)} at p{earlier.partition}@{earlier.offset}")
                break
    return breaks


def _read_order_breaks(deliveries: Sequence[Delivery]) -> list[str]:
    """Keys whose messages were first read out of sequence order (a message read twice is judged as such)."""
    last: dict[bytes, Delivery] = {}
    seen: set[tuple[bytes, int]] = set()
    breaks = []
    for delivery in deliveries:
        message = (delivery.key, delivery.sequence)
        if message in seen:
            continue
        seen.add(message)
        previous = last.get(delivery.key)
        if previous is not None and delivery.sequence < previous.sequence:
            breaks.append(f"{_name(*message)} (v{delivery.vp}@{delivery.offset}, {delivery.member}) read after "
                          f"{_name(delivery.key, previous.sequence)} (v{previous.vp}@{previous.offset}, {previous.member})")
        last[delivery.key] = delivery if previous is None or delivery.sequence > previous.sequence else previous
    return breaks
