"""The pure parts of ``mafka4 chaos``: settings checks, merging the history, sources of reads, judging.

The run itself is an integration test (tests/integration/test_chaos.py); here a two-message
history stands for it, so that what the report says about a loss or a reorder is pinned down.
"""

from __future__ import annotations

import pytest

from mafka4.errors import InvalidConfig
from simulations.chaos.judge import FinalLogs, judge, with_sources
from simulations.chaos.run import ChaosSettings
from simulations.chaos.workload import History
from simulations.checkers import Ack, Commit, Consumed, Send, StoredRecord

KEY = b"k00"
FIRST, SECOND = b"k00:0000000", b"k00:0000001"


def final_logs() -> FinalLogs:
    """Both messages in p0 at offsets 0 and 1, fed to vp0 at the same offsets."""
    return FinalLogs(
        committed={0: [StoredRecord(0, KEY, FIRST), StoredRecord(1, KEY, SECOND)]},
        expected_vp={(0, 0): 0, (0, 1): 0},
        physical_replicas={0: {"p0/w0": (2, b"")}},
        vp_logs={0: [StoredRecord(0, KEY, FIRST, 0, 0), StoredRecord(1, KEY, SECOND, 0, 1)]},
        vp_replicas={},
        unreadable=[],
    )


def written() -> list:
    return [Send("producer-0", KEY, FIRST, 0), Send("producer-0", KEY, SECOND, 0),
            Ack(KEY, FIRST, 0, 0), Ack(KEY, SECOND, 0, 1)]


def read(offset: int, value: bytes) -> Consumed:
    return Consumed("member-0", "vp0", offset, KEY, value, 0, offset)


def test_settings_refuse_unknown_faults_and_more_members_than_virtual_partitions():
    with pytest.raises(InvalidConfig, match="faults nap unknown: choose from kill-replica"):
        ChaosSettings(faults=("kill-replica", "nap"))
    with pytest.raises(InvalidConfig, match="members=5 must be from 1 to virtual_partitions=4"):
        ChaosSettings(members=5, virtual_partitions=4)


def test_the_history_orders_the_members_records_among_the_drivers_by_time():
    history = History()
    send, ack = written()[0], written()[2]
    history.add(send, t=1.0)
    history.add(ack, t=3.0)
    assert history.merged([(2.0, read(0, FIRST))]) == [send, read(0, FIRST), ack]


def test_a_read_takes_its_source_from_the_ack_else_from_the_vp_log():
    acks = [Ack(KEY, FIRST, 0, 0)]
    vp_logs = {0: [StoredRecord(7, KEY, SECOND, 1, 5)]}  # SECOND was never acknowledged (its send failed)
    plain = [(1.0, Consumed("m", "vp0", 0, KEY, FIRST)), (2.0, Consumed("m", "vp0", 7, KEY, SECOND))]
    sourced = [record for _, record in with_sources(plain, acks, vp_logs)]
    assert [(r.partition, r.partition_offset) for r in sourced] == [(0, 0), (1, 5)]


def test_a_message_the_group_committed_past_without_reading_is_lost_and_explained():
    history = written() + [read(1, SECOND), Commit("chaos", "vp0", 2)]
    judged = judge(history, final_logs(), "chaos", drained=True)
    assert judged["anomalies"]["lost"] == 1 and judged["unread_acknowledged"] == 1
    assert judged["anomalies"]["reordered"] == 0
    assert judged["unread_explained"] == [
        "b'k00:0000000' acked at p0@0: in vp0@0; group committed vp0@2: the group committed past it without reading it"]


def test_a_key_read_out_of_order_is_reordered_and_a_re_read_before_a_commit_is_only_redelivered():
    history = written() + [read(1, SECOND), read(0, FIRST), read(1, SECOND), Commit("chaos", "vp0", 2)]
    judged = judge(history, final_logs(), "chaos", drained=True)
    assert judged["anomalies"]["reordered"] == 1
    assert judged["anomalies"]["lost"] == judged["anomalies"]["duplicate"] == 0
    assert judged["redelivered"] == 1
