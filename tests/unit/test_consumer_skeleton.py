"""What the three consumers share: where a partition starts, when a member auto-commits, the poll
loop, and the fetches they keep out. No Ray, no etcd: stand-ins for the stream caller, the
network gate and the member's commit."""

from __future__ import annotations

import concurrent.futures
import logging
import time

import pytest

from mafka4.client import fetches_in_flight as fetches_module
from mafka4.client import group_commits as commits_module
from mafka4.client.fetches_in_flight import FetchesInFlight
from mafka4.client.group_commits import GroupCommits
from mafka4.client.message import Message
from mafka4.client.positions import CommitSchedule, start_offset
from mafka4.client.reading import poll_until, seek_to_time
from mafka4.errors import CoordinatorUnavailable
from mafka4.partition_gate import UNTOUCHED, CallPlan

# --- where a partition starts ------------------------------------------------------------


@pytest.mark.parametrize("earliest", [True, False])
def test_a_committed_offset_the_log_still_holds_is_where_reading_resumes(earliest):
    assert start_offset(150, (100, 200), earliest) == 150
    assert start_offset(100, (100, 200), earliest) == 100


def test_without_a_usable_commit_reading_starts_at_the_log_start_or_the_high_watermark():
    assert start_offset(None, (100, 200), earliest=True) == 100
    assert start_offset(None, (100, 200), earliest=False) == 200
    # committed below the log start: retention deleted it, so auto_offset_reset decides
    assert start_offset(40, (100, 200), earliest=True) == 100
    assert start_offset(40, (100, 200), earliest=False) == 200


# --- when auto-commit is due -------------------------------------------------------------

AT = {0: (10, 12), 1: (20, 20)}  # positions: partition or VP -> (offset, high watermark seen)


def test_auto_commit_is_due_an_interval_after_the_last_commit_whatever_sent_it():
    schedule = CommitSchedule(5_000, now_ms=0)
    assert not schedule.due(4_999, AT)
    assert schedule.due(5_000, AT)
    schedule.sent(3_000)  # commit() or a drained parent, say
    assert not schedule.due(5_000, AT)
    assert schedule.due(8_000, AT)


def test_without_an_interval_auto_commit_is_never_due():
    assert not CommitSchedule(None, now_ms=0).due(10**12, AT)
    assert CommitSchedule(None, now_ms=0).until_due_ms(10**12, AT) == float("inf")


def test_positions_the_coordinator_acknowledged_are_not_committed_again_until_they_move():
    schedule = CommitSchedule(5_000, now_ms=0)
    schedule.sent(0)
    schedule.acknowledged(AT)
    assert not schedule.due(60_000, dict(AT)), "an idle member sends no commit"
    assert schedule.until_due_ms(60_000, AT) == float("inf"), "and has none to wake up for"
    assert schedule.due(60_000, {0: (11, 12), 1: (20, 20)}), "an offset moved"
    assert schedule.due(60_000, {0: (10, 13), 1: (20, 20)}), "the high watermark seen moved: the group's lag"
    assert schedule.due(60_000, {0: (10, 12)}), "a partition fewer"
    assert schedule.until_due_ms(4_000, {0: (11, 12), 1: (20, 20)}) == 1_000


def test_a_commit_sent_and_not_yet_acknowledged_settles_nothing():
    """Sent but unanswered (the coordinator away, or partitions lost): the next auto-commit writes."""
    schedule = CommitSchedule(5_000, now_ms=0)
    schedule.sent(0)
    schedule.acknowledged(AT)
    schedule.sent(10_000)
    assert schedule.due(15_000, AT)


def test_after_a_sync_the_next_auto_commit_writes_the_same_positions_again():
    schedule = CommitSchedule(5_000, now_ms=0)
    schedule.sent(0)
    schedule.acknowledged(AT)
    schedule.forget()
    assert schedule.due(5_000, AT) and not schedule.due(4_999, AT)


def test_what_was_acknowledged_is_a_copy_not_the_callers_dict():
    schedule = CommitSchedule(5_000, now_ms=0)
    positions = dict(AT)
    schedule.acknowledged(positions)
    positions[0] = (99, 99)
    assert schedule.due(5_000, positions)


class Member:
    """A group member's commit: records what it wrote, loses ``lost``, or fails as etcd is away."""

    def __init__(self):
        self.positions = {0: (10, 10), 1: (20, 20)}
        self.lost: set[int] = set()
        self.unavailable = False
        self.writes: list[dict[int, tuple[int, int]]] = []

    def at(self) -> dict[int, tuple[int, int]]:
        return dict(self.positions)

    def write(self, positions) -> tuple[dict[int, int], set[int]]:
        self.writes.append(dict(positions))
        if self.unavailable:
            raise CoordinatorUnavailable("etcd did not answer; retry")
        return {p: o for p, (o, _) in positions.items() if p not in self.lost}, set(self.lost)

    def commits(self, interval_ms: int | None, noun: str = "VPs") -> GroupCommits:
        return GroupCommits("billing", interval_ms, self.at, self.write, noun)


