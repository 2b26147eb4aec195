"""``mafka4 deploy``, ``status --address`` and ``undeploy``: mafka4 on an existing Ray cluster.

What runs where (the decisions are ``runtime.deploy_plan``'s, the actors ``runtime.deploy_actors``'):

* etcd: one ``EtcdMemberHost`` actor per member on a head-type node, each owning its member's
  process, data on that node; three members where three head-type nodes exist, else one,
  with a loud warning.
* the controller: a ``ControllerHost`` actor on the first member's node runs
  ``controller_process --node-agents``, which keeps one node agent actor on every write and
  read node (``runtime.node_agents``): no mafka4 command runs on the workers.
* the admin's credential: written to ``<home>/credentials`` on the machine that deploys, and its
  user to etcd (``security.admin_credential``), as ``mafka4 up`` does.

The deployment's record is the actors' names (namespace "mafka4", ``<cluster>/deploy/...``):
``status`` and ``undeploy`` find everything from the Ray address alone, etcd's endpoint
included (the member actors know it). ``deploy`` is idempotent: what runs is kept, only what
is missing is started. It returns once every write and read node is registered and every read
node serves clients, whose addresses it reports (what clients need: ``$MAFKA4_BOOTSTRAP``).
With ``wait=False`` (``--no-wait``) it neither requires write and read nodes nor waits for them:
it returns once etcd, the credential and the controller are up, and the controller gives each
node an agent as Ray adds it. That is how a cluster launcher's head deploys (``ray_cluster.yaml``):
its start commands run before the autoscaler launches any worker.

``undeploy`` stops, in order: the controller (so nothing restarts what follows), the node agents
(each revokes its registration), the cluster's other named actors (read nodes and partition
replicas, which the controller started: killed, their data stays on their nodes, their liveness
keys are deleted), then the etcd members (their data stays: a later deploy starts them on it).

A host actor that died other than by ``undeploy`` (its worker crashing, ``ray stop`` on its
node) leaves its process running until a deploy starts a new host there, which stops it first
(``runtime.deploy_actors``). One deployment per data dir: two mafka4 clusters deployed on one
Ray need data dirs of their own. A member of three whose node's address changed cannot rejoin
its peers on its recorded peer URL.
"""

from __future__ import annotations

import dataclasses
import logging
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from mafka4.errors import CoordinatorUnavailable, MafkaError, NotDeployable
from mafka4.limits import (CLIENT_PORT_DEFAULT, CONTROLLER_STOP_TIMEOUT_S, DEPLOY_CALL_TIMEOUT_S,
                           DEPLOY_ETCD_START_TIMEOUT_S, DEPLOY_READY_POLL_INTERVAL_S, ETCD_STOP_TIMEOUT_S)
from mafka4.limits.servers import ClusterConfig
from mafka4.metadata import keys
from mafka4.metadata.store import MetadataStore
from mafka4.metrics.scrape import cluster_figures
from mafka4.runtime.deploy_actors import ControllerHost, EtcdMemberHost
from mafka4.runtime.deploy_plan import DATA_DIR_DEFAULT, MemberPlace, place_etcd_members, plan_deploy, require_mafka4_nodes
from mafka4.runtime.etcd_member import EtcdServer, etcd_endpoint
from mafka4.runtime.etcd_server import member_healthy
from mafka4.runtime.node_agents import agent_names, agent_reports, list_ray_nodes, stop_node_agents
from mafka4.runtime.local import kafka_listeners, metrics_status
from mafka4.runtime.node_identity import NodeRole
from mafka4.runtime.state import CLUSTER_NAME_DEFAULT
from mafka4.security.admin_credential import ensure_admin_credential
from mafka4.security.user_store import UserStore
from mafka4.transport.ray_names import NAMESPACE, controller_host_actor_name, etcd_member_actor_name
from mafka4.transport.remote_errors import unwrap

