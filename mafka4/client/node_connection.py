"""A client's way in: one authenticated connection to the first node that answers, and calls over it.

A client knows a few node addresses (``client.bootstrap``) and tries them in order until one
accepts its connection and its credential; any node answers metadata, which names the rest. A
node that does not answer is skipped; a refused credential is not (every node would refuse it:
the users are the cluster's), nor is any other answer a node gave. With no node answering, the
error names each address tried and why. The SCRAM exchange derives the user's salted password
once per process (``security.scram_client.PasswordKeys``), not once per connection.

``call_once`` runs one request on a private event loop and closes the connection: what a
command line and an admin client need (``where``: which cluster, as ``client.cluster_access``
reads it: a home, a ``ClusterAccess``, a process holding the cluster's store, or the environment's). It imports neither ``ray`` nor ``etcd3``.
"""

from __future__ import annotations

import asyncio
from typing import Sequence

from mafka4.client.bootstrap import Credential
from mafka4.client.cluster_access import cluster_access
from mafka4.errors import ClusterNotRunning, RequestTimedOut, StreamLost
from mafka4.metadata.endpoints import HostPort
from mafka4.protocol.connection import ClientConnection
from mafka4.security.scram_client import ScramClientExchange

CLIENT_NAME = "mafka4-python"


async def connect_to(node: HostPort, credential: Credential) -> ClientConnection:
    """An authenticated connection to ``node``; ``StreamLost`` or ``RequestTimedOut`` (retriable) if it does not answer."""
    return await ClientConnection.open(node.host, node.port, ScramClientExchange(credential.user, credential.password),
                                       CLIENT_NAME)


async def connect_any(nodes: Sequence[HostPort], credential: Credential) -> ClientConnection:
    """An authenticated connection to the first of ``nodes`` that answers; see the module docstring."""
    failures = []
    for node in nodes:
        try:
            return await connect_to(node, credential)
        except (StreamLost, RequestTimedOut) as error:
            failures.append(f"{node}: {error.message}")
    raise ClusterNotRunning(f"no mafka4 node answered ({'; '.join(failures)}); check that the cluster is up "
                            f"('mafka4 status') and that the bootstrap addresses are its nodes' client ports")


def call_once(request, where: object = None) -> object:
    """The answer of one request to any node of the cluster ``where`` names, as its user; the
    connection is closed after."""
    access = cluster_access(where)

    async def call() -> object:
        connection = await connect_any(access.nodes, access.credential)
        try:
            answer, _ = await connection.call(request)
            return answer
        finally:
            connection.close()

    return asyncio.run(call())
