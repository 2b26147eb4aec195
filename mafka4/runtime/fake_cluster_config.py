"""Ray's fake multi-node cluster shaped like ``ray_cluster.yaml``, derived from the parsed yaml (pure).

Ray's ``fake_multinode`` provider runs Ray's real autoscaler on one machine: started as
``RAY_FAKE_CLUSTER=1 ray start --head --autoscaling-config=CFG``, the autoscaler launches each
worker it decides on as a raylet of this machine (a ``ray._private.node.Node`` created inside the
autoscaler's own process) with its node type's resources. ``fake_cluster_launch`` turns the yaml
into what that needs; what it keeps, replaces and leaves out, and why:

* **Kept:** every node type with its ``resources``, ``min_workers`` and ``max_workers``; the
  cluster's ``cluster_name``, ``max_workers``, ``upscaling_speed`` and ``idle_timeout_minutes``
  (unless the caller overrides it: a test that waits for an idle node to be released cannot wait
  the yaml's 30 minutes); the flags of the head's ``ray start --head`` line, such as
  ``--system-config``.
* **Replaced:** the provider (AWS) by ``fake_multinode`` on ``127.0.0.1:<gcs_port>``; each
  type's ``node_config`` (an EC2 instance) by ``{}``, which the fake provider ignores; the head
  type's name by ``ray.head.default``, the one name the fake provider tags its head with whatever
  the config says (the autoscaler looks the head's type up by that tag); the head line's
  ``--port`` and ``--autoscaling-config`` by the local port and file.
* **Added, for one machine:** each worker type's ``object_store_memory``
  (``limits.OBJECT_STORE_BYTES_PER_NODE``; the fake provider gives it to the raylet it starts).
  Without it every fake node claims Ray's default share of this machine's memory for itself.
  The head line gains ``--node-ip-address=127.0.0.1``, ``--temp-dir`` and ``--block`` (the
  harness owns the head process and stops it by PID).
* **Left out, listed in ``commands_not_run`` with the reason:** every command but the head's
  ``ray start``. The fake provider runs no commands on the nodes it starts (node updaters are
  off: there is nothing to SSH into), and it starts each worker's raylet itself, in place of the
  worker's ``ray start`` line, with the node type's resources, which is all the yaml's workers
  carry too. The setup commands install what this machine already has. The head's other start
  commands (``mafka4 undeploy`` and ``mafka4 deploy --no-wait``) name the head by the address
  ``hostname -I`` prints, where the fake cluster's Ray is on 127.0.0.1, and deploy's data dir is
  under ``~``: a test that deploys mafka4 on the fake cluster runs ``mafka4 deploy`` itself, with
  the fake head's address and a data dir of its own.
* **Dropped flags of the head line:** ``--object-manager-port`` (a fixed port that another Ray on
  this machine may hold; Ray picks a free one) and the dashboard flags (``--include-dashboard=false``:
  its fixed port 8265 may be taken too, and nothing in a test reads it). The dashboard agent, which
  ``ray start`` puts on the fixed port 52365, gets a free one (``=0``), as the fake workers' do.
  Shell around the line (``ulimit -n 65536;``) is not run: only the ``ray start`` arguments are taken.
* **Not reproduced:** CPUs. The yaml's types name none (a real worker offers its instance's
  CPUs); the fake provider gives a node only the CPUs its type names, so fake workers have none.
  mafka4's partition actors, read nodes and node agents take ``num_cpus=0``; anything that needs
  a CPU runs on the head.

Invariants (``tests/unit/test_fake_cluster_config.py``): the config names only 127.0.0.1; its
worker node types, and their resources apart from ``object_store_memory``, are the yaml's; every
command of the yaml is either the head's ``ray start`` line or listed in ``commands_not_run``.
The yaml dict is never changed.
"""

from __future__ import annotations

import copy
import re
import shlex
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from mafka4.errors import InvalidConfig
from mafka4.limits import OBJECT_STORE_BYTES_PER_NODE