@pytest.fixture
def clock(monkeypatch):
    now = [0.0]
    monkeypatch.setattr(commits_module, "_now_ms", lambda: now[0])
    return now


def read(member: Member, partition: int) -> None:
    offset, _ = member.positions[partition]
    member.positions[partition] = (offset + 1, offset + 1)


def test_poll_auto_commits_once_per_interval_and_commit_restarts_the_interval(clock):
    member = Member()
    commits = member.commits(1_000)
    clock[0] = 999
    commits.if_due()
    assert len(member.writes) == 0
    clock[0] = 1_000
    commits.if_due()
    commits.if_due()
    assert len(member.writes) == 1
    clock[0] = 1_500
    read(member, 0)
    assert commits.now() == ({0: 11, 1: 20}, set())
    clock[0] = 2_000
    read(member, 0)
    commits.if_due()
    assert len(member.writes) == 2  # 500 ms after commit(): not due
    clock[0] = 2_500
    commits.if_due()
    assert len(member.writes) == 3


def test_an_idle_member_commits_its_positions_once_then_not_until_they_move(clock):
    member = Member()
    commits = member.commits(1_000)
    clock[0] = 1_000
    commits.if_due()
    for clock[0] in range(2_000, 60_000, 500):
        assert commits.seconds_until_due() == float("inf"), "poll() has no auto-commit to wake up for"
        commits.if_due()
    assert member.writes == [{0: (10, 10), 1: (20, 20)}]
    read(member, 1)
    assert commits.seconds_until_due() == 0
    commits.if_due()
    assert member.writes[1:] == [{0: (10, 10), 1: (21, 21)}]


def test_commit_always_writes_even_positions_the_coordinator_holds(clock):
    member = Member()
    commits = member.commits(1_000)
    commits.now()
    assert commits.now() == ({0: 10, 1: 20}, set())
    assert len(member.writes) == 2


def test_after_a_sync_the_next_auto_commit_writes_unchanged_positions(clock):
    member = Member()
    commits = member.commits(1_000)
    clock[0] = 1_000
    commits.if_due()
    commits.forget()  # a claim, a revoke, a rebalance
    assert commits.seconds_until_due() == 1.0
    clock[0] = 2_000
    commits.if_due()
    assert len(member.writes) == 2


def test_an_auto_commit_etcd_misses_is_skipped_and_tried_an_interval_later(clock, caplog):
    member = Member()
    member.unavailable = True
    commits = member.commits(1_000)
    clock[0] = 1_000
    with caplog.at_level(logging.WARNING, logger=commits_module.__name__):
        commits.if_due()  # does not raise into poll()
    assert "auto-commit skipped, retried in 1000 ms" in caplog.text
    member.unavailable = False
    clock[0] = 1_999
    commits.if_due()
    assert len(member.writes) == 1
    clock[0] = 2_000
    commits.if_due()
    assert len(member.writes) == 2, "the same positions again: the first try was not answered"
    clock[0] = 3_000
    commits.if_due()
    assert len(member.writes) == 2


def test_an_unanswered_commit_after_an_answered_one_leaves_the_next_auto_commit_to_write(clock):
    member = Member()
    commits = member.commits(1_000)
    commits.now()
    member.unavailable = True
    with pytest.raises(CoordinatorUnavailable):
        commits.now()  # it may or may not have been written
    member.unavailable = False
    clock[0] = 1_000
    commits.if_due()
    assert len(member.writes) == 3


def test_partitions_lost_before_an_auto_commit_are_logged_and_commit_now_reports_them(clock, caplog):
    member = Member()
    member.lost = {1}
    commits = member.commits(1_000)
    clock[0] = 1_000
    with caplog.at_level(logging.WARNING, logger=commits_module.__name__):
        commits.if_due()
    assert "group billing: lost VPs [1] before committing" in caplog.text
    assert commits.now() == ({0: 10}, {1})
    clock[0] = 2_000
    commits.if_due()
    assert len(member.writes) == 3, "a commit that lost partitions settles nothing"


def test_commit_now_raises_what_etcd_raises():
    member = Member()
    member.unavailable = True
    with pytest.raises(CoordinatorUnavailable):
        member.commits(None, "partitions").now()


# --- the poll loop -----------------------------------------------------------------------


def message(offset: int) -> Message:
    return Message("orders", 0, offset, 0, None, b"v", None)


def test_poll_returns_the_first_round_that_brings_messages_after_its_duties():
    calls = []
    rounds = iter([[], [], [message(7)]])

    def fetch(remaining_s: float) -> list[Message]:
        calls.append("fetch")
        return next(rounds)

    assert poll_until(10_000, lambda: calls.append("duties"), fetch) == [message(7)]
    assert calls == ["duties", "fetch"] * 3


def test_poll_returns_nothing_once_the_timeout_passed_and_gives_each_fetch_the_time_left():
    given = []

    def fetch(remaining_s: float) -> list[Message]:
        given.append(remaining_s)
        time.sleep(min(remaining_s, 0.01))
        return []

    started = time.monotonic()
    assert poll_until(50, lambda: None, fetch) == []
    assert 0.05 <= time.monotonic() - started < 1
    assert given[0] <= 0.05 and given == sorted(given, reverse=True) and given[-1] >= 0


