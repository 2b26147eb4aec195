"""Both drivers of a physical replica leave every follow-up of a core call to ``PhysicalReplica``.

The simulator (``simulations/dst/physical.py``) and the Ray actor (``mafka4/physical/actor.py``)
must build the real replica shell and never remember a follow-up themselves: no call of the
core's state-changing methods and no write to the replica's disk (epoch or HW checkpoint,
truncation, append, flush) except through the shell. Otherwise the simulator could drift from
the actor and still pass. Read from the source: a call ``<x>.<method>(...)`` is refused when
its receiver is named like the core (``state``), the storage or the log.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# ``ReplicaState``'s methods that change it (a driver reads the core, never drives it).
CORE_CALLS = frozenset({
    "become_leader", "become_follower", "check_epoch", "plan_append", "appended", "ack_ready", "on_follower_fetch",
    "tick", "isr_committed", "truncation_offset", "truncated", "follower_appended", "follower_high_watermark",
})
# What writes the replica's directory (``ReplicaStorage``, ``Log``).
DISK_WRITES = frozenset({
    "save_epochs", "save_high_watermark", "stage_high_watermark", "commit_high_watermark", "truncate_to", "append",
    "append_batches", "maybe_flush", "start_flush", "finish_flush", "flush", "close",
})
CORE_RECEIVERS = frozenset({"state", "_state"})
DISK_RECEIVERS = frozenset({"storage", "_storage", "log", "_log"})

DRIVERS = {
    "simulations/dst/physical.py": "self.replica",
    "mafka4/physical/actor.py": "self._replica",
}


def _receiver_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return None


def follow_ups_outside_the_shell(source: str) -> list[str]:
    """Each call in ``source`` of a core follow-up or a disk write, as ``line: code``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        method, receiver = node.func.attr, _receiver_name(node.func.value)
        if ((receiver in CORE_RECEIVERS and method in CORE_CALLS)
                or (receiver in DISK_RECEIVERS and method in DISK_WRITES)):
            found.append((node.lineno, f"{node.lineno}: {ast.unparse(node)}"))
    return [text for _, text in sorted(found)]


def constructions(source: str) -> set[str]:
    """The names of the classes (or functions) ``source`` calls by name."""
    return {node.func.id for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)}


@pytest.mark.parametrize("driver", sorted(DRIVERS))
def test_a_driver_builds_the_replica_shell_and_no_core_or_storage_of_its_own(driver):
    built = constructions((ROOT / driver).read_text())
    assert "PhysicalReplica" in built
    assert not built & {"ReplicaState", "ReplicaStorage", "Log"}, built


@pytest.mark.parametrize("driver", sorted(DRIVERS))
def test_a_driver_leaves_every_follow_up_to_the_replica_shell(driver):
    found = follow_ups_outside_the_shell((ROOT / driver).read_text())
    assert not found, (f"{driver} calls the core or writes the replica's disk itself; call "
                       f"{DRIVERS[driver]} (physical.physical_replica) instead:\n" + "\n".join(found))


def test_the_check_catches_a_driver_that_remembers_a_follow_up():
    source = """
def on_become_leader(self, message):
    self.state.become_leader(message.leader_epoch, message.replicas, message.isr, 0)
    self.replica.storage.save_epochs(self.state.epochs)
    self.replica.log.truncate_to(3)
    self._parked.append(message)
    self.replica.tick(0)
    self.state.leads(1)
"""
    assert follow_ups_outside_the_shell(source) == [
        "3: self.state.become_leader(message.leader_epoch, message.replicas, message.isr, 0)",
        "4: self.replica.storage.save_epochs(self.state.epochs)",
        "5: self.replica.log.truncate_to(3)",
    ]
