"""Commands and benches added through entry points: loaded only when they may run, never heavy to list.

The entry points come from the installed package's metadata, which a checkout does not have
until it is reinstalled, so these tests give ``plugins.entry_points`` the ones declared in
``pyproject.toml`` (``declared_entry_points``) or fakes. Without the analysis extra (pyspark,
pyarrow, matplotlib blocked in a fresh interpreter), ``mafka4 --help`` and the queue's own
commands must work, and an experiment command must name the extra to install.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from declared_entry_points import PYPROJECT, declared_entry_points, installed
from mafka4 import cli
from mafka4.cli import plugins
from mafka4.cli.bench import Bench


class FakeEntryPoint:
    """An entry point whose command ``hello`` counts how often it was loaded and run."""

    group = plugins.COMMAND_ENTRY_POINT_GROUP

    def __init__(self, name: str = "hello", error: Exception | None = None):
        self.name, self.value, self.error = name, f"tests.fake:{name}", error
        self.loads, self.runs = 0, 0

    def load(self):
        self.loads += 1
        if self.error is not None:
            raise self.error
        return self.add

    def add(self, commands) -> None:
        hello = commands.add_parser(self.name, help="a command from another package")
        hello.add_argument("--times", type=int, default=1)
        hello.set_defaults(run=self.run)

    def run(self, args) -> int:
        self.runs += args.times
        return 0


@pytest.fixture(autouse=True)
def empty_home(tmp_path, monkeypatch):
    monkeypatch.setenv("MAFKA4_HOME", str(tmp_path / "no-cluster-here"))


def test_the_declared_experiment_commands_register_with_their_help(monkeypatch):
    installed(monkeypatch, declared_entry_points())
    declared = {ep.name for ep in declared_entry_points(plugins.COMMAND_ENTRY_POINT_GROUP)}
    assert declared == {"experiment", "fleet", "analyze", "compare", "chaos"}
    commands = next(action for action in cli.build_parser()._subparsers._group_actions)
    listed = {choice.dest: choice.help for choice in commands._choices_actions}
    assert all(listed[name] for name in ("experiment", "fleet", "analyze", "compare", "chaos")), listed
    assert "topic" in listed and listed["analyze"].startswith("Spark analysis of event logs")
    args = cli.build_parser("analyze").parse_args(["analyze", "results/scaling"])
    assert (args.dir, args.out, args.master) == ("results/scaling", None, "local[*]") and callable(args.run)
    assert cli.build_parser("chaos").parse_args(["chaos", "--members", "2"]).members == 2


def test_a_built_in_command_never_loads_a_plugin(monkeypatch, capsys):
    hello = FakeEntryPoint()
    installed(monkeypatch, [hello])
    assert cli.main(["topic", "create", "bad name!"]) == 2
    assert "hello" not in cli.build_parser("topic").format_help()
    assert hello.loads == 0


def test_a_plugin_command_is_loaded_to_run_and_to_be_listed(monkeypatch, capsys):
    hello = FakeEntryPoint()
    installed(monkeypatch, [hello])
    assert cli.main(["hello", "--times", "3"]) == 0
    assert (hello.loads, hello.runs) == (1, 3)
    with pytest.raises(SystemExit) as exited:
        cli.main(["--help"])
    assert exited.value.code == 0 and "a command from another package" in capsys.readouterr().out


def test_a_plugin_that_cannot_load_is_left_out_with_a_warning_and_the_rest_works(monkeypatch, capsys):
    installed(monkeypatch, [FakeEntryPoint("broken", ModuleNotFoundError("No module named 'gone'")), FakeEntryPoint()])
    with pytest.raises(SystemExit) as exited:
        cli.main(["--help"])
    out, err = capsys.readouterr()
    assert exited.value.code == 0 and "hello" in out and "broken" not in out
    assert "mafka4: warning: command 'broken' (tests.fake:broken) left out: ModuleNotFoundError" in err
    with pytest.raises(SystemExit) as exited:
        cli.main(["broken"])
    assert exited.value.code == 2 and "invalid choice: 'broken'" in capsys.readouterr().err


def test_a_plugin_cannot_take_the_name_of_a_built_in_command(monkeypatch, capsys):
    impostor = FakeEntryPoint("topic")
    installed(monkeypatch, [impostor])
    cli.build_parser("--help")
    assert impostor.loads == 0 and "command 'topic' (tests.fake:topic) left out" in capsys.readouterr().err


def test_without_installed_entry_points_mafka4_runs_its_own_commands(monkeypatch, capsys):
    installed(monkeypatch, [])
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    assert "analyze" not in capsys.readouterr().out
    assert cli.main(["topic", "list"]) == 1


# --- benches of other packages ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HelloBenchSettings:
    rounds: int = field(default=1, metadata={"help": "rounds of hello"})


class FakeBenchEntryPoint:
    """An entry point of ``mafka4.benches`` that counts how often it was loaded; its object is ``bench``."""

    group = plugins.BENCH_ENTRY_POINT_GROUP

    def __init__(self, name: str = "hello", bench: object = None, error: Exception | None = None):
        self.name, self.value, self.error = name, f"tests.fake:{name}", error
        self.bench = Bench(name, "a bench from another package", HelloBenchSettings, "tests.fake:run") \
            if bench is None else bench
        self.loads = 0

    def load(self):
        self.loads += 1
        if self.error is not None:
            raise self.error
        return self.bench


def benches(command: str | None = "bench") -> dict:
    """The parsers of ``mafka4 bench``'s benches, by name, as ``build_parser(command)`` makes them."""
    bench = next(action for action in cli.build_parser(command)._subparsers._group_actions).choices["bench"]
    return next(action for action in bench._subparsers._group_actions).choices


