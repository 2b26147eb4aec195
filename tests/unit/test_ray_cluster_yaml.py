"""ray_cluster.yaml passes Ray's own config checks, offline; its workers run Ray alone, with their type's resources, and
its head runs mafka4 through ``mafka4 deploy --no-wait`` after ``ray start --head``."""

from __future__ import annotations

import copy
import json
import re
import shlex
import socket
import subprocess
from pathlib import Path

import pytest
import yaml

from mafka4 import cli
from mafka4.runtime.deploy_plan import DATA_DIR_DEFAULT
from mafka4.runtime.environment import apply_ray_environment
from mafka4.runtime.ray_cluster import ray_system_config
from mafka4.transport.ray_names import NODE_RESOURCE_PREFIX, NODE_RESOURCE_UNITS, READ_NODE_RESOURCE, WRITE_NODE_RESOURCE

apply_ray_environment()  # before Ray's first import, as for every process of this suite
from ray.autoscaler._private.util import prepare_config, validate_config  # noqa: E402

CONFIG_PATH = Path(__file__).resolve().parents[2] / "ray_cluster.yaml"


@pytest.fixture
def config() -> dict:
    return yaml.safe_load(CONFIG_PATH.read_text())


@pytest.fixture
def no_network(monkeypatch):
    """Any connection attempt fails the test: the checks must not reach a cloud."""

    def refuse(*args, **kwargs):
        raise AssertionError(f"network access during config checks: {args}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)


def test_config_validates_as_written_and_after_prepare_config(config, no_network):
    validate_config(copy.deepcopy(config))
    prepared = prepare_config(copy.deepcopy(config))
    validate_config(prepared)
    assert prepared["head_node_type"] == "head"
    assert set(prepared["available_node_types"]) == {"head", "write_node", "read_node"}


HEAD_ADDRESS = "10.0.0.5"  # stands for the head's address the commands read from `hostname -I`


def test_workers_run_ray_alone_and_carry_only_their_type_s_resource(config):
    node_types = config["available_node_types"]
    assert node_types["write_node"]["resources"] == {WRITE_NODE_RESOURCE: NODE_RESOURCE_UNITS}
    assert node_types["read_node"]["resources"] == {READ_NODE_RESOURCE: NODE_RESOURCE_UNITS}
    assert not {WRITE_NODE_RESOURCE, READ_NODE_RESOURCE} & set(node_types["head"]["resources"])
    assert node_types["write_node"]["min_workers"] >= 1 and node_types["read_node"]["min_workers"] >= 1
    # The controller starts each worker's node agent as an actor: no mafka4 command runs there, and a worker is
    # known by its Ray node id, not by a per-node resource of its own.
    worker_commands = config["worker_setup_commands"] + config["worker_start_ray_commands"]
    assert [re.search(r"\bray (stop|start)\b", command).group(0) for command in worker_commands] == [
        "ray stop", "ray start"]
    ray_start = config["worker_start_ray_commands"][-1]
    assert "--address=$RAY_HEAD_IP:6379" in ray_start and "--resources" not in ray_start
    for command in worker_commands:
        assert not re.search(r"\bmafka4\b|python|nohup|\.pid\b", command), command
    assert NODE_RESOURCE_PREFIX not in json.dumps(config)


def test_the_head_undeploys_stops_and_starts_ray_then_deploys_without_waiting_for_workers(config):
    head_start = config["head_start_ray_commands"]
    steps = [next(i for i, command in enumerate(head_start) if marker in command)
             for marker in ("mafka4 undeploy", "ray stop", "ray start --head", "mafka4 deploy")]
    assert steps == sorted(steps) and len(set(steps)) == 4, head_start
    assert head_start[steps[0]].endswith("|| true"), "the first start has no Ray, so nothing to undeploy"
    assert len(head_start) == 4, "nothing else: etcd and the controller are deploy's"
    assert "etcd-server" in " ".join(config["head_setup_commands"])  # deploy starts its members from Debian's etcd
    assert "pip install \"$HOME/mafka4[server]\"" in " ".join(config["setup_commands"])  # every node runs actors
    assert config["file_mounts"]["~/mafka4"] == "."


def mafka4_command_line(command: str) -> list[str]:
    """The arguments of the ``mafka4 ...`` part of a shell command, with the head's address filled in."""
    line = re.search(r"\bmafka4 ((?:deploy|undeploy) [^|;]*)", command).group(1)
    return shlex.split(line.replace("$HEAD_IP", HEAD_ADDRESS))


def test_the_head_s_deploy_and_undeploy_parse_with_mafka4_s_own_command_line(config, monkeypatch):
    monkeypatch.delenv("MAFKA4_CLUSTER", raising=False)
    head_start = config["head_start_ray_commands"]
    deploy = cli.build_parser().parse_args(mafka4_command_line(
        next(command for command in head_start if "mafka4 deploy" in command)))
    assert (deploy.address, deploy.wait, deploy.data_dir, deploy.cluster) == (
        f"{HEAD_ADDRESS}:6379", False, DATA_DIR_DEFAULT, "local")
    undeploy = cli.build_parser().parse_args(mafka4_command_line(
        next(command for command in head_start if "mafka4 undeploy" in command)))
    assert (undeploy.address, undeploy.cluster) == (deploy.address, deploy.cluster)
    ray_start = next(command for command in head_start if "ray start --head" in command)
    assert "--port=6379" in ray_start and "--dashboard-host=127.0.0.1" in ray_start
    assert all(command.startswith("HEAD_IP=$(hostname -I | awk '{print $1}'); ")
               for command in head_start if "mafka4 " in command)


def test_every_node_s_shell_runs_ray_with_its_token_and_mafka4_s_drivers_off_loopback(config):
    """Ray's token reaches every node (file_mounts) and every command's shell is in token mode; mafka4's drivers,
    which default Ray to loopback, join by the head's address."""
    assert config["file_mounts"]["~/.ray/auth_token"] == "~/.ray/auth_token"
    setup = config["setup_commands"]
    assert "echo 'export RAY_AUTH_MODE=token' >> ~/.bashrc" in " ".join(setup)
    assert "echo 'export RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=1' >> ~/.bashrc" in " ".join(setup)


def test_every_command_is_valid_shell(config):
    sections = ("initialization_commands", "setup_commands", "head_setup_commands", "worker_setup_commands",
                "head_start_ray_commands", "worker_start_ray_commands")
    for section in sections:
        for command in config[section]:
            checked = subprocess.run(["bash", "-n", "-c", command], capture_output=True, text=True)
            assert checked.returncode == 0, (section, command, checked.stderr)


def test_the_head_s_ray_gets_the_system_config_a_local_cluster_gets(config):
    ray_start = next(c for c in config["head_start_ray_commands"] if "ray start --head" in c)
    given = re.search(r"--system-config='([^']*)'", ray_start)
    assert given, "the head's ray start has no --system-config"
    assert json.loads(given.group(1)) == ray_system_config()
