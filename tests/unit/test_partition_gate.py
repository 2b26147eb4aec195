"""Network faults (``mafka4.partition_gate``): which links a partition cuts, and what a call meets.

A call's request travels caller→callee and its answer callee→caller, so a lost request never
reaches the callee while a lost answer does (the callee acted); both fail the call as a
timed-out one. The sleeps of the gate are recorded, not waited: no assert here reads a clock.
"""

from __future__ import annotations

import asyncio

import pytest

from mafka4.errors import InvalidConfig, RequestTimedOut
from mafka4.partition_gate import (CLIENT, HEALED, CallLost, GatedHandle, Link, NetworkFault, PartitionGate,
                                   client_gate, set_client_fault)


def test_a_partition_both_ways_cuts_every_link_between_the_sides_and_none_inside_one():
    fault = NetworkFault.between(["w0"], ["w1", "r0"])
    assert sorted(link.describe() for link in fault.links) == [
        "r0->w0 dropped", "w0->r0 dropped", "w0->w1 dropped", "w1->w0 dropped"]
    assert fault.link("w1", "r0") is None, "nodes on the same side still reach each other"


def test_a_one_way_partition_drops_the_requests_one_way_and_the_answers_the_other():
    fault = NetworkFault.between(["w1"], ["w0"], both_ways=False)  # traffic from w1 to w0 is lost
    # w1 calls w0 (a follower fetching from its leader): the request is lost, w0 never sees it.
    assert fault.plan("w1", "w0").request_lost and not fault.plan("w1", "w0").answer_lost
    # w0 calls w1: the call arrives, its answer is lost.
    assert fault.plan("w0", "w1").answer_lost and not fault.plan("w0", "w1").request_lost
    assert not fault.plan("w0", "r0").lost


def test_a_slowed_link_delays_without_losing():
    plan = NetworkFault.between(["w0"], [CLIENT], delay_ms=200).plan(CLIENT, "w0")
    assert (plan.lost, plan.request_delay_ms, plan.answer_delay_ms) == (False, 200, 200)


def test_faults_that_cannot_be_are_refused():
    with pytest.raises(InvalidConfig, match="disjoint, non-empty sides"):
        NetworkFault.between(["w0", "w1"], ["w1"])
    with pytest.raises(InvalidConfig, match="never cut from itself"):
        Link("w0", "w0")
    with pytest.raises(InvalidConfig, match="either dropped or delayed"):
        Link("w0", "w1", dropped=True, delay_ms=5)
    with pytest.raises(InvalidConfig, match="listed twice"):
        NetworkFault((Link("w0", "w1"), Link("w0", "w1")))
    with pytest.raises(InvalidConfig, match="lost_after_ms=0"):
        NetworkFault(lost_after_ms=0)
    with pytest.raises(InvalidConfig, match="takes a NetworkFault"):
        PartitionGate("w0").set({"links": []})


class Recorded:
    """``asyncio.sleep`` replaced: records each sleep and only yields."""

    def __init__(self, monkeypatch):
        self.sleeps: list[float] = []
        real_sleep = asyncio.sleep

        async def sleep(seconds, result=None):
            self.sleeps.append(seconds)
            await real_sleep(0)
            return result

        monkeypatch.setattr(asyncio, "sleep", sleep)


class Callee:
    """A remote method: counts the calls that reached it."""

    def __init__(self, answer=7, error: Exception | None = None):
        self.calls = 0
        self._answer, self._error = answer, error

    async def __call__(self):
        self.calls += 1
        if self._error is not None:
            raise self._error
        return self._answer