def test_the_declared_benches_are_benches_of_their_names_outside_the_product(monkeypatch):
    declared = declared_entry_points(plugins.BENCH_ENTRY_POINT_GROUP)
    assert {ep.name for ep in declared} == {"delays", "failover", "feed-lag", "kafka-clients", "lanes", "read-scale",
                                                  "redis-streams"}
    for entry_point in declared:
        bench = entry_point.load()
        assert isinstance(bench, Bench) and bench.name == entry_point.name, entry_point
        assert bench.driver.startswith("benchmarks.") and bench.settings.__module__.startswith("benchmarks."), bench
    installed(monkeypatch, declared)
    listed = benches()
    assert {"produce", "consume", "stream", "vp-join", "vp-density", "rebalance", "delays", "failover", "feed-lag",
            "kafka-clients", "lanes", "read-scale", "redis-streams"} == set(listed)
    assert "--read-count" in listed["redis-streams"].format_help()


def test_mafka4_bench_loads_the_benches_of_other_packages_and_a_built_in_command_none(monkeypatch):
    hello_bench, hello_command = FakeBenchEntryPoint(), FakeEntryPoint()
    installed(monkeypatch, [hello_bench, hello_command])
    assert cli.main(["topic", "create", "bad name!"]) == 2
    assert (hello_bench.loads, hello_command.loads) == (0, 0)
    assert "hello" in benches("bench") and (hello_bench.loads, hello_command.loads) == (1, 0)
    assert cli.build_parser("bench").parse_args(["bench", "hello", "--rounds", "3"]).rounds == 3


def test_a_bench_that_cannot_load_takes_a_built_in_name_or_is_no_bench_of_its_name_is_left_out(monkeypatch, capsys):
    broken = FakeBenchEntryPoint("broken", error=ModuleNotFoundError("No module named 'gone'"))
    impostor = FakeBenchEntryPoint("produce")
    misnamed = FakeBenchEntryPoint("misnamed", bench=FakeBenchEntryPoint("other").bench)
    not_a_bench = FakeBenchEntryPoint("plain", bench=HelloBenchSettings)
    installed(monkeypatch, [broken, impostor, misnamed, not_a_bench, FakeBenchEntryPoint()])
    listed = benches()
    assert "hello" in listed and not {"broken", "misnamed", "plain", "other"} & set(listed)
    assert impostor.loads == 0 and "produce vs" not in listed["produce"].format_help()
    err = capsys.readouterr().err
    assert "mafka4: warning: bench 'broken' (tests.fake:broken) left out: ModuleNotFoundError" in err
    assert "bench 'produce' (tests.fake:produce) left out: mafka4 has a bench of that name" in err
    assert "bench 'misnamed' (tests.fake:misnamed) left out: TypeError: the entry point must name a " \
           "mafka4.cli.bench.Bench whose name is 'misnamed'" in err
    assert "bench 'plain' (tests.fake:plain) left out: TypeError" in err


