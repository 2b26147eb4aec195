"""Unit tests of ``mafka4 bench consume`` without a cluster: settings, tallies, settling, rows, both protocol sides.

The arithmetic is pure (``bench.drain``). The member's steps (``bench.consume_member``) run here
against a fake consumer, with threading events for the signals, and the driver's
(``bench.consume``) against scripted reports; then both sides over a real wire, the member in a
thread of this process. Member processes are started only to fail (no node of their access
listens there), and are checked to leave nothing running; nothing joins Ray.
"""

from __future__ import annotations

import json
import multiprocessing
import pickle
import subprocess
import sys
import threading

import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from mafka4 import cli
from mafka4.bench import consume, consume_member
from mafka4.bench.drain import (Armed, Assigned, Closed, ConsumeBenchSettings, Drained, GroupSettling, Joined,
                                MemberDrain, OffsetRange, OffsetTally, assignment_problem, backlog_messages, drain_row,
                                messages_read, summary, table)
from mafka4.bench.drain_terms import AckCadence, AckKind
from mafka4.bench.member_process import Stop
from mafka4.client.bootstrap import Credential
from mafka4.client.cluster_access import ClusterAccess
from mafka4.client.message import Message
from mafka4.errors import CoordinatorUnavailable, InvalidConfig
from mafka4.metadata.endpoints import HostPort

MS = 1_000_000  # ns
NOWHERE = ClusterAccess((HostPort("127.0.0.1", 1),), Credential("nobody", "none"))  # port 1: no node there
PER_READ, NONE = AckCadence(AckKind.PER_READ), AckCadence(AckKind.NONE)


# --- settings -----------------------------------------------------------------------------------


def test_the_defaults_drain_a_million_messages_with_1_4_and_16_consumers_in_both_read_modes_at_both_cadences():
    settings = ConsumeBenchSettings()
    assert (settings.messages, settings.message_bytes, settings.partitions) == (1_000_000, 1024, 4)
    assert settings.consumers == (1, 4, 16) and settings.read_modes == ("mafka3", "mafka4")
    assert settings.ack_cadences == ("per-read", "every-5000ms"), "after each poll, and as often as auto-commit"
    assert settings.cadences == (AckCadence(AckKind.PER_READ), AckCadence(AckKind.EVERY, 5000))
    assert settings.mafka4_virtual_partitions == 16, "every one of 16 consumers owns a VP of the backlog"
    assert ConsumeBenchSettings(virtual_partitions=4).mafka4_virtual_partitions == 4


@pytest.mark.parametrize("changes, named", [
    ({"consumers": ()}, "consumers="),
    ({"consumers": (1, 0)}, "consumers=1,0"),
    ({"consumers": (4, 4)}, "distinct"),
    ({"consumers": (65,)}, "from 1 to 64"),
    ({"read_modes": ("kafka",)}, "read_modes=kafka"),
    ({"read_modes": ("mafka4", "mafka4")}, "each once"),
    ({"read_modes": ()}, "one or both of mafka3, mafka4"),
    ({"messages": 0}, "messages=0"),
    ({"messages": 3_000_000}, "messages=3000000 is out of range: use 1 to 1048576"),
    ({"message_bytes": 2 * 1024 * 1024}, "message_bytes="),
    ({"ack_cadences": ("per-read", "per-read")}, "each once"),
    ({"ack_cadences": ("every-0ms",)}, "'every-0ms' is not one"),
    ({"partitions": 0}, "partitions=0"),
    ({"virtual_partitions": 0}, "virtual_partitions=0"),
    ({"repetitions": 0}, "repetitions=0"),
    ({"settle_s": 0.0}, "settle_s=0.0"),
    ({"quiet_wait_s_max": -1.0}, "quiet_wait_s_max=-1.0 must be 0"),
])
def test_settings_refuse_what_cannot_be_measured_naming_it(changes, named):
    with pytest.raises(InvalidConfig, match=named.replace(".", r"\.")):
        ConsumeBenchSettings(**changes)


def test_a_smoke_run_is_small_and_says_so():
    smoke = ConsumeBenchSettings.smoke_sized(read_modes=("mafka4",))
    assert smoke.smoke and smoke.messages == 2_000 and smoke.consumers == (1, 2) and smoke.repetitions == 1
    assert smoke.quiet_wait_s_max == 0  # a test does not wait for the machine
    assert smoke.read_modes == ("mafka4",)


