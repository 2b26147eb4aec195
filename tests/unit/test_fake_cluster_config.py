"""The fake multi-node cluster derived from ray_cluster.yaml keeps its node types, resources and head flags, and
names only 127.0.0.1 (``mafka4.runtime.fake_cluster_config``; pure, nothing started)."""

from __future__ import annotations

import copy
import ipaddress
import json
import re
from pathlib import Path

import pytest
import yaml

from mafka4.errors import InvalidConfig
from mafka4.limits import OBJECT_STORE_BYTES_PER_NODE
from mafka4.runtime.environment import apply_ray_environment
from mafka4.runtime.fake_cluster_config import (FAKE_HEAD_NODE_ID, FAKE_HEAD_NODE_TYPE, fake_autoscaling_config,
                                                fake_cluster_launch, head_ray_start_arguments, workers_by_type)
from mafka4.runtime.ray_cluster import ray_system_config

CONFIG_PATH = Path(__file__).resolve().parents[2] / "ray_cluster.yaml"
GCS_PORT = 45123
AUTOSCALING_CONFIG = "/tmp/fake-test/autoscaling.yaml"
TEMP_DIR = "/tmp/fake-test/ray"
# What the autoscaler reads without a default (the fake provider has no defaults file to fill them in).
REQUIRED_TOP_LEVEL = {
    "cluster_name", "max_workers", "upscaling_speed", "idle_timeout_minutes", "provider", "auth", "docker",
    "available_node_types", "head_node_type", "file_mounts", "cluster_synced_files", "file_mounts_sync_continuously",
    "rsync_exclude", "rsync_filter", "initialization_commands", "setup_commands", "head_setup_commands",
    "worker_setup_commands", "head_start_ray_commands", "worker_start_ray_commands",
}
IPV4 = re.compile(r"\b\d{1,3}(?:\.\d{1,3}){3}\b")


@pytest.fixture
def cluster_yaml() -> dict:
    return yaml.safe_load(CONFIG_PATH.read_text())


def launch(cluster_yaml: dict, **options):
    return fake_cluster_launch(cluster_yaml, GCS_PORT, AUTOSCALING_CONFIG, TEMP_DIR, **options)


def worker_types(cluster_yaml: dict) -> dict:
    return {name: node_type for name, node_type in cluster_yaml["available_node_types"].items()
            if name != cluster_yaml["head_node_type"]}


def without_object_store(resources: dict) -> dict:
    return {name: amount for name, amount in resources.items() if name != "object_store_memory"}


def test_worker_types_keep_the_yaml_s_names_resources_and_worker_counts(cluster_yaml):
    derived = launch(cluster_yaml).autoscaling_config["available_node_types"]
    for name, node_type in worker_types(cluster_yaml).items():
        assert without_object_store(derived[name]["resources"]) == node_type["resources"], name
        assert derived[name]["min_workers"] == node_type["min_workers"], name
        assert derived[name]["max_workers"] == node_type["max_workers"], name
        # One machine holds every fake node: each gets mafka4's object store bound, not Ray's share of memory.
        assert derived[name]["resources"]["object_store_memory"] == OBJECT_STORE_BYTES_PER_NODE
        assert derived[name]["node_config"] == {}, "an EC2 instance config means nothing to the fake provider"
    assert set(derived) == set(worker_types(cluster_yaml)) | {FAKE_HEAD_NODE_TYPE}


def test_the_head_type_is_the_fake_provider_s_head_with_the_yaml_s_head_resources_and_no_second_head(cluster_yaml):
    config = launch(cluster_yaml).autoscaling_config
    head = config["available_node_types"][FAKE_HEAD_NODE_TYPE]
    assert config["head_node_type"] == FAKE_HEAD_NODE_TYPE
    assert head["resources"] == cluster_yaml["available_node_types"][cluster_yaml["head_node_type"]]["resources"]
    assert head["max_workers"] == 0
    assert cluster_yaml["head_node_type"] not in config["available_node_types"]


def test_the_launch_waits_for_the_yaml_s_minimum_workers(cluster_yaml):
    assert launch(cluster_yaml).minimum_workers == {
        name: node_type["min_workers"] for name, node_type in worker_types(cluster_yaml).items()}


