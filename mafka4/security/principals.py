"""Who may authenticate: user names, password rules and the credential file's format.

A *principal* is the user name a client authenticated as (SCRAM's ``n=``); ACLs name it. User
names follow the rules of topic names (``mafka4.names``: letters, digits, '.', '_' and '-', not
'.' or '..') with at most ``USER_NAME_BYTES_MAX`` characters, so a name is always a safe etcd key
part, needs no SCRAM escaping, and never equals ``ANYONE`` ("*", an ACL rule for every
principal). A password has at least ``PASSWORD_CHARS_MIN`` characters; it is never stored, only
the keys SCRAM derives from it (``mafka4.security.scram``).

The credential file (``$MAFKA4_HOME/credentials``, mode 0600) is one JSON object::

    {"user": "admin", "password": "..."}

Pure: strings in, strings or ``InvalidConfig`` out; reading and writing the file is
``mafka4.security.admin_credential``'s.
"""

from __future__ import annotations

import json

from mafka4.errors import InvalidConfig
from mafka4.limits import PASSWORD_CHARS_MIN, USER_NAME_BYTES_MAX
from mafka4.names import name_problem

# An ACL rule for this principal applies to every authenticated user.
ANYONE = "*"
# The user whose credential file ``mafka4 up`` writes (``admin_credential``), and the superuser
# of ACLs unless told otherwise (``acl.AclTable``).
ADMIN_USER = "admin"
CREDENTIAL_FIELDS = frozenset({"user", "password"})


def user_name_problem(name: object) -> str | None:
    """Why ``name`` is not a valid user name, or None if it is."""
    return name_problem(name, "user name", USER_NAME_BYTES_MAX)


def validate_user_name(name: object) -> str:
    """Return ``name`` if it is a valid user name, else raise ``InvalidConfig`` saying why."""
    problem = user_name_problem(name)
    if problem is not None:
        raise InvalidConfig(problem)
    return name


def validate_password(password: object, user: str) -> str:
    """Return ``password`` if it may be ``user``'s, else raise ``InvalidConfig`` saying why."""
    if not isinstance(password, str):
        raise InvalidConfig(f"the password of user {user!r} must be a string")
    if len(password) < PASSWORD_CHARS_MIN:
        raise InvalidConfig(f"the password of user {user!r} has {len(password)} characters: "
                            f"use at least {PASSWORD_CHARS_MIN}")
    return password


def format_credential(user: str, password: str) -> str:
    """The credential file's text for ``user`` and ``password``."""
    return json.dumps({"user": validate_user_name(user), "password": validate_password(password, user)}) + "\n"


def parse_credential(text: str, source: str) -> tuple[str, str]:
    """(user, password) of a credential file's ``text``; ``InvalidConfig`` naming ``source`` (the
    file) and the bad field otherwise."""
    try:
        value = json.loads(text)
    except ValueError as error:
        raise InvalidConfig(f"{source} is not JSON ({error}): it must hold {{\"user\": ..., \"password\": ...}}")
    if not isinstance(value, dict) or set(value) != CREDENTIAL_FIELDS:
        fields = sorted(value) if isinstance(value, dict) else type(value).__name__
        raise InvalidConfig(f"{source} must hold exactly the fields 'user' and 'password', not {fields}")
    problem = user_name_problem(value["user"])
    if problem is not None:
        raise InvalidConfig(f"{source}: field 'user': {problem}")
    try:
        return value["user"], validate_password(value["password"], value["user"])
    except InvalidConfig as error:
        raise InvalidConfig(f"{source}: field 'password': {error.message}") from None
