"""Naming rules for topics (Kafka's rules), checked before anything is created."""

from __future__ import annotations

import re

from mafka4.errors import InvalidTopicName
from mafka4.limits import TOPIC_NAME_CHARS_MAX

_TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]+")


def validate_topic_name(name: object) -> str:
    """Return ``name`` if it is a valid topic name, else raise ``InvalidTopicName`` saying why."""
    if not isinstance(name, str) or not name:
        raise InvalidTopicName(f"topic name {name!r} must be a non-empty string")
    if len(name) > TOPIC_NAME_CHARS_MAX:
        raise InvalidTopicName(
            f"topic name of {len(name)} characters is too long: at most {TOPIC_NAME_CHARS_MAX}"
        )
    if name in (".", ".."):
        raise InvalidTopicName(f"topic name {name!r} is reserved: choose another name")
    if not _TOPIC_NAME.fullmatch(name):
        bad = sorted({c for c in name if not _TOPIC_NAME.fullmatch(c)})
        raise InvalidTopicName(
            f"topic name {name!r} contains {''.join(bad)!r}: use only letters, digits, '.', '_' and '-'"
        )
    return name
