"""Access control lists: rules that allow or deny a principal an operation on a resource, and the
decision for one request.

A rule names a principal (a user name, or ``ANYONE`` "*": every authenticated user), a
permission (ALLOW or DENY), one operation, a resource type (topic, group or the cluster) and a
resource name, matched LITERAL (the name itself; the literal name "*" is every resource of the
type, as in Kafka) or PREFIXED (every name that starts with it). The cluster resource has one
name, ``CLUSTER_RESOURCE``, and only literal rules.

The decision for (principal, operation, resource type, name), in order:

1. A superuser (``ADMIN_USER`` by default) may do anything; no rule is consulted.
2. Any matching DENY refuses. A DENY matches only its own operation: denying PRODUCE does not
   deny DESCRIBE.
3. A matching ALLOW permits. An ALLOW also matches the operations it implies (Kafka's rules), on
   any resource type:
   - PRODUCE and CONSUME imply DESCRIBE (a producer fetches the topic's metadata; a consumer
     describes its group);
   - CREATE, ALTER and DELETE imply DESCRIBE (what one may change, one may look at).
4. Otherwise the request is refused: nothing is allowed by default.

``AclTable`` is an immutable value built from the rules (indexed so that a decision costs a few
dict look-ups per prefix length present, not a scan of every rule); ``check`` raises
``NotAuthorized`` naming the principal, the operation, the resource and the ``mafka4 acl``
command that fixes it. Pure: rules in, decisions out.
"""

from __future__ import annotations

import enum
import hashlib
import json
import shlex
from dataclasses import dataclass
from typing import Iterable

from mafka4.errors import InvalidConfig, NotAuthorized
from mafka4.limits import TOPIC_NAME_CHARS_MAX
from mafka4.names import name_problem
from mafka4.security.principals import ADMIN_USER, ANYONE, user_name_problem

# The one name of the cluster resource (Kafka's "kafka-cluster").
CLUSTER_RESOURCE = "mafka4-cluster"
# A literal rule with this name matches every resource of its type.
EVERY_NAME = "*"


class Operation(enum.Enum):
    PRODUCE = "produce"
    CONSUME = "consume"
    DESCRIBE = "describe"
    CREATE = "create"
    ALTER = "alter"
    DELETE = "delete"


class ResourceType(enum.Enum):
    TOPIC = "topic"
    GROUP = "group"
    CLUSTER = "cluster"


class PatternType(enum.Enum):
    LITERAL = "literal"
    PREFIXED = "prefixed"


class Permission(enum.Enum):
    ALLOW = "allow"
    DENY = "deny"


# What an ALLOW of each operation also allows (the module docstring's rule 3).
IMPLIED = {
    Operation.PRODUCE: frozenset({Operation.DESCRIBE}),
    Operation.CONSUME: frozenset({Operation.DESCRIBE}),
    Operation.CREATE: frozenset({Operation.DESCRIBE}),
    Operation.ALTER: frozenset({Operation.DESCRIBE}),
    Operation.DELETE: frozenset({Operation.DESCRIBE}),
    Operation.DESCRIBE: frozenset(),
}
# The operations whose ALLOW permits each operation: itself and those implying it.
ALLOWED_BY = {wanted: frozenset({wanted} | {op for op, implied in IMPLIED.items() if wanted in implied})
              for wanted in Operation}
# How a refusal spells each operation before its resource.
VERBS = {Operation.PRODUCE: "produce to", Operation.CONSUME: "consume from", Operation.DESCRIBE: "describe",
         Operation.CREATE: "create", Operation.ALTER: "alter", Operation.DELETE: "delete"}
RULE_FIELDS = ("principal", "permission", "operation", "resource_type", "pattern_type", "name")


