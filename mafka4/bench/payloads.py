"""Message values for ``mafka4 bench produce``: random bytes, or typical JSON events (pure).

Two kinds (``PAYLOAD_KINDS``):

* **random**: ``message_bytes`` random bytes. No codec shrinks them: the cost of a codec
  without its gain.
* **json**: one compact JSON object per message (ASCII, so characters are bytes), the kind of
  event a message queue carries: an order, a cart change, a page view, a click or a search,
  with a random event id, a timestamp a few ms after the previous event's, a user drawn from a
  bounded population (so ids, countries and devices repeat across events as real traffic's
  do), nested objects, and a list (order items, a click trail, search results) that grows
  with the size asked. A short free-text ``note`` of vocabulary words fills what is left, so
  an event is ``message_bytes - JSON_FILL_SLACK_BYTES`` to ``message_bytes`` long.

Values come in a pool of distinct values that the bench sends in turn (``pool_size``). The pool
holds more values than one batch of the producer can, so no batch holds a value twice: a
codec compresses repeated *fields*, as it would in real traffic, never a repeated *message*,
which would overstate its gain.

Deterministic: the same kind, size, count and seed give the same values (``random.Random``),
so a run's JSON traffic can be generated again exactly.
"""

from __future__ import annotations

import json
import random
from datetime import datetime, timezone
from typing import Sequence

PAYLOAD_KINDS = ("random", "json")
# A json event needs room for its fixed fields (id, type, time, user); the largest is below this.
JSON_MESSAGE_BYTES_MIN = 200
# A note needs `,"note":""` plus one character, so an event may end this many bytes short.
JSON_FILL_SLACK_BYTES = 10
# Pools: at least this many values, and at most this many (values under ~16 bytes may then repeat
# in a 1 MiB batch; there are few distinct ones anyway).
POOL_SIZE_MIN = 64
POOL_SIZE_MAX = 65_536

# The first event's time: fixed, so that the values depend on the seed alone.
_START_MS = 1_795_600_800_000  # 2026-11-25T10:00:00Z
_EVENT_GAP_MS_MAX = 20
_USERS = 5_000
_SKUS = 2_000
_EVENT_TYPES = ("page_view", "click", "add_to_cart", "order_placed", "search")
_EVENT_WEIGHTS = (40, 30, 12, 8, 10)
_MARKETS = (("US", "en-US", "USD"), ("DE", "de-DE", "EUR"), ("GB", "en-GB", "GBP"), ("FR", "fr-FR", "EUR"),
            ("IN", "en-IN", "INR"), ("BR", "pt-BR", "BRL"), ("JP", "ja-JP", "JPY"), ("NL", "nl-NL", "EUR"))
_DEVICES = ("ios", "android", "web-desktop", "web-mobile")
_CATEGORIES = ("books", "electronics", "garden", "toys", "grocery", "apparel", "beauty", "sports")
_PATHS = ("/", "/search", "/cart", "/checkout", "/account/orders", "/deals", "/help/shipping")
_REFERRERS = ("https://www.google.com/", "https://www.bing.com/", "https://t.co/", "", "https://news.example.org/")
_USER_AGENTS = (
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0 Safari/537.36",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 18_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Mobile/15E148",
    "Mozilla/5.0 (Linux; Android 15; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0 Mobile Safari/537.36",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_6) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/18.1 "
    "Safari/605.1.15",
)
_WORDS = ("blue", "cotton", "shirt", "wireless", "charger", "garden", "hose", "kids", "puzzle", "organic", "coffee",
          "beans", "running", "shoes", "leather", "wallet", "steel", "water", "bottle", "desk", "lamp", "yoga", "mat",
          "travel", "mug", "please", "deliver", "after", "five", "leave", "at", "the", "door", "gift", "wrap",
          "thanks", "size", "medium", "large", "small", "red", "green", "black", "pack", "of", "two", "fast")

_SESSION_MS = 30 * 60 * 1000  # a user's events within one half hour share a session id
_encode = json.JSONEncoder(separators=(",", ":")).encode  # compact, as events travel