# --- the command line ---------------------------------------------------------------------------


@pytest.fixture
def driver(monkeypatch, tmp_path):
    monkeypatch.setenv("MAFKA4_HOME", str(tmp_path / "no-cluster-here"))
    calls = []

    def fake_driver(settings, output_path):
        calls.append((settings, output_path))
        return _report([_row("mafka3", 1, 0, 50_000), _row("mafka4", 1, 0, 40_000)], settings)

    monkeypatch.setattr("mafka4.bench.consume.run_consume_bench", fake_driver)
    return calls


def test_the_command_passes_its_lists_to_the_settings_and_prints_a_table(driver, capsys):
    argv = ["bench", "consume", "--consumers", "1,4", "--read-modes", "mafka4", "--virtual-partitions", "8",
            "--messages", "5000", "--repetitions", "2", "--quiet-wait-s-max", "30", "--gc-freeze", "--no-check-crcs",
            "--ack-cadences", "none,every-100ms"]
    assert cli.main(argv) == 0
    assert driver == [(ConsumeBenchSettings(consumers=(1, 4), read_modes=("mafka4",), virtual_partitions=8,
                                            messages=5000, repetitions=2, quiet_wait_s_max=30.0, gc_freeze=True,
                                            check_crcs=False, ack_cadences=("none", "every-100ms")),
                       "results/bench_consume.json")]
    out, err = capsys.readouterr()
    assert out.splitlines()[0].split()[:5] == ["read", "mode", "ack", "consumers", "working"]
    assert "50,000" in out and "40,000" in out
    assert "full report written to results/bench_consume.json" in err


def test_a_list_that_is_not_one_exits_2_before_the_driver_runs(driver, capsys):
    with pytest.raises(SystemExit) as exited:
        cli.main(["bench", "consume", "--consumers", "1,four"])
    assert exited.value.code == 2 and driver == []
    assert "comma-separated list of integers" in capsys.readouterr().err


@pytest.mark.parametrize("argv, named", [
    (["--read-modes", "kafka"], "read_modes=kafka"),
    (["--consumers", "0"], "consumers=0"),
])
def test_a_value_the_settings_refuse_exits_2_before_the_driver_runs(driver, capsys, argv, named):
    assert cli.main(["bench", "consume", *argv]) == 2
    assert driver == [] and named in capsys.readouterr().err


# --- the backlog and a member's tally ------------------------------------------------------------


def test_an_offset_range_runs_from_the_log_start_to_the_high_watermark():
    assert OffsetRange(10, 25).count == 15
    assert backlog_messages({0: OffsetRange(0, 5), 1: OffsetRange(3, 3)}) == 5
    with pytest.raises(AssertionError):
        OffsetRange(5, 4)


def test_a_tally_counts_every_message_once_as_new_duplicate_or_outside_the_backlog():
    tally = OffsetTally({0: OffsetRange(0, 3), 1: OffsetRange(10, 12)})
    for partition, offset in [(0, 0), (0, 1), (0, 1), (1, 10), (1, 12), (2, 0), (0, 2)]:
        tally.record(partition, offset)
    assert (tally.new, tally.duplicates, tally.outside, tally.delivered) == (4, 1, 2, 7)
    assert tally.complete([0]) and not tally.complete([0, 1])
    assert tally.complete([]), "a member owning nothing has nothing to read"
    assert tally.seen() == {0: b"\x01\x01\x01", 1: b"\x01\x00"}
    tally.record(1, 11)
    assert tally.complete([0, 1])


@hypothesis_settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(-2, 14)), max_size=40), st.booleans())
def test_a_poll_tallied_at_once_counts_as_its_messages_tallied_one_by_one(pairs, runs):
    if runs:  # mostly runs of consecutive offsets per partition, as polls return them
        pairs = [(partition, first + step) for partition, first in pairs for step in range(3)]
    messages = [Message("t", partition, offset, 0, None, b"v", ()) for partition, offset in pairs]
    ranges = {0: OffsetRange(0, 10), 1: OffsetRange(5, 12)}
    one_by_one, at_once = OffsetTally(ranges), OffsetTally(ranges)
    for split in range(0, len(messages), 7):  # several polls, a run of offsets may span two
        for message in messages[split:split + 7]:
            one_by_one.record(message.partition, message.offset)
        at_once.record_messages(messages[split:split + 7])
    assert (at_once.new, at_once.duplicates, at_once.outside) == (one_by_one.new, one_by_one.duplicates,
                                                                  one_by_one.outside)
    assert at_once.seen() == one_by_one.seen()
    assert at_once.complete([0, 1]) == one_by_one.complete([0, 1])


