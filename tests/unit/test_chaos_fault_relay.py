"""A network fault carried to the chaos members' processes through a file (``simulations.chaos.fault_relay``)."""

from __future__ import annotations

from mafka4.partition_gate import CLIENT, HEALED, NetworkFault, client_gate, set_client_fault
from simulations.chaos.fault_relay import FaultFile

CUT = NetworkFault.between([CLIENT], ["r0"], lost_after_ms=500)


def test_a_member_sets_each_fault_written_once_and_the_heal_after_it(tmp_path):
    driver, member = FaultFile(tmp_path / "fault.json"), FaultFile(tmp_path / "fault.json")
    try:
        assert member.follow() is None, "nothing written yet: nothing to set"
        driver.write(CUT)
        assert member.follow() == CUT and client_gate().plan("r0").request_lost
        assert member.follow() is None, "the same version is set once"
        driver.write(HEALED)
        assert member.follow() == HEALED and not client_gate().active
    finally:
        set_client_fault(HEALED)


def test_writes_in_one_clock_tick_are_still_told_apart(tmp_path):
    driver, member = FaultFile(tmp_path / "fault.json"), FaultFile(tmp_path / "fault.json")
    try:
        for fault in (CUT, HEALED, CUT):  # back to back: a coarse change time may not move
            driver.write(fault)
            assert member.follow() == fault
    finally:
        set_client_fault(HEALED)


def test_a_member_started_during_a_fault_takes_it_at_its_first_look(tmp_path):
    FaultFile(tmp_path / "fault.json").write(CUT)
    try:
        assert FaultFile(tmp_path / "fault.json").follow() == CUT
    finally:
        set_client_fault(HEALED)
    assert FaultFile(tmp_path / "none.json").read() == HEALED
