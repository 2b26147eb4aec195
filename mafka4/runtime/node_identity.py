"""Who a Ray node is to mafka4: its role and its node id, read from the resources it offers (pure).

A write node offers ``write_node``, a read node ``read_node``. A node may also offer
``mafka4_node_<id>`` (``transport.ray_names``): ``<id>`` is then its mafka4 id, the one it
registers under, and replicas are pinned to it by that resource; an id of the operator's
choosing (``ray_cluster.yaml`` of old gave each worker its short hostname) outlives a restart
of the Ray node. A node that offers none, as every node Ray's autoscaler launches from a node
type does, is known by its Ray node id (``ray_node_node_id``: ``ray-<hex>``) and pinned by node
affinity. A Ray node that offers neither role resource is no mafka4 node (the head). One that
offers several ids, an id of the reserved ``ray-`` form, or both roles, cannot be given an
agent: ``identify_node`` says why, so that the operator can fix the node's ``ray start
--resources``.

Node ids name a Ray resource, an etcd key and a directory: ``validate_node_id`` holds the rule.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from typing import Mapping

from mafka4.errors import InvalidNodeId
from mafka4.transport.ray_names import (NODE_RESOURCE_PREFIX, RAY_NODE_ID_PREFIX, READ_NODE_RESOURCE, WRITE_NODE_RESOURCE,
                                        node_resource, ray_node_node_id)

# A DNS label: the longest name `hostname -s` prints, and room for ``ray-`` and a Ray node id's 56 hex digits.
NODE_ID_CHARS_MAX = 63
# First character not "-", so that an id is never taken for an option on a command line.
_NODE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")


class NodeRole(enum.Enum):
    WRITE = "write"
    READ = "read"


ROLE_RESOURCES = {NodeRole.WRITE: WRITE_NODE_RESOURCE, NodeRole.READ: READ_NODE_RESOURCE}


@dataclass(frozen=True, slots=True)
class NodeIdentity:
    node_id: str
    role: NodeRole


def validate_node_id(node_id: object) -> str:
    """Return ``node_id`` if it can name a node, else raise ``InvalidNodeId`` saying why.

    The id ends up in the Ray resource ``mafka4_node_<id>`` (written as JSON into a shell
    command by ``ray_cluster.yaml``), in the etcd key ``.../nodes/<id>`` and in the directory
    ``<data root>/<id>``: letters, digits, "_" and "-" are safe in all three.
    """
    if not isinstance(node_id, str) or not node_id:
        raise InvalidNodeId(f"node id {node_id!r} must be a non-empty string")
    if len(node_id) > NODE_ID_CHARS_MAX:
        raise InvalidNodeId(f"node id of {len(node_id)} characters is too long: at most {NODE_ID_CHARS_MAX}")
    if not _NODE_ID.fullmatch(node_id):
        raise InvalidNodeId(
            f"node id {node_id!r} is not valid: use letters, digits, '_' and '-', starting with a letter or "
            f"digit, and the same id as the node's Ray resource {node_resource('<id>')}"
        )
    return node_id


def identify_node(resources: Mapping[str, float], ray_node_id: str) -> NodeIdentity | None:
    """The mafka4 identity of Ray node ``ray_node_id`` offering ``resources``; None if it offers no role resource.

    Its id is the ``<id>`` of its one ``mafka4_node_<id>``, or, if it offers none,
    ``ray_node_node_id(ray_node_id)``. Raises ``InvalidNodeId`` when it offers several ids, an id
    starting with the reserved ``ray-``, or both roles: such a node gets no agent (placement
    could not tell which id pins replicas to it, or which side it serves).
    """
    roles = [role for role, resource in ROLE_RESOURCES.items() if resources.get(resource, 0) > 0]
    if not roles:
        return None
    if len(roles) > 1:
        raise InvalidNodeId(f"the Ray node offers both {WRITE_NODE_RESOURCE} and {READ_NODE_RESOURCE}: "
                            f"a mafka4 node has one role; start it with one of them")
    role = roles[0]
    ids = sorted(name[len(NODE_RESOURCE_PREFIX):] for name, amount in resources.items()
                 if name.startswith(NODE_RESOURCE_PREFIX) and amount > 0)
    if not ids:
        return NodeIdentity(ray_node_node_id(ray_node_id), role)
    if len(ids) > 1:
        found = ", ".join(NODE_RESOURCE_PREFIX + node_id for node_id in ids)
        raise InvalidNodeId(
            f"the Ray node offers {ROLE_RESOURCES[role]} and {len(ids)} node ids ({found}): offer one "
            f"{node_resource('<id>')}, or none to be known by the Ray node's id"
        )
    if ids[0].startswith(RAY_NODE_ID_PREFIX):
        raise InvalidNodeId(
            f"node id {ids[0]!r} (resource {node_resource(ids[0])}) starts with {RAY_NODE_ID_PREFIX!r}, which names "
            f"nodes known by their Ray node id: choose another id, or offer none"
        )
    return NodeIdentity(validate_node_id(ids[0]), role)
