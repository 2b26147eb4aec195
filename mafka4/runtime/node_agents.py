"""Node agents as Ray actors: the Ray nodes that offer ``write_node`` / ``read_node`` join mafka4 by themselves.

``NodeAgent`` is the node agent of ``mafka4.runtime.node`` (``run_agent``: the cluster config,
the data root, the lease-bound registration) run on a thread of a detached Ray actor,
``<cluster>/node_agent/<node id>`` in namespace "mafka4", pinned to its Ray node by
``NodeAffinitySchedulingStrategy(ray_node_id, soft=False)``: no shell command runs on the
worker. It takes ``num_cpus=0`` and none of the node's units, like the node's other actors.
Its node id is the ``<id>`` of the node's ``mafka4_node_<id>`` resource, or, on a node that
offers none (one Ray's autoscaler launched), ``ray-<Ray node id>`` (``node_identity.identify_node``);
replicas are pinned to it accordingly (``transport.node_pinning``).

An agent's registration also names its Ray node (``ray_node_id``): Ray's node list does not
show what a dead node offered, so that is how a keeper, even one started after the node died,
knows which mafka4 node died with it.

``NodeAgentKeeper.reconcile`` is one pass: read Ray's node list, the agents' names and
reports, and the registrations; ask ``agent_plan.plan_agents`` what to do; start the
agents it names and delete the registrations of nodes that left Ray (compare-and-delete on
the key's revision, so a node registering again meanwhile keeps its key); stop the agents of
read nodes the controller released (``keys.released_read_nodes_prefix``) and start none there,
since Ray's autoscaler ends no node that runs an actor. The controller's
watch on the registrations then sees the node go and repairs what it hosted, as it does when a
lease expires. An agent whose registration loop ended with an error is killed and started
again on a later pass. ``keep_node_agents`` runs passes every
``NODE_AGENT_RECONCILE_INTERVAL_S`` while its owner (the controller's process, started with
``--node-agents``) is the active controller.

Agents are detached: they keep their nodes registered while the controller restarts, and
stop only by ``stop_node_agents`` or with their Ray node.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Callable, Iterable

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from mafka4.errors import CoordinatorUnavailable, MafkaError
from mafka4.limits import (CLIENT_PORT_DEFAULT, NODE_AGENT_CALL_TIMEOUT_S, NODE_AGENT_RECONCILE_INTERVAL_S,
                           NODE_AGENT_STOP_TIMEOUT_S)
from mafka4.metadata import keys
from mafka4.metadata.store import MetadataStore
from mafka4.runtime.agent_plan import AgentPlan, AgentStart, RayNode, plan_agents
from mafka4.runtime.node import run_agent
from mafka4.runtime.node_identity import NodeRole
from mafka4.transport.ray_names import NAMESPACE, node_agent_actor_name

log = logging.getLogger("mafka4.node_agents")


@dataclass(frozen=True, slots=True)
class AgentSettings:
    """What every agent of one mafka4 cluster is given (``run_agent``'s arguments but the node's own)."""

    cluster: str
    etcd_endpoint: str
    data_dir: str  # the data root to record if the cluster has none yet
    lease_ttl_s: int
    client_port: int = CLIENT_PORT_DEFAULT  # a read node's client port; 0: any free port


@dataclass(frozen=True, slots=True)
class AgentReport:
    node_id: str
    ray_node_id: str  # where the agent runs
    failure: str | None  # why its registration loop ended; None while it runs


class NodeAgent:
    """The actor: ``run_agent`` on a thread of its own until ``stop``."""

    def __init__(self, settings: AgentSettings, node_id: str, role: NodeRole):
        # A Ray worker's root logger drops INFO: the registration's log lines belong in the worker's log.
        logging.getLogger("mafka4").setLevel(logging.INFO)
        logging.basicConfig(format="%(asctime)s %(process)d %(name)s %(levelname)s %(message)s")
        self._node_id = node_id
        self._failure: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(settings, node_id, NodeRole(role)),
                                        name=f"node-agent-{node_id}", daemon=True)
        self._thread.start()

    def _run(self, settings: AgentSettings, node_id: str, role: NodeRole) -> None:
        try:
            run_agent(settings.etcd_endpoint, settings.cluster, role, node_id, settings.data_dir,
                      settings.lease_ttl_s, settings.client_port, stop=self._stop,
                      ray_node_id=ray.get_runtime_context().get_node_id())
        except MafkaError as error:
            self._failure = error.message
            log.error("node %s: %s", node_id, error.message)
        except Exception as error:  # reported to the keeper, which starts the agent again
            self._failure = f"{type(error).__name__}: {error}"
            log.exception("node %s: the registration loop failed", node_id)

    def report(self) -> AgentReport:
        return AgentReport(self._node_id, ray.get_runtime_context().get_node_id(), self._failure)

    def stop(self) -> None:
        """End the registration loop, which revokes the registration's lease; bounded wait."""
        self._stop.set()
        self._thread.join(NODE_AGENT_STOP_TIMEOUT_S)


