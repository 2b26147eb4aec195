"""mafka4 deployed on Ray's fake multi-node cluster of ``ray_cluster.yaml``, read nodes following a group (issue 38).

The cluster is the yaml's (``fake_ray_cluster``): its head and its minimum workers (three write
nodes, two read nodes), each a local raylet offering its node type's resources only, so every
mafka4 node is known by its Ray node id. ``mafka4 deploy`` runs on it from the Ray address alone
with read-node scaling on and small bounds; a producer writes through the read nodes' client
ports while a group grows from 2 to 16 members (the topic splits to 16 VPs, 32 VP replicas: over
the bound of 8 a read node). Then:

* the controller asks Ray's autoscaler for read nodes up to the yaml's most (4), which the
  autoscaler launches; their node agents start by themselves and VP replicas move onto them;
* the group shrinks to 2 and a write node is killed (its raylet and its workers) while the producer
  writes: the node
  leaves Ray and mafka4's registry, and the controller restores the replicas it hosted on the
  other write nodes. Ray's autoscaler does not replace it here: the fake provider's nodes keep
  the status "uninitialized" the launcher tags them with (their node updaters are disabled, as
  the fake provider needs), and Ray 2.60's autoscaler ends and replaces only "up-to-date" nodes
  that stopped sending heartbeats; on a cloud, the instance's end makes it launch another;
* the VPs merge back, the closed ones retire once past the topic's (short) retention, and the
  controller releases idle read nodes, one at a time, down to the yaml's least (2): it moves a
  node's replicas off and stops its read node; Ray's autoscaler ends the node once it has been
  idle for the fake cluster's idle timeout;

and every acknowledged message is consumed, in order per key.

Experiment-scale (a fake fleet of six raylets and 16 consumers, minutes): marked ``experiment``, so
the README's suite leaves it to CI's second step.

    PYTHONPATH=$PWD python3 -m pytest -q -p no:cacheprovider -m experiment tests/integration/test_fake_cluster_deploy.py
"""

from __future__ import annotations

import json
import signal

import psutil
import pytest
import ray

from mafka4 import cli
from mafka4.client.bootstrap import client_credential
from mafka4.client.cluster_access import ClusterAccess
from mafka4.client.topic_admin import create_topic
from mafka4.metadata import keys
from mafka4.metadata.endpoints import parse_endpoints
from mafka4.metadata.store import MetadataStore
from mafka4.physical.topics import TopicStore
from mafka4.runtime.connect import Connection
from mafka4.runtime.fake_ray_cluster import fake_ray_cluster
from mafka4.runtime.temporary import temporary_home
from mafka4.transport.ray_names import READ_NODE_RESOURCE, WRITE_NODE_RESOURCE, pinned_ray_node
from mafka4.virtual.vp_store import VirtualStore

from conftest import away_from_session_ray
from process_helpers import CLUSTER_YAML
from virtual_helpers import Deliveries, Member, ProduceLoop, topic_name
from wait_helpers import wait_until

CLUSTER = "fake"
# Small bounds, so that 16 open VPs of two read replicas (32; the closed ones count for no bound) need the
# yaml's most read nodes (4 x 8), however many of its at least two the autoscaler started; and a quick
# release once the group shrank, down to the yaml's least read nodes.
READ_NODES_MIN, READ_NODES_MAX = 2, 4
SETTINGS = {"read_node_scaling": 1, "upkeep_interval_ms": 500, "read_node_vp_replicas_max": 8,
            "read_nodes_min": READ_NODES_MIN, "read_nodes_max": READ_NODES_MAX,
            "read_node_idle_release_delay_ms": 20_000,
            "vp_merge_delay_ms": 2_000}
# The VPs a shrinking group closes keep their logs until their newest record passes the topic's retention.
# They count for no bound, but a released node moves the ones it hosts off before it stops (each move
# copies a log): short here, so that they retire first and the releases stay within the test's waits.
# (Their logs then are gone: what was consumed is checked, not the VPs' logs.)
RETENTION_MS = 90_000
# (A group of 32 and a bound of 16 tested the same in 190-220 s of CI's 30 minutes, this one in 169 s.)
MEMBERS_AT_START, MEMBERS_AT_MOST = 2, 16
# The autoscaler's delay before it ends an idle node, instead of the yaml's 30 minutes.
IDLE_TIMEOUT_MINUTES = 0.5
WAIT_S = 300


