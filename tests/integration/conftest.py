"""Integration fixtures: one real local cluster (etcd + multi-node Ray) per test session.

Every test under tests/integration is marked ``integration`` so that ``-m 'not integration'``
gives the fast suite.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from mafka4.limits import ClusterConfig
from mafka4.runtime.connect import connect
from mafka4.runtime.environment import HOME_ENV, ray_temp_dir
from mafka4.runtime.local import down, up

INTEGRATION_DIR = Path(__file__).parent


def pytest_collection_modifyitems(config, items):
    for item in items:
        if INTEGRATION_DIR in Path(item.path).parents:
            item.add_marker(pytest.mark.integration)


def short_home() -> Path:
    """A fresh home under /tmp: short enough that Ray's temp dir (and sockets) live inside it."""
    return Path(tempfile.mkdtemp(prefix="m4-", dir="/tmp"))


def remove_home(home: Path) -> None:
    shutil.rmtree(ray_temp_dir(home), ignore_errors=True)
    shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="session")
def cluster():
    """A running cluster with write nodes w0..w2 and read node r0, and a driver connected to it."""
    home = short_home()
    previous_home = os.environ.get(HOME_ENV)
    os.environ[HOME_ENV] = str(home)
    try:
        up(home, ClusterConfig(write_nodes=3, read_nodes=1))
        connection = None
        try:
            connection = connect(home)
            yield connection
        finally:
            import ray

            if connection is not None:
                connection.store.close()
            ray.shutdown()
            down(home)
    finally:
        if previous_home is None:
            os.environ.pop(HOME_ENV, None)
        else:
            os.environ[HOME_ENV] = previous_home
        remove_home(home)


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
def own_cluster(config: ClusterConfig):
    """A cluster of its own for one test module, with a driver connected to it (yields the connection).

    If the session cluster is running, the driver leaves its Ray meanwhile and rejoins it afterwards.
    """
    import ray

    previous_ray = ray.get_runtime_context().gcs_address if ray.is_initialized() else None
    previous_home = os.environ.get(HOME_ENV)
    ray.shutdown()
    home = short_home()
    os.environ[HOME_ENV] = str(home)
    connection, started = None, False
    try:
        up(home, config)  # kills what it started if it fails
        started = True
        connection = connect(home)
        yield connection
    finally:
        if connection is not None:
            connection.store.close()
        ray.shutdown()
        if started:
            down(home)
        if previous_home is None:
            os.environ.pop(HOME_ENV, None)
        else:
            os.environ[HOME_ENV] = previous_home
        remove_home(home)
        if previous_ray is not None:
            ray.init(address=previous_ray, namespace="mafka4", log_to_driver=False)


@pytest.fixture(scope="module")
def read_cluster():
    """A cluster of its own for one test module: write nodes w0, w1 and read nodes r0, r1 (RR=2)."""
    with own_cluster(ClusterConfig(write_nodes=2, read_nodes=2)) as connection:
        yield connection


@pytest.fixture
def fresh_home():
    """An empty short home for a test that starts its own cluster; removed afterwards."""
    home = short_home()
    yield home
    remove_home(home)