def list_ray_nodes() -> list[RayNode]:
    """Ray's node list, dead nodes included while the GCS still lists them."""
    return [RayNode(node["NodeID"], bool(node["Alive"]), dict(node.get("Resources") or {})) for node in ray.nodes()]


def agent_names(cluster: str) -> dict[str, str]:
    """Node id -> actor name of every agent of ``cluster`` whose actor is alive (Ray frees a dead one's name)."""
    prefix = node_agent_actor_name(cluster, "")
    return {entry["name"][len(prefix):]: entry["name"] for entry in ray.util.list_named_actors(all_namespaces=True)
            if entry["namespace"] == NAMESPACE and entry["name"].startswith(prefix)}


def agent_reports(cluster: str) -> dict[str, tuple[AgentReport, object]]:
    """Node id -> (report, handle) of every agent of ``cluster`` that answers within NODE_AGENT_CALL_TIMEOUT_S."""
    calls = {}
    for node_id, name in agent_names(cluster).items():
        try:
            handle = ray.get_actor(name, namespace=NAMESPACE)
        except ValueError:  # died since it was listed
            continue
        calls[node_id] = (handle, handle.report.remote())
    reports = {}
    for node_id, (handle, ref) in calls.items():
        try:
            reports[node_id] = (ray.get(ref, timeout=NODE_AGENT_CALL_TIMEOUT_S), handle)
        except ray.exceptions.RayError as error:  # GetTimeoutError is one
            log.info("node agent %s does not answer: %s", node_id, error)
    return reports


def start_node_agent(settings: AgentSettings, start: AgentStart) -> None:
    """Create the agent ``start`` names on its Ray node; it registers the node once it runs.

    Does not wait: a later pass sees it answer. Raises ValueError if an agent of that name
    exists (one still dying, or started by another keeper meanwhile).
    """
    ray.remote(NodeAgent).options(
        name=node_agent_actor_name(settings.cluster, start.node_id), namespace=NAMESPACE, lifetime="detached",
        num_cpus=0, max_restarts=0,
        scheduling_strategy=NodeAffinitySchedulingStrategy(start.ray_node_id, soft=False),
    ).remote(settings, start.node_id, start.role)


def stop_node_agents(cluster: str, node_ids: Iterable[str] | None = None) -> None:
    """Stop the agents of ``node_ids`` (all of ``cluster``'s if None): each revokes its registration, then is killed."""
    names = agent_names(cluster)
    chosen = names if node_ids is None else {node_id: names[node_id] for node_id in node_ids if node_id in names}
    handles = []
    for name in chosen.values():
        try:
            handles.append(ray.get_actor(name, namespace=NAMESPACE))
        except ValueError:
            continue
    refs = [handle.stop.remote() for handle in handles]
    for ref in refs:
        try:
            ray.get(ref, timeout=NODE_AGENT_STOP_TIMEOUT_S + NODE_AGENT_CALL_TIMEOUT_S)
        except ray.exceptions.RayError:
            pass  # a dead agent has nothing to revoke: its lease ends its registration
    for handle in handles:
        ray.kill(handle)