def test_every_top_level_key_the_autoscaler_reads_is_present_and_the_provider_is_the_fake_one(cluster_yaml):
    config = launch(cluster_yaml).autoscaling_config
    assert set(config) >= REQUIRED_TOP_LEVEL
    assert config["provider"] == {"type": "fake_multinode", "gcs_address": f"127.0.0.1:{GCS_PORT}",
                                  "use_node_id_as_ip": True, "disable_node_updaters": True,
                                  "disable_launch_config_check": True, "launch_multiple": True}
    for key in ("cluster_name", "max_workers", "upscaling_speed", "idle_timeout_minutes"):
        assert config[key] == cluster_yaml[key], key


def test_the_config_and_the_head_s_arguments_name_only_loopback(cluster_yaml):
    derived = launch(cluster_yaml)
    text = json.dumps(derived.autoscaling_config) + " " + " ".join(derived.head_ray_start_arguments)
    addresses = set(IPV4.findall(text))
    assert addresses == {"127.0.0.1"}, addresses
    assert all(ipaddress.ip_address(address).is_loopback for address in addresses)
    assert "HEAD_IP" not in text and "hostname" not in text, "nothing may resolve to the machine's own address"
    assert "--node-ip-address=127.0.0.1" in derived.head_ray_start_arguments


def test_the_head_starts_with_the_yaml_s_flags_on_the_local_port_config_and_temp_dir(cluster_yaml):
    arguments = launch(cluster_yaml).head_ray_start_arguments
    assert arguments[0] == "--head" and arguments[-1] == "--block"
    assert f"--port={GCS_PORT}" in arguments and f"--autoscaling-config={AUTOSCALING_CONFIG}" in arguments
    assert f"--temp-dir={TEMP_DIR}" in arguments
    system_config = next(argument for argument in arguments if argument.startswith("--system-config="))
    assert json.loads(system_config.split("=", 1)[1]) == ray_system_config()
    flags = [argument.split("=", 1)[0] for argument in arguments]
    assert len(flags) == len(set(flags)), "each flag once: the yaml's --port and config are replaced, not repeated"
    assert "--object-manager-port" not in flags and "--dashboard-host" not in flags
    assert "--include-dashboard=false" in arguments
    assert "--dashboard-agent-listen-port=0" in arguments, "ray start's default is a fixed port another Ray may hold"


def test_every_command_but_the_head_s_ray_start_is_listed_as_not_run_with_a_reason(cluster_yaml):
    sections = ("initialization_commands", "setup_commands", "head_setup_commands", "worker_setup_commands",
                "head_start_ray_commands", "worker_start_ray_commands")
    derived = launch(cluster_yaml)
    not_run = [(item.section, item.command) for item in derived.commands_not_run]
    every = [(section, command) for section in sections for command in cluster_yaml.get(section) or ()]
    head_ray_start = [(section, command) for section, command in every
                      if section == "head_start_ray_commands" and "ray start --head" in command]
    assert len(head_ray_start) == 1
    assert not_run == [item for item in every if item not in head_ray_start]
    assert all(item.reason for item in derived.commands_not_run)
    worker_ray_start = next(item for item in derived.commands_not_run
                            if item.section == "worker_start_ray_commands" and "ray start" in item.command)
    assert "fake provider starts" in worker_ray_start.reason
    deploy = next(item for item in derived.commands_not_run if "mafka4 deploy" in item.command)
    assert deploy.section == "head_start_ray_commands" and "runs mafka4 deploy itself" in deploy.reason
    # The provider runs none of them: the config the autoscaler reads holds no command.
    assert all(derived.autoscaling_config[section] == [] for section in sections)


def test_the_derivation_follows_the_yaml_s_node_types_and_head_line(cluster_yaml):
    """Another branch changes the yaml's start commands; the fake cluster must follow, not a copy of today's."""
    changed = copy.deepcopy(cluster_yaml)
    changed["available_node_types"]["big_read_node"] = {
        "min_workers": 1, "max_workers": 2, "resources": {"read_node": 1000, "CPU": 4}, "node_config": {"x": 1}}
    changed["head_start_ray_commands"] = ["ray start --head --port=6379 --autoscaling-config=~/c.yaml "
                                          "--object-manager-port=8076 --system-config='{\"a\": 1}' --num-cpus=2",
                                          "mafka4 deploy --address 127.0.0.1:6379"]
    derived = launch(changed)
    assert derived.autoscaling_config["available_node_types"]["big_read_node"]["resources"] == {
        "read_node": 1000, "CPU": 4, "object_store_memory": OBJECT_STORE_BYTES_PER_NODE}
    assert derived.minimum_workers["big_read_node"] == 1
    assert derived.head_ray_start_arguments[-3:] == ('--system-config={"a": 1}', "--num-cpus=2", "--block")
    assert [item.command for item in derived.commands_not_run if item.section == "head_start_ray_commands"] == [
        "mafka4 deploy --address 127.0.0.1:6379"]


