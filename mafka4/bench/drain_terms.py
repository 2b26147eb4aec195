"""What two drains must share to be compared: the backlog and the acknowledgement cadence (pure).

``mafka4 bench consume`` drains a mafka4 backlog and ``mafka4 bench redis-streams`` a Redis
Streams one; their msgs/s compare only when both drain the same backlog and acknowledge what
they read as often. Both benches take their terms from here:

* **the backlog**: ``--messages`` messages of ``--message-bytes`` each, with one default
  (``BACKLOG_MESSAGES_DEFAULT``) and one bound (``BACKLOG_BYTES_MAX``): redis-server holds its
  stream in memory, so a backlog beyond what it holds is refused by both benches, and any
  backlog one bench accepts the other can drain too (``check_backlog``).
* **the acknowledgement cadence** (``AckCadence``), swept as a list (``--ack-cadences``):

  - ``per-read``: a Redis member sends XACK of each read's ids after it; a mafka4 member calls
    ``commit()`` after each poll that returned messages (auto-commit off);
  - ``every-<N>ms``: a Redis member sends XACK of everything read since its last XACK once N ms
    passed since it; a mafka4 member auto-commits every N ms (``auto_commit_interval_ms``);
  - ``none``: nothing is acknowledged during the drain: Redis reads with NOACK (nothing is
    pending, at most once); a mafka4 member commits nothing until it closes, after the drain.

  With ``per-read`` and ``every-<N>ms`` a member's part of the drain ends when its last
  acknowledgement returned (inside the timed window); with ``none``, at its last message.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from typing import Sequence

from mafka4.errors import InvalidConfig
from mafka4.limits import ConsumerConfig, MiB

# A million messages: at this machine's drain rates (0.5 to 0.7 M msgs/s with 4 consumers) a
# drain lasts over a second, the window the machine's CPU figures need (bench.cpu_cost), and at
# the default 1 KiB it stays within BACKLOG_BYTES_MAX.
BACKLOG_MESSAGES_DEFAULT = 1_000_000
# redis-server holds a stream in memory (and the bench's driver its ids): the largest backlog
# both benches drain, so that every backlog has an equal twin on the other side.
BACKLOG_BYTES_MAX = 1024 * MiB
# The longest every-<N>ms interval: a drain lasts minutes at most (drain_s_max).
ACK_INTERVAL_MS_MAX = 600_000


def check_count(name: str, value: int, maximum: int, bound: str = "") -> None:
    """``InvalidConfig`` unless ``value`` is 1 to ``maximum``; ``bound`` says what sets the maximum (both benches'
    settings refuse a count this one way)."""
    if not 1 <= value <= maximum:
        raise InvalidConfig(f"{name}={value} is out of range: use 1 to {maximum}" + (f" ({bound})" if bound else ""))


def check_consumer_counts(consumers: Sequence[int], maximum: int, example: str) -> None:
    """``InvalidConfig`` unless ``consumers`` are distinct counts of 1 to ``maximum``, one drain each."""
    if not consumers or len(set(consumers)) != len(consumers) or not all(1 <= count <= maximum for count in consumers):
        raise InvalidConfig(f"consumers={','.join(map(str, consumers))}: give distinct consumer counts from 1 to "
                            f"{maximum}, e.g. {example}")


def check_backlog(messages: int, message_bytes: int) -> None:
    """``InvalidConfig`` unless a backlog of ``messages`` of ``message_bytes`` each fits both benches."""
    check_count("messages", messages, BACKLOG_BYTES_MAX // message_bytes,
                f"{message_bytes}-byte messages: the drains of bench consume and bench redis-streams take equal "
                f"backlogs, and redis-server holds its backlog in memory, {BACKLOG_BYTES_MAX // MiB} MiB at most, so "
                f"a larger one could not be equal on both sides")


class AckKind(enum.Enum):
    NONE = "none"
    PER_READ = "per-read"
    EVERY = "every"


_EVERY = re.compile(r"every-(\d+)ms")


@dataclass(frozen=True, slots=True)
class AckCadence:
    """How often a draining member acknowledges what it read (module docstring); ``str`` gives its spelling."""

    kind: AckKind
    interval_ms: int | None = None  # EVERY only

    def __post_init__(self) -> None:
        assert (self.interval_ms is not None) == (self.kind is AckKind.EVERY), self
        assert self.interval_ms is None or 1 <= self.interval_ms <= ACK_INTERVAL_MS_MAX, self

    @classmethod
    def parse(cls, text: str) -> "AckCadence":
        spelled = text.strip().lower()
        if spelled in (AckKind.NONE.value, AckKind.PER_READ.value):
            return cls(AckKind(spelled))
        every = _EVERY.fullmatch(spelled)
        if every is None or not 1 <= int(every.group(1)) <= ACK_INTERVAL_MS_MAX:
            raise InvalidConfig(f"acknowledgement cadence {text!r} is not one: use per-read, every-<N>ms with N from 1 "
                                f"to {ACK_INTERVAL_MS_MAX} (e.g. every-5000ms) or none")
        return cls(AckKind.EVERY, int(every.group(1)))

    def __str__(self) -> str:
        return f"every-{self.interval_ms}ms" if self.kind is AckKind.EVERY else self.kind.value

    @property
    def auto_commit_interval_ms(self) -> int | None:
        """The ``ConsumerConfig.auto_commit_interval_ms`` of a mafka4 member (None: it commits itself, or never)."""
        return self.interval_ms

    def due(self, now_ns: int, last_ack_ns: int) -> bool:
        """Whether a Redis member acknowledges after a read at ``now_ns``; its last XACK (or first read) was at
        ``last_ack_ns``."""
        if self.kind is AckKind.EVERY:
            return now_ns - last_ack_ns >= self.interval_ms * 1_000_000
        return self.kind is AckKind.PER_READ


# Both cadences the issue compares: after every read, and as often as a mafka4 consumer commits by default.
ACK_CADENCES_DEFAULT = (AckKind.PER_READ.value, f"every-{ConsumerConfig().auto_commit_interval_ms}ms")


def parse_cadences(texts: Sequence[str]) -> tuple[AckCadence, ...]:
    """The cadences of a sweep, each once; ``InvalidConfig`` naming what is wrong."""
    cadences = tuple(AckCadence.parse(text) for text in texts)
    if not cadences or len(set(cadences)) != len(cadences):
        raise InvalidConfig(f"ack_cadences={','.join(texts)}: give one or more acknowledgement cadences, each once, "
                            f"e.g. {','.join(ACK_CADENCES_DEFAULT)}")
    return cadences