log = logging.getLogger("mafka4.deploy")

CONTROLLER_ID = "deployed"
CONTROLLER_LOG_NAME = "controller.log"


@dataclass(frozen=True, slots=True)
class DeploySettings:
    cluster: str = CLUSTER_NAME_DEFAULT
    data_dir: str = DATA_DIR_DEFAULT  # on every node: etcd's data, the controller's log, the nodes' data root
    node_lease_ttl_s: int = ClusterConfig().node_lease_ttl_s
    client_port: int = CLIENT_PORT_DEFAULT  # the read nodes' client port; 0: any free port
    ready_timeout_s: float = ClusterConfig().start_timeout_s
    wait: bool = True  # require write and read nodes, and wait until they serve; False: neither (module docstring)
    # ControllerConfig values the controller runs with instead of the defaults, as (name, value) pairs
    controller_settings: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True, slots=True)
class DeployReport:
    etcd_members: tuple[EtcdServer, ...]
    started: tuple[str, ...]  # what this deploy started; empty when everything already ran
    write_nodes: tuple[str, ...]  # empty when it did not wait for the nodes
    read_nodes: tuple[str, ...]
    bootstrap: tuple[str, ...]  # the read nodes' client addresses
    credential: str  # where the admin's credential was written
    warnings: tuple[str, ...] = ()

    @property
    def etcd_endpoint(self) -> str:
        return etcd_endpoint(self.etcd_members)


def deploy(settings: DeploySettings, home: Path) -> DeployReport:
    """Bring up what is missing of the deployment (module docstring); this process has joined Ray.

    Raises NotDeployable when the Ray cluster lacks what a deployment needs (a head-type node;
    with ``settings.wait``, a write and a read node too), a node cannot start its etcd member, or
    (with ``settings.wait``) the nodes are not all serving within ``settings.ready_timeout_s``.
    """
    cluster = settings.cluster
    ray_nodes = list_ray_nodes()
    roles = require_mafka4_nodes(ray_nodes) if settings.wait else {role: [] for role in NodeRole}
    placement = place_etcd_members(ray_nodes)
    running = _member_hosts(cluster)
    step = plan_deploy(placement, running, _actor(controller_host_actor_name(cluster)) is not None)
    warnings = tuple(text for text in (placement.warning, step.note) if text)
    for text in warnings:
        log.warning("%s", text)
    started: list[str] = []
    if step.start_members:
        members = _start_members(settings, step.start_members)
        started += [f"etcd member {member.name} on {member.endpoint}" for member in members]
    else:
        members = _running_members(running)
    store = MetadataStore(etcd_endpoint(members))
    try:
        Path(home).mkdir(parents=True, exist_ok=True)
        credential = ensure_admin_credential(home, UserStore(store, cluster))
        if step.start_controller:
            _start_controller(settings, etcd_endpoint(members), placement.controller_ray_node_id)
            started.append("controller")
        bootstrap = (_wait_until_serving(store, cluster, roles, time.monotonic() + settings.ready_timeout_s)
                     if settings.wait else ())
    finally:
        store.close()
    return DeployReport(members, tuple(started), tuple(roles[NodeRole.WRITE]), tuple(roles[NodeRole.READ]),
                        bootstrap, str(credential), warnings)


