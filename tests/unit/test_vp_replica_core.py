"""The VP replica core and its shell under the lone-leader rule (the RISR twin of eligible leader replicas).

While a VP with two or more replicas has a RISR of its leader alone, the leader's HW never passes
what it flushed, the core asks for a flush (``Ready.flush``) after each append in that state, and
``HostedVp`` executes it and reports the flushed offset back (also after its own flushes). A VP
with one replica is not covered. The protocol around it is covered by the simulator
(``tests/sim``); these tests pin what a reader relies on: no offset it saw is lost by a power loss
of a lone leader.
"""

from __future__ import annotations

from mafka4.limits import LogConfig
from mafka4.physical.epochs import EpochHistory
from mafka4.risr.state import RisrConfig
from mafka4.virtual.hosted_vp import HostedVp, VpId
from mafka4.virtual.replica_core import Ready, VpReplicaCore
from mafka4.virtual.split import FeedProgress, SourcedRecord

LAG_MS = 100
CONFIG = RisrConfig(read_replica_lag_ms_max=LAG_MS)
PAIR = ("r0", "r1")


def core(flushed_offset: int = 0, log_end_offset: int = 0) -> VpReplicaCore:
    return VpReplicaCore("t/v0", "r0", CONFIG, EpochHistory(), 0, log_end_offset, 0, flushed_offset=flushed_offset)


def records(partition: int, first: int, count: int) -> list[SourcedRecord]:
    return [SourcedRecord(partition, offset, 0, offset, b"k", b"v%d" % offset) for offset in range(first, first + count)]


# --- the core ---------------------------------------------------------------------------------


def test_a_lone_leader_asks_for_a_flush_after_each_append_and_serves_only_what_was_flushed():
    replica = core()
    replica.become_leader(1, PAIR, ("r0",), FeedProgress(), now_ms=0)
    fed = records(0, 0, 3)
    ready = replica.leader_appended(replica.plan_feed(1, fed), 3)
    assert ready.flush and replica.high_watermark == 0
    assert replica.flushed(3) == Ready(wake=True)
    assert replica.high_watermark == 3


def test_a_vp_with_one_replica_is_not_covered_by_the_rule():
    replica = core()
    replica.become_leader(1, ("r0",), ("r0",), FeedProgress(), now_ms=0)
    ready = replica.leader_appended(replica.plan_feed(1, records(0, 0, 3)), 3)
    assert not ready.flush and replica.high_watermark == 3


def test_a_follower_taking_over_alone_flushes_before_it_serves_its_unflushed_tail():
    replica = core(flushed_offset=2, log_end_offset=5)
    ready = replica.become_leader(1, PAIR, ("r0",), FeedProgress(), now_ms=0)
    assert ready.flush and replica.high_watermark == 2
    replica.flushed(5)
    assert replica.high_watermark == 5


def test_a_leader_left_alone_flushes_before_it_writes_the_risr():
    replica = core()
    replica.become_leader(1, PAIR, PAIR, FeedProgress(), now_ms=0)
    replica.leader_appended(replica.plan_feed(1, records(0, 0, 4)), 4)
    answer, ready = replica.replica_fetch("r1", 1, 4, 1, now_ms=0)
    assert replica.high_watermark == 4 and not ready.flush  # r1 holds 0..3: no flush needed
    ready = replica.tick(LAG_MS + 1)  # r1 went quiet
    assert ready.write_risr == ("r0",) and ready.flush, "readers saw 0..3: flushed before {r0} is recorded"


def test_a_truncated_follower_is_flushed_no_further_than_its_log():
    replica = core(flushed_offset=6, log_end_offset=6)
    replica.epochs.assign(1, 0)
    replica.become_follower(2, "r1")
    replica.truncate((1, 4))
    assert replica.flushed_offset == 4


# --- the shell --------------------------------------------------------------------------------


def hosted(tmp_path, replicas=PAIR, risr=("r0",)) -> tuple[HostedVp, list[Ready]]:
    notices: list[Ready] = []
    config = LogConfig(segment_bytes_max=1 << 20, retention_ms=None, flush_interval_ms=1_000)
    vp = HostedVp(VpId("t", 0), "r0", tmp_path / "t-v0", config, CONFIG, 0, lambda _, ready: notices.append(ready))
    vp.become_leader(1, replicas, risr, now_ms=0)
    return vp, notices


def test_a_hosted_lone_leader_flushes_each_feed_and_serves_it_at_once(tmp_path):
    vp, notices = hosted(tmp_path)
    vp.feed(1, records(0, 0, 3), now_ms=10)
    assert vp.core.flushed_offset == vp.log_end_offset == 3
    assert vp.read(0, 1 << 20, now_ms=10).high_watermark == 3
    assert notices[-1].wake
    vp.close()


def test_a_hosted_vp_with_one_replica_flushes_by_policy_and_reports_it_from_housekeeping(tmp_path):
    vp, _ = hosted(tmp_path, replicas=("r0",), risr=("r0",))
    vp.feed(1, records(0, 0, 3), now_ms=10)
    assert vp.core.flushed_offset == 0 and vp.core.high_watermark == 3  # served before it is durable
    vp.housekeep(now_ms=1_000, retention_due=False)  # flush_interval_ms passed
    assert vp.core.flushed_offset == 3
    vp.close()