def test_a_partition_the_member_was_given_nothing_of_is_left_out_of_what_it_saw():
    tally = OffsetTally({0: OffsetRange(0, 2), 1: OffsetRange(0, 2)})
    tally.record(1, 0)
    assert set(tally.seen()) == {1}


# --- when a group has settled ---------------------------------------------------------------------


def test_a_group_is_settled_when_its_members_own_every_partition_once():
    assert assignment_problem({0: (0, 1), 1: (2, 3), 2: ()}, 3, range(4)) is None, "a member may own nothing"
    assert "members [2]" in assignment_problem({0: (0, 1), 1: (2, 3)}, 3, range(4))
    assert "{1: [0, 1]}" in assignment_problem({0: (0, 1), 1: (1, 2, 3)}, 2, range(4))
    assert "without an owner: [3]" in assignment_problem({0: (0, 1), 1: (2,)}, 2, range(4))
    assert "not in the backlog: [7]" in assignment_problem({0: (0, 1, 2, 3, 7)}, 1, range(4))


def test_settling_waits_until_every_member_joined_and_nothing_changed_for_the_settle_time():
    settling = GroupSettling(2, range(2), settle_ns=1000 * MS)
    settling.observe_join(0, 0)
    settling.observe(0, [0, 1], 0)
    assert not settling.settled(5000 * MS) and settling.problem() == "1 of 2 members joined"
    settling.observe_join(1, 100 * MS)
    settling.observe(1, [], 100 * MS)
    assert not settling.settled(900 * MS), "covered, but member 1 joined 800 ms ago"
    assert settling.settled(1100 * MS)
    settling.observe(0, [0], 1200 * MS)  # the eager rebalance member 1's join causes: released one
    settling.observe(1, [1], 1300 * MS)
    assert not settling.settled(2200 * MS) and settling.settled(2300 * MS)
    settling.observe(1, [1], 2400 * MS)
    assert settling.settled(2400 * MS), "the same assignment again is no change"


def test_a_join_restarts_the_wait_even_when_the_assignments_look_settled():
    settling = GroupSettling(2, range(2), settle_ns=1000 * MS)
    settling.observe_join(0, 0)
    settling.observe(0, [0, 1], 0)
    settling.observe(1, [], 0)  # reported before its join was seen: a stale look
    settling.observe_join(1, 900 * MS)
    assert not settling.settled(1500 * MS), "member 0 may not have seen member 1 join yet"
    assert settling.settled(1900 * MS)


def test_a_group_with_a_shared_partition_never_settles():
    settling = GroupSettling(2, range(2), settle_ns=1)
    for member, owned in ((0, [0, 1]), (1, [1])):
        settling.observe_join(member, 0)
        settling.observe(member, owned, 0)
    assert not settling.settled(10**12) and "more than one member" in settling.problem()
    with pytest.raises(AssertionError, match="time order"):
        settling.observe(0, [0], -1)


# --- one row per drain ------------------------------------------------------------------------------


def _drain(member, partitions, first_ms, last_ms, latencies_ms, seen, delivered, duplicates=0, outside=0, end_ms=None):
    end_ms = last_ms if end_ms is None else end_ms
    return MemberDrain(member, tuple(partitions), None if first_ms is None else first_ms * MS,
                       None if last_ms is None else last_ms * MS, None if end_ms is None else end_ms * MS,
                       tuple(int(ms * MS) for ms in latencies_ms), delivered, duplicates, outside, seen, complete=True)


RANGES = {0: OffsetRange(0, 4), 1: OffsetRange(0, 4)}


