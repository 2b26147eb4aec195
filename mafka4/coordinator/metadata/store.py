"""Typed access to etcd: JSON values, compare-and-swap, transactions and leases.

Everything that talks to etcd goes through ``MetadataStore``; every etcd failure becomes a
retriable ``CoordinatorUnavailable`` naming the endpoint, so callers never see gRPC errors.
Multi-key changes are single transactions; updates are compare-and-swap on ``mod_revision``,
optionally *fenced*: the write also requires another key to be at a given revision (the
controller fences its writes with its own election key, so a deposed controller writes
nothing). Watches deliver ``WatchEvent`` lists on the client's watch thread; a watch that
ends (etcd went away, the client failed over) calls ``on_broken`` once and must be set up
again by its owner.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any, Callable, Iterable, TypeVar

import etcd3
import etcd3.utils
import grpc

from mafka4.errors import CoordinatorUnavailable
from mafka4.limits import ETCD_REQUEST_TIMEOUT_S_DEFAULT

# gRPC waits up to 120 s between reconnection attempts by default, so a client would go on
# failing long after etcd is back; reconnect within a second instead.
GRPC_OPTIONS = [("grpc.initial_reconnect_backoff_ms", 200), ("grpc.min_reconnect_backoff_ms", 200),
                ("grpc.max_reconnect_backoff_ms", 1000)]
T = TypeVar("T")
# (key, mod_revision): a write fenced by it happens only while that key is at that revision.
Fence = tuple[str, int]


@dataclass(frozen=True, slots=True)
class Versioned:
    """A JSON value read from etcd together with the revision it was last modified at."""

    key: str
    value: Any
    mod_revision: int


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """One change seen by a watch; ``value`` is None when the key was deleted."""

    key: str
    value: Any
    mod_revision: int


def _etcd_call(method: Callable[..., T]) -> Callable[..., T]:
    @functools.wraps(method)
    def wrapper(self: "MetadataStore", *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except (grpc.RpcError, etcd3.exceptions.Etcd3Exception, ValueError) as error:
            # ValueError: the client's "Trying to use a failed node" (see __init__).
            raise CoordinatorUnavailable(
                f"etcd at {self.endpoint} did not answer ({type(error).__name__}); "
                f"check that the cluster is up ('mafka4 status') and retry"
            ) from error

    return wrapper


def _encode(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()



def prefix_range_end(prefix: str) -> bytes:
    """The end of the key range holding every key that starts with ``prefix`` (etcd's range_end)."""
    return etcd3.utils.prefix_range_end(etcd3.utils.to_bytes(prefix))

class MetadataStore:
    def __init__(self, endpoint: str, timeout_s: float = ETCD_REQUEST_TIMEOUT_S_DEFAULT):
        host, _, port = endpoint.rpartition(":")
        self.endpoint = endpoint
        self._client = etcd3.client(host=host, port=int(port), timeout=timeout_s, grpc_options=GRPC_OPTIONS)
        # The client refuses an endpoint for 300 s after one failed call; with a single local
        # etcd that would turn a one-second blip into five minutes of errors. Retry at once.
        for endpoint in self._client.endpoints.values():
            endpoint.time_retry = 0

    def close(self) -> None:
        self._client.close()

    @_etcd_call
    def get(self, key: str) -> Versioned | None:
        raw, meta = self._client.get(key)
        return None if raw is None else Versioned(key, json.loads(raw), meta.mod_revision)

    @_etcd_call
    def get_prefix(self, prefix: str) -> list[Versioned]:
        return sorted(
            (Versioned(meta.key.decode(), json.loads(raw), meta.mod_revision)
             for raw, meta in self._client.get_prefix(prefix)),
            key=lambda item: item.key,
        )

    @_etcd_call
    def get_prefix_at(self, prefix: str) -> tuple[list[Versioned], int]:
        """Every key under ``prefix`` and the store revision they were read at (to watch from +1)."""
        response = self._client.get_prefix_response(prefix)
        items = sorted((Versioned(kv.key.decode(), json.loads(kv.value), kv.mod_revision) for kv in response.kvs),
                       key=lambda item: item.key)
        return items, response.header.revision

    @_etcd_call
    def get_prefixes(self, prefixes: Iterable[str]) -> dict[str, list[Versioned]]:
        """Every key under each of ``prefixes``, all read in one transaction (at one revision)."""
        prefixes = list(prefixes)
        txn = self._client.transactions
        reads = [txn.get(prefix, range_end=prefix_range_end(prefix))
                 for prefix in prefixes]
        _, responses = self._client.transaction(compare=[], success=reads, failure=[])
        return {
            prefix: sorted((Versioned(meta.key.decode(), json.loads(raw), meta.mod_revision) for raw, meta in kvs),
                           key=lambda item: item.key)
            for prefix, kvs in zip(prefixes, responses)
        }

    @_etcd_call
    def put(self, key: str, value: Any, lease: etcd3.Lease | None = None) -> int:
        """Write ``value``; returns the revision of the write (the key's new mod_revision)."""
        return self._client.put(key, _encode(value), lease=lease).header.revision

    @_etcd_call
    def delete(self, key: str) -> bool:
        """Delete ``key``; False if it did not exist."""
        return self._client.delete(key)

    @_etcd_call
    def delete_if(self, key: str, mod_revision: int) -> bool:
        """Delete ``key`` only if it is still at ``mod_revision``."""
        txn = self._client.transactions
        succeeded, _ = self._client.transaction(compare=[txn.mod(key) == mod_revision], success=[txn.delete(key)],
                                                failure=[])
        return succeeded

    @_etcd_call
    def transact(self, creates: dict[str, Any], requires: dict[str, int], deletes: Iterable[str] = ()) -> bool:
        """In one transaction: create every key of ``creates`` (each only if absent) and delete
        ``deletes``, only if every key of ``requires`` is at its mod_revision. False: nothing done."""
        txn = self._client.transactions
        compare = [txn.version(key) == 0 for key in creates] + [self._at_revision(k, r) for k, r in requires.items()]
        success = [txn.put(key, _encode(value)) for key, value in creates.items()] + [txn.delete(k) for k in deletes]
        succeeded, _ = self._client.transaction(compare=compare, success=success, failure=[])
        return succeeded

    @_etcd_call
    def create_all(self, values: dict[str, Any]) -> bool:
        """Create every key in one transaction; False (nothing written) if any already exists."""
        txn = self._client.transactions
        succeeded, _ = self._client.transaction(
            compare=[txn.version(key) == 0 for key in values],
            success=[txn.put(key, _encode(value)) for key, value in values.items()],
            failure=[],
        )
        return succeeded

    def _at_revision(self, key: str, mod_revision: int):
        txn = self._client.transactions
        return txn.version(key) == 0 if mod_revision == 0 else txn.mod(key) == mod_revision

    @_etcd_call
    def compare_and_swap(self, key: str, value: Any, mod_revision: int, fence: Fence | None = None) -> bool:
        """Write ``value`` only if ``key`` is still at ``mod_revision`` (0: only if absent) and the fence holds."""
        txn = self._client.transactions
        conditions = [self._at_revision(key, mod_revision)]
        if fence is not None:
            conditions.append(txn.mod(fence[0]) == fence[1])
        succeeded, _ = self._client.transaction(compare=conditions, success=[txn.put(key, _encode(value))], failure=[])
        return succeeded

    @_etcd_call
    def put_and_delete(self, key: str, value: Any, delete: str, fence: Fence, lease: etcd3.Lease | None = None) -> bool:
        """Write ``key`` (under ``lease``) and delete ``delete`` in one transaction, only while the fence holds."""
        txn = self._client.transactions
        succeeded, _ = self._client.transaction(
            compare=[txn.mod(fence[0]) == fence[1]],
            success=[txn.put(key, _encode(value), lease=lease), txn.delete(delete)],
            failure=[],
        )
        return succeeded

    @_etcd_call
    def create_leased(self, key: str, value: Any, lease: etcd3.Lease, swaps: dict[str, tuple[Any, int]]) -> int | None:
        """Create ``key`` under ``lease`` and CAS each of ``swaps`` (key: (value, mod_revision)) in one transaction.

        Returns the revision of the write (the new key's mod_revision, usable as a fence), or
        None if ``key`` exists or a swapped key moved.
        """
        txn = self._client.transactions
        conditions = [txn.version(key) == 0] + [self._at_revision(k, rev) for k, (_, rev) in swaps.items()]
        puts = [txn.put(key, _encode(value), lease=lease)] + [txn.put(k, _encode(v)) for k, (v, _) in swaps.items()]
        succeeded, responses = self._client.transaction(compare=conditions, success=puts, failure=[])
        return responses[0].response_put.header.revision if succeeded else None

    @_etcd_call
    def watch_prefix(self, prefix: str, on_events: Callable[[list[WatchEvent]], None], on_broken: Callable[[], None],
                     start_revision: int | None = None) -> int:
        """Call ``on_events`` for every change under ``prefix`` (from ``start_revision``); returns the watch id.

        Both callbacks run on the client's watch thread and must not block. ``on_broken`` is
        called once when the watch ends for any reason other than ``cancel_watch``.
        """
        def callback(response) -> None:
            if not isinstance(response, etcd3.watch.WatchResponse):  # an error, or None: the stream closed
                on_broken()
                return
            on_events([
                WatchEvent(event.key.decode(), json.loads(event.value) if isinstance(event, etcd3.events.PutEvent) else None,
                           event.mod_revision)
                for event in response.events
            ])

        return self._client.add_watch_prefix_callback(prefix, callback, start_revision=start_revision)

    def cancel_watch(self, watch_id: int) -> None:
        """Stop a watch; quietly does nothing if it already ended (etcd may be away)."""
        try:
            self._client.cancel_watch(watch_id)
        except (grpc.RpcError, etcd3.exceptions.Etcd3Exception, ValueError):
            pass

    @_etcd_call
    def delete_prefix(self, prefix: str) -> None:
        """Delete every key under ``prefix``."""
        self._client.delete_prefix(prefix)

    @_etcd_call
    def delete_keys_and_prefixes(self, keys: Iterable[str], prefixes: Iterable[str]) -> bool:
        """Delete keys and whole prefixes in one transaction; False if the first key was absent."""
        keys = list(keys)
        txn = self._client.transactions
        deletes = [txn.delete(key) for key in keys] + [
            txn.delete(prefix, range_end=prefix_range_end(prefix))
            for prefix in prefixes
        ]
        succeeded, _ = self._client.transaction(compare=[txn.version(keys[0]) > 0], success=deletes, failure=[])
        return succeeded

    @_etcd_call
    def grant_lease(self, ttl_s: int) -> etcd3.Lease:
        return self._client.lease(ttl_s)

    @_etcd_call
    def refresh_lease(self, lease: etcd3.Lease) -> int:
        """Refresh ``lease``; return its remaining TTL in seconds (0: it had already expired)."""
        responses = lease.refresh()
        return max((response.TTL for response in responses), default=0)

    @_etcd_call
    def revoke_lease(self, lease: etcd3.Lease) -> None:
        lease.revoke()
