"""``HostedVp``: VP replicas on real logs, wired by hand as two read nodes would wire them.

A leader and a follower replicate fed records (the follower asks with its fetch position, the
leader answers and sends batches, the follower applies them); a follower with a divergent tail
truncates after a leader change; a reopened replica recovers its epochs and HW and rebuilds
its feed progress from its log; reads come only from a serving replica; housekeeping
checkpoints the HW. No Ray, no etcd: the node's ``notify`` is a recorder.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from mafka4.batch_payload import Record, decode_batches
from mafka4.errors import ReadReplicaNotInSync
from mafka4.limits.servers import LogConfig
from mafka4.log.replica_storage import EPOCH_CHECKPOINT, HIGH_WATERMARK_CHECKPOINT
from mafka4.risr.state import RisrConfig
from mafka4.virtual.hosted_vp import HostedVp, VpId
from mafka4.virtual.load_meter import LoadMeter
from mafka4.virtual.replica_core import Ready, VpRole
from mafka4.virtual.vp_records import SourcedRecord, source_of, strip_source

LAG_MS = 1_000
LOG_CONFIG = LogConfig(segment_bytes_max=4096, index_interval_bytes=512, flush_interval_ms=None)
RISR_CONFIG = RisrConfig(read_replica_lag_ms_max=LAG_MS)
VP = VpId("orders", 3)
PAIR = ("r0", "r1")
READ_ALL_BYTES = 1 << 20


class Node:
    """Records what the replicas hand their node (``ReadNode._on_ready`` writes RISRs to etcd)."""

    def __init__(self):
        self.readies: list[Ready] = []

    def notify(self, hosted: HostedVp, ready: Ready) -> None:
        self.readies.append(ready)

    def risr_writes(self) -> list[tuple[str, ...]]:
        return [ready.write_risr for ready in self.readies if ready.write_risr is not None]


def open_vp(root: Path, replica_id: str, node: Node, now_ms: int = 0) -> HostedVp:
    return HostedVp(VP, replica_id, root / replica_id, LOG_CONFIG, RISR_CONFIG, now_ms, node.notify)


def sourced(partition: int, offsets, tag: bytes = b"") -> list[SourcedRecord]:
    return [SourcedRecord(partition, offset, offset * 31, 1_000 + offset, b"k%d" % offset,
                          b"p%d-o%d%s-" % (partition, offset, tag) + b"x" * 100) for offset in offsets]


def feed(leader: HostedVp, partition: int, offsets, now_ms: int = 0, tag: bytes = b"") -> int:
    return leader.feed(leader.core.leader_epoch, sourced(partition, offsets, tag), now_ms)


def replicate(leader: HostedVp, follower: HostedVp, now_ms: int, bytes_max: int = READ_ALL_BYTES) -> int:
    """Fetch rounds until the follower is caught up and knows the leader's HW; how many rounds."""
    for rounds in range(1, 50):
        answer = leader.answer_follower(follower.core.replica_id, follower.core.fetch_position(), now_ms)
        data = leader.read_for_follower(answer.read_from, bytes_max)
        follower.apply_answer(answer, data, now_ms)
        if answer.diverging is None and not data:
            return rounds
    raise AssertionError("replication did not settle in 50 rounds")


def log_bytes(hosted: HostedVp) -> bytes:
    return hosted.read_for_follower(hosted.log_start_offset, READ_ALL_BYTES)


def readable(hosted: HostedVp, now_ms: int) -> list[Record]:
    return decode_batches(hosted.read(0, READ_ALL_BYTES, now_ms).data)


def sources(records: list[Record]) -> list[tuple[int, int]]:
    return [source_of(record) for record in records]


@pytest.fixture
def pair(tmp_path):
    """A leader (r0, epoch 0, alone in its RISR) and its follower (r1)."""
    node = Node()
    leader, follower = open_vp(tmp_path, "r0", node), open_vp(tmp_path, "r1", node)
    leader.become_leader(0, PAIR, ("r0",), now_ms=0)
    follower.become_follower(0, "r0")
    yield leader, follower, node
    leader.close()
    follower.close()


