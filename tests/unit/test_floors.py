"""The floor plan: every import of a ``mafka4`` module goes to its own floor or one below.

Floors, from the ground up (the first pattern that matches a module names its floor):

0. **base**: errors, limits, names, hashing, the record batch (its frame, its payload of records
   and their compression), the cyclic collector's pause and freeze, faults and network faults,
   long polls, planted bugs, exported environment variables, files replaced durably (and
   packages with an empty ``__init__``).
1. **cores**: the log layer, RISR, and every pure decision core and value type of the
   physical and the virtual side, of delayed delivery and retries (their rules and headers, a delay topic's schedule and log),
   of groups and of the controller, the runtime's rules
   for which Ray nodes get node agents, where a deployment's etcd members run, and its
   fake multi-node Ray cluster derived from ``ray_cluster.yaml``; the names of etcd keys
   and of Ray actors; the frames of stream calls; principals, SCRAM and ACLs; the client
   protocol's frames, messages, error
   codes and session rules; the Kafka protocol's frames and record batches, and what its listener
   remembers of idempotent producers; the Prometheus metric families made from a process's snapshot,
   the latency histogram and the end-to-end latency of the batches a fetch serves, the metrics
   targets named in liveness keys, a group's lag, the controller's counters and the cluster's
   figures ``mafka4 status`` sums up from the targets' expositions (``mafka4.metrics``); a dead
   letter's topic and headers (``mafka4.dead_letters``).
2. **metadata and transport**: etcd access and what is stored there (``mafka4.metadata``: store,
   leases, intents, the in-sync recorder; the topic store of ``physical``, the VP store of
   ``virtual``, the user and ACL stores of ``security`` and the admin's credential file), how
   the cluster's processes call each other (``mafka4.transport``: stream calls, Ray errors
   unwrapped), the client port's server and connection (``mafka4.protocol``), and the HTTP
   server a process's Prometheus metrics are scraped from (``mafka4.metrics.exposition``) and
   ``mafka4 status``'s scrape of them (``mafka4.metrics.scrape``).
3. **shells**: what runs the cores against etcd and Ray: replica actors, read nodes, group
   protocols, and what nodes serve clients (``mafka4.frontend``: the watched view of the
   metadata, the client port's handlers).
4. **control**: the controller and what it drives (launchers, resharding, repairs, upkeep).
5. **runtime**: the processes of a cluster: the local cluster and its daemon, the node agent,
   the controller's process, etcd servers.
6. **clients**: Admin, Producer, Consumer.
7. **tools and services**: the operator's benchmarks, the CLI, the demo, and the delay scheduler
   (``mafka4.scheduling``: a client of the cluster that the active controller runs as its child).
8. **outside the product**: the experiments (``simulations``) and the benchmarks that compare
   or probe (``benchmarks``). They import the product; the product never imports them (their
   commands and benches register through entry points, ``mafka4.cli.plugins``).

An import that runs up a floor would let a lower part depend on a higher one; an import circle
between floors cannot exist if none does. Read from the source, importing nothing.

Across the floors, the broker never touches single messages: the log layer and the physical side
read a batch's frame (``batch_frame``) and never import its payload of records (``batch_payload``).
"""

from __future__ import annotations

import re
from pathlib import Path

from import_graph import ROOT, direct_imports


