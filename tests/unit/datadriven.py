"""Text-script scenario tests in the style of etcd-raft's "datadriven" package.

A scenario file tells one story as blocks separated by blank lines. A block is optional
``#`` comment lines, one command, a ``----`` line and the output the command must print::

    # r2 stops fetching and leaves the RISR.
    tick now=1100
    ----
    risr changed=True

A command is ``name target... key=value...``; a runner (a ``ScenarioRunner`` subclass)
interprets it by calling ``do_<name>(targets, args)`` (dashes in the name become
underscores) and returns the output. A ``MafkaError`` is printed as the command's output,
so a script can show a refusal and the message a user would read.

``MAFKA4_REWRITE_SCENARIOS=1`` writes each file back with the outputs the code prints now,
comments and commands unchanged: after a deliberate change, read the diff and commit it.
"""

from __future__ import annotations

import os
import pathlib
from dataclasses import dataclass, replace
from typing import Callable

from mafka4.errors import MafkaError

REWRITE_ENV = "MAFKA4_REWRITE_SCENARIOS"
SEPARATOR = "----"

Handler = Callable[[list[str], dict[str, str]], str]


@dataclass(frozen=True, slots=True)
class Block:
    """One command of a scenario file, where it stands and what it must print."""

    comments: tuple[str, ...]
    command: str
    output: str
    line: int  # of the command, for failure messages

    def render(self) -> str:
        return "\n".join([*self.comments, self.command, SEPARATOR, *([self.output] if self.output else [])])


class ScenarioRunner:
    """Base of the runners: dispatches ``name target... key=value...`` to ``do_<name>``."""

    def run(self, command: str) -> str:
        name, *words = command.split()
        handler: Handler | None = getattr(self, "do_" + name.replace("-", "_"), None)
        if handler is None:
            known = sorted(n[3:].replace("_", "-") for n in dir(self) if n.startswith("do_"))
            raise ValueError(f"unknown command {name!r}: {type(self).__name__} knows {known}")
        args = dict(word.split("=", 1) for word in words if "=" in word)
        targets = [word for word in words if "=" not in word]
        try:
            return handler(targets, args)
        except MafkaError as error:
            return f"error {type(error).__name__}: {error.message}"


def parse(text: str, name: str = "<scenario>") -> list[Block]:
    """The blocks of a scenario file, in order."""
    blocks: list[Block] = []
    chunk: list[tuple[int, str]] = []
    for number, line in enumerate(text.splitlines() + [""], start=1):
        if line:
            chunk.append((number, line))
        elif chunk:
            blocks.append(_block(chunk, name))
            chunk = []
    return blocks


def _block(chunk: list[tuple[int, str]], name: str) -> Block:
    texts = [line for _, line in chunk]
    if SEPARATOR not in texts:
        raise ValueError(f"{name}:{chunk[0][0]}: a block needs a {SEPARATOR!r} line after its command")
    separator = texts.index(SEPARATOR)
    head = chunk[:separator]
    commands = [(number, line) for number, line in head if not line.startswith("#")]
    if len(commands) != 1:
        raise ValueError(f"{name}:{chunk[0][0]}: a block holds one command before {SEPARATOR!r}, not {len(commands)}")
    ((line, command),) = commands
    comments = tuple(text for _, text in head if text.startswith("#"))
    return Block(comments, command, "\n".join(texts[separator + 1:]), line)


def render(blocks: list[Block]) -> str:
    return "\n\n".join(block.render() for block in blocks) + "\n"


def check_scenario(path: pathlib.Path, runner: ScenarioRunner) -> None:
    """Run every command of ``path`` with ``runner`` and compare (or, when rewriting, record) the outputs."""
    expected = parse(path.read_text(), path.name)
    actual = []
    for block in expected:
        try:
            output = runner.run(block.command)
        except Exception as error:
            error.add_note(f"{path.name}:{block.line}: {block.command}")
            raise
        # A blank line would end the block: the file could not be read back.
        assert not output or "" not in output.split("\n"), f"{path.name}:{block.line}: output with a blank line"
        actual.append(replace(block, output=output))
    if os.environ.get(REWRITE_ENV):
        path.write_text(render(actual))
        return
    for want, got in zip(expected, actual):
        assert got.output == want.output, (
            f"{path.name}:{want.line}: {want.command}\n--- expected\n{want.output}\n--- got\n{got.output}"
        )
