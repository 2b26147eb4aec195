"""Where a client starts and who it is: the nodes it first connects to, and its credential.

Nodes: ``$MAFKA4_BOOTSTRAP`` (``host:port[,host:port...]``, client ports of any nodes of the
cluster), else the read nodes' client addresses recorded for the local cluster in
``<home>/cluster.json`` (``mafka4 up``). A client needs only one of them to answer: any node
answers metadata, which names every other node it may need.

Credential: ``$MAFKA4_USER`` and ``$MAFKA4_PASSWORD`` together, else the credential file
``<home>/credentials`` that ``mafka4 up`` writes for the cluster's admin (readable by its owner
only). The password is never sent: it answers a SCRAM challenge.

This module, like everything a client imports, imports neither ``ray`` nor ``etcd3``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from mafka4.errors import ClusterNotRunning, InvalidConfig
from mafka4.metadata.endpoints import HostPort, parse_endpoints
from mafka4.runtime.environment import mafka4_home
from mafka4.runtime.state import load_state
from mafka4.security.admin_credential import CREDENTIAL_FILE, load_credential

BOOTSTRAP_ENV = "MAFKA4_BOOTSTRAP"
USER_ENV = "MAFKA4_USER"
PASSWORD_ENV = "MAFKA4_PASSWORD"


@dataclass(frozen=True, slots=True)
class Credential:
    user: str
    password: str

    def __repr__(self) -> str:  # never print a password
        return f"Credential(user={self.user!r})"


def bootstrap_nodes(home: Path | None = None) -> tuple[HostPort, ...]:
    """The nodes a client starts from; ``ClusterNotRunning`` naming both ways to give them when none is known."""
    listed = os.environ.get(BOOTSTRAP_ENV)
    if listed:
        return parse_endpoints(listed, what=f"${BOOTSTRAP_ENV}")
    home = _home(home)
    state = load_state(home)
    if state is None or not state.ready or not state.bootstrap:
        raise ClusterNotRunning(f"no local cluster at {home}: start one with 'mafka4 up', or set ${BOOTSTRAP_ENV} "
                                f"to the client addresses of a cluster's nodes (host:port,...)")
    return parse_endpoints(",".join(state.bootstrap), what=f"the bootstrap addresses of {home}")


def client_credential(home: Path | None = None) -> Credential:
    """The credential a client authenticates with; see the module docstring."""
    user, password = os.environ.get(USER_ENV), os.environ.get(PASSWORD_ENV)
    if user or password:
        if not (user and password):
            raise InvalidConfig(f"set both ${USER_ENV} and ${PASSWORD_ENV} to authenticate as a user, or neither "
                                f"(to use the local cluster's admin credential)")
        return Credential(user, password)
    return Credential(*load_credential(_home(home) / CREDENTIAL_FILE))


def _home(home: Path | None) -> Path:
    return (Path(home) if home is not None else mafka4_home()).expanduser()