def test_the_drain_runs_from_the_first_poll_to_the_last_message_of_any_member():
    drains = [_drain(0, [0], 1000, 1400, [100, 300], {0: b"\x01" * 4}, 4),
              _drain(1, [1], 1010, 1500, [200, 290], {1: b"\x01" * 4}, 4),
              _drain(2, [], None, None, [], {}, 0)]
    row = drain_row(RANGES, drains, message_bytes=1000)
    assert row["elapsed_s"] == 0.5, "from 1,000 ms (member 0's first poll) to 1,500 ms (member 1's last message)"
    assert (row["messages"], row["messages_read"], row["missing"], row["duplicates"]) == (8, 8, 0, 0)
    assert row["msgs_per_s"] == 16 and row["mb_per_s"] == 0.02
    assert row["consumers_with_work"] == 2 and row["fetches"] == 4
    assert row["fetch_latency_ms"] == {"p50": 200.0, "p99": 300.0, "p99.9": 300.0}
    assert [m["first_poll_ms"] for m in row["members"]] == [0.0, 10.0, None]
    assert row["members"][1]["last_message_ms"] == row["members"][1]["end_ms"] == 500.0
    assert json.loads(json.dumps(row)) == row, "the report is plain JSON"


def test_a_drain_ends_when_the_last_commit_returned_not_at_the_last_message():
    drains = [_drain(0, [0], 1000, 1400, [100], {0: b"\x01" * 4}, 4, end_ms=1600),
              _drain(1, [1], 1010, 1500, [200], {1: b"\x01" * 4}, 4, end_ms=1510)]
    row = drain_row(RANGES, drains, message_bytes=1000)
    assert row["elapsed_s"] == 0.6, "member 0's last commit returned at 1,600 ms, after member 1's last message"
    assert [(m["last_message_ms"], m["end_ms"]) for m in row["members"]] == [(400.0, 600.0), (500.0, 510.0)]
    with pytest.raises(AssertionError, match="ends at or after its last message"):
        drain_row(RANGES, [_drain(0, [0], 0, 10, [1], {0: b"\x01" * 4}, 4, end_ms=5)], message_bytes=1)


def test_duplicates_are_counted_within_and_across_members_and_missing_offsets_are_reported():
    drains = [_drain(0, [0], 0, 10, [10], {0: b"\x01\x01\x00\x00"}, 3, duplicates=1),
              _drain(1, [0, 1], 0, 20, [20], {0: b"\x00\x01\x00\x00", 1: b"\x01\x01\x01\x01"}, 5)]
    assert messages_read(RANGES, [d.seen for d in drains]) == 6
    row = drain_row(RANGES, drains, message_bytes=1)
    assert (row["messages_read"], row["missing"], row["delivered"]) == (6, 2, 8)
    assert row["duplicates"] == 1 and row["duplicates_across_members"] == 1, "offset 0/1 went to both members"


def test_a_drain_nobody_read_has_no_rate():
    row = drain_row(RANGES, [_drain(0, [0, 1], 0, None, [], {}, 0)], message_bytes=1)
    assert row["elapsed_s"] is None and row["msgs_per_s"] is None and row["fetch_latency_ms"] is None
    assert row["missing"] == 8


def _row(mode, consumers, repetition, msgs_per_s, missing=0, quiet=True, ack="per-read"):
    return {"read_mode": mode, "ack": ack, "consumers": consumers, "repetition": repetition, "msgs_per_s": msgs_per_s,
            "mb_per_s": msgs_per_s / 1000, "fetch_latency_ms": {"p50": 1.0, "p99": 2.0, "p99.9": 3.0},
            "consumers_with_work": consumers, "missing": missing, "duplicates": 0, "duplicates_across_members": 0,
            "member_cpu_us_per_message": 1_000_000 / msgs_per_s, "machine_cpu_us_per_message": 2_000_000 / msgs_per_s,
            "quiet": quiet}


def _report(rows, settings):
    return {"settings": {"repetitions": settings.repetitions, "smoke": settings.smoke}, "rows": rows,
            "summary": summary(rows), "load_average_1m": [0.5, 1.5]}


def test_the_summary_takes_medians_over_repetitions_per_read_mode_cadence_and_consumer_count():
    rows = [_row("mafka3", 4, r, rate) for r, rate in enumerate([30_000, 10_000, 20_000])]
    rows += [_row("mafka4", 4, 0, 5_000, missing=3, quiet=False), _row("mafka3", 4, 0, 40_000, ack="none")]
    result = summary(rows)
    per_read = result["mafka3"]["per-read"]["4"]
    assert per_read["msgs_per_s_median"] == 20_000 and per_read["msgs_per_s_each"] == [30_000, 10_000, 20_000]
    assert result["mafka3"]["none"]["4"]["msgs_per_s_each"] == [40_000], "each cadence a cell of its own"
    assert per_read["fetch_latency_ms_median"] == {"p50": 1.0, "p99": 2.0, "p99.9": 3.0}
    mafka4 = result["mafka4"]["per-read"]["4"]
    assert mafka4["missing_each"] == [3] and mafka4["quiet_each"] == [False]
    assert per_read["member_cpu_us_per_message_median"] == 50.0, "the median of 33.3, 100 and 50"
    assert per_read["machine_cpu_us_per_message_median"] == 100.0