def deployment_status(cluster: str) -> dict:
    """What of ``cluster``'s deployment runs on the joined Ray: members, controller, agents, nodes."""
    hosts = sorted(_member_hosts(cluster).items())
    servers = {name: _call(handle.member) for name, handle in hosts}
    healthy = [server for server in servers.values() if server is not None and member_healthy(server)]
    members = [{"name": name, "endpoint": server.endpoint if server else None, "pid": server.pid if server else None,
                "healthy": server in healthy, "ray_node_id": _call(handle.ray_node_id)}
               for (name, handle), server in zip(hosts, servers.values())]
    controller_handle = _actor(controller_host_actor_name(cluster))
    controller = _call(controller_handle.report) if controller_handle else None
    report = {"cluster": cluster, "deployed": bool(members or controller_handle),
              "running": bool(members) and all(m["healthy"] for m in members) and bool(controller and controller["running"]),
              "etcd_members": members, "controller": controller,
              "node_agents": {node_id: {"ray_node_id": agent.ray_node_id, "failure": agent.failure}
                              for node_id, (agent, _) in sorted(agent_reports(cluster).items())}}
    if healthy:
        store = MetadataStore(etcd_endpoint(healthy))
        try:
            report["etcd_endpoint"] = etcd_endpoint(healthy)
            report["registered_nodes"] = _registered(store, cluster)
            report["serving_read_nodes"] = _serving_read_nodes(store, cluster)
            report["metrics"] = metrics_status(store, cluster)
            report["kafka_listeners"] = kafka_listeners(store, cluster)
        finally:
            store.close()
        report["figures"] = cluster_figures(report["metrics"])
    return report


def undeploy(cluster: str) -> list[str]:
    """Stop ``cluster``'s deployment on the joined Ray (module docstring); returns what it stopped."""
    stopped = []
    controller = _actor(controller_host_actor_name(cluster))
    if controller is not None:
        _stop_and_kill(controller, CONTROLLER_STOP_TIMEOUT_S)
        stopped.append("controller")
    agents = sorted(agent_names(cluster))
    stop_node_agents(cluster)
    stopped += [f"node agent {node_id}" for node_id in agents]
    # Read nodes and partition replicas: the controller started them, and nothing of theirs needs a goodbye.
    gone = (f"{cluster}/deploy/", f"{cluster}/node_agent/")  # stopped above, or below by their own stop
    others = [name for name in _named_actors(f"{cluster}/") if not name.startswith(gone)]
    for name in others:
        handle = _actor(name)
        if handle is not None:
            ray.kill(handle)
    stopped += [f"actor {name}" for name in others]
    hosts = _member_hosts(cluster)
    _forget_liveness(hosts, cluster)
    for name, handle in sorted(hosts.items()):
        _stop_and_kill(handle, ETCD_STOP_TIMEOUT_S)
        stopped.append(f"etcd member {name}")
    # Ray frees a killed actor's name a moment later: wait, so that a deploy right after finds none.
    deadline = time.monotonic() + DEPLOY_CALL_TIMEOUT_S
    while _named_actors(f"{cluster}/") and time.monotonic() < deadline:
        time.sleep(DEPLOY_READY_POLL_INTERVAL_S)
    return stopped


def _forget_liveness(hosts: dict[str, object], cluster: str) -> None:
    """Delete the liveness keys of the read nodes and replicas just killed: they would outlive them by a
    lease's time, and a deploy right after would take them for live ones (and their client addresses
    for ones that answer)."""
    members = [member for member in (_call(handle.member) for handle in hosts.values()) if member is not None]
    if not members:
        return
    store = MetadataStore(etcd_endpoint(members))
    try:
        for prefix in (keys.read_nodes_prefix(cluster), keys.replicas_prefix(cluster)):
            store.delete_prefix(prefix)
    except CoordinatorUnavailable as error:
        log.warning("the liveness keys stay until their leases end: %s", error.message)
    finally:
        store.close()


