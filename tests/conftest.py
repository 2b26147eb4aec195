"""Hooks for the whole session, whatever directories it runs, and ``lone_etcd``, a fixture for any of them.

How a test process ends. Two full runs of the suite ended in a segmentation fault (exit 139)
after pytest had reported every test passed: in the interpreter's teardown, not in a test.
A driver that joined Ray keeps native threads after ``ray.shutdown()`` (Ray's GCS client and
worker io threads, grpc's pollers and timers: a full run ends with about a dozen), which no
Python call stops, and they run on while the interpreter and the libraries' static state are torn
down. So, once the session has finished:

1. the process closes the clients it may still hold: the stream caller's event loop thread,
   Ray's driver and a Spark session (each only if its library was imported);
2. after pytest's own cleanup, it runs the exit handlers (``atexit``: what a normal exit runs
   first) and leaves with ``os._exit(exit status)``, skipping only the interpreter's teardown.
   The exit status is pytest's. Set ``MAFKA4_TEST_FULL_EXIT=1`` to exit the usual way instead
   (to chase the crash: ``PYTHONFAULTHANDLER=1`` prints every thread's stack if it comes).
"""

from __future__ import annotations

import atexit
import os
import sys

import pytest

FULL_EXIT_ENV = "MAFKA4_TEST_FULL_EXIT"

# pytest's exit status, once the session finished; None until then (and then the exit is pytest's).
_exit_status: int | None = None


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    if os.environ.get(FULL_EXIT_ENV) != "1":
        # The first cleanup added runs last, after every one pytest and its plugins add.
        config.add_cleanup(_exit_without_interpreter_teardown)


def pytest_sessionfinish(session, exitstatus):
    global _exit_status
    _close_clients()
    _exit_status = int(exitstatus)


def _close_clients() -> None:
    if "mafka4.client.client_loop" in sys.modules:
        sys.modules["mafka4.client.client_loop"].close_client_loop()
    if "ray" in sys.modules and sys.modules["ray"].is_initialized():
        sys.modules["ray"].shutdown()
    if "pyspark.sql" in sys.modules:
        active = sys.modules["pyspark.sql"].SparkSession.getActiveSession()
        if active is not None:
            active.stop()


def _exit_without_interpreter_teardown() -> None:
    if _exit_status is None:
        return  # the session did not finish: pytest reports and exits as it does
    atexit._run_exitfuncs()  # the handlers a normal exit runs before the teardown
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(_exit_status)


@pytest.fixture(scope="module")
def lone_etcd(tmp_path_factory):
    """One lone etcd member on a free loopback port for the module, stopped by its PID. Tests that
    share it keep apart by each writing below a cluster name of its own."""
    from mafka4.runtime.etcd_server import start_etcd, stop_etcd  # only the modules that use it start one

    server = start_etcd(tmp_path_factory.mktemp("etcd") / "data")
    try:
        yield server
    finally:
        stop_etcd(server)


@pytest.fixture
def lone_etcd_store(lone_etcd):
    """A ``MetadataStore`` on the module's lone etcd, closed after the test."""
    from mafka4.metadata.store import MetadataStore

    store = MetadataStore(lone_etcd.endpoint)
    try:
        yield store
    finally:
        store.close()
