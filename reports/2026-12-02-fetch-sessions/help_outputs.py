"""What every `mafka4` command line prints while it is parsed: each help, and the usage errors.

Prints one JSON line per command line (argv, exit code, stdout, stderr), each parsed in a fresh
interpreter, as `mafka4` parses it (`build_parser(argv[0])`), and never run. The command lines
are every command, action and bench of the full parser, each with --help, and lines that fail to
parse. Two trees must print the same bytes:

    PYTHONPATH=<tree> python help_outputs.py > <tree's name>.jsonl
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys


def subcommands(parser) -> dict:
    """``parser``'s sub-command parsers by name (empty without any)."""
    if parser._subparsers is None:
        return {}
    return next(action for action in parser._subparsers._group_actions if action.choices).choices


def command_lines() -> list[list[str]]:
    from mafka4.cli.main import build_parser

    lines = [[], ["--help"], ["-h"], ["no-such-command"], ["--no-such-option"]]
    for name, command in subcommands(build_parser()).items():
        lines += [[name, "--help"], [name, "no-such-action"], [name, "--no-such-option"]]
        for action in subcommands(command):
            lines += [[name, action, "--help"], [name, action, "--no-such-option"]]
    lines += [["topic"], ["topic", "list", "extra"], ["produce"], ["produce", "t", "--acks", "2"],
              ["up", "--etcd-members", "2"], ["up", "--controller-setting", "x"], ["bench"],
              ["acl", "add", "--principal", "x", "--operation", "produce"], ["group", "reset-offsets", "g"]]
    return lines


def outcome(argv: list[str]) -> dict:
    """What parsing ``argv`` prints and exits with, in this interpreter."""
    from mafka4.cli.main import build_parser

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = ["parsed", build_parser(argv[0] if argv else None).parse_args(argv).command]
        except SystemExit as exited:
            code = exited.code
    return {"argv": argv, "code": code, "stdout": out.getvalue(), "stderr": err.getvalue()}


if __name__ == "__main__":
    if sys.argv[1:2] == ["--one"]:
        print(json.dumps(outcome(json.loads(sys.argv[2]))))
    else:
        env = {**os.environ, "COLUMNS": "100"}  # argparse wraps at the terminal's width
        for argv in command_lines():
            sys.stdout.write(subprocess.run([sys.executable, __file__, "--one", json.dumps(argv)], env=env,
                                            capture_output=True, text=True, check=True).stdout)
