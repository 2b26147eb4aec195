"""ray_cluster.yaml passes Ray's own config checks, offline, gives write/read nodes their resources and runs a 3-member etcd."""

from __future__ import annotations

import copy
import json
import re
import socket
import subprocess
from pathlib import Path

import pytest
import yaml

from mafka4.limits import ETCD_HISTORY_RETENTION_S, ETCD_TXN_OPS_MAX
from mafka4.metadata.endpoints import parse_endpoints
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


def test_write_and_read_node_types_carry_mafka4_resources_and_the_head_none(config):
    node_types = config["available_node_types"]
    assert node_types["write_node"]["resources"] == {WRITE_NODE_RESOURCE: NODE_RESOURCE_UNITS}
    assert node_types["read_node"]["resources"] == {READ_NODE_RESOURCE: NODE_RESOURCE_UNITS}
    assert not {WRITE_NODE_RESOURCE, READ_NODE_RESOURCE} & set(node_types["head"]["resources"])
    assert node_types["write_node"]["min_workers"] >= 1 and node_types["read_node"]["min_workers"] >= 1
    worker_start = " ".join(config["worker_start_ray_commands"])
    assert f'\\"{NODE_RESOURCE_PREFIX}$(hostname -s)\\": {NODE_RESOURCE_UNITS}' in worker_start


def test_head_starts_etcd_ray_and_the_controller_and_every_node_installs_mafka4(config):
    head_start = config["head_start_ray_commands"]
    assert any(command.startswith("HEAD_IP=") and "nohup etcd " in command for command in head_start)
    assert any("ray start --head" in command for command in head_start)
    controller = next(command for command in head_start if "mafka4.runtime.controller_process" in command)
    # mafka4 defaults Ray to loopback-only; on a multi-host cluster the controller must opt out.
    assert "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=1 nohup python -m mafka4.runtime.controller_process" in controller
    assert "etcd-server" in " ".join(config["head_setup_commands"])
    assert "pip install \"$HOME/mafka4[server]\"" in " ".join(config["setup_commands"])  # a node runs a cluster
    assert config["file_mounts"] == {"~/mafka4": "."}


def test_every_command_is_valid_shell(config):
    sections = ("initialization_commands", "setup_commands", "head_setup_commands", "worker_setup_commands",
                "head_start_ray_commands", "worker_start_ray_commands")
    for section in sections:
        for command in config[section]:
            checked = subprocess.run(["bash", "-n", "-c", command], capture_output=True, text=True)
            assert checked.returncode == 0, (section, command, checked.stderr)


def test_the_head_s_etcd_accepts_a_whole_topic_in_one_transaction(config):
    etcd_command = next(c for c in config["head_start_ray_commands"] if "etcd --name" in c)
    assert f"--max-txn-ops {ETCD_TXN_OPS_MAX}" in etcd_command, (
        "a topic of 1,024 VPs is created, and a lone member's closing commit made, in one transaction")


def test_the_head_s_etcd_compacts_its_history(config):
    etcd_command = next(c for c in config["head_start_ray_commands"] if "etcd --name" in c)
    assert (f"--auto-compaction-mode periodic --auto-compaction-retention {ETCD_HISTORY_RETENTION_S}s"
            in etcd_command), "without compaction etcd's history grows until its quota refuses every write"


def test_the_head_s_ray_gets_the_system_config_a_local_cluster_gets(config):
    ray_start = next(c for c in config["head_start_ray_commands"] if "ray start --head" in c)
    given = re.search(r"--system-config='([^']*)'", ray_start)
    assert given, "the head's ray start has no --system-config"
    assert json.loads(given.group(1)) == ray_system_config()


def test_the_head_runs_three_etcd_members_and_every_etcd_client_is_given_all_three(config):
    etcd_command = next(c for c in config["head_start_ray_commands"] if "etcd --name" in c)
    cluster = dict(item.split("=", 1) for item in re.search(r"CLUSTER=(\S+);", etcd_command).group(1).split(","))
    members = re.search(r"for MEMBER in ([^;]+); do", etcd_command).group(1).split()
    names_ports = [member.split(":") for member in members]  # "<n>:<client port>:<peer port>"
    assert len(members) == 3 and len(cluster) == 3
    assert {f"mafka4-{n}": f"http://127.0.0.1:{peer}" for n, _, peer in names_ports} == cluster
    assert "--name mafka4-$N" in etcd_command and "--initial-cluster $CLUSTER" in etcd_command
    assert len({client for _, client, _ in names_ports} | {peer for _, _, peer in names_ports}) == 6
    client_ports = sorted(int(client) for _, client, _ in names_ports)

    commands = config["head_start_ray_commands"] + config["worker_start_ray_commands"]
    given = [re.sub(r"\$\w+", "h", endpoint) for command in commands
             for endpoint in re.findall(r"--etcd (\S+)", command)]
    assert len(given) == 3  # the head's config command, the controller, the node agents
    for endpoint in given:
        assert sorted(member.port for member in parse_endpoints(endpoint)) == client_ports, endpoint