FAKE_PROVIDER_TYPE = "fake_multinode"
# ray/autoscaler/_private/fake_multi_node/node_provider.py: FAKE_HEAD_NODE_TYPE. The fake provider
# tags its head with this type name whatever the config's head_node_type says.
FAKE_HEAD_NODE_TYPE = "ray.head.default"
# Same file, FAKE_HEAD_NODE_ID: ``RAY_FAKE_CLUSTER=1 ray start --head`` gives the head this Ray node id.
FAKE_HEAD_NODE_ID = "fffffffffffffffffffffffffffffffffffffffffffffffffff00000"
LOOPBACK = "127.0.0.1"
# The resource key the fake provider pops from a node type's resources and gives the raylet
# as its object store size.
OBJECT_STORE_RESOURCE = "object_store_memory"

# Sections of a cluster launcher config that hold shell commands, in the order ``ray up`` runs them.
COMMAND_SECTIONS = ("initialization_commands", "setup_commands", "head_setup_commands", "worker_setup_commands",
                    "head_start_ray_commands", "worker_start_ray_commands")
# Top-level keys the autoscaler reads without a default of its own; the fake provider has no
# defaults file in Ray's wheel to fill them in, so each must be present, empty where unused.
EMPTY_TOP_LEVEL = {
    "auth": {},  # no SSH: the fake provider's nodes are processes of this machine
    "docker": {},
    "file_mounts": {},  # the repository is already here
    "cluster_synced_files": [],
    "file_mounts_sync_continuously": False,
    "rsync_exclude": [],
    "rsync_filter": [],
    **{section: [] for section in COMMAND_SECTIONS},
}
KEPT_TOP_LEVEL = ("cluster_name", "max_workers", "upscaling_speed", "idle_timeout_minutes")
KEPT_NODE_TYPE_KEYS = ("resources", "min_workers", "max_workers")

HEAD_RAY_START = re.compile(r"\bray start\s+--head\b(.*)$", re.DOTALL)
RAY_START_OR_STOP = re.compile(r"\bray (start|stop)\b")
# Flags of the yaml's head ``ray start`` line the derivation sets itself or leaves out.
REPLACED_HEAD_FLAGS = ("--port", "--autoscaling-config")
DROPPED_HEAD_FLAGS = ("--object-manager-port", "--dashboard-host", "--dashboard-port", "--include-dashboard",
                      "--dashboard-agent-listen-port")

NOT_RUN_SETUP = "installs what this machine already has; the fake provider runs no commands on its nodes"
NOT_RUN_HEAD = ("mafka4's own step on the head (deploy, or undeploy of an earlier start): it names the head by "
                "`hostname -I`'s address, not the fake cluster's 127.0.0.1, and its data dir is under ~, so it cannot "
                "run unchanged here; a test that deploys mafka4 on the fake cluster runs mafka4 deploy itself")
NOT_RUN_RAY_STOP = "stops Ray by name; the harness stops its processes by PID"
NOT_RUN_WORKER_RAY_START = ("the fake provider starts each worker's raylet itself, with its node type's resources "
                            "(what the autoscaler gives this line in $RAY_OVERRIDE_RESOURCES)")
NOT_RUN_WORKER = "runs on a worker, which the fake provider runs no commands on (and which would need $RAY_HEAD_IP)"


@dataclass(frozen=True, slots=True)
class CommandNotRun:
    """A command of the yaml that the fake cluster does not run, and why."""

    section: str  # e.g. "head_start_ray_commands"
    command: str
    reason: str


@dataclass(frozen=True, slots=True)
class FakeClusterLaunch:
    """Everything needed to start the fake cluster: the file the head's autoscaler reads, the
    arguments of the head's ``ray start``, and the yaml's commands that do not run."""

    autoscaling_config: dict[str, Any]
    head_ray_start_arguments: tuple[str, ...]  # after "ray start"
    commands_not_run: tuple[CommandNotRun, ...]
    minimum_workers: dict[str, int]  # node type -> the workers the autoscaler launches before any demand