def test_a_zero_timeout_runs_one_round():
    rounds = []
    assert poll_until(0, lambda: None, lambda remaining_s: rounds.append(remaining_s) or []) == []
    assert rounds == [0]


def test_seek_to_time_moves_each_partition_to_its_offset_for_the_time():
    class Fetcher:
        positions: dict[int, int] = {}

        def offsets_for_time(self, partitions, timestamp_ms):
            return [timestamp_ms + p for p in partitions]

        def seek(self, partition, offset):
            self.positions[partition] = offset

    fetcher = Fetcher()
    seek_to_time(fetcher, [2, 5], 1_000)
    assert fetcher.positions == {2: 1_002, 5: 1_005}


# --- fetches in flight -------------------------------------------------------------------


class Calls:
    """The fetchers' calls: one future per call started, answered by the test."""

    def __init__(self):
        self.sent: list[object] = []
        self.futures: list[concurrent.futures.Future] = []

    def start(self, request: object):
        """What a fetcher hands ``send``: starting it sends ``request``."""
        def started() -> concurrent.futures.Future:
            self.sent.append(request)
            self.futures.append(concurrent.futures.Future())
            return self.futures[-1]
        return started


class Gate:
    def __init__(self, plans: dict[str, CallPlan]):
        self.plans = plans

    def plan(self, node: str) -> CallPlan:
        return self.plans.get(node, UNTOUCHED)


@pytest.fixture
def calls():
    return Calls()


def in_flight(monkeypatch, plans: dict[str, CallPlan] | None = None) -> FetchesInFlight:
    monkeypatch.setattr(fetches_module, "client_gate", lambda: Gate(plans or {}))
    return FetchesInFlight()


def test_a_fetch_is_started_once_and_what_it_asked_for_comes_back_with_its_answer(calls, monkeypatch):
    fetches = in_flight(monkeypatch)
    assert fetches.send("r0", "r0", calls.start(["read"]), [(3, 30)])
    assert calls.sent == [["read"]]
    assert "r0" in fetches and fetches.destinations() == ["r0"] and fetches.sent_to("r0") == [(3, 30)]
    calls.futures[0].set_result("answer")
    [(destination, sent, call)] = fetches.answered(timeout_s=1, idle_s=1)
    assert (destination, sent, call.result()) == ("r0", [(3, 30)], "answer")
    assert "r0" not in fetches and fetches.answered(timeout_s=0, idle_s=0) == []


def test_every_answer_in_by_the_first_is_handed_out_once_in_the_order_sent(calls, monkeypatch):
    fetches = in_flight(monkeypatch)
    for partition in (0, 1, 2):
        fetches.send(partition, "w0", calls.start(partition * 10), partition * 10)
    calls.futures[2].set_result("c")
    calls.futures[0].set_result("a")
    assert [(d, call.result()) for d, _, call in fetches.answered(timeout_s=1, idle_s=1)] == [(0, "a"), (2, "c")]
    assert 1 in fetches and 0 not in fetches and 2 not in fetches


def test_no_answer_within_the_timeout_hands_out_nothing_and_keeps_the_fetches(calls, monkeypatch):
    fetches = in_flight(monkeypatch)
    fetches.send(0, "w0", calls.start(0), 0)
    assert fetches.answered(timeout_s=0.01, idle_s=1) == []
    assert 0 in fetches


def test_a_dropped_fetch_is_cancelled_and_never_handed_out(calls, monkeypatch):
    fetches = in_flight(monkeypatch)
    fetches.send(0, "w0", calls.start(0), 0)
    fetches.drop(0)
    assert calls.futures[0].cancelled()
    assert fetches.answered(timeout_s=0, idle_s=0) == []


def test_clearing_cancels_every_fetch_out(calls, monkeypatch):
    fetches = in_flight(monkeypatch)
    fetches.send(0, "w0", calls.start(0), 0)
    fetches.send(1, "w1", calls.start(1), 0)
    fetches.clear()
    assert all(future.cancelled() for future in calls.futures) and 0 not in fetches


def test_with_nothing_out_it_sleeps_the_shorter_of_the_timeout_and_the_idle_wait(calls, monkeypatch):
    fetches = in_flight(monkeypatch)
    started = time.monotonic()
    assert fetches.answered(timeout_s=5, idle_s=0.02) == []
    assert 0.02 <= time.monotonic() - started < 1


def test_a_destination_cut_off_gets_nothing_and_one_slowed_gets_its_fetch_after_the_delay(calls, monkeypatch):
    fetches = in_flight(monkeypatch, {"r1": CallPlan(request_lost=True), "r2": CallPlan(request_delay_ms=20)})
    assert not fetches.send("r1", "r1", calls.start([]), [])
    assert "r1" not in fetches and calls.sent == []
    started = time.monotonic()
    assert fetches.send("r2", "r2", calls.start([]), [])
    assert time.monotonic() - started >= 0.02 and "r2" in fetches
