"""Commands other packages add to ``mafka4``, through the ``mafka4.commands`` entry-point group.

An entry point's name is a command; its object is a function ``add(commands)`` that adds that
command, with its help and options, to the ``mafka4`` sub-command parsers (what argparse's
``add_subparsers`` returns). That function's module is imported to build the parser, for
``mafka4 --help`` too, so it must stay light (argparse and settings); the command's handler
imports what running it needs. ``simulations`` adds ``experiment``, ``fleet``, ``analyze``,
``compare`` and ``chaos`` this way (``pyproject.toml``), so that mafka4 never imports
``simulations``, nor the ``analysis`` extra those commands need.

Entry points are read from the installed package's metadata: after changing them, reinstall
(``pip install -e .``). A command that cannot be loaded (a stale install, a broken plugin) is
left out with a warning, and every other command still works.
"""

from __future__ import annotations

import sys
from importlib.metadata import EntryPoint, entry_points

ENTRY_POINT_GROUP = "mafka4.commands"


def add_commands(commands) -> None:
    for entry_point in entry_points(group=ENTRY_POINT_GROUP):
        if entry_point.name in commands.choices:
            _leave_out(entry_point, "mafka4 has a command of that name")
            continue
        try:
            entry_point.load()(commands)
        except Exception as error:  # whatever a broken plugin raises, the other commands must work
            _leave_out(entry_point, f"{type(error).__name__}: {error}")


def _leave_out(entry_point: EntryPoint, why: str) -> None:
    print(f"mafka4: warning: command {entry_point.name!r} ({entry_point.value}) left out: {why}", file=sys.stderr)