def fake_cluster_launch(cluster_yaml: Mapping[str, Any], gcs_port: int, config_path: str, temp_dir: str,
                        idle_timeout_minutes: float | None = None) -> FakeClusterLaunch:
    """The fake multi-node cluster of ``cluster_yaml`` (``ray_cluster.yaml``, parsed) with its GCS on
    ``127.0.0.1:gcs_port``, its autoscaling config at ``config_path`` and Ray's files under ``temp_dir``.

    ``idle_timeout_minutes`` (if given) replaces the yaml's delay before an idle worker is released.
    Raises InvalidConfig if the yaml has no node types, names a head type it does not define, or has
    no head ``ray start --head`` command.
    """
    config = fake_autoscaling_config(cluster_yaml, gcs_port, idle_timeout_minutes)
    return FakeClusterLaunch(
        autoscaling_config=config,
        head_ray_start_arguments=head_ray_start_arguments(cluster_yaml, gcs_port, config_path, temp_dir),
        commands_not_run=commands_not_run(cluster_yaml),
        minimum_workers=minimum_workers(config),
    )


def fake_autoscaling_config(cluster_yaml: Mapping[str, Any], gcs_port: int,
                            idle_timeout_minutes: float | None = None) -> dict[str, Any]:
    """The ``--autoscaling-config`` of the fake cluster (see the module docstring for what changes)."""
    node_types, head_type = _node_types(cluster_yaml)
    config: dict[str, Any] = copy.deepcopy(EMPTY_TOP_LEVEL)
    config.update({key: copy.deepcopy(cluster_yaml[key]) for key in KEPT_TOP_LEVEL if key in cluster_yaml})
    if idle_timeout_minutes is not None:
        config["idle_timeout_minutes"] = idle_timeout_minutes
    config["provider"] = {
        "type": FAKE_PROVIDER_TYPE,
        "gcs_address": f"{LOOPBACK}:{gcs_port}",
        # Every fake node has this machine's IP; the autoscaler must tell them apart by node id.
        "use_node_id_as_ip": True,
        # Node updaters run setup and start commands over SSH; the fake nodes have neither.
        "disable_node_updaters": True,
        # A changed node_config would make the autoscaler replace nodes; here node_config is {}.
        "disable_launch_config_check": True,
        # Otherwise the fake provider starts one node per launch whatever its count: the yaml's three
        # write nodes would come one autoscaler round (5 s) apart.
        "launch_multiple": True,
    }
    config["available_node_types"] = {
        (FAKE_HEAD_NODE_TYPE if name == head_type else name): _fake_node_type(node_type, is_head=name == head_type)
        for name, node_type in node_types.items()
    }
    config["head_node_type"] = FAKE_HEAD_NODE_TYPE
    return config


def _node_types(cluster_yaml: Mapping[str, Any]) -> tuple[Mapping[str, Any], str]:
    node_types = cluster_yaml.get("available_node_types") or {}
    head_type = cluster_yaml.get("head_node_type")
    if not node_types:
        raise InvalidConfig("the cluster yaml has no available_node_types: the fake cluster takes its node types "
                            "from there; add the head and worker types")
    if head_type not in node_types:
        raise InvalidConfig(f"the cluster yaml's head_node_type {head_type!r} is not one of its available_node_types "
                            f"{sorted(node_types)}: name the head's type there")
    if FAKE_HEAD_NODE_TYPE in node_types and head_type != FAKE_HEAD_NODE_TYPE:
        raise InvalidConfig(f"the cluster yaml defines a worker type named {FAKE_HEAD_NODE_TYPE!r}, the name the fake "
                            f"provider gives its head: rename that type")
    return node_types, head_type


def _fake_node_type(node_type: Mapping[str, Any], is_head: bool) -> dict[str, Any]:
    fake = {key: copy.deepcopy(node_type[key]) for key in KEPT_NODE_TYPE_KEYS if key in node_type}
    fake.setdefault("resources", {})
    fake["node_config"] = {}
    if is_head:
        # The head exists before the autoscaler does; it must never launch a second one.
        fake["max_workers"] = 0
    else:
        fake["resources"].setdefault(OBJECT_STORE_RESOURCE, OBJECT_STORE_BYTES_PER_NODE)
    return fake


def minimum_workers(autoscaling_config: Mapping[str, Any]) -> dict[str, int]:
    """Worker type -> how many the autoscaler launches with no demand (its ``min_workers``)."""
    return {name: node_type.get("min_workers", 0)
            for name, node_type in autoscaling_config["available_node_types"].items()
            if name != autoscaling_config["head_node_type"]}


