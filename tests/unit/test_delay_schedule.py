"""A delay topic's schedule (``scheduling.delay_schedule``): what is due comes out in due order,
once; a cancel removes exactly a pending message; the counts by horizon. (That a scheduler reading
its delay topic again holds the same schedule is ``test_delay_log``'s.)"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mafka4.delays import MessageId
from mafka4.limits import DELAY_FAR_SLOT_MS, DELAY_SLOT_MS
from mafka4.scheduling.delay_schedule import DelaySchedule, DueEntry

MINUTE_MS, HOUR_MS, DAY_MS = 60_000, 3_600_000, 86_400_000
NOW_MS = 1_765_000_000_000


def m(partition: int, offset: int) -> MessageId:
    return MessageId(partition, offset)


def test_due_entries_come_out_in_due_order_ties_by_log_offset_and_only_once():
    schedule = DelaySchedule()
    schedule.schedule(NOW_MS + 5_000, 12, m(0, 3))
    schedule.schedule(NOW_MS + 2_000, 13, m(1, 7))
    schedule.schedule(NOW_MS + 5_000, 11, m(2, 1))
    schedule.schedule(NOW_MS + 9 * MINUTE_MS, 14, m(0, 4))
    assert len(schedule) == 4 and schedule.next_due_ms() == NOW_MS + 2_000
    assert schedule.take_due(NOW_MS + 1_999, limit=10) == []
    assert schedule.take_due(NOW_MS + 5_000, limit=10) == [
        DueEntry(NOW_MS + 2_000, 13, m(1, 7)), DueEntry(NOW_MS + 5_000, 11, m(2, 1)), DueEntry(NOW_MS + 5_000, 12, m(0, 3))]
    assert schedule.take_due(NOW_MS + 5_000, limit=10) == []
    assert len(schedule) == 1 and schedule.next_due_ms() == NOW_MS + 9 * MINUTE_MS
    assert schedule.take_due(NOW_MS + DAY_MS, limit=10) == [DueEntry(NOW_MS + 9 * MINUTE_MS, 14, m(0, 4))]
    assert len(schedule) == 0 and schedule.next_due_ms() is None


def test_a_take_stops_at_its_limit_and_the_rest_stays_due():
    schedule = DelaySchedule()
    for log_offset in range(10):
        schedule.schedule(NOW_MS + 1_000 + log_offset % 3, log_offset, m(0, log_offset))
    first = schedule.take_due(NOW_MS + 10_000, limit=4)
    rest = schedule.take_due(NOW_MS + 10_000, limit=100)
    assert [e.log_offset for e in first + rest] == [0, 3, 6, 9, 1, 4, 7, 2, 5, 8]
    assert len(first) == 4 and len(schedule) == 0


def test_cancel_removes_a_pending_message_and_nothing_else():
    schedule = DelaySchedule()
    schedule.schedule(NOW_MS + 3_000, 1, m(0, 10))
    schedule.schedule(NOW_MS + 3_000, 2, m(1, 10))  # the same offset in another partition
    schedule.schedule(NOW_MS + 2 * DAY_MS, 3, m(0, 11))
    assert not schedule.cancel(m(0, 99)) and not schedule.cancel(m(5, 10))
    assert schedule.cancel(m(1, 10)) and not schedule.cancel(m(1, 10))
    assert schedule.cancel(m(0, 11))
    assert len(schedule) == 1 and schedule.next_due_ms() == NOW_MS + 3_000
    assert schedule.take_due(NOW_MS + 3 * DAY_MS, limit=10) == [DueEntry(NOW_MS + 3_000, 1, m(0, 10))]
    assert not schedule.cancel(m(0, 10)), "a released message cannot be cancelled"


def test_a_cancel_whose_marker_was_not_written_can_be_put_back():
    """The read node cancels, then appends the cancel marker; if the append fails it schedules the
    entry ``pending`` gave again."""
    schedule = DelaySchedule()
    schedule.schedule(NOW_MS + 4_000, 8, m(2, 40))
    assert schedule.pending(m(2, 41)) is None and schedule.pending(m(1, 40)) is None
    entry = schedule.pending(m(2, 40))
    assert entry == DueEntry(NOW_MS + 4_000, 8, m(2, 40))
    assert schedule.cancel(m(2, 40)) and schedule.pending(m(2, 40)) is None
    schedule.schedule(*entry)
    assert schedule.take_due(NOW_MS + 4_000, limit=10) == [entry]


def test_entries_taken_and_not_released_can_be_put_back():
    """The read node takes entries, then appends their release copies; if the append fails it
    schedules them again."""
    schedule = DelaySchedule()
    schedule.schedule(NOW_MS + 1_000, 1, m(0, 1))
    schedule.schedule(NOW_MS + 1_500, 2, m(0, 2))
    taken = schedule.take_due(NOW_MS + 1_200, limit=10)
    for entry in taken:
        schedule.schedule(*entry)
    assert schedule.take_due(NOW_MS + 2_000, limit=10) == [DueEntry(NOW_MS + 1_000, 1, m(0, 1)),
                                                          DueEntry(NOW_MS + 1_500, 2, m(0, 2))]


def test_scheduling_a_pending_message_again_is_a_broken_invariant():
    schedule = DelaySchedule()
    schedule.schedule(NOW_MS + 1_000, 1, m(0, 1))
    with pytest.raises(AssertionError, match="scheduled already"):
        schedule.schedule(NOW_MS + 2_000, 2, m(0, 1))


def test_counts_by_horizon_put_overdue_in_the_minute_and_each_bound_in_the_nearer_horizon():
    schedule = DelaySchedule()
    dues = [NOW_MS - 5_000, NOW_MS + MINUTE_MS, NOW_MS + MINUTE_MS + 1, NOW_MS + HOUR_MS, NOW_MS + HOUR_MS + 1,
            NOW_MS + DAY_MS, NOW_MS + DAY_MS + 1, NOW_MS + 30 * DAY_MS]
    for log_offset, due_ms in enumerate(dues):
        schedule.schedule(due_ms, log_offset, m(0, log_offset))
    assert schedule.counts_by_horizon(NOW_MS) == {"minute": 2, "hour": 2, "day": 2, "later": 2}
    schedule.take_due(NOW_MS, limit=1)  # spreads the current far slot into near slots
    assert schedule.counts_by_horizon(NOW_MS) == {"minute": 1, "hour": 2, "day": 2, "later": 2}
    assert schedule.counts_by_horizon(NOW_MS + 40 * DAY_MS) == {"minute": 7, "hour": 0, "day": 0, "later": 0}


def test_many_releases_and_cancels_in_one_partition_leave_exactly_the_pending_ones():
    """Past a few dozen removals a partition's index drops them: what stays must still be found."""
    schedule = DelaySchedule()
    for offset in range(1_000):
        schedule.schedule(NOW_MS + 1_000 + (offset * 7919) % 5_000_000, offset, m(0, offset))
    for entry in schedule.take_due(NOW_MS + 1_000_000, limit=10_000):  # taken, then put back
        schedule.schedule(*entry)
    taken = {e.message_id.offset for e in schedule.take_due(NOW_MS + 2_500_000, limit=10_000)}
    cancelled = {offset for offset in range(0, 1_000, 3) if offset not in taken}
    assert all(schedule.cancel(m(0, offset)) for offset in sorted(cancelled))
    pending = set(range(1_000)) - taken - cancelled
    assert len(schedule) == len(pending)
    assert not any(schedule.cancel(m(0, offset)) for offset in sorted(taken | cancelled))
    assert {e.message_id.offset for e in schedule.take_due(NOW_MS + DAY_MS, limit=10_000)} == pending


