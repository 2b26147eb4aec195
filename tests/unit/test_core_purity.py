"""Every decision core imports, directly or through any module it imports, no I/O, clock or randomness.

The cores take their inputs (including ``now_ms``) as arguments and return decisions, so the
replica actors, the read nodes, the controller and the simulator all run the same rules, and
the simulator can replay any schedule. A core that reached ``etcd3`` through a value type
sharing a file with an etcd store would break that silently; this test follows imports
transitively (package ``__init__`` files included, ``if TYPE_CHECKING:`` blocks excluded, since
they never run) by reading the source, without importing anything.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from import_graph import ROOT, direct_imports, source_file, with_parents

PROJECT_PACKAGES = ("mafka4", "simulations")
FORBIDDEN = frozenset({"ray", "etcd3", "grpc", "time", "random", "asyncio"})

CORES = (
    # the log layer's pure parts and the physical replica
    "mafka4.log.epochs",
    "mafka4.log.producer_state",
    "mafka4.log.read_loss",
    "mafka4.physical.replica",
    "mafka4.physical.partition_state",
    "mafka4.physical.topic_leftovers",
    # what a replica counts of the requests it served, for its metrics
    "mafka4.physical.replica_traffic",
    # RISR and the virtual side: ranges, split rules, records, feeding plan, VP replica core
    "mafka4.risr.state",
    "mafka4.virtual.ranges",
    "mafka4.virtual.layout",
    "mafka4.virtual.vp_state",
    "mafka4.virtual.vp_records",
    "mafka4.virtual.feed_plan",
    "mafka4.virtual.failover",
    "mafka4.virtual.replica_core",
    "mafka4.virtual.visit_schedule",
    # what a read node counts of its load and reports over each window
    "mafka4.virtual.load_meter",
    # a feed stream's lag behind its physical partition, in messages and in time
    "mafka4.virtual.feed_lag",
    # delayed delivery: due times, its headers and message ids; a VP's delay schedule (issue 41)
    "mafka4.delays",
    "mafka4.scheduling.delay_schedule",
    "mafka4.scheduling.delay_log",
    "mafka4.retries",
    # Prometheus metric families from a process's snapshot, the latency histogram, where processes serve metrics
    "mafka4.metrics.families",
    "mafka4.metrics.histogram",
    # the end-to-end latency of the batches a fetch serves, one batch header each
    "mafka4.metrics.end_to_end",
    "mafka4.metrics.targets",
    # a group's lag in messages and in time, the committed offsets read from etcd keys; the controller's counters
    "mafka4.metrics.group_lag",
    "mafka4.metrics.controller_counters",
    # the cluster's figures mafka4 status sums up from every target's exposition
    "mafka4.metrics.figures",
    # groups: ownership, what wakes a member and its picture of the group, assignors, the Mafka3 protocol's decisions
    "mafka4.coordinator.groups.vp_ownership",
    "mafka4.coordinator.groups.vp_wakes",
    "mafka4.coordinator.groups.vp_pictures",
    "mafka4.coordinator.groups.assignors",
    "mafka4.coordinator.groups.partition_protocol",
    # the controller's decisions and the lease rule
    "mafka4.coordinator.control.partition_decisions",
    "mafka4.coordinator.control.read_path_decisions",
    "mafka4.coordinator.control.upkeep_decisions",
    # how many read nodes to ask Ray's autoscaler for, and how VP replicas move between them (issue 38)
    "mafka4.coordinator.control.read_node_scaling",
    "mafka4.coordinator.control.replica_moves",
    "mafka4.coordinator.control.replica_move_plans",
    "mafka4.coordinator.control.replica_move_records",
    # the producer's per-partition pipeline rules (the sender and the simulator run them)
    "mafka4.client.sender_core",
    # the Kafka listener's version-agnostic messages, error codes, brokers and partitions, produce routing,
    # and CreateTopics' topics as mafka4's topic configs
    "mafka4.kafka.shapes",
    "mafka4.kafka.error_codes",
    "mafka4.kafka.topology",
    "mafka4.kafka.produce_routing",
    # what the Kafka listener remembers of idempotent producers, and its decision on each batch
    "mafka4.kafka.producer_sessions",
    # how a Kafka CreateTopics request's fields and configs become a topic config
    "mafka4.kafka.topic_configs",
    # a Kafka group member's generation, rebalance state and commits, as the listener keeps them
    "mafka4.kafka.group_members",
    # what a consumer makes of a VP fetch's bytes
    "mafka4.client.vp_messages",
    # how one poll of a reader of several lanes shares its messages between them
    "mafka4.client.lane_shares",
    # a group's retry policy (back-off, deliveries before the dead-letter topic), a dead letter's topic and headers
    "mafka4.client.retry_policy",
    "mafka4.dead_letters",
    # where a consumer starts a partition, when a group member auto-commits
    "mafka4.client.positions",
    "mafka4.coordinator.control.placement",
    # which Ray nodes are mafka4 nodes, which node agents to start and registrations to drop
    "mafka4.runtime.node_identity",
    "mafka4.runtime.agent_plan",
    # Ray's fake multi-node cluster shaped like ray_cluster.yaml (the integration tests' autoscaling cluster)
    "mafka4.runtime.fake_cluster_config",
    # where mafka4 deploy runs etcd's members, and what it starts
    "mafka4.runtime.deploy_plan",
    "mafka4.metadata.lease",
    "mafka4.metadata.keys",
    # what a read node reports of its load to the controller's read-node scaling
    "mafka4.metadata.read_node_load",
    # how a write too large for one etcd transaction is cut into runs
    "mafka4.metadata.txn_runs",
    # who may authenticate, the SCRAM exchange, ACL decisions
    "mafka4.security.principals",
    "mafka4.security.credentials",
    "mafka4.security.scram",
    "mafka4.security.scram_client",
    "mafka4.security.acl",
    # the client protocol: frames, typed messages, error codes, a connection's session rules
    "mafka4.protocol.frames",
    "mafka4.protocol.messages",
    "mafka4.protocol.error_codes",
    "mafka4.protocol.session",
    "mafka4.protocol.metadata_api",
    "mafka4.protocol.admin_api",
    "mafka4.protocol.topic_admin_api",
    "mafka4.protocol.group_admin_api",
    # the Kafka protocol: request and response frames, their arrays' bounds, record batches and their conversion
    "mafka4.kafka.wire",
    "mafka4.kafka.array_bounds",
    "mafka4.kafka.record_batches",
    # Kafka's consumer protocol inside JoinGroup and SyncGroup: subscriptions in, assignments out
    "mafka4.kafka.consumer_protocol",
    # what a node knows of the cluster's metadata to answer clients
    "mafka4.frontend.view_state",
    # a join's hop times from its trace's rows (bench vp-join)
    "mafka4.bench.join_hops",
    # the soak's slopes of a chaos run's samples
    "simulations.chaos.resource_trend",
    # which of a chaos run's messages are delayed, nacked or poison, and which nacks await their redelivery
    "simulations.chaos.traffic",
    # the order of the consumer-scaling experiment's runs
    "simulations.scaling.run_plan",
    # each mode's scaling ratio and its interval, from the bootstrap's per-replicate statistics
    "simulations.analysis.scale_ratios",
)


def _closure(core: str, root: Path = ROOT) -> dict[str, str]:
    """Every module ``core`` imports, directly or not: module -> the project module that imports it."""
    seen: dict[str, str] = {}
    pending = [core]
    while pending:
        module = pending.pop()
        for name in direct_imports(module, root):
            for imported in with_parents(name):
                if imported in seen or imported == core:
                    continue
                seen[imported] = module
                if imported.split(".")[0] in PROJECT_PACKAGES and source_file(imported, root):
                    pending.append(imported)
    return seen


def _chain(core: str, module: str, imported_by: dict[str, str]) -> str:
    chain = [module]
    while chain[-1] != core:
        chain.append(imported_by[chain[-1]])
    return " <- ".join(chain)


def forbidden_imports(core: str, root: Path = ROOT) -> list[str]:
    """Each forbidden module ``core`` reaches, as the chain of imports that reaches it."""
    imported_by = _closure(core, root)
    return [_chain(core, m, imported_by) for m in sorted(imported_by) if m.split(".")[0] in FORBIDDEN]


@pytest.mark.parametrize("core", CORES)
def test_a_core_imports_no_io_clock_or_randomness_even_indirectly(core):
    assert source_file(core) is not None, f"{core} moved: update CORES"
    bad = forbidden_imports(core)
    assert not bad, "\n".join(bad)


def test_an_indirect_import_of_io_is_caught_with_its_chain(tmp_path):
    """The check itself: a core whose value type shares a file with an etcd store is impure."""
    package = tmp_path / "mafka4"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "core.py").write_text("from mafka4.sub import values\n\ndef decide(x):\n    return x\n")
    (package / "sub" / "values.py").write_text("from mafka4.sub.store import Store\n")
    (package / "sub" / "store.py").write_text("import threading\n\nif True:\n    import etcd3\n")
    (package / "pure.py").write_text("from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    import ray\n")
    assert forbidden_imports("mafka4.core", tmp_path) == ["etcd3 <- mafka4.sub.store <- mafka4.sub.values <- mafka4.core"]
    assert forbidden_imports("mafka4.pure", tmp_path) == []


def test_the_closure_follows_from_imports_of_submodules_and_parent_packages():
    closure = _closure("mafka4.virtual.replica_core")
    assert "mafka4" in closure and "mafka4.virtual" in closure
    assert "mafka4.risr.state" in closure
