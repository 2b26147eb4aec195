"""The cluster's ACL rules in etcd: one key per rule.

Key ``/mafka4/<cluster>/acls/<id>`` (``metadata.keys``), ``<id>`` being ``AclRule.digest()``, so
adding a rule that exists writes nothing new; value ``AclRule.to_json()``. At most
``ACL_RULES_MAX`` rules: the count is read before a new rule is written, so two adds racing at
the bound may pass it by one. Nodes watch ``prefix`` and build an ``AclTable`` from what they see.
"""

from __future__ import annotations

from mafka4.errors import InvalidConfig, UnknownAclRule
from mafka4.limits import ACL_RULES_MAX
from mafka4.metadata import keys
from mafka4.metadata.store import MetadataStore
from mafka4.security.acl import AclRule


class AclStore:
    def __init__(self, store: MetadataStore, cluster: str):
        self._store = store
        self._cluster = cluster
        # Every rule's key starts with it: what a node watches.
        self.prefix = keys.acls_prefix(cluster)

    def add(self, rule: AclRule) -> None:
        """Store ``rule``; nothing changes if it is there already. ``InvalidConfig`` at ``ACL_RULES_MAX`` rules."""
        key = keys.acl(self._cluster, rule.digest())
        if self._store.get(key) is not None:
            return
        if self._store.count_prefix(self.prefix) >= ACL_RULES_MAX:
            raise InvalidConfig(f"the cluster holds {ACL_RULES_MAX} ACL rules, the most it takes: remove some "
                                f"(mafka4 acl list, mafka4 acl remove), or cover many names with one prefixed rule")
        # False: another writer added the same rule meanwhile, which is what this one wanted.
        self._store.compare_and_swap(key, rule.to_json(), 0)

    def remove(self, rule: AclRule) -> None:
        """Delete ``rule``; ``UnknownAclRule`` if the cluster does not hold it."""
        if not self._store.delete(keys.acl(self._cluster, rule.digest())):
            raise UnknownAclRule(f"there is no ACL rule {rule.describe()} to remove: see mafka4 acl list")

    def rules(self) -> list[AclRule]:
        """Every rule, in the order of their ids."""
        return [AclRule.from_json(item.value) for item in self._store.get_prefix(self.prefix)]