def test_a_follower_replicates_what_the_leader_was_fed_and_then_bounds_the_leaders_high_watermark(pair):
    leader, follower, node = pair
    assert feed(leader, 0, range(10)) == 10 and feed(leader, 1, range(5)) == 5
    assert leader.core.high_watermark == 15, "alone in its RISR the leader serves what it appended"
    with pytest.raises(ReadReplicaNotInSync):
        follower.read(0, READ_ALL_BYTES, now_ms=10)

    replicate(leader, follower, now_ms=10)
    assert log_bytes(follower) == log_bytes(leader), "the follower holds the leader's batches byte for byte"
    assert node.risr_writes() == [("r0", "r1")], "the follower joined the RISR: the node records it in etcd"
    leader.risr_written(("r0", "r1"), 0)
    assert follower.core.high_watermark == 15 and follower.core.serving(10)
    assert readable(follower, 10) == readable(leader, 10)
    assert sources(readable(follower, 10)) == [(0, o) for o in range(10)] + [(1, o) for o in range(5)]
    assert strip_source(readable(follower, 10)[0]).value.startswith(b"p0-o0-")

    assert feed(leader, 0, range(8, 14)) == 4, "re-fed records are dropped"
    assert leader.core.high_watermark == 15, "new records wait for the RISR follower"
    replicate(leader, follower, now_ms=20)
    assert leader.core.high_watermark == follower.core.high_watermark == 19
    assert log_bytes(follower) == log_bytes(leader)


def test_a_follower_with_a_divergent_tail_truncates_to_the_new_leaders_log(pair):
    old, new, node = pair
    feed(old, 0, range(5))
    replicate(old, new, now_ms=10)
    old.risr_written(("r0", "r1"), 0)
    feed(old, 0, range(5, 8), tag=b"-lost")  # never replicated: r1 does not hold them
    assert old.core.high_watermark == 5

    new.become_leader(1, PAIR, ("r1",), now_ms=20)  # r0 failed over to r1
    old.become_follower(1, "r1")
    feed(new, 1, range(2))  # r1 appends other records at VP offsets 5 and 6
    assert new.core.epochs.entries == ((0, 0), (1, 5))

    replicate(new, old, now_ms=30)
    assert log_bytes(old) == log_bytes(new)
    assert old.log_end_offset == 7 and old.core.epochs.entries == ((0, 0), (1, 5))
    assert (old.directory / EPOCH_CHECKPOINT).read_text() == old.core.epochs.to_text()
    records = readable(old, 30)
    assert sources(records) == [(0, o) for o in range(5)] + [(1, 0), (1, 1)]
    assert not any(b"-lost" in record.value for record in records)


def test_a_reopened_leader_recovers_epochs_and_high_watermark_and_refeeding_appends_nothing_twice(tmp_path):
    node = Node()
    vp = open_vp(tmp_path, "r0", node)
    vp.become_leader(0, ("r0",), ("r0",), now_ms=0)
    feed(vp, 0, range(5))
    feed(vp, 1, range(3))
    vp.housekeep(now_ms=100, retention_due=False)
    feed(vp, 0, range(5, 7))  # after the last HW checkpoint
    assert vp.core.high_watermark == vp.log_end_offset == 10
    vp.close()

    vp = open_vp(tmp_path, "r0", node, now_ms=200)
    assert vp.core.role is VpRole.NONE and vp.log_end_offset == 10
    assert vp.core.epochs.entries == ((0, 0),)
    assert vp.core.high_watermark == 8, "the HW checkpoint may be older than the log, never newer"
    with pytest.raises(ReadReplicaNotInSync):
        vp.read(0, READ_ALL_BYTES, now_ms=200)

    vp.become_leader(1, ("r0",), ("r0",), now_ms=200)
    assert vp.core.last_applied(1, 0) == 6 and vp.core.last_applied(1, 1) == 2
    assert feed(vp, 0, range(9)) == 2 and feed(vp, 1, range(3)) == 0
    assert vp.log_end_offset == 12
    found = sources(readable(vp, 200))
    assert sorted(found) == [(0, o) for o in range(9)] + [(1, o) for o in range(3)]
    vp.close()

    vp = open_vp(tmp_path, "r0", node, now_ms=300)
    assert vp.core.epochs.entries == ((0, 0), (1, 10))
    vp.close()