def _start_members(settings: DeploySettings, places: tuple[MemberPlace, ...]) -> tuple[EtcdServer, ...]:
    """Start a host actor per member, then every member at once; on any failure stop them all."""
    hosts = {place.name: ray.remote(EtcdMemberHost).options(
        name=etcd_member_actor_name(settings.cluster, place.name), namespace=NAMESPACE, lifetime="detached",
        num_cpus=0, max_restarts=0, scheduling_strategy=NodeAffinitySchedulingStrategy(place.ray_node_id, soft=False),
    ).remote(place.name, settings.data_dir) for place in places}
    try:
        # The first call also waits for the actor's worker to start: on a loaded node that takes a while.
        proposals = [_member_call(hosts[place.name].propose, place, settings.ready_timeout_s) for place in places]
        joined = _join_members(proposals)
        refs = [(place, hosts[place.name].start.remote(member, DEPLOY_ETCD_START_TIMEOUT_S))
                for place, member in zip(places, joined)]
        return tuple(_member_result(ref, place, DEPLOY_ETCD_START_TIMEOUT_S + DEPLOY_CALL_TIMEOUT_S)
                     for place, ref in refs)
    except BaseException:
        for handle in hosts.values():
            _stop_and_kill(handle, ETCD_STOP_TIMEOUT_S)
        raise


def _join_members(proposals: list[EtcdServer]) -> list[EtcdServer]:
    """The members as they start: a lone one as proposed; several either all as recorded by an earlier
    start on their data (they must keep their peers) or all new, naming each other and a new token."""
    if len(proposals) == 1:
        return proposals
    recorded = [member for member in proposals if member.initial_cluster]
    if not recorded:
        peers = ",".join(f"{member.name}=http://{member.host}:{member.peer_port}" for member in proposals)
        token = f"mafka4-{secrets.token_hex(6)}"
        return [dataclasses.replace(member, initial_cluster=peers, cluster_token=token) for member in proposals]
    if len(recorded) == len(proposals) and len({(m.initial_cluster, m.cluster_token) for m in recorded}) == 1:
        return proposals
    raise NotDeployable(
        f"etcd members {[m.name for m in recorded]} hold the data of an earlier etcd and "
        f"{[m.name for m in proposals if not m.initial_cluster] or 'the others'} do not, or not of the same one: "
        f"they cannot form one cluster; remove the members' data dirs (<data dir>/.etcd on the head-type nodes) "
        f"to start with no metadata")


def _start_controller(settings: DeploySettings, endpoint: str, ray_node_id: str) -> None:
    arguments = ["--etcd", endpoint,
               "--ray-address", ray.get_runtime_context().gcs_address, "--cluster", settings.cluster,
               "--controller-id", CONTROLLER_ID, "--node-agents", "--node-data-dir", settings.data_dir,
               "--node-lease-ttl-s", str(settings.node_lease_ttl_s), "--node-client-port", str(settings.client_port),
               *(argument for name, value in settings.controller_settings for argument in ("--setting", f"{name}={value}"))]
    host = ray.remote(ControllerHost).options(
        name=controller_host_actor_name(settings.cluster), namespace=NAMESPACE, lifetime="detached", num_cpus=0,
        max_restarts=0, scheduling_strategy=NodeAffinitySchedulingStrategy(ray_node_id, soft=False),
    ).remote(arguments, str(Path(settings.data_dir) / CONTROLLER_LOG_NAME))
    # Its first answer comes once its process started (and any controller an earlier host left was stopped).
    try:
        ray.get(host.report.remote(), timeout=settings.ready_timeout_s)
    except ray.exceptions.RayError as raised:
        error = unwrap(raised)
        why = error.message if isinstance(error, MafkaError) else f"{type(raised).__name__}: {raised}"
        raise NotDeployable(f"the controller on Ray node {ray_node_id} did not start: {why}") from raised


