"""``VpHousekeeping``: a read node's passes visit the VPs that changed or whose deadline came, never an idle one.

Real ``HostedVp`` logs, wired to a ``VpHousekeeping`` as a read node wires them (``on_change``,
and ``owe_flush`` where a test says so); the passes run by hand at chosen times. Each test checks
both sides of the rule: what must still happen (flush, HW checkpoint, retention, a lagging
follower leaving the RISR, a lone leader's fsync) and that an idle VP costs no visit, or that
the event loop does not fsync. No Ray, no etcd.
"""

from __future__ import annotations

import asyncio
import errno
import threading
import time
from dataclasses import replace
from pathlib import Path

from mafka4.limits.servers import LogConfig
from mafka4.log.pending_flush import FileToSync
from mafka4.log.replica_storage import HIGH_WATERMARK_CHECKPOINT
from mafka4.risr.state import RisrConfig
from mafka4.virtual.hosted_vp import HostedVp, VpId
from mafka4.virtual import housekeeping
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

    def __init__(self, root: Path, node_id: str, log_config: LogConfig = LOG_CONFIG, owes_flushes: bool = False):
        """``owes_flushes``: wire ``owe_flush`` as a read node does (lone leaders fsync off the loop)."""
        self.root, self.node_id, self.log_config = root, node_id, log_config
        self.owes_flushes = owes_flushes
        self.hosted: dict[VpId, HostedVp] = {}
        self.readies: list[Ready] = []
        self.housekeeper = VpHousekeeping(self.hosted.get)

    def open(self, vp: int) -> HostedVp:
        vp_id = VpId(TOPIC, vp)
        hosted = HostedVp(vp_id, self.node_id, self.root / self.node_id / str(vp), self.log_config, RISR_CONFIG, 0,
                          lambda hosted, ready: self.readies.append(ready), on_change=self.housekeeper.changed,
                          owe_flush=self.housekeeper.owe_flush if self.owes_flushes else None)
        self.hosted[vp_id] = hosted
        return hosted

    def lead(self, vp: int, replicas=None, now_ms: int = 0, risr=None) -> HostedVp:
        hosted = self.open(vp)
        replicas = replicas or (self.node_id,)
        hosted.become_leader(0, replicas, risr or replicas, now_ms)
        return hosted

    def drop(self, hosted: HostedVp) -> None:
        """Stop hosting ``hosted``, as ``ReadNode.drop`` does."""
        self.hosted.pop(hosted.vp_id).close()
        self.housekeeper.forget(hosted.vp_id)

    def owed(self) -> int:
        return self.housekeeper.describe()["pending"]["owed_flushes"]

    def flush_owed(self, now_ms: int) -> int:
        """One batch of owed flushes; how many it ran."""
        before = self.housekeeper.visits["owed_flushes"]
        asyncio.run(self.housekeeper.flush_owed(now_ms))
        return self.housekeeper.visits["owed_flushes"] - before

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
    assert node.housekeeper.describe()["pending"] == {"housekeeping": 0, "retention": 0, "risr_ticks": 0,
                                                      "owed_flushes": 0}

    feed(vps[7], range(3, 5), now_ms=10**9)
    assert node.housekeep(now_ms=10**9 + 200) == 1, "only the VP fed is visited"
    assert (vps[7].core.flushed_offset, checkpointed(vps[7])) == (5, 5)
    assert node.housekeep(now_ms=10**9 + 400) == 1, "once more, to find it idle and close its files"
    assert node.housekeep(now_ms=10**9 + 600) == 0
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
    assert leaders.housekeep(1_000) == 1 and followers.housekeep(1_000) == 1, "found idle: files closed"
    assert leaders.housekeep(1_200) == 0 and followers.housekeep(1_200) == 0
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


# --- a lone leader's fsync, off the event loop ---------------------------------------------------

NO_FLUSH_BY_TIME = replace(LOG_CONFIG, flush_interval_ms=None)  # only the lone-leader rule flushes


def lone_leaders(node: Node, count: int) -> list[HostedVp]:
    """Leaders of VPs with two replicas whose RISR is the leader alone: their HW waits for their fsyncs."""
    return [node.lead(vp, replicas=(node.node_id, "r9"), risr=(node.node_id,)) for vp in range(count)]


def test_a_lone_leader_owes_its_fsync_and_its_high_watermark_waits_for_the_owed_flush(tmp_path):
    node = Node(tmp_path, "r0", NO_FLUSH_BY_TIME, owes_flushes=True)
    first, second = lone_leaders(node, 2)
    feed(first, range(3))
    feed(second, range(2))
    feed(first, range(3, 5))
    for hosted in (first, second):
        assert hosted.core.flushed_offset == 0 < hosted.log_end_offset, "no fsync on the loop"
        assert hosted.core.high_watermark == 0, "the HW waits for the fsync"
    assert node.owed() == 2, "each VP owes one flush, however many appends owed it"

    assert node.flush_owed(now_ms=1) == 2
    assert (first.core.flushed_offset, first.core.high_watermark) == (5, 5)
    assert (second.core.flushed_offset, second.core.high_watermark) == (2, 2)
    assert node.readies[-1].wake, "readers waiting for the HW are woken"
    assert node.owed() == 0 and node.flush_owed(now_ms=2) == 0
    assert node.housekeep(now_ms=3) == 2 and checkpointed(first) == 5, "housekeeping checkpoints the HW it moved"
    node.close()