def test_reads_come_only_from_a_replica_that_may_serve(pair):
    leader, follower, _ = pair
    feed(leader, 0, range(3))
    with pytest.raises(ReadReplicaNotInSync, match="r1"):
        follower.read(0, READ_ALL_BYTES, now_ms=10)
    with pytest.raises(ReadReplicaNotInSync, match="r1"):
        follower.list_offsets(10)
    assert follower.readable(0, now_ms=10), "a long poll on a non-serving replica fails at once"

    replicate(leader, follower, now_ms=10)
    assert follower.list_offsets(10) == (0, 3)
    assert len(follower.read(0, READ_ALL_BYTES, 10 + LAG_MS).data) > 0
    assert not follower.readable(3, now_ms=10), "a serving replica waits for records past its HW"
    with pytest.raises(ReadReplicaNotInSync):
        follower.read(0, READ_ALL_BYTES, 11 + LAG_MS)  # no word from the leader for too long


def test_a_read_stops_at_the_high_watermark(pair):
    leader, follower, _ = pair
    feed(leader, 0, range(4))
    replicate(leader, follower, now_ms=10)
    leader.risr_written(("r0", "r1"), 0)
    feed(leader, 0, range(4, 6))
    answer = leader.read(0, READ_ALL_BYTES, now_ms=10)
    assert (answer.high_watermark, answer.log_end_offset) == (4, 6)
    assert sources(decode_batches(answer.data)) == [(0, o) for o in range(4)]
    assert leader.read(4, READ_ALL_BYTES, now_ms=10).data == b""


def test_a_replica_counts_consumers_reads_and_their_bytes_for_its_node_s_metrics(pair):
    leader, follower, _ = pair
    feed(leader, 0, range(4))
    first = leader.read(0, READ_ALL_BYTES, now_ms=10)
    empty = leader.read(4, READ_ALL_BYTES, now_ms=10)  # at the HW: a read all the same, of no bytes
    assert first.data and not empty.data
    described = leader.describe(10)
    assert (described["fetch_requests"], described["fetch_bytes"]) == (2, len(first.data))
    with pytest.raises(ReadReplicaNotInSync):
        follower.read(0, READ_ALL_BYTES, 11 + LAG_MS)
    assert follower.describe(10)["fetch_requests"] == 0, "a refused read is no read"


def test_housekeeping_checkpoints_the_high_watermark_when_it_moved(tmp_path):
    vp = open_vp(tmp_path, "r0", Node())
    vp.become_leader(0, ("r0",), ("r0",), now_ms=0)
    checkpoint = vp.directory / HIGH_WATERMARK_CHECKPOINT
    feed(vp, 0, range(3))
    vp.housekeep(now_ms=10, retention_due=False)
    assert checkpoint.read_text() == "3"
    feed(vp, 0, range(3, 5))
    assert checkpoint.read_text() == "3", "written by housekeeping only, not per append"
    vp.housekeep(now_ms=20, retention_due=False)
    assert checkpoint.read_text() == "5"
    vp.close()