def test_the_table_has_one_line_per_cell_of_the_sweep_with_every_repetition_and_the_load():
    rows = [_row("mafka3", 1, 0, 86_709), _row("mafka3", 4, 0, 64_796), _row("mafka3", 4, 1, 60_000),
            _row("mafka4", 1, 0, 70_513), _row("mafka4", 1, 0, 90_000, ack="every-5000ms")]
    lines = table(_report(rows, ConsumeBenchSettings.smoke_sized())).splitlines()
    assert len(lines) == 1 + 4 + 1
    assert lines[2].split() == ["mafka3", "per-read", "4", "4/4", "62,398", "64,796/60,000", "62.4", "1.00", "2.00",
                                "3.00", "16.05", "32.10", "0", "0"]
    assert lines[4].split()[:6] == ["mafka4", "every-5000ms", "1", "1", "90,000", "90,000"]
    assert "load average 0.5 before, 1.5 after" in lines[-1] and "not a result" in lines[-1]


# --- what crosses between processes -----------------------------------------------------------------


def test_the_members_reports_survive_pickling():
    drain = _drain(0, [0], 1, 2, [1], {0: b"\x01"}, 1)
    spec = consume_member.MemberSpec(0, NOWHERE, "t", "g", {0: OffsetRange(0, 2)}, PER_READ)
    for report in (Armed(0, (0, 1), 0), Drained(drain), Closed(0, 0), OffsetRange(2, 5), spec, consume_member.Arm(),
                   consume_member.Start()):
        assert pickle.loads(pickle.dumps(report)) == report


# --- the member's steps, against a fake consumer -------------------------------------------------------


class FakeConsumer:
    """Serves each owned partition's backlog in polls of ``batch`` messages, from the position seek() set."""

    def __init__(self, owned, ranges, batch=3, failures=0, commit_failures=0):
        self.owned = list(owned)
        self.ranges = ranges
        self.positions = {p: ranges[p].end for p in owned}  # joined at the latest offsets
        self.batch = batch
        self.failures = failures
        self.commit_failures = commit_failures
        self.polls = 0
        self.seeks = []
        self.commits = []  # (polls made by then, the positions committed)

        class Config:
            fetch_wait_ms_max = 0

        self.config = Config()

    def assignment(self):
        return sorted(self.owned)

    def seek(self, partition, offset):
        self.seeks.append((partition, offset))
        self.positions[partition] = offset

    def commit(self):
        if self.commit_failures:
            self.commit_failures -= 1
            raise CoordinatorUnavailable("etcd away for a moment")
        self.commits.append((self.polls, dict(self.positions)))
        return dict(self.positions)

    def poll(self, timeout_ms):
        self.polls += 1
        if self.failures:
            self.failures -= 1
            raise CoordinatorUnavailable("etcd away for a moment")
        messages = []
        for partition in self.assignment():
            end = min(self.positions[partition] + self.batch, self.ranges[partition].end)
            messages += [Message("t", partition, offset, 0, None, b"v", ())
                         for offset in range(self.positions[partition], end)]
            self.positions[partition] = end
        return messages


class ReactingDriver:
    """Collects a member's reports and answers as the driver does: arm once assigned, start once armed, stop once
    drained."""

    def __init__(self):
        self.reports = []
        self.arm, self.start, self.stop = threading.Event(), threading.Event(), threading.Event()

    def send(self, report):
        self.reports.append(report)
        answer = {Assigned: self.arm, Armed: self.start, Drained: self.stop}.get(type(report))
        if answer is not None:
            answer.set()


