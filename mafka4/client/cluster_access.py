"""How a client reaches a cluster: the nodes it starts from and the credential it authenticates with.

``cluster_access(where)`` makes one from what a caller gives a ``Producer`` or a consumer:

- nothing: ``$MAFKA4_BOOTSTRAP`` or the local cluster's record, and ``$MAFKA4_USER`` /
  ``$MAFKA4_PASSWORD`` or the local cluster's admin credential (``client.bootstrap``);
- a ``ClusterAccess``: itself;
- a home directory (a ``Path``), or anything that carries a local cluster's state (``.state.home``,
  as a driver's ``Connection`` or a test's cluster does): that cluster's record and credential.

Imports neither ``ray`` nor ``etcd3``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mafka4.client.bootstrap import Credential, bootstrap_nodes, client_credential
from mafka4.metadata.endpoints import HostPort


@dataclass(frozen=True, slots=True)
class ClusterAccess:
    nodes: tuple[HostPort, ...]
    credential: Credential


def cluster_access(where: object = None) -> ClusterAccess:
    """The access ``where`` names; see the module docstring."""
    if isinstance(where, ClusterAccess):
        return where
    home = None
    if isinstance(where, (str, Path)):
        home = Path(where)
    elif where is not None:
        state = getattr(where, "state", None)
        home = Path(state.home) if state is not None else None  # joined by environment: the environment's
    return ClusterAccess(bootstrap_nodes(home), client_credential(home))
