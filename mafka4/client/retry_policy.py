"""How a consumer group retries a message its members nack (issue 41): the back-off schedule, the
number of deliveries before the message is dead-lettered, and whether a retry holds up its key.

A pure value and its arithmetic, no clock: the caller brings ``delivery_count`` (deliveries of the
message to this group so far, 1 for the first) and adds the delay to its own ``now_ms``.

Counting. Delivery 1 is the first; a nack of delivery ``n`` either schedules delivery ``n + 1``
after ``delay_ms_after(n)``, or, when ``exhausted(n)`` (``n >= deliveries_max``), sends the
message to the group's dead-letter topic (``mafka4.dead_letters``) and commits past it. So a
message is handled at most ``deliveries_max`` times.

Schedule. ``backoff_ms[i]`` is the delay before delivery ``i + 2``; past the last step each delay
doubles the one before, up to ``backoff_ms_max``. Steps never shorten and never pass
``backoff_ms_max`` (both refused on construction), so the delays of one message never shrink
and never pass the cap. A nack may name its own ``retry_after_ms``, which replaces the schedule's
delay for that retry (up to ``RETRY_DELAY_MS_MAX``, not the group's cap: the consumer knows
better, e.g. a rate limit's reset time).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from mafka4.errors import InvalidConfig
from mafka4.limits import (DAY_MS, RETRY_BACKOFF_MS_DEFAULT, RETRY_BACKOFF_MS_MAX_DEFAULT, RETRY_BACKOFF_STEPS_MAX,
                           RETRY_DELAY_MS_MAX, RETRY_DELIVERIES_MAX, RETRY_DELIVERIES_MAX_DEFAULT, _check_range)

# Doubling past the last step reaches any cap within this many doublings (a step is at least 1 ms
# and RETRY_DELAY_MS_MAX < 2**40 ms): the shift stays small whatever the delivery count.
_DOUBLINGS_ENOUGH = 64


class RetryMode(enum.StrEnum):
    """What a nacked message holds up while it waits for its redelivery.

    A ``StrEnum``: stored group config and CLI flags hold the plain string."""

    # Only itself: later messages of its VP (its key's too) are delivered meanwhile.
    UNORDERED = "unordered"
    # Its VP (physical partition, Mafka3 mode): nothing after it there is delivered until it
    # succeeds or is dead-lettered, so per-key order holds; other VPs flow on.
    ORDERED = "ordered"

    @classmethod
    def parse(cls, value: object) -> "RetryMode":
        try:
            return cls(value)
        except (TypeError, ValueError):
            raise InvalidConfig(f"mode={value!r} is not valid: use 'unordered' (a failed message waits alone, "
                                f"later ones flow on) or 'ordered' (its virtual partition waits with it, keeping "
                                f"per-key order)") from None


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """One consumer group's retry policy (see the module doc for what each field does)."""

    # Delays before the 2nd, 3rd, ... delivery, in ms, never shortening; past the last, doubling.
    # A list is taken and held as a tuple.
    backoff_ms: tuple[int, ...] = RETRY_BACKOFF_MS_DEFAULT
    # The longest delay the schedule reaches by doubling (every step is at most this too).
    backoff_ms_max: int = RETRY_BACKOFF_MS_MAX_DEFAULT
    # A message nacked on its deliveries_max-th delivery goes to the dead-letter topic.
    deliveries_max: int = RETRY_DELIVERIES_MAX_DEFAULT
    mode: RetryMode = RetryMode.UNORDERED

    def __post_init__(self) -> None:
        object.__setattr__(self, "mode", RetryMode.parse(self.mode))
        _check_range(self, "backoff_ms_max", 0, RETRY_DELAY_MS_MAX)
        _check_range(self, "deliveries_max", 1, RETRY_DELIVERIES_MAX)
        self._check_steps()

    def _check_steps(self) -> None:
        steps = self.backoff_ms
        if isinstance(steps, (str, bytes)) or not isinstance(steps, (list, tuple)):
            raise InvalidConfig(f"backoff_ms={steps!r} must be a list of delays in ms, e.g. [1000, 5000, 30000]")
        if not 1 <= len(steps) <= RETRY_BACKOFF_STEPS_MAX:
            raise InvalidConfig(f"backoff_ms has {len(steps)} steps, must have at least 1 and at most "
                                f"{RETRY_BACKOFF_STEPS_MAX} (past its last step the delay doubles up to "
                                f"backoff_ms_max)")
        object.__setattr__(self, "backoff_ms", tuple(steps))
        for index, step in enumerate(steps):
            if isinstance(step, bool) or not isinstance(step, int):
                raise InvalidConfig(f"backoff_ms[{index}]={step!r} must be an integer (ms)")
            if not 0 <= step <= self.backoff_ms_max:
                raise InvalidConfig(f"backoff_ms[{index}]={step} must be at least 0 and at most backoff_ms_max="
                                    f"{self.backoff_ms_max}: shorten the step or raise backoff_ms_max (at most "
                                    f"{RETRY_DELAY_MS_MAX})")
            if index and step < steps[index - 1]:
                raise InvalidConfig(f"backoff_ms[{index}]={step} must be at least backoff_ms[{index - 1}]="
                                    f"{steps[index - 1]}: a back-off schedule never shortens")

    def delay_ms_after(self, delivery_count: int, retry_after_ms: int | None = None) -> int:
        """The delay before delivery ``delivery_count + 1`` of a message nacked on delivery
        ``delivery_count`` (the first is 1), or ``retry_after_ms`` when the nack named one.

        Meaningful only while not ``exhausted(delivery_count)``: an exhausted message is
        dead-lettered, not delayed."""
        assert delivery_count >= 1, f"delivery_count={delivery_count}: the first delivery is 1"
        if retry_after_ms is not None:
            return checked_retry_after_ms(retry_after_ms)
        step = delivery_count - 1
        if step < len(self.backoff_ms):
            return self.backoff_ms[step]
        doublings = min(step - len(self.backoff_ms) + 1, _DOUBLINGS_ENOUGH)
        return min(self.backoff_ms[-1] << doublings, self.backoff_ms_max)

    def exhausted(self, delivery_count: int) -> bool:
        """True if a nack of delivery ``delivery_count`` sends the message to the dead-letter topic."""
        assert delivery_count >= 1, f"delivery_count={delivery_count}: the first delivery is 1"
        return delivery_count >= self.deliveries_max

    def to_json(self) -> dict:
        """The policy as group config holds it: plain JSON values."""
        return {"backoff_ms": list(self.backoff_ms), "backoff_ms_max": self.backoff_ms_max,
                "deliveries_max": self.deliveries_max, "mode": self.mode.value}

    @classmethod
    def from_json(cls, value: dict) -> "RetryPolicy":
        """A stored policy, validated again; fields it lacks take their defaults (as stored topic configs do)."""
        if not isinstance(value, dict):
            raise InvalidConfig(f"retry policy {value!r} must be an object of backoff_ms, backoff_ms_max, "
                                f"deliveries_max and mode")
        known = ("backoff_ms", "backoff_ms_max", "deliveries_max", "mode")
        return cls(**{name: value[name] for name in known if name in value})


def checked_retry_after_ms(retry_after_ms: object) -> int:
    """A nack's own delay, refused unless 0 to ``RETRY_DELAY_MS_MAX`` ms."""
    if isinstance(retry_after_ms, bool) or not isinstance(retry_after_ms, int) or \
            not 0 <= retry_after_ms <= RETRY_DELAY_MS_MAX:
        raise InvalidConfig(f"retry_after_ms={retry_after_ms!r} must be an integer from 0 to {RETRY_DELAY_MS_MAX} "
                            f"({RETRY_DELAY_MS_MAX // DAY_MS} days), or None for the group's back-off schedule")
    return retry_after_ms