def test_without_owe_flush_a_lone_leader_fsyncs_each_feed_at_once(tmp_path):
    node = Node(tmp_path, "r0", NO_FLUSH_BY_TIME)
    (leader,) = lone_leaders(node, 1)
    feed(leader, range(3))
    assert leader.core.flushed_offset == leader.core.high_watermark == 3 and node.owed() == 0
    node.close()


def test_the_flush_before_a_risr_write_that_leaves_the_leader_alone_stays_on_the_loop(tmp_path):
    leaders, followers = Node(tmp_path, "r0", NO_FLUSH_BY_TIME, owes_flushes=True), Node(tmp_path, "r1")
    leader = leaders.lead(0, replicas=("r0", "r1"))
    follower = followers.open(0)
    follower.become_follower(0, "r0")
    feed(leader, range(4))
    replicate(leader, follower, now_ms=0)
    assert leader.core.high_watermark == 4 and leader.core.flushed_offset == 0, "the follower's copy protects it"
    leaders.tick(LAG_MS + 1)
    assert leaders.readies[-1].write_risr == ("r0",)
    assert leader.core.flushed_offset == 4, "what readers saw is fsynced before etcd may hold a RISR of r0 alone"
    leaders.close()
    followers.close()


def test_an_owed_flush_skips_a_vp_dropped_before_or_while_it_runs(tmp_path):
    node = Node(tmp_path, "r0", NO_FLUSH_BY_TIME, owes_flushes=True)
    before, during, kept = lone_leaders(node, 3)
    for hosted in (before, during, kept):
        feed(hosted, range(3))
    node.drop(before)
    assert node.owed() == 2

    async def flush_and_drop() -> None:
        flushing = asyncio.create_task(node.housekeeper.flush_owed(now_ms=1))
        await asyncio.sleep(0)  # the batch started and waits for its worker thread
        node.drop(during)
        await flushing

    asyncio.run(flush_and_drop())
    assert node.housekeeper.visits["owed_flushes"] == 2
    assert kept.core.high_watermark == 3 and node.owed() == 0
    assert during.core.flushed_offset == 0, "a VP dropped meanwhile is not touched after its close"
    node.close()


def test_an_owed_flush_that_fails_does_not_stop_the_others_and_is_owed_again_at_the_next_pass(tmp_path,
                                                                                               monkeypatch):
    node = Node(tmp_path, "r0", NO_FLUSH_BY_TIME, owes_flushes=True)
    broken, healthy = lone_leaders(node, 2)
    for hosted in (broken, healthy):
        feed(hosted, range(3))
    fsync = FileToSync.fsync

    def failing_disk(file: FileToSync) -> bool:
        if broken.directory in file.path.parents:
            raise OSError(errno.EIO, "injected I/O error", str(file.path))
        return fsync(file)

    monkeypatch.setattr(FileToSync, "fsync", failing_disk)
    assert node.flush_owed(now_ms=1) == 2
    assert healthy.core.high_watermark == 3
    assert (broken.core.flushed_offset, broken.core.high_watermark) == (0, 0)
    assert node.owed() == 0 and node.flush_owed(now_ms=2) == 0, "not retried in a loop"

    monkeypatch.setattr(FileToSync, "fsync", fsync)  # the disk heals
    node.housekeep(now_ms=3)
    assert node.owed() == 1, "owed again at the next housekeeping pass"
    assert node.flush_owed(now_ms=4) == 1 and broken.core.high_watermark == 3
    node.close()


def test_owed_flushes_and_the_housekeeping_pass_never_flush_at_the_same_time(tmp_path, monkeypatch):
    """Two flushes of one log in flight would stage the same checkpoint file (``Log.start_flush``)."""
    node = Node(tmp_path, "r0", replace(LOG_CONFIG, flush_interval_ms=100), owes_flushes=True)
    (leader,) = lone_leaders(node, 1)
    feed(leader, range(3))
    running, overlaps = [], []
    lock = threading.Lock()
    run_chores = housekeeping.run_chores

    def slow_run_chores(chores) -> None:
        with lock:
            running.append(None)
            overlaps.append(len(running))
        time.sleep(0.05)
        run_chores(chores)
        with lock:
            running.pop()

    monkeypatch.setattr(housekeeping, "run_chores", slow_run_chores)

    async def rounds() -> None:  # one event loop, as on a read node
        await asyncio.gather(node.housekeeper.housekeep(200, retention_due=False), node.housekeeper.flush_owed(200))
        assert overlaps == [1], "the owed flush found the pass's flush done: nothing left to run"
        assert leader.core.high_watermark == 3
        feed(leader, range(3, 5), now_ms=300)
        await asyncio.gather(node.housekeeper.flush_owed(400), node.housekeeper.housekeep(400, retention_due=False))
        assert overlaps == [1, 1, 1], "the owed flush, then the pass (its HW checkpoint): one at a time"
        assert leader.core.high_watermark == 5 and checkpointed(leader) == 5

    asyncio.run(rounds())
    node.close()
