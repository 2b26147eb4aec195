"""Typed access to etcd: JSON values, compare-and-swap, transactions and leases.

Everything that talks to etcd goes through ``MetadataStore``; every etcd failure becomes a
retriable ``CoordinatorUnavailable`` naming the endpoint, so callers never see gRPC errors.
Multi-key changes are single transactions; updates are compare-and-swap on ``mod_revision``.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any, Callable, Iterable, TypeVar

import etcd3
import grpc

from mafka4.errors import CoordinatorUnavailable

REQUEST_TIMEOUT_S_DEFAULT = 5.0
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Versioned:
    """A JSON value read from etcd together with the revision it was last modified at."""

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


class MetadataStore:
    def __init__(self, endpoint: str, timeout_s: float = REQUEST_TIMEOUT_S_DEFAULT):
        host, _, port = endpoint.rpartition(":")
        self.endpoint = endpoint
        self._client = etcd3.client(host=host, port=int(port), timeout=timeout_s)
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
    def put(self, key: str, value: Any, lease: etcd3.Lease | None = None) -> None:
        self._client.put(key, _encode(value), lease=lease)

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

    @_etcd_call
    def compare_and_swap(self, key: str, value: Any, mod_revision: int) -> bool:
        """Write ``value`` only if ``key`` is still at ``mod_revision`` (0: only if absent)."""
        txn = self._client.transactions
        condition = txn.version(key) == 0 if mod_revision == 0 else txn.mod(key) == mod_revision
        succeeded, _ = self._client.transaction(compare=[condition], success=[txn.put(key, _encode(value))], failure=[])
        return succeeded

    @_etcd_call
    def delete_keys_and_prefixes(self, keys: Iterable[str], prefixes: Iterable[str]) -> bool:
        """Delete keys and whole prefixes in one transaction; False if the first key was absent."""
        keys = list(keys)
        txn = self._client.transactions
        deletes = [txn.delete(key) for key in keys] + [
            txn.delete(prefix, range_end=etcd3.utils.prefix_range_end(etcd3.utils.to_bytes(prefix)))
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