def test_housekeeping_in_three_steps_flushes_what_was_fed_before_it_began(tmp_path):
    flushing = replace(LOG_CONFIG, segment_bytes_max=1 << 20, flush_interval_ms=100)
    vp = HostedVp(VP, "r0", tmp_path / "r0", flushing, RISR_CONFIG, 0, Node().notify)
    vp.become_leader(0, ("r0",), ("r0",), now_ms=0)
    feed(vp, 0, range(3), now_ms=500)
    assert vp.core.flushed_offset == 0, "appends leave flushing by time to housekeeping"
    chores = vp.start_housekeeping(now_ms=500)
    feed(vp, 0, range(3, 5), now_ms=500)  # the read node goes on feeding while a worker thread fsyncs
    chores.run()
    vp.finish_housekeeping(chores, now_ms=500, retention_due=False)
    assert (vp.core.flushed_offset, vp.log_end_offset) == (3, 5)
    assert (vp.directory / HIGH_WATERMARK_CHECKPOINT).read_text() == "3"
    vp.close()


def test_housekeeping_raises_what_its_chores_met_on_the_disk(tmp_path):
    vp = open_vp(tmp_path, "r0", Node())
    vp.become_leader(0, ("r0",), ("r0",), now_ms=0)
    feed(vp, 0, range(3))
    chores = vp.start_housekeeping(now_ms=10)
    (vp.directory / (HIGH_WATERMARK_CHECKPOINT + ".tmp")).mkdir()  # the checkpoint cannot be written
    chores.run()
    with pytest.raises(OSError):
        vp.finish_housekeeping(chores, now_ms=10, retention_due=False)
    vp.close()


def test_retention_deletes_only_segments_below_the_high_watermark(tmp_path):
    node = Node()
    expiring = replace(LOG_CONFIG, retention_ms=1_000)
    leader = HostedVp(VP, "r0", tmp_path / "r0", expiring, RISR_CONFIG, 0, node.notify)
    follower = HostedVp(VP, "r1", tmp_path / "r1", expiring, RISR_CONFIG, 0, node.notify)
    leader.become_leader(0, PAIR, PAIR, now_ms=0)
    follower.become_follower(0, "r0")
    for first in range(0, 60, 5):  # a backlog older than retention, fed after an outage
        feed(leader, 0, range(first, first + 5))
    assert leader.core.high_watermark == 0
    leader.housekeep(now_ms=10**7, retention_due=True)
    assert leader.log_start_offset == 0, "records not on every RISR member yet are kept"

    replicate(leader, follower, now_ms=10**7)
    assert leader.core.high_watermark == 60
    leader.housekeep(now_ms=10**7, retention_due=True)
    follower.housekeep(now_ms=10**7, retention_due=True)
    for hosted in (leader, follower):
        assert 0 < hosted.log_start_offset <= hosted.core.high_watermark
        assert hosted.read(hosted.log_start_offset, READ_ALL_BYTES, 10**7).data
    leader.close()
    follower.close()


# --- flushing: the lone-leader rule -----------------------------------------------------------


def test_a_lone_leader_flushes_each_feed_and_serves_it_at_once(tmp_path):
    """LOG_CONFIG flushes by no policy: only the rule makes the leader's log durable."""
    node = Node()
    leader = open_vp(tmp_path, "r0", node)
    leader.become_leader(1, PAIR, ("r0",), now_ms=0)
    feed(leader, 0, [10, 11, 12])
    assert leader.core.flushed_offset == leader.log_end_offset == 3
    assert leader.read(0, READ_ALL_BYTES, now_ms=0).high_watermark == 3 and node.readies[-1].wake
    leader.close()


def test_a_vp_with_one_replica_flushes_by_policy_and_reports_it_from_housekeeping(tmp_path):
    """It serves its unflushed tail: its readers detect a diverged log after a power loss (``read``)."""
    replica = HostedVp(VP, "r0", tmp_path / "r0", replace(LOG_CONFIG, flush_interval_ms=1_000), RISR_CONFIG, 0,
                       Node().notify)
    replica.become_leader(1, ("r0",), ("r0",), now_ms=0)
    feed(replica, 0, [10, 11, 12], now_ms=10)
    assert replica.core.flushed_offset == 0 and replica.core.high_watermark == 3  # served before it is durable
    replica.housekeep(now_ms=1_000, retention_due=False)  # flush_interval_ms passed
    assert replica.core.flushed_offset == 3
    replica.close()


