"""The delay scheduler's state of one delay topic (``scheduling.delay_log``): what it holds, releases,
drops, and where a scheduler that starts again must read from so that it rebuilds the same schedule."""

from __future__ import annotations

import random

from mafka4.batch_payload import LANE_HEADER
from mafka4.delays import (CANCEL_OF_HEADER, DELIVER_AT_HEADER, RELEASE_OF_HEADER, MessageId, encode_cancel_of,
                           encode_deliver_at, encode_release_of)
from mafka4.scheduling.delay_log import DelayLog

DUE = 1_000_000


def scheduled(log: DelayLog, partition: int, offset: int, due_ms: int, value: bytes = b"v", lane: str = "") -> None:
    headers = ((LANE_HEADER, lane.encode()),) if lane else ()
    log.apply(partition, offset, b"k", value, (*headers, ("user", b"h"), (DELIVER_AT_HEADER, encode_deliver_at(due_ms))),
              due_ms - 5000)


def marker(log: DelayLog, partition: int, offset: int, released_offset: int) -> None:
    log.apply(partition, offset, None, b"", ((RELEASE_OF_HEADER, encode_release_of(released_offset)),), 0)


def cancel(log: DelayLog, partition: int, offset: int, target: MessageId) -> None:
    log.apply(partition, offset, None, b"", ((CANCEL_OF_HEADER, encode_cancel_of(target)),), 0)


def feed(log: DelayLog, partition: int, offset: int, record: tuple[str, int]) -> None:
    """One record of a history: ("scheduled", due ms), ("marker", released offset) or ("cancel", offset)."""
    kind, number = record
    if kind == "scheduled":
        scheduled(log, partition, offset, number)
    elif kind == "marker":
        marker(log, partition, offset, number)
    else:
        cancel(log, partition, offset, MessageId(partition, number))


def test_a_message_is_released_at_its_due_time_with_its_body_lane_and_due_header():
    log = DelayLog()
    scheduled(log, 0, 0, DUE, b"later", lane="swim")
    scheduled(log, 0, 1, DUE - 10, b"sooner")
    assert log.take_due(DUE - 11, 10) == []
    assert log.next_due_ms() == DUE - 10
    first, second = log.take_due(DUE, 10)
    assert (first.value, second.value) == (b"sooner", b"later")
    assert second.lane == "swim" and second.key == b"k" and second.timestamp_ms == DUE - 5000
    assert second.headers == (("user", b"h"), (DELIVER_AT_HEADER, encode_deliver_at(DUE)))
    assert log.waiting() == 2  # in flight until the markers are read back
    marker(log, 0, 2, 1)
    marker(log, 0, 3, 0)
    assert log.waiting() == 0 and log.counts.released == 2
    assert log.restart_offsets() == {0: 4}


def test_a_failed_release_is_due_again_at_once():
    log = DelayLog()
    scheduled(log, 0, 0, DUE)
    (release,) = log.take_due(DUE, 10)
    log.release_failed(release.message_id)
    assert [r.message_id for r in log.take_due(DUE, 10)] == [release.message_id]
    assert log.counts.retried == 1


def test_a_cancel_before_the_due_time_drops_the_message_and_one_after_is_late():
    log = DelayLog()
    scheduled(log, 1, 5, DUE)
    scheduled(log, 1, 6, DUE + 1)
    cancel(log, 1, 7, MessageId(1, 5))
    (release,) = log.take_due(DUE + 1, 10)
    assert release.message_id == MessageId(1, 6)
    cancel(log, 1, 8, MessageId(1, 6))
    assert (log.counts.cancelled, log.counts.cancels_late) == (1, 1)
    cancel(log, 1, 9, MessageId(1, 99))  # unknown: nothing to drop
    assert log.counts.cancelled == 1


def test_records_not_written_by_mafka4_are_counted_and_skipped():
    log = DelayLog()
    log.apply(0, 0, b"k", b"v", (("user", b"h"),), 0)
    log.apply(0, 1, b"k", b"v", ((DELIVER_AT_HEADER, b" 12"),), 0)
    assert (log.counts.foreign, log.counts.unreadable, log.waiting()) == (1, 1, 0)
    assert log.restart_offsets() == {0: 2}


def test_the_restart_offset_is_the_first_message_still_waiting_or_in_flight():
    log = DelayLog()
    scheduled(log, 0, 0, DUE)
    scheduled(log, 0, 1, DUE + 100)
    scheduled(log, 2, 0, DUE + 50)
    assert log.restart_offsets() == {0: 0, 2: 0}
    (release,) = log.take_due(DUE, 10)
    assert log.restart_offsets() == {0: 0, 2: 0}  # in flight: its marker is not read yet
    marker(log, 0, 2, 0)
    assert log.restart_offsets() == {0: 1, 2: 0}


def test_a_scheduler_that_starts_from_the_restart_offsets_rebuilds_the_same_schedule():
    """A random history of schedules, releases, failures and cancels; at any point a new log fed
    the records from the old one's restart offsets holds exactly the messages still waiting."""
    rng = random.Random(41)
    for _ in range(30):
        records: dict[int, list] = {0: [], 1: []}
        live = DelayLog()
        now = DUE

        def append(partition: int, record: tuple) -> None:
            records[partition].append(record)
            feed(live, partition, len(records[partition]) - 1, record)

        for _ in range(rng.randrange(5, 60)):
            partition = rng.randrange(2)
            roll = rng.random()
            if roll < 0.5:
                append(partition, ("scheduled", now + rng.randrange(0, 2000)))
            elif roll < 0.6 and records[partition]:
                append(partition, ("cancel", rng.randrange(len(records[partition]))))
            else:
                now += rng.randrange(0, 500)
                for release in live.take_due(now, rng.randrange(1, 5)):
                    if rng.random() < 0.2:
                        live.release_failed(release.message_id)
                    else:
                        append(release.message_id.partition, ("marker", release.message_id.offset))
        restarted = DelayLog()
        for partition, start in live.restart_offsets().items():
            for offset in range(start, len(records[partition])):
                feed(restarted, partition, offset, records[partition][offset])
        far = now + 10**9
        in_flight = live.waiting() - len(live.schedule)
        expected = sorted(r.message_id for r in live.take_due(far, 10**6))
        got = sorted(r.message_id for r in restarted.take_due(far, 10**6))
        # In-flight messages (taken, no marker yet) are pending again after a restart: at least once.
        assert set(expected) <= set(got) and len(got) - len(expected) == in_flight
