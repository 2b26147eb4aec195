"""``InSyncRecorder``: both replica actors' writes of a leader's in-sync set, against a fake etcd write.

The core counts a set only after etcd holds it; one write is in flight at a time and a burst
of changes is written as its latest set; etcd away means retry; a fenced leader stops; a
replica that no longer leads, or closed, writes nothing more.
"""

from __future__ import annotations

import asyncio
import logging
import threading

from mafka4.errors import CoordinatorUnavailable
from mafka4.metadata.in_sync_recorder import InSyncRecorder

BACKOFF_S = 0.01
TEST_BOUND_S = 10


class Leader:
    """A leader's in-sync set as the actor holds it, and what reaches a fake etcd."""

    def __init__(self, members=("r0", "r1", "r2"), epoch: int = 4):
        self.members, self.epoch, self.leading = frozenset(members), epoch, True
        self.written: list[tuple[tuple[str, ...], int]] = []
        self.recorded: list[tuple[tuple[str, ...], int]] = []
        self.answers: list[object] = []  # what the next writes answer (an exception is raised); then True
        self.release = threading.Event()
        self.release.set()

    def current(self):
        return (self.members, self.epoch) if self.leading else None

    def write(self, members: tuple[str, ...], epoch: int) -> bool:
        self.release.wait(TEST_BOUND_S)
        self.written.append((members, epoch))
        answer = self.answers.pop(0) if self.answers else True
        if isinstance(answer, Exception):
            raise answer
        return answer

    def record(self, members: tuple[str, ...], epoch: int) -> None:
        self.recorded.append((members, epoch))

    def recorder(self) -> InSyncRecorder:
        return InSyncRecorder("orders-0", "ISR", "r0", self.current, self.write, self.record, BACKOFF_S)


async def settled(condition) -> None:
    while not condition():
        await asyncio.sleep(0.001)


def run(scenario) -> None:
    asyncio.run(asyncio.wait_for(scenario(), TEST_BOUND_S))


def test_a_changed_set_is_written_sorted_then_recorded(caplog):
    leader = Leader(members=("r2", "r0"))

    async def scenario():
        with caplog.at_level(logging.WARNING):
            leader.recorder().changed()
        await settled(lambda: leader.recorded)

    run(scenario)
    assert leader.written == leader.recorded == [(("r0", "r2"), 4)]
    assert "orders-0: ISR is now ['r0', 'r2']" in caplog.text


def test_changes_during_a_write_are_written_once_as_the_latest_set():
    leader = Leader()

    async def scenario():
        recorder = leader.recorder()
        leader.release.clear()  # the first write hangs in etcd
        recorder.changed()
        await asyncio.sleep(0.01)
        for members in (("r0", "r1"), ("r0",), ("r0", "r2")):
            leader.members = frozenset(members)
            recorder.changed()
        leader.release.set()
        await settled(lambda: len(leader.recorded) == 2)
        await asyncio.sleep(0.02)  # no third write follows

    run(scenario)
    assert leader.written == leader.recorded == [(("r0", "r1", "r2"), 4), (("r0", "r2"), 4)]


def test_while_etcd_is_away_the_set_is_written_again_after_the_backoff(caplog):
    leader = Leader()
    leader.answers = [CoordinatorUnavailable("etcd at fake did not answer")] * 2

    async def scenario():
        leader.recorder().changed()
        await settled(lambda: leader.recorded)

    with caplog.at_level(logging.WARNING):
        run(scenario)
    assert len(leader.written) == 3 and leader.recorded == [(("r0", "r1", "r2"), 4)]
    assert "orders-0: cannot record ISR yet: etcd at fake did not answer" in caplog.text


def test_a_fenced_leader_records_nothing_and_stops_writing(caplog):
    leader = Leader()
    leader.answers = [False]

    async def scenario():
        leader.recorder().changed()
        await settled(lambda: leader.written)
        await asyncio.sleep(0.02)

    with caplog.at_level(logging.ERROR):
        run(scenario)
    assert leader.written == [(("r0", "r1", "r2"), 4)] and leader.recorded == []
    assert "orders-0: etcd names another leader or epoch; r0 is fenced" in caplog.text


def test_a_replica_that_no_longer_leads_writes_nothing():
    leader = Leader()
    leader.leading = False

    async def scenario():
        leader.recorder().changed()
        await asyncio.sleep(0.02)

    run(scenario)
    assert leader.written == [] and leader.recorded == []


def test_after_close_a_write_still_out_is_not_recorded():
    leader = Leader()

    async def scenario():
        recorder = leader.recorder()
        leader.release.clear()
        recorder.changed()
        await asyncio.sleep(0.01)
        recorder.close()
        leader.release.set()
        await settled(lambda: leader.written)
        await asyncio.sleep(0.02)

    run(scenario)
    assert leader.written == [(("r0", "r1", "r2"), 4)] and leader.recorded == []