def workers_by_type(autoscaling_config: Mapping[str, Any], ray_nodes: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """Alive workers per worker type of ``autoscaling_config``, from Ray's node list (``ray.nodes()``).

    A node is of the type whose resources it carries, the most specific one if several match
    (the type naming the most resources); the head (``FAKE_HEAD_NODE_ID``) and nodes of no type
    are not counted. ``object_store_memory`` is not compared: Ray reports the size it gave the
    store, not the number asked for.
    """
    types = {name: {key: amount for key, amount in node_type.get("resources", {}).items()
                    if key != OBJECT_STORE_RESOURCE}
             for name, node_type in autoscaling_config["available_node_types"].items()
             if name != autoscaling_config["head_node_type"]}
    counts = dict.fromkeys(types, 0)
    for node in ray_nodes:
        if not node.get("Alive") or node.get("NodeID") == FAKE_HEAD_NODE_ID:
            continue
        offered = node.get("Resources") or {}
        matching = [name for name, wanted in types.items()
                    if all(offered.get(key) == amount for key, amount in wanted.items())]
        if matching:
            counts[max(matching, key=lambda name: len(types[name]))] += 1
    return counts


def head_ray_start_arguments(cluster_yaml: Mapping[str, Any], gcs_port: int, config_path: str,
                             temp_dir: str) -> tuple[str, ...]:
    """The arguments of the head's ``ray start`` (after ``start``): the yaml's head line, with the
    local port and config, loopback, ``temp_dir`` and ``--block``; flags that name fixed ports dropped."""
    line = _head_ray_start_line(cluster_yaml)
    kept = [argument for argument in shlex.split(HEAD_RAY_START.search(line).group(1))
            if _flag_name(argument) not in (*REPLACED_HEAD_FLAGS, *DROPPED_HEAD_FLAGS)]
    unpaired = [argument for argument in kept if not argument.startswith("--")]
    if unpaired:
        raise InvalidConfig(f"the head's ray start line gives {unpaired} apart from their flags; write them as "
                            f"--flag=value so the fake cluster can tell which flag each belongs to")
    return ("--head", f"--port={gcs_port}", f"--autoscaling-config={config_path}", f"--node-ip-address={LOOPBACK}",
            f"--temp-dir={temp_dir}", "--include-dashboard=false", "--dashboard-agent-listen-port=0", *kept,
            "--block")


def _flag_name(argument: str) -> str:
    return argument.split("=", 1)[0]


def _head_ray_start_line(cluster_yaml: Mapping[str, Any]) -> str:
    lines = [command for command in cluster_yaml.get("head_start_ray_commands") or ()
             if HEAD_RAY_START.search(command)]
    if len(lines) != 1:
        raise InvalidConfig(f"the cluster yaml's head_start_ray_commands have {len(lines)} 'ray start --head' "
                            f"commands; the fake cluster takes the head's flags from exactly one")
    return lines[0]


def commands_not_run(cluster_yaml: Mapping[str, Any]) -> tuple[CommandNotRun, ...]:
    """Every command of the yaml but the head's ``ray start --head``, each with why it does not run."""
    not_run = []
    for section in COMMAND_SECTIONS:
        for command in cluster_yaml.get(section) or ():
            reason = _reason_not_run(section, command)
            if reason is not None:
                not_run.append(CommandNotRun(section=section, command=command, reason=reason))
    return tuple(not_run)


def _reason_not_run(section: str, command: str) -> str | None:
    ray_command = RAY_START_OR_STOP.search(command)
    if section == "head_start_ray_commands":
        if HEAD_RAY_START.search(command):
            return None
        if ray_command is not None and ray_command.group(1) == "stop":
            return NOT_RUN_RAY_STOP
        return NOT_RUN_HEAD
    if section == "worker_start_ray_commands":
        if ray_command is not None:
            return NOT_RUN_RAY_STOP if ray_command.group(1) == "stop" else NOT_RUN_WORKER_RAY_START
        return NOT_RUN_WORKER
    return NOT_RUN_SETUP