def test_a_member_joins_at_the_end_arms_at_the_start_drains_and_stays_until_stopped(monkeypatch):
    monkeypatch.setattr(consume_member, "ANSWER_MARGIN_S", 0.0)
    ranges = {0: OffsetRange(0, 5), 1: OffsetRange(2, 4)}
    consumer = FakeConsumer([1, 0], ranges)
    consumer.member_id = "m-0"
    driver = ReactingDriver()
    spec = consume_member.MemberSpec(0, NOWHERE, "t", "g", ranges, PER_READ)
    late = consume_member._steps(consumer, spec, driver, driver.arm, driver.start, driver.stop)
    assert [type(report) for report in driver.reports] == [Joined, Assigned, Armed, Drained]
    joined, assigned, armed, drained = driver.reports
    assert joined == Joined(0, "m-0") and assigned == Assigned(0, (0, 1))
    assert armed == Armed(0, (0, 1), 0), "joined at the backlog's end: nothing read while joining"
    assert consumer.seeks == [(0, 0), (1, 2)]
    assert drained.drain.complete and drained.drain.delivered == 7 and late == 0


def test_a_member_stopped_before_the_start_reports_no_drain():
    consumer = FakeConsumer([0], {0: OffsetRange(0, 5)})
    consumer.member_id = "m-1"
    driver = ReactingDriver()
    driver.stop.set()
    spec = consume_member.MemberSpec(1, NOWHERE, "t", "g", consumer.ranges, PER_READ)
    assert consume_member._steps(consumer, spec, driver, driver.arm, driver.start, driver.stop) is None
    assert driver.reports == [Joined(1, "m-1")] and consumer.polls == 0


def test_arming_seeks_every_owned_partition_to_the_backlog_start(monkeypatch):
    monkeypatch.setattr(consume_member, "ANSWER_MARGIN_S", 0.0)
    ranges = {0: OffsetRange(5, 9), 1: OffsetRange(0, 3)}
    consumer = FakeConsumer([0, 1], ranges)
    spec = consume_member.MemberSpec(0, NOWHERE, "t", "g", ranges, PER_READ)
    assert consume_member._arm(consumer, spec) == (0, 1)
    assert consumer.seeks == [(0, 5), (1, 0)]


def test_a_member_drains_until_it_was_given_every_offset_it_owns_and_times_only_polls_with_data():
    ranges = {0: OffsetRange(0, 7), 1: OffsetRange(0, 2), 2: OffsetRange(0, 4)}
    consumer = FakeConsumer([0, 1], ranges, failures=1)
    for partition in (0, 1):
        consumer.seek(partition, 0)
    drain = consume_member._drain(consumer, 3, OffsetTally(ranges), NONE, threading.Event())
    assert drain.complete and drain.delivered == 9 and drain.duplicates == 0
    assert drain.partitions == (0, 1) and set(drain.seen) == {0, 1}
    assert consumer.polls == 4, "one failed poll, then 3, 3 and 1 messages of partition 0"
    assert len(drain.fetch_latencies_ns) == 3 and drain.poll_errors == 1
    assert "CoordinatorUnavailable" in drain.first_poll_error
    assert drain.first_poll_ns <= drain.last_message_ns == drain.end_ns, "cadence none: it ends at its last message"
    assert consumer.commits == [] and drain.commit_errors == 0
    assert drain.cpu_ns is not None and drain.cpu_ns >= 0


def _draining(cadence, commit_failures=0):
    ranges = {0: OffsetRange(0, 7)}
    consumer = FakeConsumer([0], ranges, commit_failures=commit_failures)
    consumer.seek(0, 0)
    return consumer, consume_member._drain(consumer, 0, OffsetTally(ranges), cadence, threading.Event())


def test_a_member_committing_per_read_commits_after_each_poll_that_returned_messages_and_ends_with_the_last():
    consumer, drain = _draining(PER_READ)
    assert [polls for polls, _ in consumer.commits] == [1, 2, 3], "3, 3 and 1 messages, each poll committed"
    assert consumer.commits[-1][1] == {0: 7} and drain.complete
    assert drain.last_message_ns <= drain.end_ns, "the timed drain ends when the last commit returned"


def test_a_member_committing_every_n_ms_leaves_the_interval_to_the_consumer_and_commits_once_when_done():
    consumer, drain = _draining(AckCadence(AckKind.EVERY, 5000))
    assert consumer.commits == [(3, {0: 7})], "its auto-commit runs inside poll(); its last commit ends its part"
    assert drain.last_message_ns <= drain.end_ns


