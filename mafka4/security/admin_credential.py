"""The admin's credential file, ``<home>/credentials``, and the admin user it stands for in etcd.

``mafka4 up`` makes sure of both (``ensure_admin_credential``): the file exists, readable by its
owner only, and etcd holds the user it names with its password. The file is written once, with
a random password, by ``durable_files.replace_file`` with mode 0600: it is never readable by
others, not even for a moment, and a crash leaves either no file or the whole one. A file that
exists is never rewritten; etcd is brought in line with it (a fresh etcd gets the user again).

Clients read a credential file with ``load_credential``. This module imports no etcd client, so
a client may use it; the user store is only a parameter.
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import TYPE_CHECKING

from mafka4.durable_files import replace_file
from mafka4.errors import InvalidConfig, MissingCredential
from mafka4.security.principals import ADMIN_USER, format_credential, parse_credential

if TYPE_CHECKING:
    from mafka4.security.user_store import UserStore

CREDENTIAL_FILE = "credentials"
# Its owner may read and write it; nobody else may even read it.
CREDENTIAL_FILE_MODE = 0o600
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
        text = format_credential(user, password).encode()
        replace_file(path, lambda file: file.write(text), CREDENTIAL_FILE_MODE)
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
