"""Ray's fake multi-node cluster, shaped like ``ray_cluster.yaml``, for one ``with`` block (issue 38's
checks, and ``bench read-scale``).

``fake_ray_cluster`` writes the autoscaling config that ``mafka4.runtime.fake_cluster_config``
derives from the yaml into a fresh directory under /tmp, starts the head as
``RAY_FAKE_CLUSTER=1 ray start --head ... --block`` on a free loopback port, joins it as this
process's driver and waits until Ray's autoscaler has launched the yaml's minimum workers (each a
local raylet with its node type's resources). The body gets a ``FakeRayCluster``; later workers
come from the autoscaler, e.g. after ``ray.autoscaler.sdk.request_resources``.

The cluster follows the project's rules for a local Ray: loopback only and no usage reporting
(``runtime.environment.ray_environment``), Ray's files in the cluster's own short temp dir (never
/tmp/ray), and Ray's token authentication with a token of its own (``use_ray_token``): a process
joins it only with ``token_path``. The fake workers inherit all of that from the head, since the
autoscaler that starts them runs in one of the head's processes.

Stopping, by PID (``ray stop`` stops every Ray on the machine by process name, which the project
forbids): the head is started in a session of its own, so every process of the cluster is in that
session: the head's processes, the autoscaler's fake raylets (children of the autoscaler's monitor
process) and the workers they start, even once re-parented after their raylet died. On exit,
also when the body raised: the driver leaves Ray; those PIDs are listed (session members and
the head's descendants) before any signal; the head gets SIGTERM (``ray start --block`` then stops
its processes, and the monitor, with ``RAY_AUTOSCALER_FATESHARE_WORKERS=1``, terminates the fake
nodes it launched), is waited for up to ``DAEMON_STOP_TIMEOUT_S``, and whatever of the listed
PIDs and of the session still runs is SIGKILLed (``runtime.session_processes``). The head is
reaped only after that, so its PID, the session's id, cannot be reused meanwhile. The directory
goes last.

Precondition: this process is not joined to Ray. Nothing here runs mafka4: a test that deploys
mafka4 on the fake cluster does that in its body (``FakeRayCluster.launch.commands_not_run``
lists the yaml's commands that the fake cluster does not run, with why).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import yaml

from mafka4.limits import DAEMON_STOP_TIMEOUT_S, FAKE_RAY_CLUSTER_START_TIMEOUT_S, LOCAL_CLUSTER_POLL_INTERVAL_S
from mafka4.runtime.environment import (SHORT_TEMP_ROOT, apply_ray_environment, ensure_ray_token, ray_environment,
                                       use_ray_token)
from mafka4.runtime.fake_cluster_config import FakeClusterLaunch, fake_cluster_launch, workers_by_type
from mafka4.runtime.ports import LOOPBACK, free_loopback_port
from mafka4.runtime.session_processes import alive, descendants, kill_pids, session_members
from mafka4.transport.ray_names import NAMESPACE

# The directory that holds this mafka4 package (a checkout's root when run from one): the head
# puts it on the fake nodes' PYTHONPATH, so that their workers run this code whatever mafka4 is
# installed.
CODE_ROOT = Path(__file__).resolve().parents[2]
HOME_PREFIX = "m4fake-"
CONFIG_FILE = "autoscaling_config.yaml"
HEAD_LOG_FILE = "ray_start_head.log"
LOG_TAIL_LINES = 20


@dataclass(frozen=True, slots=True)
class FakeRayCluster:
    """A running fake cluster, as the body of ``fake_ray_cluster`` sees it."""

    address: str  # the GCS, "127.0.0.1:<port>": what ray.init(address=...) takes
    config_path: Path  # the autoscaling config the head's autoscaler reads
    token_path: Path  # Ray's token: use_ray_token(token_path) before a process joins
    temp_dir: Path  # Ray's files (sessions, logs)
    head_pid: int  # the ``ray start --head --block`` process; its PID is the id of the cluster's session
    launch: FakeClusterLaunch
    # Every PID stopped on exit; empty until then.
    stopped_pids: set[int] = field(default_factory=set)

    def pids(self) -> set[int]:
        """The cluster's processes running now: the head, its descendants, its session's members."""
        return {self.head_pid, *descendants(self.head_pid), *session_members(self.head_pid)}

    def workers_by_type(self) -> dict[str, int]:
        """Alive fake workers per node type, as Ray's node list shows them (this process is joined)."""
        import ray

        return workers_by_type(self.launch.autoscaling_config, ray.nodes())


@contextlib.contextmanager
def fake_ray_cluster(cluster_yaml_path: Path, idle_timeout_minutes: float | None = None,
                     start_timeout_s: float = FAKE_RAY_CLUSTER_START_TIMEOUT_S) -> Iterator[FakeRayCluster]:
    """The fake cluster of ``cluster_yaml_path``, its minimum workers up and this process joined to it.

    ``idle_timeout_minutes`` replaces the yaml's delay before the autoscaler releases an idle
    worker. Raises RuntimeError, having stopped whatever started, if the head exits or the minimum
    workers are not up within ``start_timeout_s``.
    """
    cluster_yaml = yaml.safe_load(cluster_yaml_path.read_text())
    home = Path(tempfile.mkdtemp(prefix=HOME_PREFIX, dir=SHORT_TEMP_ROOT))
    try:
        temp_dir = home / "ray"  # short: Ray's socket paths live inside (environment.RAY_TEMP_DIR_CHARS_MAX)
        temp_dir.mkdir()
        config_path = home / CONFIG_FILE
        port = free_loopback_port()
        launch = fake_cluster_launch(cluster_yaml, port, str(config_path), str(temp_dir), idle_timeout_minutes)
        config_path.write_text(yaml.safe_dump(launch.autoscaling_config, sort_keys=False))
        token_path = ensure_ray_token(home)
        head = _start_head(launch, home, temp_dir, token_path)
        cluster = FakeRayCluster(address=f"{LOOPBACK}:{port}", config_path=config_path, token_path=token_path,
                                 temp_dir=temp_dir, head_pid=head.pid, launch=launch)
        deadline = time.monotonic() + start_timeout_s
        try:
            _wait_for_head(cluster, head, deadline, home / HEAD_LOG_FILE)
            _join(cluster)
            _wait_for_minimum_workers(cluster, head, deadline, home / HEAD_LOG_FILE)
            yield cluster
        finally:
            _leave_ray()
            cluster.stopped_pids.update(_stop(head))
    finally:
        shutil.rmtree(home, ignore_errors=True)


