"""The cluster's users in etcd: one SCRAM credential per user, never a password.

Key ``/mafka4/<cluster>/users/<user>`` (``metadata.keys``), value ``StoredCredential.to_json()``.
Every name is validated before it becomes a key. A password given to ``add`` is checked against
the rules of ``security.principals`` before it is turned into a credential; a credential given to
``put_credential`` was made by whoever knew the password (the client of ``mafka4 user add``, which
checks the same rules), so that the password never reaches the cluster. Nodes watch ``prefix`` to keep
their view of the credentials current (``keys.user_name_of`` names the user of a key).
"""

from __future__ import annotations

from mafka4.errors import UnknownUser, UserExists
from mafka4.metadata import keys
from mafka4.metadata.store import MetadataStore
from mafka4.security.credentials import StoredCredential, make_credential
from mafka4.security.principals import validate_password, validate_user_name


class UserStore:
    def __init__(self, store: MetadataStore, cluster: str):
        self._store = store
        self._cluster = cluster
        # Every user's key starts with it: what a node watches.
        self.prefix = keys.users_prefix(cluster)

    def add(self, user: str, password: str, replace: bool = False) -> None:
        """Store a new credential of ``user`` for ``password``; as ``put_credential``."""
        validate_user_name(user)
        self.put_credential(user, make_credential(validate_password(password, user)), replace)

    def put_credential(self, user: str, credential: StoredCredential, replace: bool = False) -> None:
        """Store ``user``'s credential, made from the password by whoever knows it (a client, for
        ``mafka4 user add``); ``UserExists`` if the user exists, unless ``replace`` (the password
        changes; connections already authenticated stay open)."""
        key = keys.user(self._cluster, validate_user_name(user))
        value = credential.to_json()
        if replace:
            self._store.put(key, value)
        elif not self._store.compare_and_swap(key, value, 0):
            raise UserExists(f"user {user!r} already exists: remove it first (mafka4 user remove {user}), "
                             f"or change its password (mafka4 user add {user} --replace)")

    def remove(self, user: str) -> None:
        """Delete ``user``'s credential (new connections as it fail); ``UnknownUser`` if there is none."""
        if not self._store.delete(keys.user(self._cluster, validate_user_name(user))):
            raise UnknownUser(f"there is no user {user!r} to remove: see mafka4 user list")

    def names(self) -> list[str]:
        """Every user's name, sorted."""
        return [keys.user_name_of(self._cluster, item.key) for item in self._store.get_prefix(self.prefix)]

    def get(self, user: str) -> StoredCredential | None:
        """``user``'s credential, None if there is no such user (InvalidConfig for an invalid name)."""
        found = self._store.get(keys.user(self._cluster, validate_user_name(user)))
        return None if found is None else StoredCredential.from_json(found.value)