def test_an_object_store_size_the_yaml_gives_is_kept():
    cluster_yaml = {"head_node_type": "h", "available_node_types": {
        "h": {"resources": {}}, "w": {"min_workers": 0, "max_workers": 1, "resources": {"object_store_memory": 5}}}}
    assert fake_autoscaling_config(cluster_yaml, GCS_PORT)["available_node_types"]["w"]["resources"] == {
        "object_store_memory": 5}


def test_an_idle_timeout_given_replaces_the_yaml_s(cluster_yaml):
    assert launch(cluster_yaml, idle_timeout_minutes=0.1).autoscaling_config["idle_timeout_minutes"] == 0.1


def test_the_yaml_is_not_changed(cluster_yaml):
    before = copy.deepcopy(cluster_yaml)
    launch(cluster_yaml)
    assert cluster_yaml == before


@pytest.mark.parametrize("break_it, names", [
    (lambda y: y.update(head_node_type="nowhere"), "head_node_type 'nowhere'"),
    (lambda y: y.update(available_node_types={}), "no available_node_types"),
    (lambda y: y["available_node_types"].update({FAKE_HEAD_NODE_TYPE: {"resources": {}}}), FAKE_HEAD_NODE_TYPE),
])
def test_a_yaml_the_fake_cluster_cannot_follow_is_refused_with_what_to_fix(cluster_yaml, break_it, names):
    break_it(cluster_yaml)
    with pytest.raises(InvalidConfig, match=re.escape(names)):
        launch(cluster_yaml)


@pytest.mark.parametrize("head_commands, names", [
    (["echo no ray here"], "have 0 'ray start --head'"),
    (["ray start --head", "ray start --head --port=1"], "have 2 'ray start --head'"),
    (["ray start --head --port 6379"], "['6379'] apart from their flags"),
])
def test_the_head_s_ray_start_line_must_be_one_and_written_flag_equals_value(cluster_yaml, head_commands, names):
    cluster_yaml["head_start_ray_commands"] = head_commands
    with pytest.raises(InvalidConfig, match=re.escape(names)):
        head_ray_start_arguments(cluster_yaml, GCS_PORT, AUTOSCALING_CONFIG, TEMP_DIR)


def ray_node(node_id: str, resources: dict, alive: bool = True) -> dict:
    return {"NodeID": node_id, "Alive": alive, "Resources": resources}


def test_workers_are_counted_by_the_resources_of_their_type_and_the_head_and_dead_nodes_are_not(cluster_yaml):
    config = launch(cluster_yaml).autoscaling_config
    nodes = [
        ray_node(FAKE_HEAD_NODE_ID, {"CPU": 2.0, "memory": 1e9}),
        ray_node("f1", {"write_node": 1000.0, "object_store_memory": 268435000.0, "memory": 1e9}),
        ray_node("f2", {"write_node": 1000.0}),
        ray_node("f3", {"read_node": 1000.0}),
        ray_node("f4", {"read_node": 1000.0}, alive=False),
        ray_node("f5", {"CPU": 1.0}),  # of no type
    ]
    assert workers_by_type(config, nodes) == {"write_node": 2, "read_node": 1}


def test_a_node_is_of_the_most_specific_type_it_matches():
    cluster_yaml = {"head_node_type": "h", "available_node_types": {
        "h": {"resources": {}},
        "read_node": {"resources": {"read_node": 1000}},
        "big_read_node": {"resources": {"read_node": 1000, "CPU": 4}}}}
    config = fake_autoscaling_config(cluster_yaml, GCS_PORT)
    nodes = [ray_node("f1", {"read_node": 1000.0, "CPU": 4.0}), ray_node("f2", {"read_node": 1000.0, "CPU": 0.0})]
    assert workers_by_type(config, nodes) == {"read_node": 1, "big_read_node": 1}


def test_ray_s_own_schema_accepts_the_derived_config(cluster_yaml):
    """The autoscaler validates the file it reads (and only logs a failure): check it here, where it shows."""
    apply_ray_environment()  # before Ray's first import, as for every process of this suite
    from ray.autoscaler._private.util import validate_config

    validate_config(copy.deepcopy(launch(cluster_yaml).autoscaling_config))
