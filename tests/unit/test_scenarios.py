"""Every ``scenarios/*.txt`` script, run by the runner its file-name prefix names.

``replica_*``: the physical replica core (``replica_scenarios``); ``risr_*``: a VP's read
in-sync replicas (``risr_scenarios``); ``reshard_*``: split epochs and the feed streams around
them (``reshard_scenarios``). See ``datadriven`` for the file format and how to rewrite outputs.
The last tests check the format itself: a wrong output fails, a rewrite keeps the story.
"""

from __future__ import annotations

import pathlib

import pytest

from datadriven import REWRITE_ENV, ScenarioRunner, check_scenario, parse, render
from mafka4.errors import InvalidReshard
from replica_scenarios import ReplicaRunner
from reshard_scenarios import ReshardRunner
from risr_scenarios import RisrRunner

SCENARIOS = pathlib.Path(__file__).parent / "scenarios"
RUNNERS = {"replica": ReplicaRunner, "risr": RisrRunner, "reshard": ReshardRunner}
PATHS = sorted(SCENARIOS.glob("*.txt"))


@pytest.mark.parametrize("path", PATHS, ids=lambda path: path.stem)
def test_scenario(path):
    prefix = path.stem.split("_", 1)[0]
    assert prefix in RUNNERS, f"{path.name}: name a scenario file after its runner: {sorted(RUNNERS)}_*.txt"
    check_scenario(path, RUNNERS[prefix]())


def test_the_scenarios_cover_every_runner():
    """A runner whose scripts were all renamed away would otherwise pass by running nothing."""
    assert {path.stem.split("_", 1)[0] for path in PATHS} >= set(RUNNERS)


@pytest.mark.parametrize("path", PATHS, ids=lambda path: path.stem)
def test_a_rewrite_changes_no_byte_of_a_script_whose_outputs_hold(path):
    text = path.read_text()
    assert render(parse(text)) == text


class EchoRunner(ScenarioRunner):
    def do_echo(self, targets, args):
        return " ".join(targets)

    def do_refuse(self, targets, args):
        raise InvalidReshard("VP 9 cannot be split")


def test_a_wrong_output_fails_and_names_the_line_of_its_command(tmp_path, monkeypatch):
    monkeypatch.delenv(REWRITE_ENV, raising=False)
    path = tmp_path / "echo.txt"
    path.write_text("# two words\necho a b\n----\na b\n\necho c\n----\nd\n")
    with pytest.raises(AssertionError, match="echo.txt:6: echo c"):
        check_scenario(path, EchoRunner())


def test_a_rewrite_records_outputs_and_errors_and_keeps_comments_and_commands(tmp_path, monkeypatch):
    path = tmp_path / "echo.txt"
    path.write_text("# two words\necho a b\n----\nstale\n\nrefuse\n----\n")
    monkeypatch.setenv(REWRITE_ENV, "1")
    check_scenario(path, EchoRunner())
    assert path.read_text() == (
        "# two words\necho a b\n----\na b\n\nrefuse\n----\nerror InvalidReshard: VP 9 cannot be split\n"
    )
    monkeypatch.delenv(REWRITE_ENV)
    check_scenario(path, EchoRunner())


def test_an_unknown_command_or_a_block_without_separator_is_a_script_error(tmp_path):
    with pytest.raises(ValueError, match="unknown command 'ehco': EchoRunner knows \\['echo', 'refuse'\\]"):
        EchoRunner().run("ehco a")
    with pytest.raises(ValueError, match="echo.txt:4: a block needs a '----' line"):
        parse("echo a\n----\n\necho b\nb\n", "echo.txt")
