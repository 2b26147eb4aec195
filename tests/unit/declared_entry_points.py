"""The entry points ``pyproject.toml`` declares, given to ``mafka4.cli.plugins`` as if they were installed.

The installed package's metadata may come from another checkout, or predate a change of the
entry points, until it is reinstalled; so the tests of what other packages add to ``mafka4``
(commands and benches) read the entry points from this checkout's ``pyproject.toml``.
"""

from __future__ import annotations

import tomllib
from importlib.metadata import EntryPoint
from pathlib import Path

from mafka4.cli import plugins

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"
GROUPS = (plugins.COMMAND_ENTRY_POINT_GROUP, plugins.BENCH_ENTRY_POINT_GROUP)


def declared_entry_points(*groups: str) -> list[EntryPoint]:
    """The entry points of ``groups`` (default: both of ``plugins``) as ``pyproject.toml`` declares them."""
    declared = tomllib.loads(PYPROJECT.read_text())["project"]["entry-points"]
    return [EntryPoint(name, value, group) for group in groups or GROUPS for name, value in declared[group].items()]


def installed(monkeypatch, entry_points: list) -> None:
    """``plugins`` sees ``entry_points`` (each with a ``group``) and no other."""
    monkeypatch.setattr(plugins, "entry_points", lambda group: [ep for ep in entry_points if ep.group == group])