class NodeAgentKeeper:
    """Runs ``plan_agents`` against Ray and etcd, one ``reconcile`` at a time (one thread)."""

    def __init__(self, settings: AgentSettings, store: MetadataStore):
        self.settings, self._store = settings, store
        self._homes: dict[str, str] = {}  # node id -> Ray node id its agent last ran on
        self._reported: set[tuple[str, str]] = set()  # skipped (Ray node, reason) already logged

    def reconcile(self) -> AgentPlan:
        """One pass (module docstring); returns what it decided.

        Raises CoordinatorUnavailable if etcd does not answer (nothing is started then: the
        registrations decide what to drop, and a pass without them would drop nothing anyway).
        """
        cluster = self.settings.cluster
        ray_nodes = list_ray_nodes()
        agents = {}
        for node_id, (report, handle) in agent_reports(cluster).items():
            if report.failure is None:
                agents[node_id] = report.ray_node_id
                continue
            log.warning("node agent %s stopped registering (%s); starting it again", node_id, report.failure)
            ray.kill(handle)  # frees the name for a later pass's start
        registered = {item.value["node_id"]: item for item in self._store.get_prefix(keys.nodes_prefix(cluster))}
        # Only a registered id can be dropped: remembering others would only grow with the ids ever seen.
        self._homes = {node_id: home for node_id, home in self._homes.items() if node_id in registered} | agents
        # Ray does not show what a dead node offered: where each agent ran is known from its
        # registration (so a restarted controller knows it too) and from this keeper's memory.
        homes = {node_id: item.value["ray_node_id"] for node_id, item in registered.items()
                 if "ray_node_id" in item.value} | self._homes
        withheld = {node_id for node_id in (keys.parse_released_read_node(cluster, item.key) for item in
                                            self._store.get_prefix(keys.released_read_nodes_prefix(cluster)))
                    if node_id is not None}
        plan = plan_agents(ray_nodes, agents, registered, homes, withheld)
        skipped_now = {(skipped.ray_node_id, skipped.reason) for skipped in plan.skipped}
        for ray_node_id, reason in sorted(skipped_now - self._reported):
            log.warning("Ray node %s gets no node agent: %s", ray_node_id, reason)
        self._reported = skipped_now  # logged once while it lasts, and bounded by the nodes Ray lists
        for start in plan.start:
            try:
                start_node_agent(self.settings, start)
            except ValueError:  # the name is still taken: a later pass tries again
                log.info("node agent %s: its name is still taken; trying again next pass", start.node_id)
                continue
            self._homes[start.node_id] = start.ray_node_id
            log.info("started the node agent of %s node %s on Ray node %s", start.role.value, start.node_id,
                     start.ray_node_id)
        for node_id in plan.drop:
            item = registered[node_id]
            if self._store.delete_if(item.key, item.mod_revision):
                log.info("node %s left Ray: its registration is dropped", node_id)
            self._homes.pop(node_id, None)
        if plan.stop:
            stop_node_agents(cluster, plan.stop)  # each revokes its registration
            log.info("stopped the node agents of released read nodes %s, so that Ray can end them",
                     ", ".join(plan.stop))
        for node_id in plan.forget:
            self._store.delete(keys.released_read_node(cluster, node_id))
            log.info("released read node %s has left Ray", node_id)
        return plan


def keep_node_agents(keeper: NodeAgentKeeper, stop: threading.Event, active: Callable[[], bool],
                     interval_s: float = NODE_AGENT_RECONCILE_INTERVAL_S) -> None:
    """Run ``keeper.reconcile`` every ``interval_s`` while ``active()`` (the active controller), until ``stop``."""
    while not stop.is_set():
        if active():
            try:
                keeper.reconcile()
            except CoordinatorUnavailable as error:
                log.warning("node agents: etcd does not answer (%s); trying again in %.0f s", error, interval_s)
            except Exception:  # a defect here must not end the controller's process
                log.exception("node agents: the pass failed; trying again in %.0f s", interval_s)
        stop.wait(interval_s)
