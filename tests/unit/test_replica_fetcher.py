"""Node-pair replication, follower side: ``ReplicaFetcher`` leaves a long poll once a followed VP moves.

The leader node is a stand-in for its Ray handle: it keeps each request and answers a call only
when the test says, as a long poll with no news does. The follower's VP is a real ``HostedVp``.
No Ray.
"""

from __future__ import annotations

import asyncio

from mafka4.limits.servers import LogConfig, ReadNodeConfig
from mafka4.risr.state import RisrConfig
from mafka4.virtual.hosted_vp import HostedVp, VpId
from mafka4.virtual.replication import ReplicaFetcher, SessionAnswer, SessionRequest

LOG_CONFIG = LogConfig(segment_bytes_max=4096, index_interval_bytes=512, flush_interval_ms=None)
RISR_CONFIG = RisrConfig(read_replica_lag_ms_max=1_000)
CONFIG = ReadNodeConfig()
VP = VpId("orders", 0)
# Only a guard against a hang: each awaited request is sent without waiting on any clock.
HANG_GUARD_S = 30


class StandInLeader:
    """``handle.replica_fetch.remote(request, wait_ms)``: each call is kept with its request and
    answers when ``answer`` is called for it."""

    def __init__(self):
        self.requests: list[SessionRequest] = []
        self.calls: list[asyncio.Future] = []
        self.replica_fetch = self
        self._arrived = asyncio.Event()

    def remote(self, request: SessionRequest, wait_ms_max: int) -> asyncio.Future:
        self.requests.append(request)
        self.calls.append(asyncio.get_running_loop().create_future())
        self._arrived.set()
        return self.calls[-1]

    async def requested(self, count: int) -> SessionRequest:
        while len(self.requests) < count:
            self._arrived.clear()
            await asyncio.wait_for(self._arrived.wait(), HANG_GUARD_S)
        return self.requests[count - 1]

    def answer(self, index: int, session_id: int) -> None:
        self.calls[index].set_result(SessionAnswer(session_id, ()))


def follower_of_n0(tmp_path) -> HostedVp:
    hosted = HostedVp(VP, "n1", tmp_path / "n1", LOG_CONFIG, RISR_CONFIG, 0, lambda hosted, ready: None)
    hosted.become_follower(0, "n0")
    return hosted


def run_against_stand_in(tmp_path, scenario) -> None:
    """``scenario(follower, leader, fetcher)`` with a started fetcher of a follower of n0 (a stand-in)."""
    follower = follower_of_n0(tmp_path)

    async def main():
        leader = StandInLeader()
        fetcher = ReplicaFetcher("n1", "n0", lambda: [follower], lambda: leader, lambda: None, CONFIG)
        fetcher.start()
        try:
            await scenario(follower, leader, fetcher)
        finally:
            fetcher.close()
            follower.close()

    asyncio.run(asyncio.wait_for(main(), HANG_GUARD_S))


def test_a_new_epoch_noticed_during_a_long_poll_is_asked_at_once_in_a_new_session(tmp_path):
    async def scenario(follower, leader, fetcher):
        first = await leader.requested(1)
        assert first.session_id is None and [f.position.leader_epoch for f in first.changed] == [0]
        follower.become_follower(1, "n0")  # a replica move's step: the same leader, the next epoch
        fetcher.wake()
        second = await leader.requested(2)  # the first call is still out: the leader never answered it
        assert second.session_id is None, "a new session: the leader replaces the one left"
        assert [f.position.leader_epoch for f in second.changed] == [1]
        assert fetcher.stats["calls_left"] == 1

    run_against_stand_in(tmp_path, scenario)


def test_a_wake_that_moved_no_followed_vp_leaves_the_call_out(tmp_path):
    async def scenario(follower, leader, fetcher):
        await leader.requested(1)
        fetcher.wake()  # another topic's roles changed on this node
        while fetcher._kick.is_set():  # the fetcher looked at the wake (it clears it to wait again)
            await asyncio.sleep(0)
        assert not leader.calls[0].cancelled(), "the call is still out"
        leader.answer(0, session_id=7)
        second = await leader.requested(2)
        assert second.session_id == 7 and second.changed == (), "the same session, nothing new to say"
        assert fetcher.stats["calls_left"] == 0

    run_against_stand_in(tmp_path, scenario)
