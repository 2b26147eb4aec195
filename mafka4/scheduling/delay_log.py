"""One delay topic as its scheduler reads it: what waits, what is due, and where to read again after a restart.

The scheduler (``scheduling.delay_service``) reads a delay topic (``mafka4.delays``) from its
physical partitions, each in offset order, and hands every record to ``DelayLog.apply``:

* a *scheduled record* (``DELIVER_AT_HEADER``) is held until its due time: its entry in the
  ``DelaySchedule`` and its body (key, value, headers, timestamp) here;
* a *release marker* (``RELEASE_OF_HEADER``) ends the release of the record it names: nothing of
  it is kept any more;
* a *cancel marker* (``CANCEL_OF_HEADER``) drops the message it names if it is still waiting;
  one read after the release began is *late* (counted; the message is delivered);
* any other record was not written by mafka4 (a user who may produce to the delay topic):
  counted as *foreign* and skipped, as is a scheduled record whose header is unreadable.

``take_due`` moves what is due into *flight*: the shell produces each release copy to the topic
and, once acknowledged, appends its release marker; ``release_failed`` puts an entry whose copy
failed back in the schedule, due at once. An entry leaves flight when its marker is read back.

Where to read again (``restart_offsets``): per partition, the lowest offset still waiting or in
flight, else the offset after the last record read. Everything below it was released (its marker
is in the topic) or cancelled, so a scheduler that starts there rebuilds the same schedule:
records it reads again whose markers follow are scheduled and then dropped by their markers. It
must not release anything before it has read to the end of the topic (the shell's rule):
records due already whose markers it has not read yet would be released twice.

Pure: no I/O, no clock (``now_ms`` is an argument).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple, Sequence

import msgpack

from mafka4.batch_payload import LANE_HEADER, lane_of_headers
from mafka4.delays import (CANCEL_OF_HEADER, DELIVER_AT_HEADER, RELEASE_OF_HEADER, MessageId, decode_cancel_of,
                           decode_deliver_at, decode_release_of, encode_deliver_at)
from mafka4.errors import CorruptRecord
from mafka4.scheduling.delay_schedule import DelaySchedule

Headers = tuple[tuple[str, bytes], ...]


class Body(NamedTuple):
    """What a release copy repeats of its scheduled record."""

    key: bytes | None
    value: bytes
    headers: Headers
    timestamp_ms: int

    def packed(self) -> bytes:
        """One bytes object (msgpack): a waiting message costs one object, not a tuple of objects.
        Measured with 1M waiting messages of 100-byte values: ~326 bytes each in the scheduler, its
        timer entry included, against ~748 as tuples (reports/2026-12-05-delays). The due time
        header is left out (the schedule holds the due time)."""
        return msgpack.packb((self.key, self.value, [(name, value) for name, value in self.headers
                                                     if name != DELIVER_AT_HEADER], self.timestamp_ms))

    @classmethod
    def unpacked(cls, data: bytes, due_ms: int) -> "Body":
        key, value, headers, timestamp_ms = msgpack.unpackb(data)
        return cls(key, value, (*(tuple(header) for header in headers), (DELIVER_AT_HEADER, encode_deliver_at(due_ms))),
                   timestamp_ms)


class Release(NamedTuple):
    """A due message to produce to the topic: in ``lane`` ("" the trunk), with ``headers`` less the
    lane header (the producer adds it back) and with the due time header."""

    message_id: MessageId
    due_ms: int
    lane: str
    key: bytes | None
    value: bytes
    headers: Headers
    timestamp_ms: int


@dataclass
class DelayCounts:
    """What a delay log has counted since it started (``delay_service`` logs and publishes them)."""

    scheduled: int = 0
    released: int = 0
    cancelled: int = 0
    cancels_late: int = 0
    foreign: int = 0
    unreadable: int = 0
    retried: int = 0


@dataclass
class DelayLog:
    """The scheduler's state of one delay topic (see the module docstring)."""

    schedule: DelaySchedule = field(default_factory=DelaySchedule)
    counts: DelayCounts = field(default_factory=DelayCounts)
    # The bodies of the scheduled records waiting or in flight, packed, by partition and offset.
    _bodies: dict[int, dict[int, bytes]] = field(default_factory=dict)
    # Taken, release not yet marked: message id -> due time.
    _flight: dict[MessageId, int] = field(default_factory=dict)
    # Per partition, the offset after the last record applied.
    _read_through: dict[int, int] = field(default_factory=dict)

    def apply(self, partition: int, offset: int, key: bytes | None, value: bytes, headers: Headers,
              timestamp_ms: int) -> None:
        """One record read from the delay topic, in offset order within its partition."""
        assert offset >= self._read_through.get(partition, 0), (partition, offset, self._read_through.get(partition))
        self._read_through[partition] = offset + 1
        marks = {name: data for name, data in headers if name in _OWN_HEADERS}
        try:
            if DELIVER_AT_HEADER in marks:
                self._scheduled(MessageId(partition, offset), decode_deliver_at(marks[DELIVER_AT_HEADER]),
                                Body(key, value, headers, timestamp_ms))
            elif RELEASE_OF_HEADER in marks:
                self._release_marked(MessageId(partition, decode_release_of(marks[RELEASE_OF_HEADER])))
            elif CANCEL_OF_HEADER in marks:
                self._cancelled(decode_cancel_of(marks[CANCEL_OF_HEADER]))
            else:
                self.counts.foreign += 1
        except CorruptRecord:
            self.counts.unreadable += 1

    def _scheduled(self, message_id: MessageId, due_ms: int, body: Body) -> None:
        bodies = self._bodies.setdefault(message_id.partition, {})
        if message_id.offset in bodies:
            return  # read again after a seek back: held already
        bodies[message_id.offset] = body.packed()
        self.schedule.schedule(due_ms, message_id.offset, message_id)
        self.counts.scheduled += 1

    def _release_marked(self, message_id: MessageId) -> None:
        if self._flight.pop(message_id, None) is not None:
            self.counts.released += 1
        else:
            self.schedule.cancel(message_id)  # released before this scheduler started: read again since
        self._drop(message_id)

    def _cancelled(self, message_id: MessageId) -> None:
        if self.schedule.cancel(message_id):
            self._drop(message_id)
            self.counts.cancelled += 1
        elif message_id in self._flight:
            self.counts.cancels_late += 1

    def take_due(self, now_ms: int, limit: int) -> list[Release]:
        """Up to ``limit`` messages due at ``now_ms``, in due order, moved into flight."""
        releases = []
        for entry in self.schedule.take_due(now_ms, limit):
            body = Body.unpacked(self._bodies[entry.message_id.partition][entry.message_id.offset], entry.due_ms)
            self._flight[entry.message_id] = entry.due_ms
            releases.append(Release(entry.message_id, entry.due_ms, lane_of_headers(body.headers), body.key,
                                    body.value, _without_lane(body.headers), body.timestamp_ms))
        return releases

    def _drop(self, message_id: MessageId) -> None:
        self._bodies.get(message_id.partition, {}).pop(message_id.offset, None)

    def release_failed(self, message_id: MessageId) -> None:
        """The release copy of in-flight ``message_id`` was not acknowledged: due again at once."""
        due_ms = self._flight.pop(message_id)
        self.schedule.schedule(due_ms, message_id.offset, message_id)
        self.counts.retried += 1

    def next_due_ms(self) -> int | None:
        return self.schedule.next_due_ms()

    def waiting(self) -> int:
        """Messages scheduled and neither released nor cancelled (in flight included)."""
        return len(self.schedule) + len(self._flight)

    def counts_by_horizon(self, now_ms: int) -> dict[str, int]:
        return self.schedule.counts_by_horizon(now_ms)

    def restart_offsets(self) -> dict[int, int]:
        """Per partition read, where a scheduler that starts must read from (the module docstring)."""
        offsets = {}
        for partition, read_through in self._read_through.items():
            candidates = [read_through, *(message_id.offset for message_id in self._flight
                                          if message_id.partition == partition)]
            first = self.schedule.first_pending_offset(partition)
            if first is not None:
                candidates.append(first)
            offsets[partition] = min(candidates)
        return offsets


_OWN_HEADERS = frozenset({DELIVER_AT_HEADER, RELEASE_OF_HEADER, CANCEL_OF_HEADER})


def _without_lane(headers: Sequence[tuple[str, bytes]]) -> Headers:
    if headers and headers[0][0] == LANE_HEADER:
        return tuple(headers[1:])
    return tuple(headers)