def test_a_message_arriving_out_of_offset_order_is_still_found():
    schedule = DelaySchedule()
    for offset in (10, 30, 20, 5):
        schedule.schedule(NOW_MS + 1_000 + offset, offset, m(0, offset))
    assert schedule.cancel(m(0, 20)) and schedule.cancel(m(0, 5)) and not schedule.cancel(m(0, 15))
    assert [e.log_offset for e in schedule.take_due(NOW_MS + 2_000, limit=10)] == [10, 30]


# --- against a model: a list of pending entries --------------------------------------------

PARTITIONS = 3
Op = st.one_of(
    st.tuples(st.just("schedule"), st.integers(0, PARTITIONS - 1), st.booleans(), st.integers(-3_000, 3 * HOUR_MS)),
    st.tuples(st.just("cancel"), st.integers(0, 40)),
    st.tuples(st.just("take"), st.integers(0, 2 * HOUR_MS), st.integers(1, 5), st.booleans()),
)


class Model:
    """The schedule as a list of pending (due_ms, log_offset, message_id)."""

    def __init__(self):
        self.pending: list[tuple[int, int, MessageId]] = []
        self.now_ms = NOW_MS
        self.next_log_offset = 0
        self.next_offsets = [0] * PARTITIONS
        self.ids: list[MessageId] = []

    def take(self, now_ms: int, limit: int) -> list[DueEntry]:
        due = sorted((e for e in self.pending if e[0] <= now_ms), key=lambda e: (e[0], e[1]))[:limit]
        for entry in due:
            self.pending.remove(entry)
        return [DueEntry(*entry) for entry in due]

    def counts(self, now_ms: int) -> dict[str, int]:
        counts = {"minute": 0, "hour": 0, "day": 0, "later": 0}
        for due_ms, _, _ in self.pending:
            ahead = due_ms - now_ms
            counts["minute" if ahead <= MINUTE_MS else "hour" if ahead <= HOUR_MS else "day" if ahead <= DAY_MS else
                   "later"] += 1
        return counts