FLOORS = (
    (0, r"mafka4|mafka4\.(errors|limits|limits\.servers|names|hashing|batch_frame|batch_payload|compression|checksum|"
        r"collector|faults|partition_gate|clocks|long_poll|stage_trace|join_trace|planted_bugs|exported_variables|durable_files|"
        r"waking_event)"),
    # Packages whose __init__ is empty: importing one runs nothing.
    (0, r"mafka4\.(physical|virtual|metadata|transport|protocol|security|frontend|coordinator|metrics|"
        r"coordinator\.(control|groups)|kafka|scheduling)"),
    (1, r"mafka4\.log(\..*)?|mafka4\.risr(\..*)?"),
    (1, r"mafka4\.dead_letters"),
    (1, r"mafka4\.physical\.(partition_state|replica|sequencer|topic_leftovers|replica_traffic)"),
    (1, r"mafka4\.virtual\.(ranges|layout|vp_records|column_split|vp_state|feed_plan|failover|replica_core|divergence|"
        r"visit_schedule|load_meter|feed_lag)"),
    (1, r"mafka4\.scheduling\.(delay_schedule|delay_log)"),
    (1, r"mafka4\.(delays|retries)"),
    (1, r"mafka4\.metadata\.(lease|keys|txn_runs|read_node_load)"),
    (1, r"mafka4\.security\.(principals|credentials|scram|scram_client|acl)"),
    (1, r"mafka4\.transport\.(ray_names|stream_frames|stream_pickles)"),
    (1, r"mafka4\.protocol\.(frames|messages|error_codes|session|metadata_api|metadata_topics|admin_api|"
        r"topic_admin_api|group_admin_api)"),
    (1, r"mafka4\.frontend\.view_state"),
    (1, r"mafka4\.coordinator\.groups\.(assignors|partition_protocol|vp_ownership|vp_wakes|vp_pictures)"),
    (1, r"mafka4\.coordinator\.control\.(partition_decisions|read_path_decisions|upkeep_decisions|placement|"
        r"read_node_scaling|replica_moves|replica_move_plans|replica_move_records)"),
    (1, r"mafka4\.runtime\.(node_identity|agent_plan|fake_cluster_config|deploy_plan)"),
    (1, r"mafka4\.metrics\.(families|histogram|end_to_end|targets|group_lag|controller_counters|figures)"),
    (1, r"mafka4\.kafka\.(wire|array_bounds|record_batches|shapes|error_codes|topology|produce_routing|"
        r"producer_sessions|topic_configs|consumer_protocol)"),
    (2, r"mafka4\.metadata\..*|mafka4\.transport\..*|mafka4\.protocol\..*"),
    (2, r"mafka4\.physical\.topics|mafka4\.virtual\.vp_store"),
    (2, r"mafka4\.security\..*"),
    (2, r"mafka4\.metrics\.(exposition|scrape)"),
    (3, r"mafka4\.(physical|virtual|frontend|kafka)\..*|mafka4\.coordinator\.groups\..*"),
    (4, r"mafka4\.coordinator\.control\..*"),
    (5, r"mafka4\.runtime(\..*)?"),
    (6, r"mafka4\.client(\..*)?"),
    (7, r"mafka4\.(bench|cli|demo|scheduling)(\..*)?"),
    (8, r"(simulations|benchmarks)(\..*)?"),
)
PROJECT_PACKAGES = ("mafka4", "simulations", "benchmarks")


def floor_of(module: str) -> int:
    for floor, pattern in FLOORS:
        if re.fullmatch(pattern, module):
            return floor
    raise AssertionError(f"{module} is on no floor: add it to FLOORS")


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_no_import_runs_up_a_floor():
    upward = []
    for path in sorted((ROOT / "mafka4").rglob("*.py")):
        module = _module_name(path)
        for imported in sorted(name for name in direct_imports(module, ROOT)
                               if name.split(".")[0] in PROJECT_PACKAGES):
            if floor_of(imported) > floor_of(module):
                upward.append(f"{module} (floor {floor_of(module)}) imports {imported} (floor {floor_of(imported)})")
    assert not upward, "\n".join(upward)


def test_the_broker_never_imports_the_records_of_a_batch():
    """The log layer and the physical side (leaders, followers, their logs) check, stamp and store
    batches by their frame; decoding a batch's records is for producers, consumers, the feeder and
    checkers (DESIGN principle 2)."""
    broker = [_module_name(path) for package in ("log", "physical")
              for path in sorted((ROOT / "mafka4" / package).rglob("*.py"))]
    assert "mafka4.log.log" in broker and "mafka4.physical.actor" in broker, "the broker's modules were found"
    readers = [module for module in broker if "mafka4.batch_payload" in direct_imports(module, ROOT)]
    assert not readers, f"these broker modules import mafka4.batch_payload (import mafka4.batch_frame): {readers}"


def test_every_module_is_on_a_floor():
    for path in (ROOT / "mafka4").rglob("*.py"):
        floor_of(_module_name(path))


def test_the_packages_on_the_ground_floor_run_nothing_when_imported():
    for package in ("physical", "virtual", "metadata", "transport", "protocol", "security", "frontend", "coordinator",
                    "coordinator/control", "coordinator/groups", "runtime", "metrics", "kafka"):
        assert (ROOT / "mafka4" / package / "__init__.py").read_text().strip() == "", package


def test_no_two_test_modules_share_a_name():
    """pytest imports test modules by their base name (the test folders are no packages): two of one
    name stop the whole run at collection."""
    names = sorted(path.name for path in (ROOT / "tests").rglob("test_*.py"))
    assert not {name for name in names if names.count(name) > 1}
