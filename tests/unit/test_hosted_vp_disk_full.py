"""VP replicas on a read node whose ``log_dir_bytes_max`` is reached: a full disk, without a full disk.

A fed leader and a replicating follower refuse the append as a full disk would (``OSError``
ENOSPC) and are left exactly as before it: the core's log end, the feed progress and the log
agree, so once space returns the same feed or fetch appends everything once. No Ray.
"""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from mafka4.batch_payload import decode_batches
from mafka4.limits.servers import LogConfig
from mafka4.log.log_dir_budget import LogDirBudget
from mafka4.risr.state import RisrConfig
from mafka4.virtual.hosted_vp import HostedVp, VpId
from mafka4.virtual.vp_records import SourcedRecord, source_of

LOG_CONFIG = LogConfig(segment_bytes_max=4096, index_interval_bytes=512, flush_interval_ms=None)
RISR_CONFIG = RisrConfig(read_replica_lag_ms_max=1_000)
VP = VpId("orders", 0)
READ_ALL_BYTES = 1 << 20


def open_vp(root: Path, node_id: str, budget: LogDirBudget) -> HostedVp:
    return HostedVp(VP, node_id, root / node_id / "orders-v0", LOG_CONFIG, RISR_CONFIG, 0,
                    lambda hosted, ready: None, budget)


def records(offsets) -> list[SourcedRecord]:
    return [SourcedRecord(0, offset, offset, 1_000 + offset, b"k", b"v%d-" % offset + b"x" * 100) for offset in offsets]


def fed_sources(hosted: HostedVp) -> list[tuple[int, int]]:
    return [source_of(record) for record in decode_batches(hosted.read_for_follower(0, READ_ALL_BYTES))]


@pytest.fixture
def budgets(tmp_path):
    return {node: LogDirBudget(tmp_path / node) for node in ("r0", "r1")}


def test_a_fed_leader_on_a_full_disk_appends_nothing_and_takes_the_same_feed_once_space_returns(tmp_path, budgets):
    leader = open_vp(tmp_path, "r0", budgets["r0"])
    leader.become_leader(0, ("r0",), ("r0",), now_ms=0)
    assert leader.feed(0, records(range(3)), now_ms=0) == 3
    budgets["r0"].set_bytes_max(0)

    with pytest.raises(OSError) as refused:
        leader.feed(0, records(range(3, 6)), now_ms=0)
    assert refused.value.errno == errno.ENOSPC
    assert leader.log_end_offset == leader.core.log_end_offset == 3
    assert fed_sources(leader) == [(0, 0), (0, 1), (0, 2)]

    budgets["r0"].set_bytes_max(None)
    assert leader.feed(0, records(range(6)), now_ms=0) == 3  # the stream resumes from what the VP holds
    assert fed_sources(leader) == [(0, offset) for offset in range(6)]


def test_a_follower_on_a_full_disk_stays_where_it_was_and_catches_up_once_space_returns(tmp_path, budgets):
    leader, follower = open_vp(tmp_path, "r0", budgets["r0"]), open_vp(tmp_path, "r1", budgets["r1"])
    leader.become_leader(0, ("r0", "r1"), ("r0", "r1"), now_ms=0)
    follower.become_follower(0, "r0")
    leader.feed(0, records(range(4)), now_ms=0)
    budgets["r1"].set_bytes_max(0)

    answer = leader.answer_follower("r1", follower.core.fetch_position(), now_ms=0)
    data = leader.read_for_follower(answer.read_from, READ_ALL_BYTES)
    assert data
    with pytest.raises(OSError):
        follower.apply_answer(answer, data, now_ms=0)
    assert follower.log_end_offset == follower.core.log_end_offset == 0

    budgets["r1"].set_bytes_max(None)
    answer = leader.answer_follower("r1", follower.core.fetch_position(), now_ms=1)
    follower.apply_answer(answer, leader.read_for_follower(answer.read_from, READ_ALL_BYTES), now_ms=1)
    assert follower.log_end_offset == follower.core.log_end_offset == 4
    assert fed_sources(follower) == fed_sources(leader)