def _wait_until_serving(store: MetadataStore, cluster: str, roles: dict[NodeRole, list[str]], deadline: float) -> tuple[str, ...]:
    """Wait until every node of ``roles`` is registered and every read node serves clients; their addresses."""
    wanted = set(roles[NodeRole.WRITE]) | set(roles[NodeRole.READ])
    registered: set[str] = set()
    serving: dict[str, str] = {}
    while True:
        try:
            registered, serving = set(_registered(store, cluster)), _serving_read_nodes(store, cluster)
        except CoordinatorUnavailable as error:  # a member just started may not answer every read yet
            log.info("waiting for etcd: %s", error.message)
        if wanted <= registered and set(roles[NodeRole.READ]) <= set(serving):
            return tuple(serving[node_id] for node_id in roles[NodeRole.READ])
        if time.monotonic() > deadline:
            raise NotDeployable(
                f"deployed, but not serving in time: nodes {sorted(wanted - registered) or 'none'} not registered, "
                f"read nodes {sorted(set(roles[NodeRole.READ]) - set(serving)) or 'none'} not serving clients; "
                f"see the controller's log ({CONTROLLER_LOG_NAME} in the data dir of the first etcd member's node) "
                f"and 'mafka4 status --address ADDR'; 'mafka4 deploy' again goes on from here")
        time.sleep(DEPLOY_READY_POLL_INTERVAL_S)


def _registered(store: MetadataStore, cluster: str) -> dict[str, dict]:
    return {item.value["node_id"]: item.value for item in store.get_prefix(keys.nodes_prefix(cluster))}


def _serving_read_nodes(store: MetadataStore, cluster: str) -> dict[str, str]:
    """Read node id -> its client address, for every read node whose ReadNode runs and serves clients."""
    prefix = keys.read_nodes_prefix(cluster)
    return {item.key[len(prefix):]: item.value["client"] for item in store.get_prefix(prefix)
            if item.value.get("client")}


def _running_members(hosts: dict[str, object]) -> tuple[EtcdServer, ...]:
    members = tuple(_call(hosts[name].member) for name in sorted(hosts))
    if not all(members):
        raise NotDeployable(f"the etcd member actors {sorted(hosts)} run but not all their members do (see "
                            f"'mafka4 status --address ADDR'): run 'mafka4 undeploy' (the data stays), then deploy")
    return members


def _member_hosts(cluster: str) -> dict[str, object]:
    """Member name -> handle of every etcd member actor of ``cluster``."""
    prefix = etcd_member_actor_name(cluster, "")
    hosts = {}
    for name in _named_actors(prefix):
        handle = _actor(name)
        if handle is not None:
            hosts[name[len(prefix):]] = handle
    return hosts


def _named_actors(prefix: str) -> list[str]:
    return sorted(entry["name"] for entry in ray.util.list_named_actors(all_namespaces=True)
                  if entry["namespace"] == NAMESPACE and entry["name"].startswith(prefix))


def _actor(name: str):
    try:
        return ray.get_actor(name, namespace=NAMESPACE)
    except ValueError:
        return None


def _call(method, timeout_s: float = DEPLOY_CALL_TIMEOUT_S):
    """One call to a deployment actor; None if it does not answer (dead, or stuck)."""
    try:
        return ray.get(method.remote(), timeout=timeout_s)
    except ray.exceptions.RayError as error:
        log.info("a deployment actor does not answer: %s", error)
        return None


def _member_call(method, place: MemberPlace, timeout_s: float):
    return _member_result(method.remote(), place, timeout_s)


def _member_result(ref, place: MemberPlace, timeout_s: float):
    """A member actor's answer, or NotDeployable naming the member and its node."""
    try:
        return ray.get(ref, timeout=timeout_s)
    except ray.exceptions.RayError as raised:
        error = unwrap(raised)
        why = error.message if isinstance(error, MafkaError) else f"{type(raised).__name__}: {raised}"
        raise NotDeployable(f"etcd member {place.name} on Ray node {place.ray_node_id}: {why}") from raised


def _stop_and_kill(handle, stop_timeout_s: float) -> None:
    """Stop the actor's process by its PID (``stop``), then kill the actor, whether ``stop`` answered or not."""
    try:
        ray.get(handle.stop.remote(), timeout=stop_timeout_s + DEPLOY_CALL_TIMEOUT_S)
    except ray.exceptions.RayError as error:
        log.warning("a deployment actor did not stop its process: %s", error)
    ray.kill(handle)
