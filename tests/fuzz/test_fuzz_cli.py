"""Fuzzing the ``mafka4`` command line: bad arguments give exit status 2 and a message, never a traceback.

``mafka4.cli.main`` gets fuzzed argument lists built from the real command words and option
names mixed with junk. Argument errors end in argparse's ``SystemExit(2)`` with a usage
message; argument lists that parse are run only for commands that need no cluster beyond
argument validation, with ``MAFKA4_HOME`` pointing at an empty directory: they must fail
cleanly, not crash: a bad value is refused before connecting (exit 2, naming it), a valid
request then finds no cluster ("no local cluster ...", exit 1). Commands that would start a cluster
or a long run (``up``, ``demo``, ``bench``, ``experiment``, ...) are only ever fuzzed with
arguments that fail to parse.

``MAFKA4_FUZZ_EXAMPLES`` (default 40) scales the number of examples of every fuzz test here.
"""

from __future__ import annotations

import contextlib
import functools
import io
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mafka4 import cli

EXAMPLES = int(os.environ.get("MAFKA4_FUZZ_EXAMPLES", "40"))
FUZZ = settings(max_examples=EXAMPLES * 2, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

# Parsed commands allowed to run: each only reads $MAFKA4_HOME and finds no cluster there.
SAFE = {("topic", "list"), ("topic", "describe"), ("topic", "create"), ("topic", "delete"), ("group", "list"),
        ("group", "describe"), ("group", "reset-offsets"), ("status",), ("down",)}
WORDS = ["up", "down", "status", "topic", "create", "list", "describe", "delete", "produce", "consume", "group",
         "reset-offsets", "bench", "produce", "failover", "rebalance", "demo", "experiment", "scaling",
         "--partitions", "--replication-factor", "--min-insync-replicas", "--retention-ms", "--acks", "--group",
         "--key-sep", "--max-messages", "--timeout-ms", "--to-earliest", "--to-latest", "--to-time", "--topic",
         "--write-nodes", "--read-nodes", "--output", "--help-me", "-x", "--", "0", "-1", "3", "9" * 30, "", "orders",
         "bad name!", "2026-13-45", "é", "\x00"]

arguments = st.lists(st.sampled_from(WORDS) | st.text(max_size=8), max_size=7)


@functools.cache
def every_command_parser():
    """Built once: parsing mutates no parser, and ``cli.main`` still builds its own for each example."""
    return cli.build_parser()


def command_of(argv: list[str]) -> tuple[str, ...] | None:
    """The (sub)command argparse would run, or None when the arguments do not parse."""
    parser = every_command_parser()
    try:
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            args = parser.parse_args(argv)
    except SystemExit:
        return None
    return tuple(value for value in (args.command, getattr(args, "topic_command", None),
                                     getattr(args, "group_command", None), getattr(args, "bench_command", None))
                 if value is not None)


def run(argv: list[str]) -> tuple[int, str]:
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            code = cli.main(argv)
        except SystemExit as exit_:
            code = exit_.code
    return code, err.getvalue() + out.getvalue()


@pytest.fixture(autouse=True)
def empty_home(tmp_path, monkeypatch):
    monkeypatch.setenv("MAFKA4_HOME", str(tmp_path / "no-cluster-here"))


@FUZZ
@given(arguments)
def test_fuzzed_arguments_exit_2_with_a_message_or_fail_cleanly_without_a_cluster(argv):
    command = command_of(argv)
    if command is not None and command not in SAFE:
        return  # it would run for real (start a cluster, read stdin, benchmark): argument parsing is all we fuzz
    code, output = run(argv)
    assert "Traceback" not in output, output
    if command is None:
        assert code == 2 and ("usage:" in output or "error:" in output), (argv, code, output)
    elif command == ("status",):
        assert code == 1 and "no local cluster" in output, (argv, code, output)
    else:
        # Values are checked before connecting: a bad one is a usage error (2) naming it; a
        # valid request then finds no cluster (1).
        assert code in (1, 2) and "mafka4: error:" in output, (argv, code, output)
        assert code == 2 or "no local cluster" in output, (argv, code, output)


@pytest.mark.parametrize("argv", [
    ["topic", "create", "bad name!"],
    ["topic", "create", "orders", "--partitions", "0"],
    ["group", "reset-offsets", "g", "--topic", "t", "--to-time", "yesterday"],
])
def test_invalid_values_are_refused_as_usage_errors_even_without_a_cluster(argv):
    code, output = run(argv)
    assert "Traceback" not in output
    assert code == 2, (code, output)
