"""The ``mafka4`` command without a cluster: what each command line parses to, the exit codes, the bench runner.

Commands that need a cluster run against an empty ``$MAFKA4_HOME``, where they must find none
(exit 1) or refuse their input first (exit 2); bench drivers are replaced by fakes that record
the settings they were given. The benches of ``benchmarks`` come through the entry points that
``pyproject.toml`` declares (``declared_entry_points``), as after an install of this checkout.
"""

from __future__ import annotations

import argparse
import importlib
import json
import subprocess
import sys
import time

import pytest

from benchmarks.failover_settings import FailoverBenchSettings
from benchmarks.lag import FeedLagBenchSettings
from declared_entry_points import declared_entry_points, installed
from mafka4 import cli
from mafka4.bench.density import VpDensityBenchSettings
from mafka4.bench.produce_settings import ProduceBenchSettings
from mafka4.bench.vp_join import VpJoinBenchSettings
from mafka4.cli import bench as bench_commands
from mafka4.cli import plugins
from mafka4.cli.main import COMMAND_MODULES
from mafka4.errors import ClusterNotRunning, InvalidTopicName

# The options of every bench, as README.md and earlier releases document them (redis-streams' backlog is
# --messages and its produce runs' --produce-messages, as in bench consume and bench produce; both drains take
# --ack-cadences).
BENCH_FLAGS = {
    "produce": {"--messages", "--message-bytes", "--payload", "--compression", "--partitions", "--replication-factor",
                "--segment-bytes-max",
                "--acks", "--linger-ms", "--batch-bytes-max", "--paced-msgs-per-s", "--gc-freeze", "--skip-memory", "--output"},
    "failover": {"--repetitions", "--replication-factor", "--min-insync-replicas", "--output"},
    "rebalance": {"--partitions", "--consumers", "--rate-msgs-per-s", "--warmup-s", "--after-join-s", "--trials",
                  "--assignor", "--output"},
    "vp-join": {"--partitions", "--consumers", "--virtual-partitions", "--rate-msgs-per-s", "--warmup-s",
                "--after-join-s", "--trials", "--read-replicas", "--skip-mafka3", "--output"},
    "vp-density": {"--virtual-partitions", "--topics", "--partitions", "--read-replicas", "--window-s", "--settle-s",
                   "--smoke", "--output"},
    "feed-lag": {"--virtual-partitions", "--partitions", "--duration-s", "--smoke", "--output"},
    "kafka-clients": {"--repetitions", "--messages", "--rate-msgs-s", "--latency-s", "--output"},
    "read-scale": {"--pairs", "--consumers-at-start", "--consumers-at-most", "--rate-msgs-per-s", "--window-s",
                   "--settle-s", "--cluster-yaml", "--output"},
    "redis-streams": {"--produce-messages", "--messages", "--message-bytes", "--consumers", "--repetitions",
                      "--pipeline-messages", "--read-count", "--ack-cadences", "--quiet-wait-s-max", "--smoke",
                      "--output"},
    "consume": {"--messages", "--message-bytes", "--partitions", "--virtual-partitions", "--replication-factor",
                "--consumers", "--read-modes", "--ack-cadences", "--repetitions", "--gc-freeze", "--no-check-crcs",
                "--quiet-wait-s-max", "--smoke", "--output"},
}


@pytest.fixture(autouse=True)
def empty_home(tmp_path, monkeypatch):
    monkeypatch.setenv("MAFKA4_HOME", str(tmp_path / "no-cluster-here"))


@pytest.fixture(autouse=True)
def declared_plugins(monkeypatch):
    installed(monkeypatch, declared_entry_points())


def parse(*argv: str):
    return cli.build_parser().parse_args(argv)


def subparser(*path: str):
    parser = cli.build_parser()
    for name in path:
        parser = next(action for action in parser._subparsers._group_actions).choices[name]
    return parser


def subcommands(parser) -> dict:
    return next(action for action in parser._subparsers._group_actions).choices


def test_every_built_in_command_is_registered_with_help():
    names = set(next(action for action in cli.build_parser()._subparsers._group_actions).choices)
    assert {"up", "down", "status", "demo", "deploy", "undeploy", "topic", "scale", "produce", "consume", "group",
            "bench"} <= names
    help_text = cli.build_parser().format_help()
    assert "start a local cluster" in help_text and "send one message per line of standard input" in help_text