def run(ops, slot_ms, far_slot_ms):
    schedule, model = DelaySchedule(slot_ms, far_slot_ms), Model()
    for op in ops:
        if op[0] == "schedule":
            _, partition, in_order, ahead_ms = op
            # A partition's messages come in offset order; one out of order tests the index's insertion.
            offset = model.next_offsets[partition] + (7 if in_order else 0)
            model.next_offsets[partition] += 13 if in_order else 1
            message_id = m(partition, offset)
            if message_id in model.ids:
                continue
            entry = (model.now_ms + ahead_ms, model.next_log_offset, message_id)
            model.next_log_offset += 1
            model.ids.append(message_id)
            schedule.schedule(*entry)
            model.pending.append(entry)
        elif op[0] == "cancel":
            message_id = model.ids[op[1] % len(model.ids)] if model.ids else m(0, op[1])
            expected = [e for e in model.pending if e[2] == message_id]
            assert schedule.pending(message_id) == (DueEntry(*expected[0]) if expected else None)
            assert schedule.cancel(message_id) == bool(expected)
            assert schedule.pending(message_id) is None
            if expected:
                model.pending.remove(expected[0])
        else:
            _, advance_ms, limit, released = op
            model.now_ms += advance_ms
            taken = schedule.take_due(model.now_ms, limit)
            assert taken == model.take(model.now_ms, limit)
            if not released:  # the release copies' produce failed: the scheduler puts them back
                for entry in taken:
                    schedule.schedule(*entry)
                    model.pending.append(tuple(entry))
        assert len(schedule) == len(model.pending)
        assert schedule.next_due_ms() == min((e[0] for e in model.pending), default=None)
        assert schedule.counts_by_horizon(model.now_ms) == model.counts(model.now_ms)
    return schedule, model


WIDTHS = st.sampled_from([(DELAY_SLOT_MS, DELAY_FAR_SLOT_MS), (1, 1), (7, 7), (1_000, 1_000), (250, 90_000), (300, 1_000)])


@settings(max_examples=300)
@given(st.lists(Op, max_size=60), WIDTHS)
def test_the_schedule_behaves_as_a_list_of_pending_entries(ops, widths):
    run(ops, *widths)
