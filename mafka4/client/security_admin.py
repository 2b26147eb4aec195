"""Users and ACLs of a cluster, managed through any node's client port (``protocol.admin_api``).

The caller needs ALTER on the cluster to add or remove, DESCRIBE to list (the admin user has
both). ``add_user`` checks the password rules here and sends only the SCRAM credential made from
the password (``security.credentials.make_credential``): the password never leaves this process.
Imports neither ``ray`` nor ``etcd3``.
"""

from __future__ import annotations

from pathlib import Path

from mafka4.client.node_connection import call_once
from mafka4.protocol.admin_api import (
    AclAddRequest,
    AclListRequest,
    AclRemoveRequest,
    UserAddRequest,
    UserListRequest,
    UserRemoveRequest,
    credential_info,
    rule_info,
    rule_of,
)
from mafka4.security.acl import AclRule
from mafka4.security.credentials import make_credential
from mafka4.security.principals import validate_password, validate_user_name


def add_user(name: str, password: str, replace: bool = False, home: Path | None = None) -> None:
    """Add user ``name`` with ``password`` (``replace``: change the password of a user that exists,
    else ``UserExists``); ``InvalidConfig`` for a bad name or password, before connecting."""
    credential = make_credential(validate_password(password, validate_user_name(name)))
    call_once(UserAddRequest(name, credential_info(credential), replace), home)


def remove_user(name: str, home: Path | None = None) -> None:
    """Remove user ``name``; ``UnknownUser`` if there is none. New connections as it fail; ACLs naming it stay."""
    call_once(UserRemoveRequest(validate_user_name(name)), home)


def list_users(home: Path | None = None) -> list[str]:
    """Every user's name, sorted."""
    return list(call_once(UserListRequest(), home).users)


def add_acl(rule: AclRule, home: Path | None = None) -> None:
    """Add ``rule``; nothing changes if the cluster holds it already."""
    call_once(AclAddRequest(rule_info(rule)), home)


def remove_acl(rule: AclRule, home: Path | None = None) -> None:
    """Remove ``rule``; ``UnknownAclRule`` if the cluster does not hold it."""
    call_once(AclRemoveRequest(rule_info(rule)), home)


def list_acls(home: Path | None = None) -> list[AclRule]:
    """Every rule of the cluster."""
    return [rule_of(info) for info in call_once(AclListRequest(), home).rules]
