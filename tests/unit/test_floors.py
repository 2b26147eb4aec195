"""The floor plan: every import of a ``mafka4`` module goes to its own floor or one below.

Floors, from the ground up (the first pattern that matches a module names its floor):

0. **base**: errors, limits, names, hashing, records and their compression (and the collector's pause while decoding), faults and network
   faults, long polls, planted bugs, exported environment variables (and packages with an empty
   ``__init__``).
1. **cores**: the log layer, RISR, and every pure decision core and value type of the
   physical and the virtual side, of groups and of the controller; the names of etcd keys.
2. **metadata**: etcd access and what is stored there (store, topic and VP stores, intents,
   the lease holder).
3. **shells**: what runs the cores against etcd and Ray: replica actors, read nodes, group
   protocols, the runtime (local clusters, node agents).
4. **control**: the controller and what it drives (launchers, resharding, repairs, upkeep).
5. **clients**: Admin, Producer, Consumer.
6. **tools**: benchmarks, the CLI, the demo.

An import that runs up a floor would let a lower part depend on a higher one; an import circle
between floors cannot exist if none does. Read from the source, importing nothing.
"""

from __future__ import annotations

import re
from pathlib import Path

from import_graph import ROOT, direct_imports


FLOORS = (
    (0, r"mafka4|mafka4\.(errors|limits|names|hashing|records|compression|checksum|collector_pause|faults|partition_gate|clocks|long_poll|"
        r"stage_trace|planted_bugs|exported_variables)"),
    # Packages whose __init__ is empty: importing one runs nothing.
    (0, r"mafka4\.(physical|virtual|coordinator|coordinator\.(metadata|control|groups))"),
    (1, r"mafka4\.log(\..*)?|mafka4\.risr(\..*)?"),
    (1, r"mafka4\.physical\.(partition_state|replica|sequencer)"),
    (1, r"mafka4\.virtual\.(ranges|layout|vp_records|vp_state|feed_plan|failover|replica_core|divergence)"),
    (1, r"mafka4\.coordinator\.metadata\.(lease|keys)"),
    (1, r"mafka4\.coordinator\.groups\.(assignors|partition_protocol|vp_ownership)"),
    (1, r"mafka4\.coordinator\.control\.(partition_decisions|read_path_decisions|upkeep_decisions|placement)"),
    (2, r"mafka4\.coordinator\.metadata\..*"),
    (3, r"mafka4\.(physical|virtual|runtime)(\..*)?|mafka4\.coordinator\.groups(\..*)?"),
    (4, r"mafka4\.coordinator\.control(\..*)?"),
    (5, r"mafka4\.client(\..*)?"),
    (6, r"mafka4\.(bench|cli|demo)(\..*)?"),
)


def floor_of(module: str) -> int:
    for floor, pattern in FLOORS:
        if re.fullmatch(pattern, module):
            return floor
    raise AssertionError(f"{module} is on no floor: add it to FLOORS")


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_no_import_runs_up_a_floor():
    upward = []
    for path in sorted((ROOT / "mafka4").rglob("*.py")):
        module = _module_name(path)
        for imported in sorted(name for name in direct_imports(module, ROOT) if name.startswith("mafka4")):
            if floor_of(imported) > floor_of(module):
                upward.append(f"{module} (floor {floor_of(module)}) imports {imported} (floor {floor_of(imported)})")
    assert not upward, "\n".join(upward)


def test_every_module_is_on_a_floor():
    for path in (ROOT / "mafka4").rglob("*.py"):
        floor_of(_module_name(path))


def test_the_packages_on_the_ground_floor_run_nothing_when_imported():
    for package in ("physical", "virtual", "coordinator", "coordinator/metadata", "coordinator/control",
                    "coordinator/groups"):
        assert (ROOT / "mafka4" / package / "__init__.py").read_text().strip() == "", package
