"""A throwaway local cluster that lives for one ``with`` block and leaves nothing behind.

The demo, the experiments, chaos runs, calibration and the integration tests each need a
cluster of their own for a while. ``temporary_cluster`` gives them one:

* on entry: a fresh home under /tmp (short, because Ray's socket paths live inside it, see
  ``environment.ray_temp_dir``), ``up`` in it, ``$MAFKA4_HOME`` pointing at it (so processes
  the body starts, such as chaos group members, join this cluster), and this process
  connected as a driver;
* on exit, also when the body raised: the driver leaves Ray, ``down`` stops by PID everything
  the cluster's daemon started, then every etcd server the body recorded in
  ``etcd_started``; the home and Ray's temp dir are removed and ``$MAFKA4_HOME`` restored.

A start that fails leaves nothing either (``up`` stops what it started). The daemon's log
goes with the home, so its last lines are put in the error instead.

Precondition: this process is not connected to Ray. The driver joins the new cluster, and on
exit whatever Ray connection the process holds is the cluster's and is shut down.
"""

from __future__ import annotations

import contextlib
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from mafka4.errors import ClusterNotRunning
from mafka4.exported_variables import exported_variable
from mafka4.limits.servers import ClusterConfig
from mafka4.runtime.connect import Connection, connect
from mafka4.runtime.daemon import LOG_FILE_NAME
from mafka4.runtime.environment import HOME_ENV, SHORT_TEMP_ROOT, ray_temp_dir
from mafka4.runtime.etcd_member import EtcdServer
from mafka4.runtime.etcd_server import stop_etcd
from mafka4.runtime.local import down, up
from mafka4.runtime.state import ClusterState, state_path

HOME_PREFIX_DEFAULT = "m4-"
LOG_TAIL_LINES = 5


@dataclass(frozen=True, slots=True)
class TemporaryCluster:
    """A running throwaway cluster, as the body of ``temporary_cluster`` sees it."""

    home: Path
    state: ClusterState
    connection: Connection
    # etcd servers the body started for this cluster (a chaos run restarts etcd outside the
    # daemon): the daemon does not know them, so they are stopped after it on exit.
    etcd_started: list[EtcdServer]
    # Every PID stopped on exit; empty until then.
    stopped_pids: list[int]


@contextlib.contextmanager
def temporary_home(prefix: str = HOME_PREFIX_DEFAULT) -> Iterator[Path]:
    """A fresh empty home under /tmp; on exit it and its Ray temp dir are removed."""
    home = Path(tempfile.mkdtemp(prefix=prefix, dir=SHORT_TEMP_ROOT))
    try:
        yield home
    finally:
        # A long home puts Ray's temp dir outside it (environment.ray_temp_dir).
        shutil.rmtree(ray_temp_dir(home), ignore_errors=True)
        shutil.rmtree(home, ignore_errors=True)


@contextlib.contextmanager
def temporary_cluster(
    config: ClusterConfig = ClusterConfig(), home_prefix: str = HOME_PREFIX_DEFAULT
) -> Iterator[TemporaryCluster]:
    """Start a cluster shaped by ``config`` in a fresh home named ``<home_prefix>...``; yield it.

    Raises ClusterNotRunning, having started nothing, if this process is already connected
    to Ray, and, having stopped whatever it started, if the cluster does not come up.
    """
    _require_no_ray_connection()
    with temporary_home(home_prefix) as home, exported_variable(HOME_ENV, str(home)):
        state = _up(home, config)
        etcd_started: list[EtcdServer] = []
        stopped_pids: list[int] = []
        connection = None
        try:
            connection = connect(home)
            yield TemporaryCluster(home, state, connection, etcd_started, stopped_pids)
        finally:
            _leave_ray(connection)
            try:
                if state_path(home).exists():  # else the daemon stopped its cluster and removed its record itself
                    stopped_pids.extend(down(home))
            finally:
                for server in etcd_started:
                    stop_etcd(server)
                    stopped_pids.append(server.pid)


def _require_no_ray_connection() -> None:
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        raise ClusterNotRunning(
            f"this process is already connected to Ray at {ray.get_runtime_context().gcs_address}; "
            f"call ray.shutdown() before starting a temporary cluster"
        )


def _up(home: Path, config: ClusterConfig) -> ClusterState:
    try:
        return up(home, config)
    except ClusterNotRunning as error:  # up stopped what it started; its log is about to go with the home
        raise ClusterNotRunning(f"{error.message}; the daemon log ends: {_log_tail(home)}") from None


def _log_tail(home: Path) -> str:
    try:
        lines = (home / LOG_FILE_NAME).read_text(errors="replace").strip().splitlines()
    except OSError:
        return "(no log)"
    return " | ".join(lines[-LOG_TAIL_LINES:])


def _leave_ray(connection: Connection | None) -> None:
    """Close the driver's etcd client and leave Ray (joined even if ``connect`` failed after it)."""
    if connection is not None:
        connection.store.close()
    ray = sys.modules.get("ray")
    if ray is not None:
        ray.shutdown()
