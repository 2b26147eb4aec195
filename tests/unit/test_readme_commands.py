"""README.md's command lines are true to the code: its two commands stand as they are, and every
``mafka4`` command line in its code blocks parses, options and all."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from mafka4 import cli

ROOT = Path(__file__).resolve().parents[2]
# Commands that join mafka4 from simulations/ (entry points): parsed when the install provides them.
PLUGIN_COMMANDS = {"experiment", "fleet", "analyze", "compare", "chaos"}


def _code_lines() -> list[str]:
    text = (ROOT / "README.md").read_text()
    return [line for block in re.findall(r"^```\w*\n(.*?)^```", text, re.DOTALL | re.MULTILINE)
            for line in block.splitlines()]


def readme_commands() -> list[list[str]]:
    """Every ``mafka4 ...`` command of the README's code blocks (after a pipe, before a comment)."""
    commands = []
    for line in _code_lines():
        command = line.split("#")[0].split("|")[-1].strip()
        if command.startswith("mafka4 "):
            commands.append(shlex.split(command)[1:])
    return commands


def test_the_two_commands_stand_as_they_are():
    starts = [line.split("#")[0].strip() for line in _code_lines()]
    assert "bash scripts/setup.sh" in starts and "python3 -m pytest -q" in starts


@pytest.mark.parametrize("argv", readme_commands(), ids=" ".join)
def test_every_mafka4_command_line_parses(argv, tmp_path, monkeypatch):
    monkeypatch.setenv("MAFKA4_HOME", str(tmp_path))
    parser = cli.build_parser(argv[0])
    commands = next(action for action in parser._subparsers._group_actions).choices
    if argv[0] not in commands:
        assert argv[0] in PLUGIN_COMMANDS, f"mafka4 has no command {argv[0]!r}"
        pytest.skip(f"{argv[0]} comes from simulations/, which this install does not provide")
    assert parser.parse_args(argv).command == argv[0]
