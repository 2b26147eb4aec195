"""Integration fixtures: one real local cluster (etcd + multi-node Ray) per test session.

Every test under tests/integration is marked ``integration`` so that ``-m 'not integration'``
gives the fast suite.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from mafka4.limits import ClusterConfig
from mafka4.runtime.temporary import temporary_cluster, temporary_home

INTEGRATION_DIR = Path(__file__).parent


def pytest_collection_modifyitems(config, items):
    for item in items:
        if INTEGRATION_DIR in Path(item.path).parents:
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def cluster():
    """A running cluster with write nodes w0..w2 and read node r0, and a driver connected to it."""
    with temporary_cluster(ClusterConfig(write_nodes=3, read_nodes=1)) as local:
        yield local.connection


@pytest.fixture(autouse=True)
def delete_topics_afterwards(request):
    """Delete every topic a test made on the session cluster once it ends.

    Idle partition and VP actors still long-poll each other: left behind, they load the
    2-core machine and slow every later test.
    """
    yield
    if "cluster" not in request.fixturenames:
        return
    from mafka4.client.admin import Admin

    admin = Admin(request.getfixturevalue("cluster"))
    for name in admin.list_topics():
        admin.delete_topic(name)


@contextlib.contextmanager
def away_from_session_ray():
    """Leave the session cluster's Ray, if this driver joined it, and rejoin it afterwards.

    A driver joins one Ray at a time, and a cluster of a test's own needs its driver.
    """
    import ray

    previous_ray = ray.get_runtime_context().gcs_address if ray.is_initialized() else None
    ray.shutdown()
    try:
        yield
    finally:
        if previous_ray is not None:
            ray.init(address=previous_ray, namespace="mafka4", log_to_driver=False)


@contextlib.contextmanager
def own_cluster(config: ClusterConfig):
    """A cluster of its own for one test module, with a driver connected to it (yields the TemporaryCluster).

    If the session cluster is running, the driver leaves its Ray meanwhile and rejoins it afterwards.
    """
    with away_from_session_ray(), temporary_cluster(config) as local:
        yield local


@pytest.fixture(scope="module")
def read_cluster():
    """A cluster of its own for one test module: write nodes w0, w1 and read nodes r0, r1 (RR=2)."""
    with own_cluster(ClusterConfig(write_nodes=2, read_nodes=2)) as local:
        yield local.connection


@pytest.fixture
def fresh_home():
    """An empty short home for a test that starts its own cluster; removed afterwards."""
    with temporary_home() as home:
        yield home