@dataclass(frozen=True, slots=True)
class AclRule:
    """One rule; validated on construction (``InvalidConfig`` naming the bad field)."""

    principal: str
    permission: Permission
    operation: Operation
    resource_type: ResourceType
    pattern_type: PatternType
    name: str

    def __post_init__(self) -> None:
        problem = None if self.principal == ANYONE else user_name_problem(self.principal)
        if problem is not None:
            raise InvalidConfig(f"ACL field 'principal': {problem} (or {ANYONE!r}: anyone)")
        for field, kind in (("permission", Permission), ("operation", Operation), ("resource_type", ResourceType),
                            ("pattern_type", PatternType)):
            if not isinstance(getattr(self, field), kind):
                raise InvalidConfig(f"ACL field {field!r} must be one of {[item.value for item in kind]}, "
                                    f"not {getattr(self, field)!r}")
        problem = _resource_name_problem(self.resource_type, self.pattern_type, self.name)
        if problem is not None:
            raise InvalidConfig(f"ACL field 'name': {problem}")

    def to_json(self) -> dict:
        return {"principal": self.principal, "permission": self.permission.value, "operation": self.operation.value,
                "resource_type": self.resource_type.value, "pattern_type": self.pattern_type.value, "name": self.name}

    @classmethod
    def from_json(cls, value: dict) -> "AclRule":
        """The rule of a ``to_json`` value; ``InvalidConfig`` naming the first bad field."""
        if not isinstance(value, dict) or set(value) != set(RULE_FIELDS):
            fields = sorted(value) if isinstance(value, dict) else type(value).__name__
            raise InvalidConfig(f"an ACL rule must have exactly the fields {list(RULE_FIELDS)}, not {fields}")
        return cls(value["principal"], _enum(Permission, value, "permission"), _enum(Operation, value, "operation"),
                   _enum(ResourceType, value, "resource_type"), _enum(PatternType, value, "pattern_type"),
                   value["name"])

    def digest(self) -> str:
        """A stable id of the rule (its etcd key's last part): the same rule always has the same one."""
        text = json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:32]

    def matches(self, principal: str, operation: Operation, resource_type: ResourceType, name: str) -> bool:
        """Whether the rule speaks to this request: its principal, its operation (for an ALLOW,
        or one it implies), its resource type, and its name literally or as a prefix."""
        operations = ALLOWED_BY[operation] if self.permission is Permission.ALLOW else {operation}
        return (self.principal in (ANYONE, principal) and self.operation in operations
                and self.resource_type is resource_type and self._matches_name(name))

    def _matches_name(self, name: str) -> bool:
        if self.pattern_type is PatternType.PREFIXED:
            return name.startswith(self.name)
        return self.name in (EVERY_NAME, name)

    def describe(self) -> str:
        """The rule as ``mafka4 acl`` options."""
        return _acl_options(self.principal, self.permission, self.operation, self.resource_type, self.pattern_type,
                            self.name)


