"""How a client reaches a cluster: the nodes it starts from and the credential it authenticates with.

``cluster_access(where)`` makes one from what a caller gives a ``Producer`` or a consumer:

- nothing: ``$MAFKA4_BOOTSTRAP`` or the local cluster's record, and ``$MAFKA4_USER`` /
  ``$MAFKA4_PASSWORD`` or the local cluster's admin credential (``client.bootstrap``);
- a ``ClusterAccess``: itself;
- a home directory (a ``Path``): that local cluster's record and credential;
- a process that holds the cluster's metadata store already (``.store`` and ``.cluster``: a
  driver's ``Connection``, a test's cluster): the client addresses its live read nodes and
  replicas name in etcd, then its record's; the credential of its home (``.state.home``), else
  the environment's.

Imports neither ``ray`` nor ``etcd3``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mafka4.client.bootstrap import Credential, bootstrap_nodes, client_credential
from mafka4.metadata.endpoints import HostPort, parse_endpoints


@dataclass(frozen=True, slots=True)
class ClusterAccess:
    nodes: tuple[HostPort, ...]
    credential: Credential


def cluster_access(where: object = None) -> ClusterAccess:
    """The access ``where`` names; see the module docstring."""
    if isinstance(where, ClusterAccess):
        return where
    if isinstance(where, (str, Path)):
        return ClusterAccess(bootstrap_nodes(Path(where)), client_credential(Path(where)))
    if where is None:
        return ClusterAccess(bootstrap_nodes(), client_credential())
    state = getattr(where, "state", None)
    home = Path(state.home) if state is not None else None  # joined by environment: the environment's
    live = live_addresses(where.store, where.cluster)
    nodes = tuple(dict.fromkeys((*live, *(bootstrap_nodes(home) if not live else ()))))
    return ClusterAccess(nodes, client_credential(home))


def live_addresses(store, cluster: str) -> tuple[HostPort, ...]:
    """The client addresses in the liveness keys of ``cluster``'s read nodes, then of its replicas."""
    from mafka4.metadata import keys  # here: a client that is not such a process never reads etcd's keys

    items = [*store.get_prefix(keys.read_nodes_prefix(cluster)), *store.get_prefix(keys.replicas_prefix(cluster))]
    return tuple(parse_endpoints(item.value["client"], what=f"the client address in {item.key}")[0]
                 for item in items if isinstance(item.value, dict) and item.value.get("client"))