# Runs mafka4 in a fresh interpreter where the analysis extra is missing, with the entry points
# of pyproject.toml; prints the exit code, what tried to import the extra and what of simulations
# and benchmarks was imported, as JSON on its last line.
WITHOUT_ANALYSIS_EXTRA = """
import json, sys
from importlib.abc import MetaPathFinder

attempts = []

class NotInstalled(MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("pyspark", "pyarrow", "matplotlib"):
            attempts.append(name)
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, NotInstalled())
sys.path.insert(0, sys.argv[1])
from declared_entry_points import declared_entry_points
from mafka4.cli import main, plugins

entry_points = declared_entry_points()
plugins.entry_points = lambda group: [ep for ep in entry_points if ep.group == group]
try:
    code = main(sys.argv[2:])
except SystemExit as exited:
    code = exited.code
print()
print(json.dumps({"code": code, "attempts": attempts,
                  "experiments": sorted(m for m in sys.modules if m.split(".")[0] in ("simulations", "benchmarks"))}))
"""
TESTS = Path(__file__).resolve().parent


def without_analysis_extra(*argv: str) -> tuple[dict, str]:
    ran = subprocess.run([sys.executable, "-c", WITHOUT_ANALYSIS_EXTRA, str(TESTS), *argv], capture_output=True,
                         text=True, timeout=120, cwd=PYPROJECT.parent)
    assert ran.returncode == 0, ran.stderr
    return json.loads(ran.stdout.splitlines()[-1]), ran.stdout + ran.stderr


def test_without_the_analysis_extra_the_help_lists_every_command_without_importing_it():
    result, output = without_analysis_extra("--help")
    assert result["code"] == 0 and result["attempts"] == [], output
    assert "analyze" in output and "produce" in output


def test_without_the_analysis_extra_the_queue_commands_work_and_import_no_experiment():
    result, output = without_analysis_extra("status")
    assert result == {"code": 1, "attempts": [], "experiments": []}, output
    assert "no local cluster" in output


@pytest.mark.parametrize("argv, message", [
    (["analyze", "no-such-dir"], "`mafka4 analyze` needs pyspark, pyarrow, matplotlib, from the analysis extra"),
    (["fleet", "model", "--out", "{tmp}", "--topics", "10", "--rows", "10"],
     "`mafka4 fleet model` needs pyarrow, from the analysis extra"),
])
def test_without_the_analysis_extra_an_experiment_command_exits_2_naming_the_extra(argv, message, tmp_path):
    result, output = without_analysis_extra(*(arg.format(tmp=tmp_path) for arg in argv))
    assert result["code"] == 2 and f"mafka4: error: {message}" in output, output
    assert 'pip install "mafka4[analysis]"' in output and 'pip install -e ".[analysis]"' in output


def test_an_experiment_without_pyarrow_is_refused_before_it_starts_a_cluster(monkeypatch, capsys):
    installed(monkeypatch, declared_entry_points())
    monkeypatch.setattr("simulations.extras._importable", lambda name: name != "pyarrow")
    monkeypatch.setattr("simulations.scaling.command.run_scaling", lambda *_: pytest.fail("the experiment started"))
    assert cli.main(["experiment", "scaling"]) == 2
    assert "`mafka4 experiment scaling` needs pyarrow, from the analysis extra" in capsys.readouterr().err