def test_each_built_in_command_is_built_from_the_module_main_names_for_it():
    """A command line builds the parsers of its own command's module alone (``COMMAND_MODULES``):
    a command missing there, or named with another module, would not parse, or build them all."""
    listed = []
    for module, names in COMMAND_MODULES.items():
        commands = argparse.ArgumentParser().add_subparsers()
        importlib.import_module(f"mafka4.cli.{module}").add_commands(commands)
        assert tuple(commands.choices) == names, module
        listed += names
        for name in names:
            assert set(subcommands(cli.build_parser(name))) == set(names), name
    assert list(subcommands(cli.build_parser()))[:len(listed)] == listed, "the help lists them in this order"


def test_command_lines_parse_to_the_documented_defaults():
    up = parse("up")
    assert (up.write_nodes, up.read_nodes, up.controller_setting) == (3, 2, [])
    create = parse("topic", "create", "orders")
    assert (create.partitions, create.replication_factor, create.read_mode, create.read_replicas,
            create.virtual_partitions, create.min_insync_replicas) == (1, 1, "mafka4", 1, None, None)
    produce = parse("produce", "orders")
    assert (produce.acks, produce.linger_ms, produce.key_sep, produce.compression) == ("all", 5, None, None)
    assert parse("produce", "orders", "--compression", "zstd").compression == "zstd"
    consume = parse("consume", "orders")
    assert (consume.timeout_ms, consume.key_sep, consume.group, consume.max_messages) == (10_000, "\t", None, None)
    reset = parse("group", "reset-offsets", "billing", "--topic", "orders", "--to-time", "2026-11-22T21:30:00")
    assert (reset.group, reset.topic, reset.to_time, reset.to_earliest) == ("billing", "orders", "2026-11-22T21:30:00",
                                                                           False)
    assert parse("up", "--controller-setting", "vp_merge_delay_ms=5000").controller_setting == [("vp_merge_delay_ms",
                                                                                                 5000)]


def test_deploy_status_and_undeploy_name_a_ray_cluster_and_parse_to_the_documented_defaults(monkeypatch):
    deploy = parse("deploy", "--address", "10.0.0.5:6379")
    assert (deploy.address, deploy.cluster, deploy.data_dir, deploy.node_lease_ttl_s, deploy.client_port,
            deploy.ready_timeout_s, deploy.wait) == ("10.0.0.5:6379", "local", "~/mafka4-data", 10, 9192, 120, True)
    assert parse("deploy", "--address", "h:1", "--no-wait").wait is False
    assert parse("undeploy", "--address", "h:1").address == "h:1"
    assert parse("status").address is None, "without --address: the local cluster, as before"
    assert parse("status", "--address", "h:1", "--cluster", "prod").cluster == "prod"
    monkeypatch.setenv("MAFKA4_CLUSTER", "staging")
    assert cli.build_parser("deploy").parse_args(["deploy", "--address", "h:1"]).cluster == "staging"


def test_deploy_refuses_a_bad_client_port_before_joining_ray(monkeypatch, capsys):
    def no_ray(*_):
        raise AssertionError("joined Ray")
    monkeypatch.setattr("mafka4.runtime.connect.join_ray", no_ray)
    assert cli.main(["deploy", "--address", "h:1", "--client-port", "70000"]) == 2
    assert "--client-port 70000 is not a TCP port" in capsys.readouterr().err
    assert cli.main(["deploy", "--address", "h:1", "--controller-setting", "no_such_setting=1"]) == 2
    assert "unknown setting(s) no_such_setting" in capsys.readouterr().err


def test_deploy_takes_controller_settings_as_up_does():
    deploy = parse("deploy", "--address", "h:1", "--controller-setting", "read_node_scaling=1",
                   "--controller-setting", "vp_merge_delay_ms=5000")
    assert deploy.controller_setting == [("read_node_scaling", 1), ("vp_merge_delay_ms", 5000)]
    assert parse("deploy", "--address", "h:1").controller_setting == []


def test_deploy_no_wait_passes_it_on_and_says_nodes_join_later_and_where_to_see_them(monkeypatch, capsys):
    from mafka4.runtime.deploy import DeployReport
    from mafka4.runtime.etcd_member import EtcdServer

    joined, given = [], []
    monkeypatch.setattr("mafka4.runtime.connect.join_ray", joined.append)

    def deployed(settings, home):
        given.append(settings)
        member = EtcdServer(pid=7, client_port=2379, data_dir="d", log_path="l", host="10.0.0.5")
        return DeployReport((member,), ("etcd member mafka4 on 10.0.0.5:2379", "controller"), (), (), (), "/c")

    monkeypatch.setattr("mafka4.runtime.deploy.deploy", deployed)
    assert cli.main(["deploy", "--address", "10.0.0.5:6379", "--no-wait", "--cluster", "prod"]) == 0
    [settings] = given
    assert joined == ["10.0.0.5:6379"] and settings.wait is False and settings.cluster == "prod"
    assert settings.controller_settings == ()
    out = capsys.readouterr().out
    assert "started etcd member mafka4 on 10.0.0.5:2379, controller" in out
    assert "nodes join as Ray adds them" in out and "'mafka4 status --address 10.0.0.5:6379 --cluster prod'" in out


