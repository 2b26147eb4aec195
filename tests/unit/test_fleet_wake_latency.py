"""The ack -> reader trials of ``fleet calibrate`` (``simulations.fleet.wake_latency``), without a cluster.

What the calibration's latency figures rest on: a reader is parked before the produce, its
position is the end of what it may read, the delay runs from the acknowledgement to the first
reader's data, a reader's error or an early answer fails the trial, and a VP fetch's answer is
read as a consumer reads it. The trials against real client ports run in
``tests/integration/test_fleet_calibrate.py``.
"""

import asyncio

import pytest

from mafka4.errors import NotLeader
from mafka4.protocol.error_codes import error_answer
from mafka4.protocol.vp_api import VpDiverging, VpReadAnswer
from mafka4.virtual.vp_state import VirtualPartitionState
from simulations.fleet import wake_latency
from simulations.fleet.wake_latency import ack_to_reader_ms, vp_answers_bring_data, vps_by_leader, wake_trial


def _vp_answer(data: bytes = b"", error=None, diverging=None) -> VpReadAnswer:
    return VpReadAnswer(data, 10, 0, 10, error, diverging)


def _state(vp: int, leader: str, retired: bool = False) -> VirtualPartitionState:
    return VirtualPartitionState.from_json(vp, {"range": [vp * 10, vp * 10 + 10], "leader": leader, "leader_epoch": 0,
                                                "replicas": [leader], "risr": [leader], "retired": retired,
                                                "sealed_end_offset": 5 if retired else None})


class FakeTopic:
    """One partition's log in memory: a produce appends and wakes every parked fetch, as a leader does."""

    def __init__(self):
        self.end, self.events = 0, []
        self.grew = asyncio.Event()

    async def produce(self) -> int:
        self.events.append("produce")
        self.end += 1
        self.grew.set()
        return self.end - 1


class FakeReader:
    """``fail``: what its fetch raises; ``stays_behind``: it does not move to the end (another writer's
    messages arrived between its position and its fetch)."""

    def __init__(self, topic: FakeTopic, name: str, fail: Exception | None = None, stays_behind: bool = False):
        self.topic, self.name, self.fail, self.stays_behind = topic, name, fail, stays_behind
        self.position = 0

    async def move_to_end(self) -> None:
        if not self.stays_behind:
            self.position = self.topic.end
        self.topic.events.append(f"{self.name} at end {self.position}")

    async def poll(self) -> bool:
        self.topic.events.append(f"{self.name} parked")
        if self.fail is not None:
            raise self.fail
        if self.topic.end <= self.position:  # a long poll: answered when the log grows
            await self.topic.grew.wait()
        return self.topic.end > self.position


def test_the_delay_runs_from_the_ack_to_the_answer_and_a_reader_first_counts_zero():
    assert ack_to_reader_ms(10.0, 10.0015) == 1.5
    assert ack_to_reader_ms(10.0, 9.999) == 0.0  # the leader woke the fetch before the produce's answer went out


def test_readers_are_parked_at_the_end_before_the_produce_and_the_first_answer_counts():
    topic = FakeTopic()
    topic.end = 7  # earlier messages are not what a reader waits for
    readers = [FakeReader(topic, "a"), FakeReader(topic, "b")]
    delay = asyncio.run(wake_trial(topic.produce, readers))
    assert delay >= 0.0
    assert topic.events == ["a at end 7", "b at end 7", "a parked", "b parked", "produce"]
    assert [reader.position for reader in readers] == [7, 7]


def test_a_reader_that_fails_fails_the_trial_before_anything_is_produced():
    topic = FakeTopic()
    with pytest.raises(NotLeader):
        asyncio.run(wake_trial(topic.produce, [FakeReader(topic, "a", fail=NotLeader("moved"))]))
    assert "produce" not in topic.events


def test_a_reader_answered_before_the_produce_fails_the_trial():
    topic = FakeTopic()
    topic.end = 3
    with pytest.raises(AssertionError, match="before the produce"):
        asyncio.run(wake_trial(topic.produce, [FakeReader(topic, "a", stays_behind=True)]))
    assert "produce" not in topic.events


def test_a_produce_no_reader_receives_fails_the_trial(monkeypatch):
    monkeypatch.setattr(wake_latency, "ANSWER_WAIT_S_MAX", 0.01)
    topic = FakeTopic()

    async def produce_elsewhere() -> int:
        topic.events.append("produce")
        return 0

    with pytest.raises(AssertionError, match="no reader received"):
        asyncio.run(wake_trial(produce_elsewhere, [FakeReader(topic, "a")]))


def test_a_vp_fetch_brings_data_when_any_vp_has_some():
    assert not vp_answers_bring_data([_vp_answer(), _vp_answer()])
    assert vp_answers_bring_data([_vp_answer(), _vp_answer(b"batch")])


def test_a_vp_fetch_answers_error_is_raised_as_the_consumer_raises_it():
    with pytest.raises(NotLeader, match="moved"):
        vp_answers_bring_data([_vp_answer(b"batch"), _vp_answer(error=error_answer(NotLeader("moved")))])


def test_a_diverging_answer_to_a_fetch_without_an_epoch_is_a_broken_invariant():
    with pytest.raises(AssertionError, match="diverging"):
        vp_answers_bring_data([_vp_answer(diverging=VpDiverging(1, 5))])


def test_vps_are_read_at_their_leaders_node_and_retired_ones_not_at_all():
    states = [_state(3, "r1"), _state(0, "r0"), _state(2, "r0", retired=True), _state(1, "r0")]
    assert vps_by_leader(states) == {"r0": [0, 1], "r1": [3]}
    assert vps_by_leader([_state(0, "r0", retired=True)]) == {}
