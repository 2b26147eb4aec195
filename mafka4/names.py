"""Naming rules for topics (Kafka's rules), checked before anything is created; user names
(``mafka4.security.principals``) and lane names (``validate_lane_name``) follow the same rules
with their own length."""

from __future__ import annotations

import re

from mafka4.errors import InvalidLaneName, InvalidTopicName
from mafka4.limits import LANE_NAME_CHARS_MAX, TOPIC_NAME_CHARS_MAX

NAME_CHARS = re.compile(r"[A-Za-z0-9._-]+")
# Lane names mafka4 keeps for itself (``delays.DELAY_LANE``), as it keeps headers named "mafka4.".
RESERVED_LANE_PREFIX = "mafka4"


def name_problem(name: object, what: str, chars_max: int) -> str | None:
    """Why ``name`` is not a valid name of a ``what`` ("topic name", ...) at most ``chars_max``
    characters long, or None if it is: letters, digits, '.', '_' and '-', not '.' or '..'."""
    if not isinstance(name, str) or not name:
        return f"{what} {name!r} must be a non-empty string"
    if len(name) > chars_max:
        return f"{what} of {len(name)} characters is too long: at most {chars_max}"
    if name in (".", ".."):
        return f"{what} {name!r} is reserved: choose another name"
    if not NAME_CHARS.fullmatch(name):
        bad = sorted({c for c in name if not NAME_CHARS.fullmatch(c)})
        return f"{what} {name!r} contains {''.join(bad)!r}: use only letters, digits, '.', '_' and '-'"
    return None


def validate_topic_name(name: object) -> str:
    """Return ``name`` if it is a valid topic name, else raise ``InvalidTopicName`` saying why."""
    problem = name_problem(name, "topic name", TOPIC_NAME_CHARS_MAX)
    if problem is not None:
        raise InvalidTopicName(problem)
    return name


def validate_lane_name(name: object) -> str:
    """Return ``name`` if it is a valid lane name, else raise ``InvalidLaneName`` saying why.

    ``None`` and "" name the trunk and are not passed here.
    """
    problem = name_problem(name, "lane name", LANE_NAME_CHARS_MAX)
    if problem is not None:
        raise InvalidLaneName(problem + " (a lane is named like a topic)")
    if name.startswith(RESERVED_LANE_PREFIX):
        raise InvalidLaneName(f"lane name {name!r} starts with {RESERVED_LANE_PREFIX!r}, which names mafka4's own "
                              f"lanes (a topic's delayed messages wait in one): choose another name")
    return name


def validate_reader_lanes(lanes: object) -> tuple[str, ...]:
    """The lanes a consumer reads, checked and in one form: sorted, each once, "" the trunk, and
    ``()`` for a reader of the trunk alone (what every consumer was before lanes)."""
    if isinstance(lanes, str) or not isinstance(lanes, (list, tuple, set, frozenset)):
        raise InvalidLaneName(f"lanes={lanes!r}: give a list of lane names (\"\" names the trunk)")
    names = sorted(set(lanes), key=str)
    for name in names:
        if name != "":
            validate_lane_name(name)
    return () if names == [""] else tuple(names)


def lane_topic_name(topic: str, lane: str) -> str:
    """The topic that holds lane ``lane`` of mafka3-mode ``topic``: isolation the old way, one queue per lane."""
    return validate_topic_name(f"{topic}.{lane}")
