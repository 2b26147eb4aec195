"""Unit tests of ``mafka4 bench consume`` without a cluster: settings, tallies, settling, rows (``bench.drain``, pure)."""

from __future__ import annotations

import json
import pickle

import pytest

from mafka4.bench.drain import (Armed, Closed, ConsumeBenchSettings, Drained, GroupSettling, MemberDrain, OffsetRange,
                                OffsetTally, assignment_problem, backlog_messages, drain_row, messages_read, summary,
                                table)
from mafka4.errors import InvalidConfig

MS = 1_000_000  # ns


# --- settings -----------------------------------------------------------------------------------


def test_the_defaults_drain_100k_messages_with_1_4_and_16_consumers_in_both_read_modes():
    settings = ConsumeBenchSettings()
    assert (settings.messages, settings.message_bytes, settings.partitions) == (100_000, 1024, 4)
    assert settings.consumers == (1, 4, 16) and settings.read_modes == ("mafka3", "mafka4")
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
    ({"message_bytes": 2 * 1024 * 1024}, "message_bytes="),
    ({"partitions": 0}, "partitions=0"),
    ({"virtual_partitions": 0}, "virtual_partitions=0"),
    ({"repetitions": 0}, "repetitions=0"),
    ({"settle_s": 0.0}, "settle_s=0.0"),
])
def test_settings_refuse_what_cannot_be_measured_naming_it(changes, named):
    with pytest.raises(InvalidConfig, match=named.replace(".", r"\.")):
        ConsumeBenchSettings(**changes)


def test_a_smoke_run_is_small_and_says_so():
    smoke = ConsumeBenchSettings.smoke_sized(read_modes=("mafka4",))
    assert smoke.smoke and smoke.messages == 2_000 and smoke.consumers == (1, 2) and smoke.repetitions == 1
    assert smoke.read_modes == ("mafka4",)


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


def _drain(member, partitions, first_ms, last_ms, latencies_ms, seen, delivered, duplicates=0, outside=0):
    return MemberDrain(member, tuple(partitions), None if first_ms is None else first_ms * MS,
                       None if last_ms is None else last_ms * MS, tuple(int(ms * MS) for ms in latencies_ms), delivered,
                       duplicates, outside, seen, complete=True)


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
    assert row["members"][1]["last_message_ms"] == 500.0
    assert json.loads(json.dumps(row)) == row, "the report is plain JSON"


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


def _row(mode, consumers, repetition, msgs_per_s, missing=0, quiet=True):
    return {"read_mode": mode, "consumers": consumers, "repetition": repetition, "msgs_per_s": msgs_per_s,
            "mb_per_s": msgs_per_s / 1000, "fetch_latency_ms": {"p50": 1.0, "p99": 2.0, "p99.9": 3.0},
            "consumers_with_work": consumers, "missing": missing, "duplicates": 0, "duplicates_across_members": 0,
            "quiet": quiet}


def _report(rows, settings):
    return {"settings": {"repetitions": settings.repetitions, "smoke": settings.smoke}, "rows": rows,
            "summary": summary(rows), "load_average_1m": [0.5, 1.5]}


def test_the_summary_takes_medians_over_repetitions_per_read_mode_and_consumer_count():
    rows = [_row("mafka3", 4, r, rate) for r, rate in enumerate([30_000, 10_000, 20_000])]
    rows += [_row("mafka4", 4, 0, 5_000, missing=3, quiet=False)]
    result = summary(rows)
    assert result["mafka3"]["4"]["msgs_per_s_median"] == 20_000
    assert result["mafka3"]["4"]["msgs_per_s_each"] == [30_000, 10_000, 20_000]
    assert result["mafka3"]["4"]["fetch_latency_ms_median"] == {"p50": 1.0, "p99": 2.0, "p99.9": 3.0}
    assert result["mafka4"]["4"]["missing_each"] == [3] and result["mafka4"]["4"]["quiet_each"] == [False]


def test_the_table_has_one_line_per_read_mode_and_consumer_count_and_the_load():
    rows = [_row("mafka3", 1, 0, 86_709), _row("mafka3", 4, 0, 64_796), _row("mafka4", 1, 0, 70_513)]
    lines = table(_report(rows, ConsumeBenchSettings.smoke_sized())).splitlines()
    assert len(lines) == 1 + 3 + 1
    assert lines[2].split() == ["mafka3", "4", "4", "64,796", "64.8", "1.00", "2.00", "3.00", "0", "0"]
    assert "load average 0.5 before, 1.5 after" in lines[-1] and "not a result" in lines[-1]


# --- what crosses between processes -----------------------------------------------------------------


def test_the_members_reports_survive_pickling():
    drain = _drain(0, [0], 1, 2, [1], {0: b"\x01"}, 1)
    for report in (Armed(0, (0, 1), 0), Drained(drain), Closed(0, 0), OffsetRange(2, 5)):
        assert pickle.loads(pickle.dumps(report)) == report