def test_a_commit_that_failed_retriably_is_counted_and_made_again():
    consumer, drain = _draining(PER_READ, commit_failures=1)
    assert [polls for polls, _ in consumer.commits] == [2, 3], "the first poll's commit failed, the next made up for it"
    assert drain.commit_errors == 1 and "CoordinatorUnavailable" in drain.first_commit_error
    consumer, drain = _draining(AckCadence(AckKind.EVERY, 5000), commit_failures=2)
    assert consumer.commits == [(3, {0: 7})] and drain.commit_errors == 2 and drain.end_ns is not None


def test_a_member_stopped_before_its_last_commit_has_no_end():
    ranges = {0: OffsetRange(0, 2)}
    consumer = FakeConsumer([0], ranges)
    consumer.seek(0, 0)
    stop = threading.Event()

    def commit_failing_at_the_deadline():
        stop.set()  # the driver's deadline passed while the commit was out
        raise CoordinatorUnavailable("etcd away")

    consumer.commit = commit_failing_at_the_deadline
    drain = consume_member._drain(consumer, 0, OffsetTally(ranges), AckCadence(AckKind.EVERY, 5000), stop)
    assert drain.complete and drain.end_ns is None and drain.commit_errors == 1


def test_a_member_that_owns_nothing_does_not_poll_in_the_drain():
    consumer = FakeConsumer([], {0: OffsetRange(0, 2)})
    drain = consume_member._drain(consumer, 1, OffsetTally(consumer.ranges), PER_READ, threading.Event())
    assert consumer.polls == 0 and consumer.commits == [] and drain.end_ns is None and drain.first_poll_ns is None and drain.last_message_ns is None and drain.complete
    assert drain.cpu_ns is None, "no drain, no CPU time of one"


def test_a_stopped_drain_reports_what_it_read_as_incomplete():
    consumer = FakeConsumer([0], {0: OffsetRange(0, 5)})
    consumer.seek(0, 0)
    stop = threading.Event()
    stop.set()
    drain = consume_member._drain(consumer, 0, OffsetTally(consumer.ranges), PER_READ, stop)
    assert not drain.complete and drain.delivered == 0


# --- the driver's side of the protocol, against scripted reports ---------------------------------------


class ScriptedMembers:
    """Stands in for the member processes: hands out ``script`` in order, then None (nothing arrived)."""

    def __init__(self, script):
        self.script = list(script)
        self.signals = []
        self.stopped = False

    def arm(self):
        self.signals.append("arm")

    def start_drain(self):
        self.signals.append("start")

    def stop(self):
        self.stopped = True
        self.signals.append("stop")

    def next_report(self):
        return self.script.pop(0) if self.script else None


def test_the_driver_settles_arms_and_collects_a_group_then_stops_it(monkeypatch):
    ranges = {0: OffsetRange(0, 4), 1: OffsetRange(0, 4)}
    settings = ConsumeBenchSettings(settle_s=0.01)
    members = ScriptedMembers([Joined(0, "a"), Assigned(0, (0, 1)), Joined(1, "b"), Assigned(1, ()),
                               Assigned(0, (0,)), Assigned(1, (1,))])
    settling = GroupSettling(2, ranges, int(settings.settle_s * 1e9))
    consume._settle(members, settling, 2, settings)
    assert settling.assignments == {0: (0,), 1: (1,)} and members.signals == []
    members.script = [Assigned(1, (1,)), Armed(1, (1,), 0), Armed(0, (0,), 0)]
    armed = consume._arm(members, 2, ranges, settings)
    assert members.signals == ["arm"] and sorted(armed) == [0, 1]
    drains = [_drain(m, [m], 0, 1, [1], {m: b"\x01" * 4}, 4) for m in (0, 1)]
    members.script = [Drained(drains[1]), Drained(drains[0]), Closed(0, 0), Closed(1, 2)]
    collected, closes, drained_at = consume._collect(members, 2, settings)
    assert members.signals == ["arm", "stop"] and sorted(d.member for d in collected) == [0, 1]
    assert drained_at.busy_ticks > 0, "the machine's CPU when the last drain came in"
    assert sorted((c.member, c.late_messages) for c in closes) == [(0, 0), (1, 2)]


