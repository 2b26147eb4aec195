"""Node-pair replication, leader side: ``answer_followers`` and fetch sessions over real ``HostedVp`` leaders.

One call answers every VP a follower node shares with this node: news detection (what ends a
long poll), the byte budget shared across VPs, paused and unknown VPs, and a VP that fails
alone; a fetch session carries only what changed. The follower side applies answers as
``ReplicaFetcher`` does. No Ray.
"""

from __future__ import annotations


import pytest

from mafka4.errors import NotLeader, OffsetOutOfRange, StaleEpoch
from mafka4.limits import KiB
from mafka4.limits.servers import LogConfig, ReadNodeConfig
from mafka4.risr.state import RisrConfig
from mafka4.virtual.hosted_vp import HostedVp, VpId
from mafka4.virtual.replica_core import ReplicaAnswer
from mafka4.virtual.replication import (
    FetchSessions, FollowerAnswer, FollowerFetch, SessionRequest, answer_followers,
)
from mafka4.virtual.vp_records import SourcedRecord

LOG_CONFIG = LogConfig(segment_bytes_max=4096, index_interval_bytes=512, flush_interval_ms=None)
RISR_CONFIG = RisrConfig(read_replica_lag_ms_max=1_000)
CONFIG = ReadNodeConfig(replica_fetch_bytes_max=1 * KiB, replica_vp_fetch_bytes_max=1 * KiB)
VPS = tuple(VpId("orders", vp) for vp in range(3))
NODES = ("n0", "n1")  # n0 leads every VP, n1 follows


class Pair:
    """The VPs of a leader node and a follower node."""

    def __init__(self, root, log_config=LOG_CONFIG):
        self.leaders = {vp_id: self._open(root, "n0", vp_id, log_config) for vp_id in VPS}
        self.followers = {vp_id: self._open(root, "n1", vp_id, log_config) for vp_id in VPS}
        for vp_id in VPS:
            self.leaders[vp_id].become_leader(0, NODES, ("n0",), now_ms=0)
            self.followers[vp_id].become_follower(0, "n0")

    @staticmethod
    def _open(root, node_id, vp_id, log_config) -> HostedVp:
        return HostedVp(vp_id, node_id, root / node_id / str(vp_id.vp), log_config, RISR_CONFIG, 0,
                        lambda hosted, ready: None)

    def feed(self, vp_id: VpId, first: int, count: int) -> None:
        """One batch of ``count`` records of about 110 bytes each."""
        leader = self.leaders[vp_id]
        records = [SourcedRecord(0, offset, offset, 1_000 + offset, None, b"v%d-" % offset + b"x" * 100)
                   for offset in range(first, first + count)]
        assert leader.feed(leader.core.leader_epoch, records, now_ms=0) == count

    def fetches(self, now_ms: int, vp_ids=VPS) -> list[FollowerFetch]:
        return [FollowerFetch(vp_id, f.core.fetch_position(), f.core.high_watermark, f.core.serving(now_ms))
                for vp_id, f in ((vp_id, self.followers[vp_id]) for vp_id in vp_ids)]

    def answer(self, fetches, now_ms: int, report: bool = True) -> list[FollowerAnswer]:
        return answer_followers("n1", fetches, self.leaders.get, CONFIG, now_ms, report)

    def apply(self, fetches, answers, now_ms: int) -> None:
        for fetch, answer in zip(fetches, answers):
            if answer.error is None and answer.answer is not None:
                self.followers[fetch.vp_id].apply_answer(answer.answer, answer.data, now_ms)

    def settle(self, now_ms: int, rounds_max: int = 50) -> int:
        """Rounds until a call has no news for any VP; how many."""
        for rounds in range(1, rounds_max + 1):
            fetches = self.fetches(now_ms)
            answers = self.answer(fetches, now_ms)
            if not any(answer.news_for(fetch) for answer, fetch in zip(answers, fetches)):
                return rounds
            self.apply(fetches, answers, now_ms)
        raise AssertionError(f"replication had news after {rounds_max} rounds")

    def close(self) -> None:
        for hosted in (*self.leaders.values(), *self.followers.values()):
            hosted.close()


@pytest.fixture
def pair(tmp_path):
    nodes = Pair(tmp_path)
    yield nodes
    nodes.close()


def test_a_settled_pair_has_no_news_until_a_leader_appends(pair):
    pair.feed(VPS[0], 0, 3)
    pair.settle(now_ms=10)
    for vp_id in VPS:
        assert pair.followers[vp_id].log_end_offset == pair.leaders[vp_id].log_end_offset
        assert pair.followers[vp_id].core.serving(10)
    assert pair.followers[VPS[0]].core.high_watermark == 3

    pair.feed(VPS[1], 0, 2)
    fetches = pair.fetches(now_ms=20)
    answers = pair.answer(fetches, now_ms=20, report=False)  # a long poll looking again
    assert [answer.news_for(fetch) for answer, fetch in zip(answers, fetches)] == [False, True, False]
    assert answers[1].data and answers[1].answer.read_from == 0


