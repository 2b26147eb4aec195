"""The admin APIs of users and ACLs: USER_ADD, USER_REMOVE, USER_LIST, ACL_ADD, ACL_REMOVE, ACL_LIST.

Each needs the cluster resource: ALTER to add or remove, DESCRIBE to list (the admin user may do
all of them; anyone else needs an ACL on ``--cluster``). The node writes to etcd, and every node
sees the change through its watch, so a new credential or rule counts from the next request.

**No password on the wire.** USER_ADD carries a SCRAM credential (salt, StoredKey, ServerKey,
iterations) that the client derived from the password, as Kafka's AlterUserScramCredentials
carries a salted password: the password never leaves the client, and the node checks only the
credential's shape (the client checks the password rules, ``security.principals``). The
credential is still what a node holds to check logins (whoever reads it can guess passwords
offline, or pose as a node to that user), so it travels only inside an authenticated
connection, and is not private on an untrusted network until the port is behind TLS (not built
yet).

A rule travels as six strings (the values of ``security.acl``'s enums); the node turns them into
an ``AclRule`` with the same strictness as a rule read from etcd (``rule_of``): a bad value is an
``InvalidConfig`` answered to the client. Pure: message types and their conversions.
"""

from __future__ import annotations

from dataclasses import dataclass

from mafka4.protocol.messages import ApiKey, register
from mafka4.security.acl import RULE_FIELDS, AclRule
from mafka4.security.credentials import StoredCredential


@dataclass(frozen=True, slots=True)
class CredentialInfo:
    """A SCRAM-SHA-256 credential (``security.credentials.StoredCredential``), never a password."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


@dataclass(frozen=True, slots=True)
class UserAddRequest:
    """Store ``user``'s credential; ``replace``: change the credential of a user that exists
    (else ``UserExists``)."""

    user: str
    credential: CredentialInfo
    replace: bool


@dataclass(frozen=True, slots=True)
class UserAddAnswer:
    user: str


@dataclass(frozen=True, slots=True)
class UserRemoveRequest:
    user: str


@dataclass(frozen=True, slots=True)
class UserRemoveAnswer:
    user: str


@dataclass(frozen=True, slots=True)
class UserListRequest:
    """Every user's name."""


@dataclass(frozen=True, slots=True)
class UserListAnswer:
    """The users' names, sorted."""

    users: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class AclRuleInfo:
    """An ACL rule as ``AclRule.to_json`` spells it."""

    principal: str
    permission: str
    operation: str
    resource_type: str
    pattern_type: str
    name: str


@dataclass(frozen=True, slots=True)
class AclAddRequest:
    """Store ``rule``; nothing changes if the cluster holds it already."""

    rule: AclRuleInfo


@dataclass(frozen=True, slots=True)
class AclAddAnswer:
    rule: AclRuleInfo


@dataclass(frozen=True, slots=True)
class AclRemoveRequest:
    """Delete ``rule``; ``UnknownAclRule`` if the cluster does not hold it."""

    rule: AclRuleInfo


@dataclass(frozen=True, slots=True)
class AclRemoveAnswer:
    rule: AclRuleInfo


@dataclass(frozen=True, slots=True)
class AclListRequest:
    """Every rule of the cluster."""


@dataclass(frozen=True, slots=True)
class AclListAnswer:
    """The rules, in the order of their ids."""

    rules: tuple[AclRuleInfo, ...]


def credential_info(credential: StoredCredential) -> CredentialInfo:
    return CredentialInfo(credential.salt, credential.stored_key, credential.server_key, credential.iterations)


def credential_of(info: CredentialInfo) -> StoredCredential:
    """The credential ``info`` carries; ``InvalidConfig`` naming the bad field."""
    return StoredCredential(info.salt, info.stored_key, info.server_key, info.iterations)


def rule_info(rule: AclRule) -> AclRuleInfo:
    return AclRuleInfo(**rule.to_json())


def rule_of(info: AclRuleInfo) -> AclRule:
    """The rule ``info`` carries; ``InvalidConfig`` naming the first bad field."""
    return AclRule.from_json({field: getattr(info, field) for field in RULE_FIELDS})


register(ApiKey.USER_ADD, UserAddRequest, UserAddAnswer)
register(ApiKey.USER_REMOVE, UserRemoveRequest, UserRemoveAnswer)
register(ApiKey.USER_LIST, UserListRequest, UserListAnswer)
register(ApiKey.ACL_ADD, AclAddRequest, AclAddAnswer)
register(ApiKey.ACL_REMOVE, AclRemoveRequest, AclRemoveAnswer)
register(ApiKey.ACL_LIST, AclListRequest, AclListAnswer)