def test_a_lost_request_never_reaches_the_callee_and_fails_as_a_timed_out_call(monkeypatch):
    sleeps = Recorded(monkeypatch)
    gate, callee = PartitionGate("w1"), Callee()
    gate.set(NetworkFault.between(["w1"], ["w0"], both_ways=False, lost_after_ms=1500))
    with pytest.raises(CallLost, match="dropped the request of a call from w1 to w0") as lost:
        asyncio.run(gate.call("w0", callee))
    assert callee.calls == 0
    assert isinstance(lost.value, RequestTimedOut) and lost.value.retriable and isinstance(lost.value, TimeoutError), \
        "callers handle it as a timed-out call"
    assert sleeps.sleeps == [1.5], "the caller hears of it once its wait ran out"


def test_a_lost_answer_lets_the_callee_act_and_still_fails_the_call(monkeypatch):
    Recorded(monkeypatch)
    gate, callee = PartitionGate("w0"), Callee()
    gate.set(NetworkFault.between(["w1"], ["w0"], both_ways=False))  # w0's calls to w1 arrive, answers do not
    with pytest.raises(CallLost, match="dropped the answer"):
        asyncio.run(gate.call("w1", callee))
    assert callee.calls == 1, "the callee acted on the call"


def test_an_error_answer_is_lost_too(monkeypatch):
    Recorded(monkeypatch)
    gate = PartitionGate("w0")
    gate.set(NetworkFault.between(["w1"], ["w0"], both_ways=False))
    with pytest.raises(CallLost):
        asyncio.run(gate.call("w1", Callee(error=ValueError("refused"))))


def test_a_slowed_call_is_answered_after_both_delays(monkeypatch):
    sleeps = Recorded(monkeypatch)
    gate, callee = PartitionGate(CLIENT), Callee(answer=42)
    gate.set(NetworkFault.between([CLIENT], ["w0"], delay_ms=300))
    assert asyncio.run(gate.call("w0", callee)) == 42
    assert sleeps.sleeps == [0.3, 0.3]


def test_calls_to_nodes_the_fault_does_not_name_pass_untouched_and_healing_clears_it(monkeypatch):
    sleeps = Recorded(monkeypatch)
    gate = PartitionGate("r0")
    gate.set(NetworkFault.between(["r0"], ["w0"]))
    assert asyncio.run(gate.call("w1", Callee(answer=1))) == 1
    gate.set(HEALED)
    assert not gate.active
    assert asyncio.run(gate.call("w0", Callee(answer=2))) == 2
    assert sleeps.sleeps == []


class FakeHandle:
    def __init__(self):
        self.fetch = self
        self.calls: list[tuple] = []

    def remote(self, *args):
        self.calls.append(args)
        return Callee(answer=("fetched", args))()


def test_a_gated_handle_makes_the_call_only_when_the_gate_lets_it(monkeypatch):
    Recorded(monkeypatch)
    gate, handle = PartitionGate("r0"), FakeHandle()
    gated = GatedHandle(handle, gate, "w0")
    assert asyncio.run(gated.fetch.remote(5, 100)) == ("fetched", (5, 100))
    gate.set(NetworkFault.between(["r0"], ["w0"]))
    with pytest.raises(CallLost):
        asyncio.run(gated.fetch.remote(6, 100))
    assert handle.calls == [(5, 100)], "the dropped request was never sent"


def test_the_client_gate_is_one_per_process():
    try:
        set_client_fault(NetworkFault.between([CLIENT], ["w0"]))
        assert client_gate().active and client_gate().plan("w0").request_lost
    finally:
        set_client_fault(HEALED)
    assert not client_gate().active


def test_a_fault_reads_back_from_its_json_form_and_a_malformed_one_is_named():
    fault = NetworkFault((Link("w0", CLIENT), Link(CLIENT, "r1", dropped=False, delay_ms=40)), lost_after_ms=700)
    assert NetworkFault.from_json(fault.to_json()) == fault
    assert NetworkFault.from_json(HEALED.to_json()) == HEALED
    for malformed in ({}, {"links": [["w0"]], "lost_after_ms": 1}, {"links": [["w0", "w0", True, 0]], "lost_after_ms": 1}):
        with pytest.raises(InvalidConfig, match="network fault|never cut from itself"):
            NetworkFault.from_json(malformed)