def test_news_is_data_a_divergence_or_a_high_watermark_or_serving_flag_the_follower_does_not_know(pair):
    fetch = pair.fetches(now_ms=0)[0]
    assert (fetch.high_watermark, fetch.serving) == (0, False)
    quiet, vp_id = ReplicaAnswer(0, serving=False), fetch.vp_id
    assert not FollowerAnswer(vp_id, quiet).news_for(fetch)
    assert FollowerAnswer(vp_id, quiet, data=b"batch").news_for(fetch)
    assert FollowerAnswer(vp_id, quiet._replace(high_watermark=4)).news_for(fetch)
    assert FollowerAnswer(vp_id, quiet._replace(serving=True)).news_for(fetch)
    assert FollowerAnswer(vp_id, quiet._replace(diverging=(0, 0))).news_for(fetch)
    assert not FollowerAnswer(vp_id, None).news_for(fetch), "a paused VP has nothing to say"


def test_an_error_alone_does_not_end_the_long_poll(pair):
    # The follower can only log a refused entry (the controller re-announces roles), so an answer
    # with nothing but errors returning at once would make the two nodes call each other in a loop.
    fetch = pair.fetches(now_ms=0)[0]
    assert not FollowerAnswer(fetch.vp_id, None, error=NotLeader("orders/v0: not the leader")).news_for(fetch)


def test_the_byte_budget_is_shared_out_in_order_and_later_vps_get_data_in_later_rounds(pair):
    for vp_id in VPS:
        for first in range(0, 15, 5):
            pair.feed(vp_id, first, 5)  # three batches of about 600 bytes per VP
    fetches = pair.fetches(now_ms=10)
    answers = pair.answer(fetches, now_ms=10)
    sizes = [len(answer.data) for answer in answers]
    assert sizes[0] > 0 and sizes[0] <= CONFIG.replica_vp_fetch_bytes_max, "one VP never takes more than its share"
    assert sizes[1] > 0, "a VP within the budget gets at least one batch"
    assert sizes[2] == 0, "the budget is spent: the last VP gets nothing this time"
    pair.apply(fetches, answers, now_ms=10)

    rounds = pair.settle(now_ms=20)
    assert rounds <= 10
    for vp_id in VPS:
        follower, leader = pair.followers[vp_id], pair.leaders[vp_id]
        assert follower.read_for_follower(0, 1 << 20) == leader.read_for_follower(0, 1 << 20)


def test_a_paused_vp_answers_nothing_and_its_follower_is_not_reported(pair):
    pair.feed(VPS[1], 0, 3)
    pair.leaders[VPS[1]].fault.set(paused=True)
    fetches = pair.fetches(now_ms=10)
    answers = pair.answer(fetches, now_ms=10)
    assert answers[1] == FollowerAnswer(VPS[1], None)
    assert answers[0].answer is not None and answers[2].answer is not None
    described = pair.leaders[VPS[1]].core.describe(10)
    assert described["replicas"]["n1"] == {"status": "joining", "log_end_offset": None}


def test_unknown_and_deposed_vps_answer_an_error_and_the_others_are_answered(pair):
    pair.feed(VPS[0], 0, 3)
    unknown = VpId("orders", 9)
    fetches = [*pair.fetches(now_ms=10), FollowerFetch(unknown, pair.fetches(10)[1].position, 0, False)]
    answers = pair.answer(fetches, now_ms=10)
    assert isinstance(answers[3].error, NotLeader) and answers[3].answer is None
    assert answers[0].data, "the other VPs are answered"

    pair.leaders[VPS[1]].become_follower(1, "n2")  # n0 was deposed; n1 has not heard of epoch 1 yet
    pair.followers[VPS[2]].become_follower(1, "n0")  # n1 heard of epoch 1 before its leader did
    answers = pair.answer(pair.fetches(now_ms=20), now_ms=20)
    assert isinstance(answers[1].error, StaleEpoch), "a follower of an older epoch learns it is behind"
    assert isinstance(answers[2].error, NotLeader)
    assert answers[0].answer is not None and answers[0].error is None


def test_a_fetch_that_is_not_reported_changes_nothing_on_the_leader(pair):
    pair.feed(VPS[0], 0, 3)
    pair.settle(now_ms=10)
    leader = pair.leaders[VPS[0]]
    pair.feed(VPS[0], 3, 2)
    fetch = pair.fetches(now_ms=20)[0]
    ahead = fetch._replace(position=fetch.position._replace(fetch_offset=5))
    answers = pair.answer([ahead], now_ms=20, report=False)
    assert answers[0].answer.high_watermark == 3 and leader.core.high_watermark == 3