def test_a_group_that_changed_while_arming_is_refused():
    members = ScriptedMembers([Armed(0, (0,), 0), Armed(1, (0, 1), 0)])
    with pytest.raises(RuntimeError, match="changed while its members stopped polling"):
        consume._arm(members, 2, range(2), ConsumeBenchSettings())


def test_a_group_that_does_not_settle_in_time_says_why():
    members = ScriptedMembers([Joined(0, "a"), Assigned(0, (0,))])
    settings = ConsumeBenchSettings(join_s_max=0.01)
    with pytest.raises(TimeoutError, match="1 of 2 members joined"):
        consume._settle(members, GroupSettling(2, range(1), 1), 2, settings)


# --- both sides over a real wire ---------------------------------------------------------------------


def test_a_member_takes_the_drivers_signals_from_its_wire_and_a_closed_wire_stops_it():
    driver_end, member_end = multiprocessing.Pipe()
    signals = consume_member.WireSignals(member_end)
    assert not signals.arm.is_set() and not signals.start.wait(0)
    driver_end.send(consume_member.Arm())
    driver_end.send(consume_member.Start())
    assert signals.start.wait(0) and signals.arm.is_set() and not signals.stop.is_set()
    driver_end.close()
    assert signals.stop.is_set(), "the driver is gone: the member stops"
    told_driver, told_member = multiprocessing.Pipe()
    told = consume_member.WireSignals(told_member)
    told_driver.send(Stop())
    assert told.stop.wait(0) and not told.arm.is_set() and not told.start.wait(0)


def test_the_driver_and_a_member_drain_a_backlog_over_their_wire(monkeypatch):
    monkeypatch.setattr(consume_member, "ANSWER_MARGIN_S", 0.0)
    ranges = {0: OffsetRange(0, 5), 1: OffsetRange(2, 4)}
    consumer = FakeConsumer([0, 1], ranges)
    consumer.member_id = "m-0"
    driver_end, member_end = multiprocessing.Pipe()
    signals = consume_member.WireSignals(member_end)
    spec = consume_member.MemberSpec(0, NOWHERE, "t", "g", ranges, PER_READ)
    member = threading.Thread(target=lambda: member_end.send(Closed(0, consume_member._steps(
        consumer, spec, member_end, signals.arm, signals.start, signals.stop))))
    members = consume._Members([(None, driver_end)])  # the member is a thread: no process to stop
    settings = ConsumeBenchSettings(settle_s=0.01)
    member.start()
    try:
        consume._settle(members, GroupSettling(1, ranges, int(settings.settle_s * 1e9)), 1, settings)
        armed = consume._arm(members, 1, ranges, settings)
        members.start_drain()
        (drain,), (closed,), _ = consume._collect(members, 1, settings)
    finally:
        members.stop()
        member.join()
    assert armed == {0: Armed(0, (0, 1), 0)} and consumer.seeks == [(0, 0), (1, 2)]
    assert drain.complete and drain.delivered == 7 and closed == Closed(0, 0)


def _ended_member(exit_code: int) -> consume._Members:
    """Members of one whose process has exited (``exit_code``) without a word."""
    driver_end, member_end = multiprocessing.Pipe()
    with member_end:
        ended = subprocess.Popen([sys.executable, "-c", f"raise SystemExit({exit_code})"])
    ended.wait()
    return consume._Members([(ended, driver_end)])


def test_a_member_process_that_ends_before_it_was_stopped_fails_the_drain():
    members = _ended_member(3)
    try:
        with pytest.raises(RuntimeError, match=r"member 0's process \d+ ended before the drain did \(exit code 3\)"):
            members.next_report()
    finally:
        members.close()
    stopped = _ended_member(0)
    stopped.stop()
    assert stopped.next_report() is None, "a stopped member exits"
    stopped.close()


def test_a_member_that_fails_fails_the_drain_with_its_error_and_no_member_process_is_left(started_members):
    ranges = {0: OffsetRange(0, 2)}
    specs = [consume_member.MemberSpec(member, NOWHERE, "t", "g", ranges, PER_READ) for member in (0, 1)]
    members = consume._Members.started(specs)
    try:
        with pytest.raises(RuntimeError, match=r"member [01] \(process \d+\) failed: ClusterNotRunning"):
            consume._settle(members, GroupSettling(2, ranges, 1), 2, ConsumeBenchSettings())
    finally:
        members.close()
    assert len(started_members) == 2 and all(process.poll() is not None for process in started_members)
