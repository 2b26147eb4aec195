"""What of a chaos run's traffic is delayed, nacked or poison, and which nacks still wait for their
redelivery. Pure: values in, decisions out (the randomness comes in as a ``random.Random``).

* Delays (``draw_delay_ms``): the producer sends a share of its messages with a delay drawn
  uniformly from ``DELAY_MS_MIN`` to the run's ``delay_ms_max``, from a generator seeded by the
  run's seed, so a seed sends the same messages delayed by the same amounts.
* Nacks (``fails``): a member nacks a message by its value, so the judge, and every member that
  reads it again, knows which: a *nacked-once* value on its first delivery only (it comes again
  from the group's retry topic and is handled then), a *poison* value on every delivery (it ends
  in the group's dead-letter topic after ``deliveries_max``). The two are drawn from a hash of the
  value, each with its own salt: independent of each other and of the key, lane and delay.
* The drain (``awaiting_redelivery``): a run is drained once the group read every acknowledged
  message and no nack waits for its redelivery any more.
* Reads of the group's retry topic (``<topic>.<group>.retry``, a physical partition) are recorded
  on streams of their own (``retry_stream``), apart from the topic's VPs: no VP log or VP commit
  judges them.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Sequence

from mafka4.limits import DELAY_MS_MIN
from simulations.checkers import Consumed, HistoryRecord, Nack

if TYPE_CHECKING:
    import random

RETRY_STREAM_PREFIX = "retry-p"
_NACK_SALT = b"chaos-nack:"
_POISON_SALT = b"chaos-poison:"
_HASH_BYTES = 8


def _fraction(salt: bytes, value: bytes) -> float:
    """Where ``value`` falls in [0, 1), by a hash: the same everywhere, for every process."""
    digest = hashlib.blake2b(salt + value, digest_size=_HASH_BYTES).digest()
    return int.from_bytes(digest, "big") / (1 << (8 * _HASH_BYTES))


def nacked_once(value: bytes, share: float) -> bool:
    """A value a member nacks on its first delivery (about ``share`` of all values)."""
    return _fraction(_NACK_SALT, value) < share


def poison(value: bytes, share: float) -> bool:
    """A value a member nacks on every delivery, until it is dead-lettered (about ``share`` of all values)."""
    return _fraction(_POISON_SALT, value) < share


def fails(value: bytes, delivery_count: int, nack_share: float, poison_share: float) -> bool:
    """True if a member nacks delivery ``delivery_count`` (1 the first) of ``value``."""
    return poison(value, poison_share) or (delivery_count == 1 and nacked_once(value, nack_share))


def draw_delay_ms(rng: "random.Random", delayed_share: float, delay_ms_max: int) -> int | None:
    """The delay of the next message, or None to send it at once.

    One ``rng.random()`` per message, and a delay drawn only for a delayed one: a seed's run
    delays the same messages (by their send number) whatever the rest of the run does."""
    if rng.random() >= delayed_share:
        return None
    return rng.randint(DELAY_MS_MIN, delay_ms_max)


def retry_stream(partition: int) -> str:
    """The stream name of a read of the group's retry topic, partition ``partition``."""
    return f"{RETRY_STREAM_PREFIX}{partition}"


def is_retry_stream(stream: str) -> bool:
    return stream.startswith(RETRY_STREAM_PREFIX)


def awaiting_redelivery(history: Sequence[HistoryRecord]) -> list[Nack]:
    """The nacks (each message's last one per group) whose redelivery the group has not read yet.

    A nack that dead-letters its message (``due_ms`` None) waits for nothing the group reads: the
    dead letter is sent before the member's next poll or its close, and read after the run."""
    pending: dict[tuple[str, bytes], Nack] = {}
    for record in history:
        if isinstance(record, Nack):
            if record.due_ms is None:
                pending.pop((record.group, record.value), None)
            else:
                pending[(record.group, record.value)] = record
        elif isinstance(record, Consumed):
            pending.pop((record.group, record.value), None)
    return list(pending.values())
