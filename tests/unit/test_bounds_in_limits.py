"""Every bound of ``mafka4`` lives in ``mafka4/limits`` (its ``__init__`` and ``servers``), one place to look.

A module-level constant elsewhere whose name ends like a bound (``_S``, ``_MS``, ``_MAX``,
``_ATTEMPTS``, ``_BYTES``, ...) is a timeout, interval or limit someone forgot to move, unless it
is a format constant (fixed by a byte layout or by something outside mafka4) or a benchmark's
setting. Read from the source, importing nothing.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

BOUND_NAME = re.compile(r"[A-Z][A-Z0-9_]*(_S|_MS|_MIN|_MAX|_ATTEMPTS|_TRIES|_BYTES|_INTERVAL)")
# Benchmarks keep their measurement settings next to the measurement.
OWN_SETTINGS = ("mafka4/bench/", "mafka4/demo/")
NOT_BOUNDS = {
    "mafka4/batch_frame.py": {"HEADER_BYTES", "LENGTH_PREFIX_BYTES", "PAYLOAD_BYTES_MAX", "TIMESTAMP_MS_MAX"},  # the batch byte layout
    "mafka4/log/offset_index.py": {"U32_MAX"},  # index entries are uint32
    "mafka4/client/sender_core.py": {"SEQUENCE_MAX"},  # a batch's sequence is an int32
    "mafka4/client/accumulator.py": {"RECORD_OVERHEAD_BYTES"},  # msgpack framing of a record
    "mafka4/batch_payload.py": {"MESSAGE_HASH_BYTES", "RECORD_END_BYTES", "LANE_ID_BYTES"},  # the columns' byte layout
    "mafka4/runtime/environment.py": {"RAY_TEMP_DIR_CHARS_MAX"},  # Ray's socket path limit
    "mafka4/runtime/node_identity.py": {"NODE_ID_CHARS_MAX"},  # a DNS label
}
# Being merged into shared replica code (issue 12); their bounds move to mafka4/limits after that.


def _module_constants(path: Path) -> set[str]:
    names = set()
    for node in ast.parse(path.read_text(), str(path)).body:
        if isinstance(node, ast.Assign):
            names |= {target.id for target in node.targets if isinstance(target, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def test_no_bound_is_defined_outside_limits():
    stray = []
    for path in sorted((ROOT / "mafka4").rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        if relative.startswith(("mafka4/limits/", *OWN_SETTINGS)):
            continue
        allowed = NOT_BOUNDS.get(relative, set())
        stray += [f"{relative}: {name}" for name in sorted(_module_constants(path))
                  if BOUND_NAME.fullmatch(name) and name not in allowed]
    assert not stray, "move these bounds into mafka4/limits, each with why its value:\n" + "\n".join(stray)


def test_the_exceptions_still_exist():
    """An exception left behind after its constant moved would let a new bound of that name in."""
    for relative, names in NOT_BOUNDS.items():
        assert names <= _module_constants(ROOT / relative), relative
