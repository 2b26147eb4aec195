"""Commands and benches other packages add to ``mafka4``, through entry points.

Two entry-point groups, read the same way:

* ``mafka4.commands``: an entry point's name is a command; its object is a function
  ``add(commands)`` that adds that command, with its help and options, to the ``mafka4``
  sub-command parsers (what argparse's ``add_subparsers`` returns). ``simulations`` adds
  ``experiment``, ``fleet``, ``analyze``, ``compare`` and ``chaos`` this way.
* ``mafka4.benches``: an entry point's name is a bench of ``mafka4 bench``; its object is the
  ``Bench`` of that name (``mafka4.cli.bench``), which the bench runner serves as it serves its
  own. ``benchmarks`` adds ``failover``, ``feed-lag`` and ``redis-streams`` this way.

Both are declared in ``pyproject.toml``, so that mafka4 never imports ``simulations`` or
``benchmarks``, nor the extras their commands need. An entry point's module is imported to
build the parser, for ``mafka4 --help`` too, so it must stay light (argparse and settings);
the handler or the bench's driver imports what running it needs.

Entry points are read from the installed package's metadata: after changing them, reinstall
(``pip install -e .``). An entry point that cannot be loaded (a stale install, a broken
plugin), or whose name mafka4 already uses, is left out with a warning, and everything else
still works.
"""

from __future__ import annotations

import functools
import sys
from typing import TYPE_CHECKING, Callable, Container

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

COMMAND_ENTRY_POINT_GROUP = "mafka4.commands"
BENCH_ENTRY_POINT_GROUP = "mafka4.benches"


def add_commands(commands) -> None:
    """Each command of the ``mafka4.commands`` entry points, added to the sub-command parsers ``commands``."""
    _load_each(COMMAND_ENTRY_POINT_GROUP, "command", commands.choices, lambda name, add: add(commands))


def add_benches(taken: Container[str], add_bench: Callable[[str, object], None]) -> None:
    """``add_bench(name, bench)`` of each bench of the ``mafka4.benches`` entry points, but those named in ``taken``."""
    _load_each(BENCH_ENTRY_POINT_GROUP, "bench", taken, add_bench)


def _load_each(group: str, kind: str, taken: Container[str], use: Callable[[str, object], None]) -> None:
    """``use(name, object)`` of each entry point of ``group`` whose name is not ``taken``; one that fails is left out."""
    for entry_point in entry_points(group=group):
        if entry_point.name in taken:
            _leave_out(kind, entry_point, f"mafka4 has a {kind} of that name")
            continue
        try:
            use(entry_point.name, entry_point.load())
        except Exception as error:  # whatever a broken plugin raises, the rest of mafka4 must work
            _leave_out(kind, entry_point, f"{type(error).__name__}: {error}")


def entry_points(group: str) -> list[EntryPoint]:
    """The installed entry points of ``group``. importlib.metadata is imported here, on first use: it
    takes about 30 ms, which a client command (that loads no plugin) must not pay on every start."""
    return list(_installed_entry_points(group))


@functools.cache
def _installed_entry_points(group: str) -> tuple[EntryPoint, ...]:
    """Read once per process: reading them scans the metadata of every installed distribution
    (about 25 ms here), and a process that builds its parser again (a test, a program running
    ``main`` more than once) would pay it each time. An install made meanwhile is not seen, as a
    module imported before it is not reloaded either."""
    from importlib.metadata import entry_points as installed

    return tuple(installed(group=group))


def _leave_out(kind: str, entry_point: EntryPoint, why: str) -> None:
    print(f"mafka4: warning: {kind} {entry_point.name!r} ({entry_point.value}) left out: {why}", file=sys.stderr)