def test_a_read_after_an_epoch_the_log_does_not_hold_there_answers_diverging_and_no_data(tmp_path):
    """A reader's last epoch is checked before any data is sent, and a long poll answers it at once."""
    vp = open_vp(tmp_path, "r0", Node())
    vp.become_leader(1, ("r0",), ("r0",), now_ms=0)
    feed(vp, 0, range(3))
    vp.become_leader(2, ("r0",), ("r0",), now_ms=0)  # as after a restart: the next epoch starts at 3
    feed(vp, 1, range(3))
    diverged = vp.read(5, READ_ALL_BYTES, now_ms=0, last_epoch=1)
    assert (diverged.data, diverged.diverging, diverged.high_watermark) == (b"", (1, 3), 6)
    assert vp.readable(6, now_ms=0, last_epoch=1), "past the HW, but told at once"
    assert not vp.readable(6, now_ms=0, last_epoch=2), "a reader of the log as it is waits for more"
    fine = vp.read(5, READ_ALL_BYTES, now_ms=0, last_epoch=2)
    assert fine.diverging is None and [r.offset for r in decode_batches(fine.data) if r.offset >= 5] == [5]
    vp.close()


def test_an_idle_vp_holds_no_descriptor_after_the_pass_that_finds_nothing_to_do(tmp_path):
    """Four descriptors per idle VP ran a read node into the open-file limit at 5,000 VPs."""
    def open_under(directory: Path) -> int:
        return sum(1 for fd in os.listdir("/proc/self/fd")
                   if os.path.realpath(f"/proc/self/fd/{fd}").startswith(str(directory) + os.sep))

    changed: list[HostedVp] = []
    vp = HostedVp(VP, "r0", tmp_path / "r0", replace(LOG_CONFIG, flush_interval_ms=100), RISR_CONFIG, 0,
                  Node().notify, on_change=changed.append)
    vp.become_leader(0, ("r0",), ("r0",), now_ms=0)
    assert open_under(vp.directory) == 0, "a VP opens its files when it is first fed or read"
    feed(vp, 0, range(3), now_ms=10)
    assert open_under(vp.directory) > 0
    vp.housekeep(now_ms=200, retention_due=False)  # flushes and checkpoints: busy, keeps its files open
    assert vp.housekeeping_pending and open_under(vp.directory) > 0, "one more visit, to find it idle"
    vp.housekeep(now_ms=300, retention_due=False)
    assert not vp.housekeeping_pending and open_under(vp.directory) == 0
    changed.clear()
    assert sources(readable(vp, now_ms=400)) == [(0, 0), (0, 1), (0, 2)]
    assert changed == [vp], "a read that opened the files is a change: housekeeping closes them again"
    vp.housekeep(now_ms=500, retention_due=False)
    assert open_under(vp.directory) == 0
    assert sources(readable(vp, now_ms=600)) == [(0, 0), (0, 1), (0, 2)]
    vp.close()


def test_a_leader_adds_the_bytes_it_appends_to_the_load_meter_and_nothing_for_repeats_or_replication(tmp_path):
    meter = LoadMeter("r0", 0)
    leader = HostedVp(VP, "r0", tmp_path / "r0", LOG_CONFIG, RISR_CONFIG, 0, Node().notify, load=meter)
    follower = HostedVp(VP, "r1", tmp_path / "r1", LOG_CONFIG, RISR_CONFIG, 0, Node().notify, load=meter)
    leader.become_leader(0, PAIR, ("r0",), now_ms=0)
    follower.become_follower(0, "r0")
    assert feed(leader, 0, range(5)) == 5 and feed(leader, 1, range(3)) == 3
    fed_bytes = len(log_bytes(leader))
    assert meter.fed_bytes_total == fed_bytes > 0
    assert feed(leader, 0, range(5)) == 0
    replicate(leader, follower, now_ms=10)
    assert len(log_bytes(follower)) == fed_bytes
    assert meter.fed_bytes_total == fed_bytes, "repeats dropped and a follower's copies are no feed work"