def pool_size(message_bytes: int, batch_bytes_max: int) -> int:
    """Values in a pool: more than one batch of ``batch_bytes_max`` holds (within the bounds above)."""
    assert message_bytes > 0 and batch_bytes_max > 0, (message_bytes, batch_bytes_max)
    return max(POOL_SIZE_MIN, min(POOL_SIZE_MAX, batch_bytes_max // message_bytes + 1))


def payload_pool(kind: str, message_bytes: int, count: int, seed: int) -> list[bytes]:
    """``count`` values of ``kind`` (``PAYLOAD_KINDS``) of about ``message_bytes``, the same for the same seed."""
    assert kind in PAYLOAD_KINDS, kind
    assert count > 0, count
    rng = random.Random(seed)
    if kind == "random":
        return [rng.randbytes(message_bytes) for _ in range(count)]
    assert message_bytes >= JSON_MESSAGE_BYTES_MIN, message_bytes
    events, now_ms = [], _START_MS
    for _ in range(count):
        now_ms += rng.randint(0, _EVENT_GAP_MS_MAX)
        events.append(json_event(rng, message_bytes, now_ms))
    return events


def payload_bytes(pool: Sequence[bytes], messages: int) -> int:
    """Bytes of the values of ``messages`` messages that take the pool's values in turn."""
    assert pool and messages >= 0, (len(pool), messages)
    rounds, rest = divmod(messages, len(pool))
    return rounds * sum(map(len, pool)) + sum(len(value) for value in pool[:rest])


def json_event(rng: random.Random, message_bytes: int, now_ms: int) -> bytes:
    """One JSON event of ``message_bytes - JSON_FILL_SLACK_BYTES`` to ``message_bytes`` bytes."""
    kind = rng.choices(_EVENT_TYPES, _EVENT_WEIGHTS)[0]
    user = rng.randrange(_USERS)
    country, locale, currency = _MARKETS[user % len(_MARKETS)]
    event = {
        "event_id": f"{rng.getrandbits(128):032x}",
        "type": kind,
        "ts": datetime.fromtimestamp(now_ms / 1000, timezone.utc).isoformat(timespec="milliseconds"),
        "user": {"id": f"u-{user:07d}", "country": country, "device": _DEVICES[user % len(_DEVICES)]},
    }
    size = _size(event)
    assert size <= JSON_MESSAGE_BYTES_MIN - JSON_FILL_SLACK_BYTES, size
    context = {"session_id": f"s-{user:07d}-{now_ms // _SESSION_MS:x}", "locale": locale,
               "path": rng.choice(_PATHS), "referrer": rng.choice(_REFERRERS),
               "user_agent": _USER_AGENTS[user % len(_USER_AGENTS)]}
    size = _add(event, "context", context, size, message_bytes)
    if kind in ("add_to_cart", "order_placed"):
        size = _add(event, "currency", currency, size, message_bytes)
    if kind == "order_placed":
        payment = {"method": rng.choice(("card", "paypal", "gift_card")), "status": "authorized"}
        size = _add(event, "payment", payment, size, message_bytes)
    if kind == "search":
        size = _add(event, "query", " ".join(rng.choice(_WORDS) for _ in range(rng.randint(1, 3))), size,
                    message_bytes)
    name, make = _LISTS[kind]
    entries: list[dict] = []
    list_bytes = 1 + _size(name) + 1 + 2  # the comma, the key, the colon and the brackets
    for _ in range(message_bytes):  # each entry takes at least one byte: a bound, never reached
        entry = make(rng, len(entries))
        entry_bytes = _size(entry) + (1 if entries else 0)
        if size + list_bytes + entry_bytes > message_bytes:
            break
        entries.append(entry)
        list_bytes += entry_bytes
    if entries:
        size = _add(event, name, entries, size, message_bytes)
        assert name in event, (name, size, list_bytes, message_bytes)
    room = message_bytes - size - JSON_FILL_SLACK_BYTES
    if room > 0:
        size = _add(event, "note", _words(rng, room), size, message_bytes)
    encoded = _encode(event).encode()
    assert len(encoded) == size, (len(encoded), size)
    assert message_bytes - JSON_FILL_SLACK_BYTES <= size <= message_bytes, (size, message_bytes)
    return encoded


def _size(value: object) -> int:
    return len(_encode(value))


def _add(event: dict, key: str, value: object, size: int, message_bytes: int) -> int:
    """``event``'s size once ``key: value`` is added, when it fits in ``message_bytes`` (else unchanged)."""
    added = 1 + _size(key) + 1 + _size(value)  # the comma, the key, the colon, the value
    if size + added > message_bytes:
        return size
    event[key] = value
    return size + added


def _words(rng: random.Random, length: int) -> str:
    text = ""
    while len(text) < length:
        text += rng.choice(_WORDS) + " "
    return text[:length]


def _item(rng: random.Random, index: int) -> dict:
    sku = rng.randrange(_SKUS)
    return {"sku": f"SKU-{sku:06d}", "name": f"{rng.choice(_WORDS)} {rng.choice(_WORDS)}",
            "category": _CATEGORIES[sku % len(_CATEGORIES)], "qty": rng.randint(1, 3),
            "price_cents": 199 + (sku * 37) % 9_800}


def _step(rng: random.Random, index: int) -> dict:
    sku = rng.randrange(_SKUS)
    path = rng.choice((*_PATHS, f"/product/SKU-{sku:06d}", f"/category/{_CATEGORIES[sku % len(_CATEGORIES)]}"))
    return {"path": path, "ms_on_page": rng.randint(200, 90_000)}


def _result(rng: random.Random, index: int) -> dict:
    return {"rank": index + 1, "sku": f"SKU-{rng.randrange(_SKUS):06d}", "score": round(rng.uniform(0.05, 1.0), 3)}


# Per event type, the list that grows with the size asked, and how one entry is made.
_LISTS = {"page_view": ("trail", _step), "click": ("trail", _step), "add_to_cart": ("items", _item),
          "order_placed": ("items", _item), "search": ("results", _result)}