def test_status_with_an_address_reports_the_deployment_and_exits_1_unless_it_runs(monkeypatch, capsys):
    joined = []
    monkeypatch.setattr("mafka4.runtime.connect.join_ray", joined.append)
    monkeypatch.setattr("mafka4.runtime.deploy.deployment_status",
                        lambda cluster: {"cluster": cluster, "deployed": False, "running": False})
    assert cli.main(["status", "--address", "h:1", "--cluster", "prod"]) == 1
    assert joined == ["h:1"] and json.loads(capsys.readouterr().out) == {"cluster": "prod", "deployed": False,
                                                                         "running": False}


def test_status_writes_the_live_nodes_metrics_addresses_as_prometheus_file_sd(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr("mafka4.runtime.connect.join_ray", lambda address: None)
    monkeypatch.setattr("mafka4.runtime.deploy.deployment_status", lambda cluster: {
        "cluster": cluster, "running": True,
        "metrics": {"read_node": {"r0": "10.0.0.7:41000"}, "replica": {"orders-0/w0": "10.0.0.8:41001"}}})
    targets = tmp_path / "prometheus" / "mafka4.json"
    assert cli.main(["status", "--address", "h:1", "--cluster", "prod", "--metrics-targets", str(targets)]) == 0
    assert json.loads(targets.read_text()) == [
        {"targets": ["10.0.0.7:41000"], "labels": {"cluster": "prod", "process": "read_node", "mafka4_name": "r0"}},
        {"targets": ["10.0.0.8:41001"], "labels": {"cluster": "prod", "process": "replica",
                                                   "mafka4_name": "orders-0/w0"}}]
    assert targets.stat().st_mode & 0o777 == 0o644, "Prometheus, often another user, reads it"
    captured = capsys.readouterr()
    assert json.loads(captured.out)["metrics"]["read_node"] == {"r0": "10.0.0.7:41000"}
    assert "wrote 2 metrics targets" in captured.err

    # No cluster: the file names no target, so Prometheus stops scraping nodes that are gone.
    assert cli.main(["status", "--metrics-targets", str(targets)]) == 1
    assert json.loads(targets.read_text()) == []


@pytest.mark.parametrize("argv", [
    ["topic"], ["group", "reset-offsets", "g", "--topic", "t"], ["scale", "orders"],
    ["group", "reset-offsets", "g", "--topic", "t", "--to-earliest", "--to-latest"],
    ["bench", "rebalance", "--assignor", "x"], ["bench", "feed-lag", "--virtual-partitions", "8,many"],
    ["up", "--controller-setting", "no_equals_sign"], ["deploy"], ["undeploy"],
])
def test_a_command_line_that_does_not_parse_exits_2_with_the_usage(argv, capsys):
    with pytest.raises(SystemExit) as exited:
        cli.main(argv)
    assert exited.value.code == 2 and "usage: mafka4" in capsys.readouterr().err


def test_bad_input_exits_2_and_a_missing_cluster_exits_1_each_with_one_line(capsys):
    assert cli.main(["topic", "create", "bad name!"]) == 2
    assert capsys.readouterr().err.strip().startswith("mafka4: error: topic name 'bad name!'")
    assert cli.main(["topic", "list"]) == 1
    error = capsys.readouterr().err
    assert error.startswith("mafka4: error: ") and "no local cluster" in error and len(error.strip().splitlines()) == 1


def group_list_raises(monkeypatch, raised: BaseException) -> None:
    def run(args):
        raise raised
    monkeypatch.setattr("mafka4.cli.groups._cmd_group_list", run)


@pytest.mark.parametrize("raised, code", [(InvalidTopicName("bad"), 2), (ClusterNotRunning("gone"), 1),
                                          (KeyboardInterrupt(), 130)])
def test_the_exit_code_follows_the_error(raised, code, monkeypatch):
    group_list_raises(monkeypatch, raised)
    assert cli.main(["group", "list"]) == code


def test_an_error_that_is_not_mafka4s_is_not_hidden(monkeypatch):
    group_list_raises(monkeypatch, ZeroDivisionError())
    with pytest.raises(ZeroDivisionError):
        cli.main(["group", "list"])


class IdleConsumer:
    """A ``Consumer`` with nothing to read: each poll waits its whole timeout; records the timeouts."""

    polls: list[int] = []

    def __init__(self, topic: str, group: str | None = None, from_beginning: bool = False, lanes=None,
                 lane_order: str = "strict"):
        IdleConsumer.polls = []

    def poll(self, timeout_ms: int) -> list:
        IdleConsumer.polls.append(timeout_ms)
        time.sleep(timeout_ms / 1000)
        return []

    def close(self) -> None:
        pass


def test_an_idle_consume_polls_once_until_its_timeout_not_every_half_second(monkeypatch, capsys):
    """The consumer's poll runs its group's duties itself: the command need not wake to call it."""
    monkeypatch.setattr("mafka4.client.consumer.Consumer", IdleConsumer)
    started = time.monotonic()
    assert cli.main(["consume", "orders", "--group", "billing", "--timeout-ms", "1200"]) == 0
    assert 1.2 <= time.monotonic() - started < 5
    assert len(IdleConsumer.polls) == 1 and 1_100 <= IdleConsumer.polls[0] <= 1_200, IdleConsumer.polls
    assert "consumed 0 messages from 'orders' as group 'billing'" in capsys.readouterr().err


# --- bench -------------------------------------------------------------------------------------


@pytest.mark.parametrize("name, flags", BENCH_FLAGS.items())
def test_every_bench_keeps_its_options(name, flags):
    options = {flag for action in subparser("bench", name)._actions for flag in action.option_strings}
    assert options - {"-h", "--help"} == flags


def test_bench_help_takes_defaults_and_text_from_the_settings_class():
    produce = subparser("bench", "produce").format_help()
    assert f"(default {ProduceBenchSettings().messages})" in produce and "rate of the latency run" in produce
    density = subparser("bench", "vp-density").format_help()
    smoke = VpDensityBenchSettings.smoke_sized()
    assert f"--virtual-partitions {smoke.virtual_partitions}" in density and "not a result" in density
    assert "(default: one per consumer" in subparser("bench", "vp-join").format_help()


@pytest.fixture
def drivers(monkeypatch):
    """Replaces every bench driver by one that records its settings and output path."""
    calls = []

    def fake_driver(settings, output_path):
        calls.append((settings, output_path))
        return {"summary": {"bench": type(settings).__name__}}

    plugin_benches = [entry_point.load() for entry_point in declared_entry_points(plugins.BENCH_ENTRY_POINT_GROUP)]
    for bench in (*bench_commands.builtin_benches(), *plugin_benches):
        module, _, function = bench.driver.partition(":")
        monkeypatch.setattr(f"{module}.{function}", fake_driver)
    return calls


@pytest.mark.parametrize("argv, settings", [
    (["produce"], ProduceBenchSettings()),
    (["produce", "--messages", "10", "--acks", "1", "--skip-memory"],
     ProduceBenchSettings(messages=10, acks="1", stalled_producer=False)),
    (["failover", "--repetitions", "2"], FailoverBenchSettings(repetitions=2)),
    (["vp-join", "--virtual-partitions", "6", "--skip-mafka3"],
     VpJoinBenchSettings(virtual_partitions=6, compare_mafka3=False)),
    (["vp-density", "--smoke", "--virtual-partitions", "32"],
     VpDensityBenchSettings.smoke_sized(virtual_partitions=32)),
    (["feed-lag", "--virtual-partitions", "8,64", "--duration-s", "5"],
     FeedLagBenchSettings(virtual_partitions=(8, 64), duration_s=5.0)),
    (["feed-lag", "--smoke"], FeedLagBenchSettings.smoke_sized()),
])
def test_a_bench_runs_with_the_class_defaults_the_options_given_and_smoke_sizes(argv, settings, drivers, capsys):
    assert cli.main(["bench", *argv]) == 0
    assert drivers == [(settings, f"results/bench_{argv[0].replace('-', '_')}.json")]
    out, err = capsys.readouterr()
    assert json.loads(out) == {"bench": type(settings).__name__}
    assert f"full report written to results/bench_{argv[0].replace('-', '_')}.json" in err


def test_a_bench_value_the_settings_refuse_exits_2_before_the_driver_runs(drivers, capsys):
    assert cli.main(["bench", "feed-lag", "--virtual-partitions", "0"]) == 2
    assert drivers == [] and "VP counts" in capsys.readouterr().err


# --- what the command imports ------------------------------------------------------------------


def test_importing_the_cli_imports_no_experiment_or_analysis_module():
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, mafka4.cli; print(sorted(m for m in sys.modules if m.split('.')[0] in "
                               "('simulations', 'benchmarks', 'pyspark', 'pyarrow', 'matplotlib', 'ray')))"],
        capture_output=True, text=True, check=True, timeout=120)
    assert loaded.stdout.strip() == "[]"
