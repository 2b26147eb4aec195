"""One member of a local cluster's etcd, as a value: where it listens and keeps its data.

``runtime.etcd_server`` starts and stops members; the cluster record (``runtime.state``) lists
them. A client reads that record to find the cluster's client ports, so this module, and not
the one that runs etcd, holds what the record is made of: it starts nothing and imports no
process code. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass

from mafka4.metadata.endpoints import format_endpoints
from mafka4.runtime.ports import LOOPBACK

LONE_MEMBER_NAME = "mafka4"
LONE_MEMBER_DIR = "etcd"


@dataclass(frozen=True, slots=True)
class EtcdServer:
    """One etcd member process; ``name`` to ``cluster_token`` describe its place in a cluster."""

    pid: int
    client_port: int
    data_dir: str
    log_path: str
    name: str = LONE_MEMBER_NAME
    peer_port: int = 0  # 0: not recorded (a lone member, which takes a new one at every start)
    # "name=http://127.0.0.1:<peer port>,..." for every member; "" for a lone member.
    initial_cluster: str = ""
    cluster_token: str = ""
    # Where it listens: loopback for a local cluster; a deployed member's node address
    # (``runtime.deploy_actors``), since the cluster's other nodes are its clients.
    host: str = LOOPBACK

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.client_port}"


def etcd_endpoint(servers) -> str:
    """The endpoint list a client of these members is given (``host:port[,host:port...]``)."""
    return format_endpoints(server.endpoint for server in servers)
