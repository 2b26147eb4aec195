"""``VpHousekeeping``: a read node's passes visit the VPs that changed or whose deadline came, never an idle one.

Real ``HostedVp`` logs, wired to a ``VpHousekeeping`` as a read node wires them (``on_change``);
the passes run by hand at chosen times. Each test checks both sides of the rule: what must
still happen (flush, HW checkpoint, retention, a lagging follower leaving the RISR) and that an
idle VP costs no visit. No Ray, no etcd.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

from mafka4.limits import LogConfig
from mafka4.log.replica_storage import HIGH_WATERMARK_CHECKPOINT
from mafka4.risr.state import RisrConfig
from mafka4.virtual.hosted_vp import HostedVp, VpId
from mafka4.virtual.housekeeping import VpHousekeeping
from mafka4.virtual.replica_core import Ready
from mafka4.virtual.vp_records import SourcedRecord

LAG_MS = 1_000
LOG_CONFIG = LogConfig(segment_bytes_max=4096, index_interval_bytes=512, flush_interval_ms=100,
                       retention_ms=None)
RISR_CONFIG = RisrConfig(read_replica_lag_ms_max=LAG_MS)
TOPIC = "orders"
READ_ALL_BYTES = 1 << 20


class Node:
    """The VPs of one read node and its passes, as ``ReadNode`` holds them."""

    def __init__(self, root: Path, node_id: str, log_config: LogConfig = LOG_CONFIG):
        self.root, self.node_id, self.log_config = root, node_id, log_config
        self.hosted: dict[VpId, HostedVp] = {}
        self.readies: list[Ready] = []
        self.housekeeper = VpHousekeeping(self.hosted.get)

    def open(self, vp: int) -> HostedVp:
        vp_id = VpId(TOPIC, vp)
        hosted = HostedVp(vp_id, self.node_id, self.root / self.node_id / str(vp), self.log_config, RISR_CONFIG, 0,
                          lambda hosted, ready: self.readies.append(ready), on_change=self.housekeeper.changed)
        self.hosted[vp_id] = hosted
        return hosted

    def lead(self, vp: int, replicas=None, now_ms: int = 0) -> HostedVp:
        hosted = self.open(vp)
        replicas = replicas or (self.node_id,)
        hosted.become_leader(0, replicas, replicas, now_ms)
        return hosted

    def housekeep(self, now_ms: int, retention_due: bool = False) -> int:
        """One housekeeping pass; how many VPs it visited."""
        before = self.housekeeper.visits["housekeeping"]
        asyncio.run(self.housekeeper.housekeep(now_ms, retention_due))
        return self.housekeeper.visits["housekeeping"] - before

    def retention_visits(self) -> int:
        return self.housekeeper.visits["retention"]

    def tick(self, now_ms: int) -> int:
        before = self.housekeeper.visits["risr_ticks"]
        self.housekeeper.tick(now_ms)
        return self.housekeeper.visits["risr_ticks"] - before

    def close(self) -> None:
        for hosted in self.hosted.values():
            hosted.close()


def feed(leader: HostedVp, offsets, now_ms: int = 0) -> None:
    records = [SourcedRecord(0, offset, offset * 31, 1_000 + offset, b"k%d" % offset, b"x" * 200) for offset in offsets]
    leader.feed(leader.core.leader_epoch, records, now_ms)


def replicate(leader: HostedVp, follower: HostedVp, now_ms: int) -> None:
    for _ in range(50):
        answer = leader.answer_follower(follower.core.replica_id, follower.core.fetch_position(), now_ms)
        data = leader.read_for_follower(answer.read_from, READ_ALL_BYTES)
        follower.apply_answer(answer, data, now_ms)
        if answer.diverging is None and not data:
            return
    raise AssertionError("replication did not settle in 50 rounds")


def checkpointed(hosted: HostedVp) -> int:
    return int((hosted.directory / HIGH_WATERMARK_CHECKPOINT).read_text())


# --- housekeeping ------------------------------------------------------------------------------


def test_idle_vps_are_not_visited_once_their_flush_and_checkpoint_are_done(tmp_path):
    node = Node(tmp_path, "n1")
    vps = [node.lead(vp) for vp in range(20)]
    for hosted in vps:
        feed(hosted, range(3))
    assert node.housekeep(now_ms=50) == 20
    assert all(hosted.core.flushed_offset == 0 for hosted in vps), "flush.ms=100 is not due yet"
    assert node.housekeep(now_ms=150) == 20, "a VP with a flush pending stays in the pass"
    assert all(hosted.core.flushed_offset == 3 and checkpointed(hosted) == 3 for hosted in vps)
    assert node.housekeep(now_ms=250, retention_due=True) == 20, "retention looks once at what changed"
    for now_ms in (350, 10_000, 10**9):
        assert node.housekeep(now_ms, retention_due=True) == 0, "idle VPs cost no visit"
    assert node.housekeeper.describe()["pending"] == {"housekeeping": 0, "retention": 0, "risr_ticks": 0}

    feed(vps[7], range(3, 5), now_ms=10**9)
    assert node.housekeep(now_ms=10**9 + 200) == 1, "only the VP fed is visited"
    assert (vps[7].core.flushed_offset, checkpointed(vps[7])) == (5, 5)
    assert node.housekeep(now_ms=10**9 + 400) == 0
    node.close()


def test_a_high_watermark_that_moves_while_its_vp_is_idle_is_still_checkpointed(tmp_path):
    leaders, followers = Node(tmp_path, "r0"), Node(tmp_path, "r1")
    leader = leaders.lead(0, replicas=("r0", "r1"))
    follower = followers.open(0)
    follower.become_follower(0, "r0")
    feed(leader, range(4))
    for now_ms in (0, 200, 400):
        leaders.housekeep(now_ms)
        followers.housekeep(now_ms)
    assert leader.core.high_watermark == 0 and checkpointed(leader) == 0, "the follower has nothing yet"
    assert leaders.housekeep(600) == 0 and followers.housekeep(600) == 0

    replicate(leader, follower, now_ms=700)  # the follower's fetches move the leader's HW
    assert leader.core.high_watermark == 4
    assert leaders.housekeep(800) == 1 and checkpointed(leader) == 4
    assert followers.housekeep(800) == 1, "the follower's log grew"
    assert (follower.core.flushed_offset, checkpointed(follower)) == (4, 4)
    assert leaders.housekeep(1_000) == 0 and followers.housekeep(1_000) == 0
    leaders.close()
    followers.close()


# --- retention ---------------------------------------------------------------------------------


def test_retention_visits_an_idle_vp_only_when_its_oldest_segment_expires(tmp_path):
    node = Node(tmp_path, "n1", replace(LOG_CONFIG, flush_interval_ms=None, retention_ms=10_000))
    hosted = node.lead(0)
    quiet = node.lead(1)  # no segment but the active one: never due
    for first in range(0, 60, 5):  # timestamps 1,000..1,059: several segments
        feed(hosted, range(first, first + 5))
    feed(quiet, range(2))
    assert hosted.log_start_offset == 0 and hosted.retention_due_ms() is not None
    assert quiet.retention_due_ms() is None
    node.housekeep(now_ms=5_000, retention_due=True)
    assert node.retention_visits() == 2 and hosted.log_start_offset == 0, "nothing has expired yet"
    due_ms = hosted.retention_due_ms()
    assert due_ms > 11_000

    visits = node.retention_visits()
    for now_ms in (6_000, 9_000, due_ms - 1):
        node.housekeep(now_ms, retention_due=True)
    assert node.retention_visits() == visits, "an idle VP is not looked at before its segment can expire"
    node.housekeep(due_ms, retention_due=True)
    assert node.retention_visits() == visits + 1 and hosted.log_start_offset > 0
    node.housekeep(10**9, retention_due=True)
    assert hosted.log_start_offset == hosted.log_end_offset - hosted_active_records(hosted)
    assert hosted.retention_due_ms() is None
    visits = node.retention_visits()
    node.housekeep(10**10, retention_due=True)
    assert node.retention_visits() == visits, "only the active segment is left: nothing more to look at"
    node.close()


def hosted_active_records(hosted: HostedVp) -> int:
    """How many records the last (active) segment holds: retention never deletes it."""
    return hosted.log_end_offset - hosted._log._segments[-1].base_offset


def test_a_segment_held_by_the_high_watermark_is_deleted_once_the_high_watermark_moves(tmp_path):
    config = replace(LOG_CONFIG, flush_interval_ms=None, retention_ms=1_000)
    leaders, followers = Node(tmp_path, "r0", config), Node(tmp_path, "r1", config)
    leader = leaders.lead(0, replicas=("r0", "r1"))
    follower = followers.open(0)
    follower.become_follower(0, "r0")
    for first in range(0, 60, 5):  # older than retention, and not on the follower yet
        feed(leader, range(first, first + 5))
    leaders.housekeep(10**7, retention_due=True)
    assert leader.log_start_offset == 0, "records not on every RISR member are kept"
    visits = leaders.retention_visits()
    leaders.housekeep(10**7 + 1, retention_due=True)
    assert leaders.retention_visits() == visits, "held by the HW: not looked at again until it moves"

    replicate(leader, follower, now_ms=10**7 + 2)
    leaders.housekeep(10**7 + 3, retention_due=True)
    assert leaders.retention_visits() == visits + 1 and leader.log_start_offset > 0
    leaders.close()
    followers.close()


# --- RISR ticks --------------------------------------------------------------------------------


def test_risr_ticks_visit_a_leader_only_when_its_follower_may_lag_out(tmp_path):
    leaders, followers = Node(tmp_path, "r0"), Node(tmp_path, "r1")
    alone = leaders.lead(1)  # read_replicas=1: no follower, never ticked
    leader = leaders.lead(0, replicas=("r0", "r1"), now_ms=0)
    follower = followers.open(0)
    follower.become_follower(0, "r0")
    assert leader.core.next_tick_ms() == LAG_MS + 1 and alone.core.next_tick_ms() is None
    assert leaders.tick(0) == 1, "the new leader changed: ticked once"
    assert leaders.tick(500) == 0 and leaders.tick(LAG_MS) == 0

    replicate(leader, follower, now_ms=900)  # caught up at 900: in sync until 1,900
    assert leaders.tick(LAG_MS + 1) == 1 and leader.core.risr == {"r0", "r1"}
    assert leader.core.next_tick_ms() == 900 + LAG_MS + 1
    assert leaders.tick(1_500) == 0
    assert leaders.tick(900 + LAG_MS + 1) == 1
    assert leader.core.risr == {"r0"}, "a follower that stopped fetching leaves the RISR"
    assert leaders.readies[-1].write_risr == ("r0",)
    assert leader.core.next_tick_ms() is None
    leaders.tick(2_000)  # the RISR change itself: looked at once more
    assert leaders.tick(10**9) == 0, "no follower in sync: nothing can lag out"
    assert alone.core.has_followers is False
    leaders.close()
    followers.close()