def test_a_follower_behind_the_leaders_log_start_fails_only_its_own_vp(tmp_path):
    nodes = Pair(tmp_path, LogConfig(segment_bytes_max=4096, index_interval_bytes=512, flush_interval_ms=None,
                                      retention_ms=1_000))
    try:
        for first in range(0, 60, 5):
            nodes.feed(VPS[0], first, 5)
        nodes.feed(VPS[1], 0, 3)
        nodes.leaders[VPS[0]].housekeep(now_ms=10**7, retention_due=True)  # alone in its RISR: HW 60
        assert nodes.leaders[VPS[0]].log_start_offset > 0
        answers = nodes.answer(nodes.fetches(now_ms=10**7), now_ms=10**7)
        assert isinstance(answers[0].error, OffsetOutOfRange)
        assert answers[1].data, "the VPs the pair shares replicate on"
    finally:
        nodes.close()


# --- fetch sessions ------------------------------------------------------------------------------


def test_a_session_sends_only_what_changed_and_answers_only_news(pair):
    sessions = FetchSessions(CONFIG)
    pair.settle(now_ms=5)  # every follower in the RISR and knowing its HW
    pair.feed(VPS[0], 0, 3)
    full = SessionRequest("n1", None, tuple(pair.fetches(now_ms=10)), ())
    session_id, session = sessions.open(full)
    answers = sessions.first_answers(full, session, pair.leaders.get, now_ms=10)
    assert [a.vp_id for a in answers] == [VPS[0]], "the idle VPs had no news"
    pair.apply([f for f in full.changed if f.vp_id == VPS[0]], answers, now_ms=10)

    changed = tuple(f for f in pair.fetches(now_ms=11) if f.vp_id == VPS[0])
    request = SessionRequest("n1", session_id, changed, ())
    assert sessions.open(request) == (session_id, session)
    assert set(session.entries) == set(VPS), "the unchanged VPs stay in the session"
    answers = sessions.first_answers(request, session, pair.leaders.get, now_ms=11)
    assert [a.vp_id for a in answers] == [VPS[0]] and not answers[0].data, "the follower's new log end moved the HW"

    pair.feed(VPS[2], 0, 2)  # a VP the last request did not name gets data: found after a wake
    later = sessions.later_answers(session, lambda vp_id: vp_id == VPS[2], pair.leaders.get, now_ms=12)
    assert [a.vp_id for a in later] == [VPS[2]] and later[0].data


def test_a_session_reports_every_idle_entry_again_each_quarter_of_its_lag_bound(pair):
    sessions = FetchSessions(CONFIG)
    full = SessionRequest("n1", None, tuple(pair.fetches(now_ms=0)), ())
    _, session = sessions.open(full)
    sessions.first_answers(full, session, pair.leaders.get, now_ms=0)
    quiet = SessionRequest("n1", 1, (), ())
    refresh_ms = RISR_CONFIG.read_replica_lag_ms_max // 4
    sessions.first_answers(quiet, session, pair.leaders.get, now_ms=refresh_ms - 1)
    assert session.reported_ms == dict.fromkeys(VPS, 0), "not yet: a quiet request reports nothing"
    sessions.first_answers(quiet, session, pair.leaders.get, now_ms=refresh_ms)
    assert session.reported_ms == dict.fromkeys(VPS, refresh_ms)
    # Idle past the lag bound but refreshed: still in sync.
    for now_ms in range(0, 3 * RISR_CONFIG.read_replica_lag_ms_max, refresh_ms // 2):
        sessions.first_answers(quiet, session, pair.leaders.get, now_ms)
        for leader in pair.leaders.values():
            leader.tick(now_ms)
    assert all(leader.core.risr == {"n0", "n1"} for leader in pair.leaders.values())


def test_an_unknown_session_is_refused_and_a_new_one_replaces_the_old(pair):
    sessions = FetchSessions(CONFIG)
    assert sessions.open(SessionRequest("n1", 7, (), ())) is None, "a restarted leader node knows no session"
    first, _ = sessions.open(SessionRequest("n1", None, tuple(pair.fetches(now_ms=0)), ()))
    second, _ = sessions.open(SessionRequest("n1", None, tuple(pair.fetches(now_ms=0)), ()))
    assert second != first and sessions.open(SessionRequest("n1", first, (), ())) is None
    assert sessions.open(SessionRequest("n2", second, (), ())) is None, "a session belongs to one follower node"
