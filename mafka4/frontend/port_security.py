"""Who a port's clients are and what they may do: SCRAM against the users, ACLs on every request.

Every port of the cluster (a read node's ``NodePort``, a replica's ``ReplicaPort``) authenticates
its connections and checks its requests the same way, from a ``ClusterView`` that watches the
users and the ACL rules: a user added or an ACL changed in etcd takes effect on the next request,
as soon as the watch delivers it; a connection already authenticated stays so (as in Kafka)
until it closes.

A refused request raises ``NotAuthorized`` naming the principal, the operation and the resource;
it is logged at INFO with the peer and counted (``refusals``).
"""

from __future__ import annotations

import logging

from mafka4.errors import NotAuthorized
from mafka4.frontend.cluster_view import ClusterView
from mafka4.protocol.session import Session
from mafka4.security.acl import AclRule, AclTable, Operation, ResourceType
from mafka4.security.credentials import StoredCredential
from mafka4.security.scram import ScramServerExchange
from mafka4.security.scram_client import MECHANISM

logger = logging.getLogger(__name__)

MECHANISMS = (MECHANISM,)


class PortSecurity:
    """Authentication and authorization of one port's clients, from ``view``."""

    def __init__(self, view: ClusterView):
        self._view = view
        self._acls: tuple[int, AclTable] = (-1, AclTable(()))
        self.refusals = 0

    def exchange(self, mechanism: str) -> ScramServerExchange:
        """The server's side of one authentication (the port offers only ``MECHANISMS``)."""
        assert mechanism == MECHANISM, "the server offers only this mechanism and refuses others itself"
        return ScramServerExchange(self._credential)

    def check(self, session: Session, operation: Operation, resource_type: ResourceType, name: str) -> None:
        """``NotAuthorized`` (logged and counted) unless the session's principal may do ``operation`` on the resource."""
        try:
            self.acl_table().check(session.principal, operation, resource_type, name)
        except NotAuthorized as refusal:
            self.refusals += 1
            logger.info("refused a request from %s: %s", session.peer, refusal.message)
            raise

    def allows(self, session: Session, operation: Operation, resource_type: ResourceType, name: str) -> bool:
        return self.acl_table().allows(session.principal, operation, resource_type, name)

    def acl_table(self) -> AclTable:
        """The rules as the view holds them now, rebuilt only after they changed."""
        version, table = self._acls
        if self._view.read(lambda state: state.acls_version) != version:
            version, rules = self._view.read(lambda state: (state.acls_version, list(state.acls.values())))
            table = AclTable(AclRule.from_json(rule) for rule in rules)
            self._acls = (version, table)
        return table

    def _credential(self, user: str) -> StoredCredential | None:
        stored = self._view.read(lambda state: state.users.get(user))
        return None if stored is None else StoredCredential.from_json(stored)
