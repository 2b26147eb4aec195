"""What a node's client port answers to the admin APIs of users and ACLs (``protocol.admin_api``).

Every request is checked first, through the port's own check (so a refusal is logged and
counted like any other): ALTER on the cluster to add or remove, DESCRIBE on the cluster to list.
Then the node writes or reads etcd through ``UserStore`` and ``AclStore`` on a thread, since the
store's calls block. Lists are read from etcd, not from the node's watched view, so that a list
right after a change shows it; a change reaches every node's checks through its watch.

The admin user (``ADMIN_USER``) is neither removed nor given a new credential here: its
credential file is the operator's way in (``mafka4 up`` keeps it), and either change would lock
the operator out (``ProtectedUser``).
"""

from __future__ import annotations

import asyncio
from typing import Callable

from mafka4.errors import ProtectedUser
from mafka4.metadata.store import MetadataStore
from mafka4.protocol.admin_api import (AclAddAnswer, AclAddRequest, AclListAnswer, AclListRequest, AclRemoveAnswer,
                                       AclRemoveRequest, UserAddAnswer, UserAddRequest, UserListAnswer,
                                       UserListRequest, UserRemoveAnswer, UserRemoveRequest, credential_of, rule_info,
                                       rule_of)
from mafka4.protocol.messages import ApiKey
from mafka4.protocol.server import Handler
from mafka4.protocol.session import Session
from mafka4.security.acl import CLUSTER_RESOURCE, Operation, ResourceType
from mafka4.security.acl_store import AclStore
from mafka4.security.principals import ADMIN_USER
from mafka4.security.user_store import UserStore

# The port's check: nothing if the session's principal may do the operation on the resource,
# else NotAuthorized (logged and counted by the port).
Check = Callable[[Session, Operation, ResourceType, str], None]


class AdminHandlers:
    """The handlers of the user and ACL APIs of ``cluster``, writing through ``store``."""

    def __init__(self, store: MetadataStore, cluster: str, check: Check):
        self._users, self._acls, self._check = UserStore(store, cluster), AclStore(store, cluster), check

    def handlers(self) -> dict[ApiKey, Handler]:
        return {ApiKey.USER_ADD: self._user_add, ApiKey.USER_REMOVE: self._user_remove,
                ApiKey.USER_LIST: self._user_list, ApiKey.ACL_ADD: self._acl_add,
                ApiKey.ACL_REMOVE: self._acl_remove, ApiKey.ACL_LIST: self._acl_list}

    def _check_cluster(self, session: Session, operation: Operation) -> None:
        self._check(session, operation, ResourceType.CLUSTER, CLUSTER_RESOURCE)

    async def _user_add(self, session: Session, request: UserAddRequest, _buffers) -> tuple[UserAddAnswer, tuple]:
        self._check_cluster(session, Operation.ALTER)
        _refuse_admin(request.user, "given a new password")
        credential = credential_of(request.credential)
        await asyncio.to_thread(self._users.put_credential, request.user, credential, request.replace)
        return UserAddAnswer(request.user), ()

    async def _user_remove(self, session: Session, request: UserRemoveRequest,
                           _buffers) -> tuple[UserRemoveAnswer, tuple]:
        self._check_cluster(session, Operation.ALTER)
        _refuse_admin(request.user, "removed")
        await asyncio.to_thread(self._users.remove, request.user)
        return UserRemoveAnswer(request.user), ()

    async def _user_list(self, session: Session, _request: UserListRequest, _buffers) -> tuple[UserListAnswer, tuple]:
        self._check_cluster(session, Operation.DESCRIBE)
        return UserListAnswer(tuple(await asyncio.to_thread(self._users.names))), ()

    async def _acl_add(self, session: Session, request: AclAddRequest, _buffers) -> tuple[AclAddAnswer, tuple]:
        self._check_cluster(session, Operation.ALTER)
        await asyncio.to_thread(self._acls.add, rule_of(request.rule))
        return AclAddAnswer(request.rule), ()

    async def _acl_remove(self, session: Session, request: AclRemoveRequest,
                          _buffers) -> tuple[AclRemoveAnswer, tuple]:
        self._check_cluster(session, Operation.ALTER)
        await asyncio.to_thread(self._acls.remove, rule_of(request.rule))
        return AclRemoveAnswer(request.rule), ()

    async def _acl_list(self, session: Session, _request: AclListRequest, _buffers) -> tuple[AclListAnswer, tuple]:
        self._check_cluster(session, Operation.DESCRIBE)
        rules = await asyncio.to_thread(self._acls.rules)
        return AclListAnswer(tuple(rule_info(rule) for rule in rules)), ()


def _refuse_admin(user: str, change: str) -> None:
    if user == ADMIN_USER:
        raise ProtectedUser(f"user {ADMIN_USER!r} cannot be {change} through the client port: its credential is "
                            f"the operator's way in, kept by 'mafka4 up' in $MAFKA4_HOME/credentials; manage "
                            f"other users (mafka4 user add NAME) and grant them ACLs instead")
