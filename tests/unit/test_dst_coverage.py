"""Which elections the simulator counts as following a fault (``simulations.dst.coverage``).

The coverage check of the seeded runs requires fault-driven elections; these pin down what
counts: never the first leader of a replica group, only a fault on a replaced replica's node
since the group's previous election, and a cut is a fault of the node cut off (and of the other
end of a single cut link).
"""

from __future__ import annotations

from simulations.dst.coverage import Cause, FaultLedger
from simulations.dst.nemesis import _cut_off

P0 = ("p", 0)
REPLICAS = ("w0", "w1", "w2")


def led_group() -> FaultLedger:
    """p0 opened, elected at start-up, and its leader took office."""
    ledger = FaultLedger()
    ledger.opened(P0)
    assert ledger.election(P0, REPLICAS) is Cause.START_UP
    ledger.took_office(P0)
    return ledger


def test_the_first_leader_of_a_group_is_a_start_up_election_even_after_a_fault_on_its_replicas():
    ledger = FaultLedger()
    ledger.opened(P0)
    ledger.fault(["w0"])  # w0 crashed before p0 ever had a leader
    assert ledger.election(P0, REPLICAS) is Cause.START_UP
    # Its first leader crashed too before confirming: still no leader ever took office.
    ledger.fault(["w1"])
    assert ledger.election(P0, REPLICAS) is Cause.START_UP


def test_an_election_after_a_fault_on_a_replaced_replicas_node_follows_the_fault():
    ledger = led_group()
    ledger.fault(["w1"])
    assert ledger.election(P0, REPLICAS) is Cause.AFTER_FAULT


def test_a_fault_elsewhere_or_before_the_previous_election_does_not_count():
    ledger = led_group()
    ledger.fault(["w3"])  # not a replica of p0
    ledger.fault(["r0"])
    assert ledger.election(P0, REPLICAS) is Cause.OTHER
    ledger.fault(["w2"])
    assert ledger.election(P0, REPLICAS) is Cause.AFTER_FAULT
    # The next election follows no new fault: the one above already answered w2's.
    assert ledger.election(P0, REPLICAS) is Cause.OTHER


def test_the_end_of_a_fault_counts_too():
    """A node booting again (its replica restarted, perhaps without its unflushed tail) is a fault's end."""
    ledger = led_group()
    ledger.fault(["w0"])
    assert ledger.election(P0, REPLICAS) is Cause.AFTER_FAULT
    ledger.fault(["w0"])  # w0 boots
    assert ledger.election(P0, REPLICAS) is Cause.AFTER_FAULT


def test_a_group_opened_later_counts_only_faults_since_it_opened():
    ledger = FaultLedger()
    ledger.fault(["r1"])  # before the split that opens vp4
    child = ("vp", 4)
    ledger.opened(child)
    ledger.took_office(child)  # a split child's epoch-0 leader on a running node takes office at once
    assert ledger.election(child, ("r1", "r2")) is Cause.OTHER
    ledger.fault(["r2"])
    assert ledger.election(child, ("r1", "r2")) is Cause.AFTER_FAULT


def test_groups_are_judged_apart():
    ledger = led_group()
    vp = ("vp", 0)
    ledger.opened(vp)
    ledger.took_office(vp)
    ledger.fault(["w1"])
    assert ledger.election(vp, ("r0", "r1")) is Cause.OTHER
    assert ledger.election(P0, REPLICAS) is Cause.AFTER_FAULT


def test_a_cut_is_a_fault_of_the_node_cut_off_and_of_the_other_end_of_a_single_link():
    assert _cut_off([("w0", "w1")]) == ["w0", "w1"]
    assert _cut_off([("w0", "ctl")]) == ["ctl", "w0"]
    assert _cut_off([("w0", "w1"), ("w0", "w2"), ("w0", "ctl")]) == ["w0"]  # isolated: the others are healthy
