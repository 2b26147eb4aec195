"""An etcd endpoint list: the client addresses of an etcd cluster's members, ``host:port[,host:port...]``.

One string names a whole etcd cluster wherever mafka4 passes "the etcd endpoint" around (the
cluster record, ``$MAFKA4_ETCD_ENDPOINT``, ``--etcd`` of the controller and node agents, the
specs of partition and read-node actors), so a single member and three members travel the
same way. Parsing is strict: a list that is not exactly ``host:port`` items fails here, with
the bad item named, rather than as an unreachable member later. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from mafka4.errors import InvalidConfig
from mafka4.limits import ETCD_ENDPOINTS_MAX

ENDPOINT_LIST_FORM = "host:port[,host:port...]"
TCP_PORTS = range(1, 65536)


@dataclass(frozen=True, slots=True)
class HostPort:
    """One address, host:port: an etcd member's, or a node's client port."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


def parse_endpoints(text: str, what: str = "etcd endpoint list") -> tuple[HostPort, ...]:
    """The members named by ``text`` in its order; InvalidConfig naming the bad item otherwise.

    ``what`` names the list in errors: the same form also lists a cluster's nodes for a client to
    start from (``MAFKA4_BOOTSTRAP``).
    """
    if not isinstance(text, str) or not text.strip():
        raise InvalidConfig(f"{what} {text!r} is empty; expected {ENDPOINT_LIST_FORM}, e.g. 127.0.0.1:2379")
    items = [item.strip() for item in text.split(",")]
    if len(items) > ETCD_ENDPOINTS_MAX:
        raise InvalidConfig(f"{what} {text!r} names {len(items)} members, at most {ETCD_ENDPOINTS_MAX}; "
                            f"expected {ENDPOINT_LIST_FORM}")
    members = tuple(_parse_item(text, item, what) for item in items)
    repeated = sorted({str(m) for m in members if members.count(m) > 1})
    if repeated:
        raise InvalidConfig(f"{what} {text!r} names {', '.join(repeated)} more than once; "
                            f"expected {ENDPOINT_LIST_FORM}, each member once")
    return members


def format_endpoints(members) -> str:
    """The endpoint list of ``members`` (addresses, or ``host:port`` strings), in their order."""
    return ",".join(str(member) for member in members)


def _parse_item(text: str, item: str, what: str) -> HostPort:
    host, _, port = item.rpartition(":")
    valid = (host and port.isascii() and port.isdigit() and int(port) in TCP_PORTS
             and not any(c.isspace() or c in "/:@" for c in host))
    if not valid:
        hint = " (no scheme: write 127.0.0.1:2379, not http://127.0.0.1:2379)" if "//" in item else ""
        problem = f"member {item!r} is not host:port with a port of 1-{TCP_PORTS[-1]}{hint}" if item else "a member is empty"
        raise InvalidConfig(f"{what} {text!r}: {problem}; expected {ENDPOINT_LIST_FORM}, "
                            f"e.g. 127.0.0.1:2379,127.0.0.1:22379")
    return HostPort(host, int(port))
