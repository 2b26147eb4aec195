"""Integration fixtures: real local clusters (etcd + multi-node Ray).

* ``read_cluster``: one cluster (w0, w1, r0, r1) shared by every test that asks for it.
* ``cluster``: one cluster (w0..w2, r0) shared by every test that asks for it.

One cluster runs at a time. The tests are ordered (``pytest_collection_modifyitems``): first
those on the read cluster, then those on the session cluster, then the rest (tests that start
clusters of their own, and every test outside this directory). Each shared cluster stops
after the last test that uses it (``pytest_runtest_teardown``), not at the session's end: an
idle cluster's processes keep taking a share of the 2 cores from every later test, and a test
with a cluster of its own no longer has to leave and rejoin a shared cluster's Ray. A cluster
start costs ~25 s here, so each shared one starts once.

Both record fsync points (``mafka4.log.fsync_points``), as chaos clusters do, so that a test can
cut a node's logs back to them: a power loss (``test_faults_power_disk``).

Every test under tests/integration is marked ``integration`` so that ``-m 'not integration'``
gives the fast suite.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest

from mafka4.limits.servers import ClusterConfig
from mafka4.log.fsync_points import recording_fsync_points
from mafka4.runtime.environment import use_ray_token
from mafka4.runtime.temporary import temporary_cluster, temporary_home

INTEGRATION_DIR = Path(__file__).parent


# The shared clusters, in the order their tests run.
SHARED_CLUSTERS = ("shared_read_cluster", "cluster")
# Each shared cluster's stack while it runs: closing it stops the cluster.
_running_clusters: dict[str, contextlib.ExitStack] = {}
# How many of the tests still to run use each shared cluster.
_users_left: dict[str, int] = {}


def pytest_collection_modifyitems(config, items):
    for item in items:
        if INTEGRATION_DIR in Path(item.path).parents:
            item.add_marker(pytest.mark.integration)
    # Stable: the tests of each group keep their order among themselves.
    items.sort(key=_shared_cluster_rank)


def _shared_cluster_rank(item) -> int:
    used = _shared_clusters_used(item)
    return SHARED_CLUSTERS.index(used[0]) if used else len(SHARED_CLUSTERS)


def _shared_clusters_used(item) -> list[str]:
    names = getattr(item, "fixturenames", ())
    return [name for name in SHARED_CLUSTERS if name in names]


def pytest_collection_finish(session):
    # Counted on the tests that will run: after -m, -k and the like deselected theirs.
    _users_left.clear()
    for item in session.items:
        for name in _shared_clusters_used(item):
            _users_left[name] = _users_left.get(name, 0) + 1


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    yield  # the test's own teardown first: it may still delete its topics on the cluster
    for name in _shared_clusters_used(item):
        _users_left[name] -= 1
        if _users_left[name] == 0 and name in _running_clusters:
            _running_clusters.pop(name).close()


@contextlib.contextmanager
def _stopped_early_or_at_the_end(name: str, cluster_context):
    """Run ``cluster_context`` until the last test using it ends (or the session does)."""
    with contextlib.ExitStack() as stack:
        _running_clusters[name] = stack
        yield stack.enter_context(cluster_context)
    _running_clusters.pop(name, None)


@pytest.fixture(scope="session")
def cluster():
    """A running cluster with write nodes w0..w2 and read node r0, and a driver connected to it."""
    with _stopped_early_or_at_the_end("cluster", _recording_cluster(ClusterConfig(write_nodes=3, read_nodes=1))) as local:
        yield local.connection


@contextlib.contextmanager
def _recording_cluster(config: ClusterConfig):
    """A shared cluster; its logs record fsync points (see the module docstring)."""
    with recording_fsync_points(), own_cluster(config) as local:
        yield local


@pytest.fixture(autouse=True)
def delete_topics_afterwards(request):
    """Delete every topic a test made on the session cluster once it ends.

    Idle partition and VP actors still long-poll each other: left behind, they load the
    2-core machine and slow every later test.
    """
    yield
    if "cluster" in request.fixturenames:
        _delete_every_topic(request.getfixturevalue("cluster"))


def _delete_every_topic(connection) -> None:
    from mafka4.client.admin import Admin

    from mafka4.errors import UnknownTopic

    admin = Admin(connection)
    for name in admin.list_topics():
        try:
            admin.delete_topic(name)
        except UnknownTopic:
            pass  # a delay topic, deleted with its topic


@contextlib.contextmanager
def away_from_session_ray():
    """Leave the session cluster's Ray, if this driver joined it, and rejoin it afterwards.

    A driver joins one Ray at a time, and a cluster of a test's own needs its driver.
    """
    import ray

    previous_ray = ray.get_runtime_context().gcs_address if ray.is_initialized() else None
    previous_token = os.environ.get("RAY_AUTH_TOKEN_PATH")  # the session cluster's: a cluster admits its own
    ray.shutdown()
    try:
        yield
    finally:
        if previous_ray is not None:
            if previous_token is not None:
                use_ray_token(Path(previous_token))
            ray.init(address=previous_ray, namespace="mafka4", log_to_driver=False)


@contextlib.contextmanager
def own_cluster(config: ClusterConfig):
    """A cluster of its own for one test module, with a driver connected to it (yields the TemporaryCluster).

    If the session cluster is running, the driver leaves its Ray meanwhile and rejoins it afterwards.
    """
    with away_from_session_ray(), temporary_cluster(config) as local:
        yield local


READ_CLUSTER_READ_NODES = 2
# How long a test waits for the shared read cluster's read nodes (a start or a restart under load).
READ_NODES_LIVE_WAIT_S = 180


@pytest.fixture(scope="session")
def shared_read_cluster():
    config = ClusterConfig(write_nodes=2, read_nodes=READ_CLUSTER_READ_NODES)
    with _stopped_early_or_at_the_end("shared_read_cluster", _recording_cluster(config)) as local:
        yield local.connection


@pytest.fixture
def read_cluster(shared_read_cluster):
    """The shared cluster of write nodes w0, w1 and read nodes r0, r1 (RR=2); see the module docstring.

    A test starts once both read nodes are live: right after the cluster's start, or after an
    earlier test killed or stopped one, a read node may still be starting (on a loaded machine
    for most of a minute). A test's topics are deleted after it, so that the next test finds an
    idle cluster.
    """
    _wait_for_live_read_nodes(shared_read_cluster, READ_CLUSTER_READ_NODES)
    yield shared_read_cluster
    _delete_every_topic(shared_read_cluster)


def _wait_for_live_read_nodes(connection, count: int) -> None:
    from mafka4.metadata import keys
    from wait_helpers import wait_until

    def live() -> list[str]:
        return [item.key for item in connection.store.get_prefix(keys.read_nodes_prefix(connection.cluster))]

    if not wait_until(lambda: len(live()) == count, READ_NODES_LIVE_WAIT_S):
        pytest.fail(f"the shared read cluster has {live()} live, not {count} read nodes, after "
                    f"{READ_NODES_LIVE_WAIT_S} s: see its controller log")


@pytest.fixture
def fresh_home():
    """An empty short home for a test that starts its own cluster; removed afterwards."""
    with temporary_home() as home:
        yield home
