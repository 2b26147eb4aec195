"""Process environment and directories of a local mafka4 cluster.

Owns the environment variables every process that starts or joins the local Ray must carry
(loopback only, no usage reporting) and the cluster's directories: the home
(``$MAFKA4_HOME``, default ``~/.mafka4``) and a Ray temp dir short enough for Ray's unix
sockets. Ray reads ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER`` when it is first imported, so
``apply_ray_environment`` must run before ``import ray``; ``force_loopback_if_imported``
covers the case where something imported Ray earlier.

A local cluster's Ray runs with Ray's token authentication: ``mafka4 up`` writes a random token
to ``<home>/ray_token`` (readable by its owner only, ``ensure_ray_token``), the daemon starts Ray
with it, and every process that joins that Ray presents it (``use_ray_token``, which
``runtime.connect`` calls; processes the cluster starts inherit it). A process without the
token (another user's, or a client that has only the client ports' address) cannot join Ray,
so it can neither run code on the cluster nor call its actors. Ray keeps the token and the mode
it read in caches of its own, so ``use_ray_token`` makes it read them again: a process may join
one cluster after another (the integration suite's drivers do).
"""

from __future__ import annotations

import hashlib
import os
import secrets
import sys
from pathlib import Path

from mafka4.durable_files import replace_file

HOME_ENV = "MAFKA4_HOME"
HOME_DEFAULT = Path("~/.mafka4")
# Ray puts sockets at <temp_dir>/session_<date>_<time>_<us>_<pid>/sockets/<name> (about 65
# characters after temp_dir) and refuses paths of 107 characters or more; this budget
# leaves room for worker-node socket suffixes.
RAY_TEMP_DIR_CHARS_MAX = 36
SHORT_TEMP_ROOT = Path("/tmp")
RAY_TOKEN_FILE = "ray_token"
RAY_TOKEN_FILE_MODE = 0o600
RAY_TOKEN_RANDOM_SIZE = 32  # bytes of randomness in a cluster's Ray token (64 hex characters)


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


def ray_token_path(home: Path) -> Path:
    """Where the Ray token of the cluster in ``home`` is kept."""
    return Path(home).expanduser().resolve() / RAY_TOKEN_FILE


def ensure_ray_token(home: Path) -> Path:
    """The cluster's Ray token file, written (owner-only, durably) if it is missing; its path."""
    path = ray_token_path(home)
    if not path.exists():
        token = secrets.token_hex(RAY_TOKEN_RANDOM_SIZE).encode()
        replace_file(path, lambda file: file.write(token), RAY_TOKEN_FILE_MODE)
    return path


def use_ray_token(token_path: Path) -> None:
    """From now on, this process's Ray (and every process it starts) authenticates with the token in
    ``token_path``. Call it before starting or joining Ray, never while joined: it makes Ray read its
    token and mode again (the caches ``ray._private.authentication_test_utils`` resets, in its order)."""
    os.environ["RAY_AUTH_MODE"] = "token"
    os.environ["RAY_AUTH_TOKEN_PATH"] = str(token_path)
    os.environ.pop("RAY_AUTH_TOKEN", None)  # it would win over the file
    raylet = sys.modules.get("ray._raylet")
    if raylet is not None:
        raylet.Config.initialize("")
        raylet.AuthenticationTokenLoader.instance().reset_cache()


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