def mafka4(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def log_tail(path, lines: int = 40) -> str:
    """The end of the controller's log, for a failure's message."""
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else "(no log)"


def read_nodes(store: MetadataStore) -> set[str]:
    return set(TopicStore(store, CLUSTER).live_nodes("read"))


def alive_ray_nodes(resource: str) -> set[str]:
    return {node["NodeID"] for node in ray.nodes() if node["Alive"] and node["Resources"].get(resource, 0) > 0}


def kill_node(ray_node_id: str) -> None:
    """SIGKILL one fake node: its raylet and every process under it (its workers, its agents), as a machine dies.

    The raylet alone is not enough here: a fake node's raylet is a child of the autoscaler's monitor,
    which does not reap it, and a worker takes its raylet for alive as long as its PID exists (a
    zombie's does), so the node's actors would run on, holding their leases. On a machine of its own
    a dead raylet is reaped at once, and its workers exit.
    """
    flag = f"--node_id={ray_node_id}"
    [raylet] = [process for process in psutil.process_iter(["name", "cmdline"])
                if process.info["name"] == "raylet" and flag in (process.info["cmdline"] or [])]
    for process in [raylet, *raylet.children(recursive=True)]:  # listed before any dies: none is re-parented yet
        try:
            process.send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess:
            continue


@pytest.fixture
def deployed(capsys, monkeypatch):
    """(etcd Connection, client access, controller log path) of mafka4 deployed on the yaml's fake cluster."""
    with away_from_session_ray(), temporary_home(prefix="m4fd-") as home, \
            fake_ray_cluster(CLUSTER_YAML, idle_timeout_minutes=IDLE_TIMEOUT_MINUTES) as fake:
        monkeypatch.setenv("MAFKA4_HOME", str(home))  # where deploy writes the admin's credential
        data_dir = home / "data"
        settings = [argument for name, value in SETTINGS.items() for argument in ("--controller-setting",
                                                                                    f"{name}={value}")]
        try:
            code, out, err = mafka4(capsys, "deploy", "--address", fake.address, "--cluster", CLUSTER,
                                    "--data-dir", str(data_dir), "--client-port", "0", "--ready-timeout-s", str(WAIT_S),
                                    *settings)
            controller_log = data_dir / "controller.log"
            assert code == 0, (out, err, controller_log.read_text() if controller_log.exists() else "")
            code, out, _ = mafka4(capsys, "status", "--address", fake.address, "--cluster", CLUSTER)
            status = json.loads(out)
            assert code == 0 and status["running"], status
            store = MetadataStore(status["etcd_endpoint"])
            access = ClusterAccess(parse_endpoints(",".join(status["serving_read_nodes"].values())),
                                   client_credential(home))
            yield Connection(cluster=CLUSTER, store=store, state=None), access, controller_log, status, fake
        finally:
            cli.main(["undeploy", "--address", fake.address, "--cluster", CLUSTER])


@pytest.mark.experiment
def test_read_nodes_follow_a_group_from_2_to_16_and_a_killed_write_node_is_repaired_with_nothing_lost(deployed):
    connection, access, controller_log, status, fake = deployed
    store = connection.store
    monitor_log = fake.temp_dir / "session_latest" / "logs" / "monitor.log"
    # Every node is one the autoscaler launched from a node type: known by its Ray node id.
    assert all(pinned_ray_node(node_id) for node_id in status["registered_nodes"]), status["registered_nodes"]
    # At least the yaml's two; Ray's fake autoscaler sometimes launches one more of a type at its start.
    initial = read_nodes(store)
    assert READ_NODES_MIN <= len(initial) < READ_NODES_MAX, f"{initial}\n{log_tail(monitor_log, 80)}"

    topic, group = topic_name("fleet"), topic_name("g")
    create_topic(topic, partitions=2, replication_factor=2, virtual_partitions=2, read_replicas=2,
                 read_mode="mafka4", retention_ms=RETENTION_MS, where=access)
    virtual = VirtualStore(store, CLUSTER)

    def states():
        return {vp: state for vp, (state, _) in virtual.states(topic).items() if not state.retired}

    deliveries = Deliveries()
    loop = ProduceLoop(access, topic, pause_s=0.05)
    members = [Member(access, topic, group, f"m{i}", deliveries, auto_commit_interval_ms=500)
               for i in range(MEMBERS_AT_START)]
    try:
        # The group grows: read nodes are asked for, launched by Ray's autoscaler, and replicas move onto them.
        members += [Member(access, topic, group, f"m{i}", deliveries, auto_commit_interval_ms=500)
                    for i in range(MEMBERS_AT_START, MEMBERS_AT_MOST)]
        assert wait_until(lambda: len(read_nodes(store)) == READ_NODES_MAX, WAIT_S), \
            f"the read nodes did not grow to {READ_NODES_MAX}: {read_nodes(store)}, {len(states())} VPs; " \
            f"{store.get(keys.read_scaling(CLUSTER))}\n{log_tail(controller_log)}"
        assert wait_until(lambda: len(states()) == MEMBERS_AT_MOST, WAIT_S), \
            f"{len(states())} VPs\n{log_tail(controller_log)}"
        log = controller_log.read_text()
        assert f"(to {READ_NODES_MAX})" in log and f"asked Ray's autoscaler for {READ_NODES_MAX} read nodes" in log
        assert len(alive_ray_nodes(READ_NODE_RESOURCE)) == READ_NODES_MAX
        added = read_nodes(store) - initial
        assert wait_until(lambda: any(node in state.replicas for state in states().values() for node in added)
                          and not store.get_prefix(keys.replica_moves_prefix(CLUSTER)), WAIT_S), \
            f"no replica moved onto {added}: {states()}"

        # The group shrinks, and a write node's raylet dies meanwhile, mid-stream.
        for member in members[MEMBERS_AT_START:]:
            member.leave()
        members = members[:MEMBERS_AT_START]
        writes_before = alive_ray_nodes(WRITE_NODE_RESOURCE)
        victim = sorted(writes_before)[0]
        kill_node(victim)

        # The node leaves Ray, then mafka4's registry; the controller restores the replicas it hosted on the
        # other write nodes. (Ray's fake provider does not replace it: module docstring.)
        gone = f"ray-{victim}"
        assert wait_until(lambda: victim not in alive_ray_nodes(WRITE_NODE_RESOURCE)
                          and gone not in TopicStore(store, CLUSTER).live_nodes("write"), WAIT_S), \
            f"{gone} is still registered after its raylet was killed\n{log_tail(controller_log)}"
        topics = TopicStore(store, CLUSTER)
        assert wait_until(lambda: all(gone not in state.replicas and len(state.isr) == 2
                                      for state in topics.get(topic).partitions), WAIT_S), \
            f"the replicas of {gone} were not restored: {topics.get(topic).partitions}\n{log_tail(controller_log)}"

        # The VPs merge back and the closed ones retire; idle read nodes are released one at a time, then ended by Ray.
        assert wait_until(lambda: len(read_nodes(store)) == READ_NODES_MIN, 2 * WAIT_S), \
            f"no read node was released: {read_nodes(store)}; {store.get(keys.read_scaling(CLUSTER))}\n" \
            f"{log_tail(controller_log)}"
        assert "read nodes: release" in controller_log.read_text()
        assert wait_until(lambda: len(alive_ray_nodes(READ_NODE_RESOURCE)) == READ_NODES_MIN, WAIT_S), \
            "Ray's autoscaler did not end the released read nodes"
        assert all(set(state.replicas) <= read_nodes(store) for state in states().values()), states()

        loop.wait_for(len(loop.acknowledged) + 200)  # the producer goes on after the repair
        acknowledged = loop.stop()
        deliveries.wait_for_all(acknowledged, WAIT_S)
    finally:
        loop.stop()
        for member in members:
            member.leave()
    deliveries.check_per_key_order()
