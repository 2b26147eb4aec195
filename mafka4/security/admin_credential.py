"""The admin's credential file, ``<home>/credentials``, and the admin user it stands for in etcd.

``mafka4 up`` makes sure of both (``ensure_admin_credential``): the file exists, readable by its
owner only, and etcd holds the user it names with its password. The file is written once, with
a random password: a temporary file created with mode 0600 in the same directory, written,
fsynced, renamed into place and the directory fsynced, so it is never readable by others, not
even for a moment, and a crash leaves either no file or the whole one. A file that exists is
never rewritten; etcd is brought in line with it (a fresh etcd gets the user again).

Clients read a credential file with ``load_credential``. This module imports no etcd client, so
a client may use it; the user store is only a parameter.
"""

from __future__ import annotations

import os
import secrets
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from mafka4.errors import InvalidConfig, MissingCredential
from mafka4.log.recovery_point import fsync_directory
from mafka4.security.acl import ADMIN_USER
from mafka4.security.principals import format_credential, parse_credential

if TYPE_CHECKING:
    from mafka4.security.user_store import UserStore

CREDENTIAL_FILE = "credentials"
# secrets.token_urlsafe's bytes of randomness in a new admin password (32 characters).
ADMIN_PASSWORD_RANDOM_SIZE = 24


def ensure_admin_credential(home: Path, users: "UserStore") -> Path:
    """Create ``<home>/credentials`` for ``ADMIN_USER`` if it is absent, and store its user in
    etcd (again, if the file was there); returns the file's path."""
    path = Path(home) / CREDENTIAL_FILE
    if path.exists():
        user, password = load_credential(path)
        if user != ADMIN_USER:
            raise InvalidConfig(f"{path} holds user {user!r}, not {ADMIN_USER!r}: it is the admin's credential "
                                f"that 'mafka4 up' keeps; move the file away and run 'mafka4 up' again")
    else:
        user, password = ADMIN_USER, secrets.token_urlsafe(ADMIN_PASSWORD_RANDOM_SIZE)
        _write_private(path, format_credential(user, password))
    users.add(user, password, replace=True)
    return path


def load_credential(path: Path) -> tuple[str, str]:
    """(user, password) of a credential file; ``MissingCredential`` if it is absent or unreadable,
    ``InvalidConfig`` if it is not a credential."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise MissingCredential(f"there is no credential file {path}: 'mafka4 up' writes the admin's there; "
                                f"for another user, write {{\"user\": ..., \"password\": ...}} to it "
                                f"(mode 0600) after 'mafka4 user add'") from None
    except (OSError, UnicodeDecodeError) as error:
        raise MissingCredential(f"cannot read the credential file {path} ({error}): it must be readable by this "
                                f"user (its owner, mode 0600) and hold UTF-8 JSON") from None
    return parse_credential(text, str(path))


def _write_private(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    # mkstemp creates the file with mode 0600 (and O_EXCL, under a fresh name), so no umask and
    # no chmod after the fact decides who could read it in between.
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    fsync_directory(path.parent)
