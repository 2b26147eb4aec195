"""Process environment and directories of a local mafka4 cluster.

Owns the environment variables every process that starts or joins the local Ray must carry
(loopback only, no usage reporting) and the cluster's directories: the home
(``$MAFKA4_HOME``, default ``~/.mafka4``) and a Ray temp dir short enough for Ray's unix
sockets. Ray reads ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER`` when it is first imported, so
``apply_ray_environment`` must run before ``import ray``; ``force_loopback_if_imported``
covers the case where something imported Ray earlier.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

HOME_ENV = "MAFKA4_HOME"
HOME_DEFAULT = Path("~/.mafka4")
# Ray puts sockets at <temp_dir>/session_<date>_<time>_<us>_<pid>/sockets/<name> (about 65
# characters after temp_dir) and refuses paths of 107 characters or more; this budget
# leaves room for worker-node socket suffixes.
RAY_TEMP_DIR_CHARS_MAX = 36
SHORT_TEMP_ROOT = Path("/tmp")


def ray_environment() -> dict[str, str]:
    """Variables that keep Ray on 127.0.0.1 and silent; child processes inherit them."""
    return {
        # Off: Ray then treats this machine as a single host and binds loopback only.
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
        "RAY_USAGE_STATS_ENABLED": "0",
    }


def apply_ray_environment() -> None:
    """Set the variables in ``os.environ`` where they are unset (an explicit value wins)."""
    for name, value in ray_environment().items():
        os.environ.setdefault(name, value)
    force_loopback_if_imported()


def force_loopback_if_imported() -> None:
    """If Ray was imported before the environment was set, make it pick loopback anyway.

    Ray copies the variable into a module constant at import and reads that constant each
    time it picks this node's IP address, so correcting the constant is enough.
    """
    constants = sys.modules.get("ray._private.ray_constants")
    if constants is not None and os.environ.get("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER") == "0":
        constants.ENABLE_RAY_CLUSTER = False


def mafka4_home() -> Path:
    return Path(os.environ.get(HOME_ENV) or HOME_DEFAULT).expanduser().resolve()


def ray_temp_dir(home: Path) -> Path:
    """``<home>/ray`` if short enough for Ray's socket paths, else ``/tmp/mafka4-<hash>``.

    The hash is of the resolved home, so one home always maps to the same directory.
    """
    home = Path(home).expanduser().resolve()
    candidate = home / "ray"
    if len(str(candidate)) <= RAY_TEMP_DIR_CHARS_MAX:
        return candidate
    digest = hashlib.sha256(str(home).encode()).hexdigest()[:12]
    return SHORT_TEMP_ROOT / f"mafka4-{digest}"
