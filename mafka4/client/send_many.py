"""The outcome of ``Producer.send_many``: one future for many messages.

A call's messages go into batches in runs ("parts"): consecutive messages of one call that
landed in one batch. Each part registers one callback on its batch, at its first record, so
the cost per message is none: what a part's callback receives (the first record's
``RecordMetadata``) gives every offset of the part, which follow one another.

``SentMessages`` is the result: a sequence of ``RecordMetadata`` in the order the values were
given, made on demand from the parts, so that a caller who only wants to know that everything
was acknowledged makes no object per message.
"""

from __future__ import annotations

import bisect
import logging
import threading
from collections.abc import Sequence
from typing import Callable, NamedTuple

from mafka4.client.futures import RecordMetadata
from mafka4.errors import RequestTimedOut

logger = logging.getLogger(__name__)


class SentPart(NamedTuple):
    """Consecutive messages of one call acknowledged in one batch: ``count`` of them, the first at
    ``first.offset`` (every offset is -1 with acks=0)."""

    first: RecordMetadata
    count: int


class SentMessages(Sequence):
    """The ``RecordMetadata`` of each message of a ``send_many`` call, in the order given."""

    __slots__ = ("parts", "_starts")

    def __init__(self, parts: tuple[SentPart, ...]):
        self.parts = parts
        starts, total = [], 0
        for part in parts:
            starts.append(total)
            total += part.count
        self._starts = (starts, total)

    def __len__(self) -> int:
        return self._starts[1]

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(f"message {index} of a send_many of {len(self)}")
        starts = self._starts[0]
        number = bisect.bisect_right(starts, index) - 1  # the last part starting at or before index
        return _nth(self.parts[number], index - starts[number])

    def __iter__(self):
        for part in self.parts:
            for within in range(part.count):
                yield _nth(part, within)

    def __repr__(self) -> str:
        return f"SentMessages({len(self)} messages in {len(self.parts)} parts)"


def _nth(part: SentPart, within: int) -> RecordMetadata:
    first = part.first
    offset = -1 if first.offset < 0 else first.offset + within
    return first._replace(offset=offset)


ManyCallback = Callable[["SentMessages | None", "BaseException | None"], None]


class ManyFuture:
    """Completes when every part of a ``send_many`` call is answered: with ``SentMessages`` if all
    were acknowledged, else with the first failed part's error (the other parts may have been
    written: a call is not atomic, as separate sends are not)."""

    def __init__(self, callback: ManyCallback | None = None):
        self._parts: list[SentPart | None] = []
        self._unanswered = 1  # the call's own, given back by ``seal`` once every part is added
        self._error: BaseException | None = None
        self._result: SentMessages | None = None
        self._callbacks: list[ManyCallback] = [] if callback is None else [callback]
        self._lock = threading.Lock()
        self._event = threading.Event()

    def add_part(self, count: int) -> Callable:
        """A part of ``count`` messages: returns the callback its batch answers (its first record's)."""
        with self._lock:
            number = len(self._parts)
            self._parts.append(None)
            self._unanswered += 1

        def answered(metadata: RecordMetadata | None, error: BaseException | None) -> None:
            self._answer(number, count, metadata, error)
        return answered

    def seal(self) -> None:
        """Every part is added: the future completes once they are answered."""
        self._settle()

    def _answer(self, number: int, count: int, metadata: RecordMetadata | None, error: BaseException | None) -> None:
        with self._lock:
            if error is not None:
                self._error = self._error or error
            else:
                self._parts[number] = SentPart(metadata, count)
        self._settle()

    def _settle(self) -> None:
        with self._lock:
            self._unanswered -= 1
            if self._unanswered:
                return
        self._finish()

    def _finish(self) -> None:
        with self._lock:
            if self._error is None:
                self._result = SentMessages(tuple(self._parts))
            self._parts = []
            callbacks, self._callbacks = self._callbacks, []
            self._event.set()
        for callback in callbacks:
            self._run(callback)

    def _run(self, callback: ManyCallback) -> None:
        try:
            callback(self._result, self._error)
        except Exception:  # a user callback must not kill the sender thread
            logger.exception("producer send_many callback raised")

    def done(self) -> bool:
        return self._event.is_set()

    def result(self, timeout: float | None = None) -> SentMessages:
        self._wait(timeout)
        if self._error is not None:
            raise self._error
        return self._result

    def exception(self, timeout: float | None = None) -> BaseException | None:
        self._wait(timeout)
        return self._error

    def add_callback(self, callback: ManyCallback) -> "ManyFuture":
        """``callback(sent, error)`` once every part is answered; at once if that has happened."""
        with self._lock:
            if not self._event.is_set():
                self._callbacks.append(callback)
                return self
        self._run(callback)
        return self

    def _wait(self, timeout: float | None) -> None:
        if not self._event.wait(timeout):
            raise RequestTimedOut(f"send_many: not every message was answered within {timeout} s")