class AclTable:
    """The rules of a cluster as one immutable value: ``allows`` and ``check`` decide requests."""

    __slots__ = ("rules", "superusers", "_literal", "_prefixed", "_prefix_lengths")

    def __init__(self, rules: Iterable[AclRule], superusers: frozenset[str] = frozenset({ADMIN_USER})):
        self.rules: tuple[AclRule, ...] = tuple(dict.fromkeys(rules))
        self.superusers = frozenset(superusers)
        # (resource type, name or prefix) -> the rules naming it, literal and prefixed apart.
        literal: dict[tuple[ResourceType, str], list[AclRule]] = {}
        prefixed: dict[tuple[ResourceType, str], list[AclRule]] = {}
        for rule in self.rules:
            index = prefixed if rule.pattern_type is PatternType.PREFIXED else literal
            index.setdefault((rule.resource_type, rule.name), []).append(rule)
        self._literal = {key: tuple(found) for key, found in literal.items()}
        self._prefixed = {key: tuple(found) for key, found in prefixed.items()}
        self._prefix_lengths = tuple(sorted({len(name) for _, name in prefixed}))

    def _candidates(self, resource_type: ResourceType, name: str) -> Iterable[AclRule]:
        """Every rule whose resource matches ``name``, whatever its principal and operation."""
        for key in ((resource_type, name), (resource_type, EVERY_NAME)):
            yield from self._literal.get(key, ())
        for length in self._prefix_lengths:
            if length > len(name):
                break
            yield from self._prefixed.get((resource_type, name[:length]), ())

    def _matching(self, principal: str, operation: Operation, resource_type: ResourceType,
                  name: str) -> tuple[AclRule | None, bool]:
        """(a DENY that matches or None, whether an ALLOW matches)."""
        allowed = False
        for rule in self._candidates(resource_type, name):
            if rule.matches(principal, operation, resource_type, name):
                if rule.permission is Permission.DENY:
                    return rule, False
                allowed = True
        return None, allowed

    def allows(self, principal: str, operation: Operation, resource_type: ResourceType, name: str) -> bool:
        """Superuser: yes; any matching DENY: no; a matching ALLOW: yes; else no."""
        if principal in self.superusers:
            return True
        deny, allowed = self._matching(principal, operation, resource_type, name)
        return deny is None and allowed

    def check(self, principal: str, operation: Operation, resource_type: ResourceType, name: str) -> None:
        """Nothing if ``allows``; else ``NotAuthorized`` naming who, what, which and the fix."""
        if principal in self.superusers:
            return
        deny, allowed = self._matching(principal, operation, resource_type, name)
        if deny is None and allowed:
            return
        resource = "the cluster" if resource_type is ResourceType.CLUSTER else f"{resource_type.value} {name!r}"
        refused = f"principal {principal!r} may not {VERBS[operation]} {resource}"
        if deny is not None:
            raise NotAuthorized(f"{refused}: an ACL denies it (mafka4 acl remove {deny.describe()})")
        # Options, not an AclRule: the name asked for need not be valid (the request is refused anyway).
        wanted = _acl_options(principal, Permission.ALLOW, operation, resource_type, PatternType.LITERAL, name)
        raise NotAuthorized(f"{refused}: no ACL allows it (mafka4 acl add {wanted})")


def _acl_options(principal: str, permission: Permission, operation: Operation, resource_type: ResourceType,
                 pattern_type: PatternType, name: str) -> str:
    """A rule as ``mafka4 acl`` options, quoted for a shell ("*" would be expanded)."""
    deny = " --deny" if permission is Permission.DENY else ""
    resource = (" --cluster" if resource_type is ResourceType.CLUSTER
                else f" --{resource_type.value} {shlex.quote(name)}")
    prefixed = " --prefixed" if pattern_type is PatternType.PREFIXED else ""
    return f"--principal {shlex.quote(principal)}{deny} --operation {operation.value}{resource}{prefixed}"


def _resource_name_problem(resource_type: object, pattern_type: PatternType, name: object) -> str | None:
    if resource_type is ResourceType.CLUSTER:
        if pattern_type is not PatternType.LITERAL:
            return f"a cluster rule is literal (the cluster has one name, {CLUSTER_RESOURCE!r}): drop --prefixed"
        if name != CLUSTER_RESOURCE:
            return f"a cluster rule names {CLUSTER_RESOURCE!r}, not {name!r}"
        return None
    if pattern_type is PatternType.LITERAL and name == EVERY_NAME:
        return None
    # A prefix need not be a whole name ("orders."), but it holds only a name's characters.
    return name_problem(name, f"{resource_type.value} name or prefix", TOPIC_NAME_CHARS_MAX)


def _enum(kind: type[enum.Enum], value: dict, field: str):
    try:
        return kind(value[field])
    except (ValueError, TypeError):
        raise InvalidConfig(f"ACL field {field!r} must be one of {[item.value for item in kind]}, "
                            f"not {value[field]!r}") from None