def _start_head(launch: FakeClusterLaunch, home: Path, temp_dir: Path, token_path: Path) -> subprocess.Popen:
    environment = ray_environment() | _code_environment() | {
        "RAY_FAKE_CLUSTER": "1",  # the fake provider refuses to run without it
        # The monitor terminates the fake nodes it launched when it is stopped (else they outlive it).
        "RAY_AUTOSCALER_FATESHARE_WORKERS": "1",
        # On SIGTERM the head would first drain its node for up to 30 s (for Ray Serve's proxies), longer
        # than the stop's grace: nothing here serves traffic, so it stops its processes at once.
        "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0",
        # Ray's default temp dir (else /tmp/ray, shared with every Ray here), for anything not placed in
        # the head's temp dir (the fake workers take the head's, from the GCS).
        "RAY_TMPDIR": str(temp_dir),
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN_PATH": str(token_path),
    }
    environment.pop("RAY_AUTH_TOKEN", None)  # it would win over the file
    with open(home / HEAD_LOG_FILE, "ab") as log:
        # Own session: the session id finds every process of the cluster on exit (module docstring).
        return subprocess.Popen(
            [sys.executable, "-m", "ray.scripts.scripts", "start", *launch.head_ray_start_arguments],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=home, env=environment,
            start_new_session=True,
        )


def _code_environment() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(CODE_ROOT), os.environ.get("PYTHONPATH")])))


def _wait_for_head(cluster: FakeRayCluster, head: subprocess.Popen, deadline: float, log_path: Path) -> None:
    """Until ``ray start`` has recorded the cluster's address in its temp dir: it does so once the head's
    GCS and raylet are up, before it blocks."""
    address_file = cluster.temp_dir / "ray_current_cluster"
    while not address_file.exists():
        _check_head(head, deadline, log_path, "the fake cluster's head did not start")
        time.sleep(LOCAL_CLUSTER_POLL_INTERVAL_S)


def _join(cluster: FakeRayCluster) -> None:
    apply_ray_environment()
    import ray  # after the environment: Ray reads it at import

    if ray.is_initialized():
        raise RuntimeError("this process is already joined to Ray; call ray.shutdown() before a fake cluster")
    use_ray_token(cluster.token_path)
    ray.init(address=cluster.address, namespace=NAMESPACE, logging_level=logging.WARNING, log_to_driver=False)


def _wait_for_minimum_workers(cluster: FakeRayCluster, head: subprocess.Popen, deadline: float,
                              log_path: Path) -> None:
    wanted = cluster.launch.minimum_workers
    while True:
        up = cluster.workers_by_type()
        if all(up.get(name, 0) >= count for name, count in wanted.items()):
            return
        _check_head(head, deadline, log_path,
                    f"the fake cluster has workers {up}, the yaml's minimum is {wanted} (the autoscaler's log: "
                    f"{cluster.temp_dir}/session_latest/logs/monitor.log)")
        time.sleep(LOCAL_CLUSTER_POLL_INTERVAL_S)


def _check_head(head: subprocess.Popen, deadline: float, log_path: Path, waiting_for: str) -> None:
    if not alive(head.pid, reap=False):
        raise RuntimeError(f"the fake cluster's head exited; its log ends:\n{_tail(log_path)}")
    if time.monotonic() > deadline:
        raise RuntimeError(f"{waiting_for} in time; the head's log ends:\n{_tail(log_path)}")


def _leave_ray() -> None:
    import ray

    if ray.is_initialized():
        ray.shutdown()


def _stop(head: subprocess.Popen) -> set[int]:
    """Stop every process of the head's session by PID (module docstring); the PIDs stopped."""
    # Listed before the signal: a worker whose raylet dies is re-parented and leaves the head's tree.
    pids = {head.pid, *descendants(head.pid), *session_members(head.pid)}
    with contextlib.suppress(ProcessLookupError):
        os.kill(head.pid, signal.SIGTERM)
    deadline = time.monotonic() + DAEMON_STOP_TIMEOUT_S
    # reap=False: a zombie head keeps its PID, the session's id, from being reused until we reap it.
    while alive(head.pid, reap=False) and time.monotonic() < deadline:
        time.sleep(LOCAL_CLUSTER_POLL_INTERVAL_S)
    pids |= session_members(head.pid)
    kill_pids(pids - {head.pid})
    with contextlib.suppress(ProcessLookupError):
        os.kill(head.pid, signal.SIGKILL)  # still running after the grace; a zombie ignores it
    head.wait()
    return pids


def _tail(log_path: Path) -> str:
    try:
        return "\n".join(log_path.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:])
    except OSError as error:
        return f"(no log: {error})"
