"""Intents: how clients ask for a change of the cluster's shape, which only the controller makes.

Instructions flow one way (DESIGN.md section 6): client -> etcd intent -> controller -> actors.
A client never starts, stops or reshapes an actor; it writes an intent and waits for its result:

    /mafka4/<cluster>/intents/<id>          {"kind", "topic", "args", "submitted_ms"}
    /mafka4/<cluster>/intent_results/<id>   {"ok": true, "value": ...}
                                            or {"ok": false, "error": {"type", "message", "retriable"}}

Ids sort in submission order (a nanosecond clock, then a random suffix). The active controller
executes pending intents oldest first, one at a time (``control.intent_worker``): it marks an
intent started (a compare-and-swap on its key), carries it out, then writes the result and
deletes the intent in one transaction fenced by its controller key; a result
lives under a lease of ``IntentConfig.result_ttl_s`` so that one nobody collects disappears. A
controller that dies mid-intent leaves the intent pending and the next one executes it again,
so every kind is written to be repeatable (a topic created or a split stored by the first try is
found and reported, not made twice).

A client that gives up waiting (``wait_s``) withdraws its intent if no controller started it
(a delete at the revision it wrote) and raises ``RequestTimedOut`` saying whether it may still
happen.
"""

from __future__ import annotations

import enum
import secrets
import threading
import time
from dataclasses import dataclass
from typing import Any

from mafka4 import errors
from mafka4.errors import MafkaError, RequestTimedOut
from mafka4.limits import INTENT_RESULT_POLL_INTERVAL_S_MAX
from mafka4.metadata import keys
from mafka4.metadata.store import MetadataStore


class IntentKind(enum.Enum):
    CREATE_TOPIC = "create_topic"
    DELETE_TOPIC = "delete_topic"
    SPLIT = "split"
    MERGE = "merge"
    SCALE = "scale"
    OPEN_LANE = "open_lane"


@dataclass(frozen=True, slots=True)
class Intent:
    intent_id: str
    kind: IntentKind
    topic: str
    args: dict
    revision: int = 0  # of the intent key when it was written (or read); not stored

    def to_json(self) -> dict:
        return {"kind": self.kind.value, "topic": self.topic, "args": self.args,
                "submitted_ms": int(self.intent_id.split("-")[0]) // 1_000_000}

    @classmethod
    def from_json(cls, intent_id: str, value: dict, revision: int = 0) -> "Intent":
        return cls(intent_id, IntentKind(value["kind"]), value["topic"], dict(value.get("args", {})), revision)

    def __str__(self) -> str:
        return f"intent {self.intent_id} ({self.kind.value} {self.topic} {self.args})"


@dataclass(frozen=True, slots=True)
class IntentResult:
    ok: bool
    value: Any = None
    error_type: str = ""
    message: str = ""
    retriable: bool = False

    @classmethod
    def of_error(cls, error: MafkaError) -> "IntentResult":
        return cls(False, None, type(error).__name__, error.message, error.retriable)

    def to_json(self) -> dict:
        if self.ok:
            return {"ok": True, "value": self.value}
        return {"ok": False, "error": {"type": self.error_type, "message": self.message, "retriable": self.retriable}}

    @classmethod
    def from_json(cls, value: dict) -> "IntentResult":
        if value["ok"]:
            return cls(True, value.get("value"))
        error = value["error"]
        return cls(False, None, error["type"], error["message"], bool(error.get("retriable")))

    def unwrap(self) -> Any:
        """The value, or the error the controller met, raised as its own mafka4 class."""
        if self.ok:
            return self.value
        error_class = getattr(errors, self.error_type, None)
        if isinstance(error_class, type) and issubclass(error_class, MafkaError):
            raise error_class(self.message)
        raise MafkaError(f"{self.error_type}: {self.message}")


def new_intent_id() -> str:
    return f"{time.time_ns():020d}-{secrets.token_hex(4)}"


def submit(store: MetadataStore, cluster: str, kind: IntentKind, topic: str, args: dict | None = None,
           intent_id: str | None = None) -> Intent:
    """Write an intent for the controller; returns it (its id names the result to wait for)."""
    intent = Intent(intent_id or new_intent_id(), kind, topic, dict(args or {}))
    revision = store.put(keys.intent(cluster, intent.intent_id), intent.to_json())
    return Intent(intent.intent_id, kind, topic, intent.args, revision)


def request(store: MetadataStore, cluster: str, kind: IntentKind, topic: str, args: dict | None,
            wait_s: float) -> Any:
    """Write an intent and wait for its result value (its error raised) once the controller executed it.

    The result key is watched from before the intent is written (a watch that starts at the
    current revision gets events at once; one started at a past revision waits for etcd's next
    sync, up to 100 ms), and read at least every ``INTENT_RESULT_POLL_INTERVAL_S_MAX`` in case
    the watch broke.
    Raises ``RequestTimedOut`` after ``wait_s``: the intent is withdrawn if no controller took it
    yet, else it may still be carried out (the message says which).
    """
    intent_id = new_intent_id()
    result_key = keys.intent_result(cluster, intent_id)
    written = threading.Event()
    watch_id = store.watch_prefix(result_key, lambda _: written.set(), written.set)
    try:
        intent = submit(store, cluster, kind, topic, args, intent_id)
        deadline = time.monotonic() + wait_s
        while True:
            found = store.get(result_key)
            if found is not None:
                store.delete(result_key)
                return IntentResult.from_json(found.value).unwrap()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            written.wait(min(INTENT_RESULT_POLL_INTERVAL_S_MAX, remaining))
            written.clear()
    finally:
        store.cancel_watch(watch_id)
    # The controller marks an intent it starts (a write to its key): one still at the revision we
    # wrote was not started and can be withdrawn for good.
    if store.delete_if(keys.intent(cluster, intent.intent_id), intent.revision):
        raise RequestTimedOut(
            f"no controller carried out {intent} within {wait_s:g} s; it was withdrawn. Is the cluster's controller "
            f"running ('mafka4 status')? Retry once it is")
    found = store.get(result_key)
    if found is not None:
        store.delete(result_key)
        return IntentResult.from_json(found.value).unwrap()
    raise RequestTimedOut(f"{intent} was not finished within {wait_s:g} s; the controller may still carry it out: "
                          f"check with 'mafka4 topic describe {intent.topic}' before retrying")
