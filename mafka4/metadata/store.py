"""Typed access to etcd: JSON values, compare-and-swap, transactions and leases.

Everything that talks to etcd goes through ``MetadataStore``; every etcd failure becomes a
retriable ``CoordinatorUnavailable`` naming the member, so callers never see gRPC errors.
Multi-key changes are single transactions, except a write too large for one (``txn_runs``),
which goes in runs whose callers say why each run is safe alone (``create_with_children``
here); updates are compare-and-swap on ``mod_revision``,
optionally *fenced*: the write also requires another key to be at a given revision (the
controller fences its writes with its own election key, so a deposed controller writes
nothing). Watches deliver ``WatchEvent`` lists on the client's watch thread; a watch that
ends (etcd went away, the client failed over) calls ``on_broken`` once and must be set up
again by its owner.

**Members.** The endpoint names one or more members of one etcd cluster
(``host:port[,host:port...]``, ``endpoints.parse_endpoints``). A store talks to one member
at a time, starting with the first listed. When a call fails in a way that blames the member
(unreachable, timed out, internal error) or a watch stream to it breaks, the store moves on to
the next member in the list, round robin. A call that is safe to repeat is then made again on
the next member, once on each member at most: a read, a watch, a lease refresh, and any call
whose member could not be connected to at all (nothing was sent). So a new process, whose first
call finds the first member dead, works with any one member down. Any other failed call is not
repeated (a write may have been applied): its caller retries as it would against a single etcd,
and the retry goes to the next member. A broken watch moves the store *before* ``on_broken`` runs, so the owner's
watch-again lands on another member. Every member is always eligible: a store never refuses
a call because a member failed recently, which with every member briefly failing (an election)
would outlast the blip. gRPC keepalive breaks the watches of a member that stopped answering
without closing its connections (``ETCD_KEEPALIVE_*``).
"""

from __future__ import annotations

import enum
import functools
import itertools
import json
import threading
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence, TypeVar

import etcd3
import etcd3.utils
import etcd3.watch
import grpc

from mafka4.errors import CoordinatorUnavailable
from mafka4.limits import (ETCD_KEEPALIVE_INTERVAL_MS, ETCD_KEEPALIVE_TIMEOUT_MS, ETCD_REQUEST_TIMEOUT_S_DEFAULT,
                           ETCD_RESPONSE_BYTES_MAX, ETCD_TXN_BYTES_MAX, ETCD_TXN_OPS_MAX)
from mafka4.metadata.endpoints import format_endpoints, parse_endpoints
from mafka4.metadata.txn_runs import TxnPart, field_bytes, runs_within

# gRPC waits up to 120 s between reconnection attempts by default, so a client would go on
# failing long after etcd is back; reconnect within a second instead. Keepalive: see
# ETCD_KEEPALIVE_INTERVAL_MS; this gRPC needs the ping timeout besides the keepalive timeout
# to drop a connection whose pings go unanswered, and without a bound on pings between data
# frames an idle watch stops being checked after two pings. Answers up to ETCD_RESPONSE_BYTES_MAX.
GRPC_OPTIONS = [("grpc.max_receive_message_length", ETCD_RESPONSE_BYTES_MAX),
                ("grpc.initial_reconnect_backoff_ms", 200), ("grpc.min_reconnect_backoff_ms", 200),
                ("grpc.max_reconnect_backoff_ms", 1000),
                ("grpc.keepalive_time_ms", ETCD_KEEPALIVE_INTERVAL_MS),
                ("grpc.keepalive_timeout_ms", ETCD_KEEPALIVE_TIMEOUT_MS),
                ("grpc.http2.ping_timeout_ms", ETCD_KEEPALIVE_TIMEOUT_MS),
                ("grpc.http2.max_pings_without_data", 0)]
# Failures that blame the member answering (the client marks it failed on these): move on.
MEMBER_FAILURE_CODES = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
                                  grpc.StatusCode.INTERNAL})
MEMBER_FAILURES = (etcd3.exceptions.ConnectionFailedError, etcd3.exceptions.ConnectionTimeoutError,
                   etcd3.exceptions.InternalServerError, etcd3.exceptions.WatchTimedOut)
# How gRPC says a call never reached its member: no connection to it could be made.
NOT_CONNECTED_DETAIL = "failed to connect to all addresses"
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


def _etcd_call(repeatable: bool) -> Callable[[Callable[..., T]], Callable[..., T]]:
    """Every call of the store: etcd's errors become ``CoordinatorUnavailable``, a member that failed
    is left for the next (``_move_on_from``), and the call is made again on the next member when it
    is ``repeatable`` (it reads, or changes nothing when made twice) or never reached its member
    (``_never_sent``), until every member was tried once."""

    def decorate(method: Callable[..., T]) -> Callable[..., T]:
        @functools.wraps(method)
        def wrapper(self: "MetadataStore", *args, **kwargs):
            tried: list[str] = []
            while True:
                member = self.member
                try:
                    return method(self, *args, **kwargs)
                except (grpc.RpcError, etcd3.exceptions.Etcd3Exception, ValueError) as error:
                    # ValueError: the client's "Trying to use a failed node" (see __init__).
                    blamed = _blames_member(error)
                    if blamed:
                        self._move_on_from(member)
                    tried.append(member)
                    if blamed and (repeatable or _never_sent(error)) and len(tried) < len(self.members):
                        continue
                    raise CoordinatorUnavailable(
                        f"{self._describe(tried)} did not answer ({type(error).__name__}); {self._next_hint(member)}"
                        f"check that the cluster is up ('mafka4 status') and retry"
                    ) from error

        return wrapper

    return decorate


def _blames_member(error: BaseException) -> bool:
    if isinstance(error, grpc.RpcError):
        return error.code() in MEMBER_FAILURE_CODES
    return isinstance(error, MEMBER_FAILURES)


def _never_sent(error: BaseException) -> bool:
    """True when the call failed before any connection to its member was made, so the member saw
    nothing of it (gRPC's own wording; the client raises its error while handling gRPC's)."""
    cause = error if isinstance(error, grpc.RpcError) else error.__context__
    return (isinstance(cause, grpc.RpcError) and cause.code() == grpc.StatusCode.UNAVAILABLE
            and NOT_CONNECTED_DETAIL in (cause.details() or ""))


def _encode(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()



def prefix_range_end(prefix: str) -> bytes:
    """The end of the key range holding every key that starts with ``prefix`` (etcd's range_end)."""
    return etcd3.utils.prefix_range_end(etcd3.utils.to_bytes(prefix))

class Update(enum.Enum):
    """What a ``MetadataStore.update`` change gives instead of a new value."""

    KEEP = "keep"  # the key already holds what the writer wants: write nothing, succeed
    REFUSE = "refuse"  # the writer may not write it (fenced: another leader or epoch): write nothing, fail


class MetadataStore:
    def __init__(self, endpoint: str, timeout_s: float = ETCD_REQUEST_TIMEOUT_S_DEFAULT):
        """``endpoint``: ``host:port[,host:port...]``, the members of one etcd cluster (InvalidConfig if not)."""
        members = parse_endpoints(endpoint)
        self.endpoint = format_endpoints(members)
        # The client refuses an endpoint for 300 s after one failed call (time_retry); that would
        # turn a one-second blip into five minutes of errors. Every member stays eligible, and
        # the store itself moves to the next member after a failure (_move_on_from).
        self._client = etcd3.MultiEndpointEtcd3Client(
            endpoints=[etcd3.Endpoint(m.host, m.port, secure=False, time_retry=0, opts=GRPC_OPTIONS) for m in members],
            timeout=timeout_s, failover=True)
        # The client's own labels, in the order given: it compares labels by identity.
        self.members: tuple[str, ...] = tuple(self._client.endpoints)
        self._member_lock = threading.Lock()
        self._use(self.members[0])  # the client starts on a random member: make it the first listed
        # Our watch ids -> (the watcher that holds the watch, its id there). Watch ids are per
        # watch stream, and the client starts a new stream on every failure while an old one may
        # live on: an etcd id alone could cancel another stream's watch.
        self._watches: dict[int, tuple[etcd3.watch.Watcher, int]] = {}
        self._watch_ids = itertools.count(1)

    @property
    def member(self) -> str:
        """The member (``host:port``) this store sends its next call to."""
        return self._client.endpoint_in_use.netloc

    def _use(self, member: str) -> None:
        # The client's own way to switch endpoints (its failover does the same): it also drops
        # the stubs bound to the old member's channel, so the next call and watch use the new one.
        self._client._current_endpoint_label = member

    def _move_on_from(self, member: str) -> None:
        """After ``member`` failed: the next call goes to the next member, unless another thread moved on already."""
        with self._member_lock:
            if self.member == member:
                self._use(self.members[(self.members.index(member) + 1) % len(self.members)])

    def _describe(self, tried: list[str]) -> str:
        if len(self.members) == 1:
            return f"etcd at {tried[0]}"
        if len(tried) == 1:
            member = tried[0]
            return f"etcd member {member} ({self.members.index(member) + 1} of {len(self.members)}: {self.endpoint})"
        return f"etcd members {', '.join(tried)} (of {self.endpoint}), each in turn,"

    def _next_hint(self, member: str) -> str:
        return "" if self.member == member else f"the next call goes to {self.member}; "

    def close(self) -> None:
        self._client.close()

    @_etcd_call(repeatable=True)
    def get(self, key: str) -> Versioned | None:
        raw, meta = self._client.get(key)
        return None if raw is None else Versioned(key, json.loads(raw), meta.mod_revision)

    @_etcd_call(repeatable=True)
    def get_prefix(self, prefix: str) -> list[Versioned]:
        return sorted(
            (Versioned(meta.key.decode(), json.loads(raw), meta.mod_revision)
             for raw, meta in self._client.get_prefix(prefix)),
            key=lambda item: item.key,
        )

    @_etcd_call(repeatable=True)
    def get_prefix_at(self, prefix: str) -> tuple[list[Versioned], int]:
        """Every key under ``prefix`` and the store revision they were read at (to watch from +1)."""
        response = self._client.get_prefix_response(prefix)
        items = sorted((Versioned(kv.key.decode(), json.loads(kv.value), kv.mod_revision) for kv in response.kvs),
                       key=lambda item: item.key)
        return items, response.header.revision

    @_etcd_call(repeatable=True)
    def count_prefix(self, prefix: str) -> int:
        """How many keys start with ``prefix``, as the member answering holds them: a serializable
        count-only range, so no value crosses the wire and no quorum round is needed (a count is
        available during an election, and may lag the leader's by a few writes)."""
        return self._client.get_prefix_response(prefix, count_only=True, serializable=True).count

    @_etcd_call(repeatable=True)
    def db_size_bytes(self) -> int:
        """The size of the answering member's database file (it grows with every revision until compacted)."""
        return self._client.status().db_size

    @_etcd_call(repeatable=True)
    def prefix_changes(self, prefixes: Iterable[str], after_revision: int) -> tuple[dict[str, tuple[int, int]], int]:
        """Per prefix (how many keys it holds, how many of them were written after ``after_revision``),
        and a revision at or before which every answer was read: a cheap "did anything change?"
        before a full read (keys only, and only the changed ones, cross the wire). A deletion shows
        as a smaller count (etcd counts every key of the range, before the revision filter; one
        counting only the changed ones shows a count that differs, which reads as a change)."""
        changes: dict[str, tuple[int, int]] = {}
        revision: int | None = None
        for prefix in prefixes:
            response = self._client.get_prefix_response(prefix, keys_only=True, min_mod_revision=after_revision + 1)
            changes[prefix] = (response.count, len(response.kvs))
            revision = response.header.revision if revision is None else min(revision, response.header.revision)
        assert revision is not None, "prefix_changes of no prefix"
        return changes, revision

    @_etcd_call(repeatable=True)
    def get_prefixes(self, prefixes: Iterable[str], keys: Iterable[str] = ()) -> dict[str, list[Versioned]]:
        """Every key under each of ``prefixes``, and each of ``keys`` (a list of it, or an empty one
        if it is absent), all read in one transaction (at one revision)."""
        prefixes, keys = list(prefixes), list(keys)
        txn = self._client.transactions
        reads = [txn.get(prefix, range_end=prefix_range_end(prefix)) for prefix in prefixes]
        reads += [txn.get(key) for key in keys]
        _, responses = self._client.transaction(compare=[], success=reads, failure=[])
        return {
            read: sorted((Versioned(meta.key.decode(), json.loads(raw), meta.mod_revision) for raw, meta in kvs),
                         key=lambda item: item.key)
            for read, kvs in zip(prefixes + keys, responses)
        }

    @_etcd_call(repeatable=False)
    def put(self, key: str, value: Any, lease: etcd3.Lease | None = None) -> int:
        """Write ``value``; returns the revision of the write (the key's new mod_revision)."""
        return self._client.put(key, _encode(value), lease=lease).header.revision

    @_etcd_call(repeatable=False)
    def delete(self, key: str) -> bool:
        """Delete ``key``; False if it did not exist."""
        return self._client.delete(key)

    @_etcd_call(repeatable=False)
    def delete_if(self, key: str, mod_revision: int) -> bool:
        """Delete ``key`` only if it is still at ``mod_revision``."""
        txn = self._client.transactions
        succeeded, _ = self._client.transaction(compare=[txn.mod(key) == mod_revision], success=[txn.delete(key)],
                                                failure=[])
        return succeeded

    @_etcd_call(repeatable=False)
    def transact(self, creates: dict[str, Any], requires: dict[str, int], deletes: Iterable[str] = ()) -> bool:
        """In one transaction: create every key of ``creates`` (each only if absent) and delete
        ``deletes``, only if every key of ``requires`` is at its mod_revision. False: nothing done."""
        txn = self._client.transactions
        compare = [txn.version(key) == 0 for key in creates] + [self._at_revision(k, r) for k, r in requires.items()]
        success = [txn.put(key, _encode(value)) for key, value in creates.items()] + [txn.delete(k) for k in deletes]
        succeeded, _ = self._client.transaction(compare=compare, success=success, failure=[])
        return succeeded

    @_etcd_call(repeatable=False)
    def create_all(self, values: dict[str, Any]) -> bool:
        """Create every key in one transaction; False (nothing written) if any already exists."""
        txn = self._client.transactions
        succeeded, _ = self._client.transaction(
            compare=[txn.version(key) == 0 for key in values],
            success=[txn.put(key, _encode(value)) for key, value in values.items()],
            failure=[],
        )
        return succeeded

    def create_with_children(self, key: str, value: Any, children: Mapping[str, Any], children_prefix: str,
                             marker: str) -> bool:
        """Create ``key`` and ``children`` (keys below ``children_prefix``) so that ``key`` appears only
        once every child is written; False, nothing written, if ``key`` exists.

        ``key`` is the commit point: its readers take the children of an absent ``key`` as absent.
        When everything fits one transaction it is one, made only while ``key`` is absent and
        nothing is below the prefix. Otherwise, or when something was there (a creation that died
        between its transactions left it, or a writer of a deleted record), the prefix is emptied
        while ``key`` is absent, and the children go in runs (``txn_runs``), each made only while
        ``key`` is absent and ``marker`` (below the prefix) holds this creation's token, which the
        first run writes; the last run writes ``key`` and deletes ``marker``. A creation that dies
        between runs leaves only children of an absent ``key``, which the next creation deletes
        (or ``delete_children_of_absent``).
        Of two creations at once, the later one's emptying deletes the earlier one's marker, so
        that one's next run is refused: it finds ``key`` written (False) or raises the retriable
        ``CoordinatorUnavailable``; no ``key`` is ever written beside another creation's children.
        """
        assert not key.startswith(children_prefix) and marker.startswith(children_prefix)
        assert all(child.startswith(children_prefix) and child != marker for child in children)
        txn = self._client.transactions
        absent = txn.version(key) == 0
        commit = txn.put(key, _encode(value))
        below = {"range_end": prefix_range_end(children_prefix)}
        puts = [txn.put(child, _encode(child_value)) for child, child_value in children.items()]
        parts = [([], [put]) for put in puts]
        nothing_below = txn.version(children_prefix, **below) == 0
        if len(self._runs(parts, ([absent, nothing_below], [commit]))) == 1:
            if self._transaction([absent, nothing_below], puts + [commit])[0]:
                return True
        if not self._transaction([absent], [txn.delete(children_prefix, **below)])[0]:
            return False
        token = _encode(uuid.uuid4().hex)
        holds, take, release = txn.value(marker) == token, txn.put(marker, token), txn.delete(marker)
        runs = self._runs(parts, ([absent, holds], [take, commit, release]))
        for index, run in enumerate(runs):
            first, last = index == 0, index == len(runs) - 1
            compare = [absent, txn.version(marker) == 0 if first else holds]
            success = ([take] if first and not last else []) + puts[run.start:run.stop]
            if last:
                success += [commit] if first else [commit, release]
            if not self._transaction(compare, success)[0]:
                if self.get(key) is not None:
                    return False
                raise CoordinatorUnavailable(f"another creation of {key} began while this one wrote its keys in "
                                             f"{len(runs)} transactions; retry")
        return True

    def _runs(self, parts: Sequence[tuple[list, list]], shared: tuple[list, list] = ([], []),
              nesting_ops: int = 0) -> list[range]:
        """``parts``, each (compares, operations) kept in one transaction, in runs etcd accepts with the
        ``shared`` compares and operations (``txn_runs.runs_within``), as the client encodes them."""
        return runs_within([self._txn_part(*part) for part in parts], self._txn_part(*shared), ETCD_TXN_BYTES_MAX,
                           ETCD_TXN_OPS_MAX, nesting_ops)

    def _txn_part(self, compare: list, success: list) -> TxnPart:
        encoded = sum(field_bytes(condition.build_message().ByteSize()) for condition in compare)
        encoded += sum(field_bytes(op.ByteSize()) for op in self._client._ops_to_requests(success))
        return TxnPart(encoded, len(compare), len(success))

    @_etcd_call(repeatable=False)
    def _transaction(self, compare: list, success: list) -> tuple[bool, list]:
        """One transaction of etcd3's compares and operations (a run of a write sent in several)."""
        return self._client.transaction(compare=compare, success=success, failure=[])

    def _at_revision(self, key: str, mod_revision: int):
        txn = self._client.transactions
        return txn.version(key) == 0 if mod_revision == 0 else txn.mod(key) == mod_revision

    @_etcd_call(repeatable=False)
    def compare_and_swap(self, key: str, value: Any, mod_revision: int, fence: Fence | None = None) -> bool:
        """Write ``value`` only if ``key`` is still at ``mod_revision`` (0: only if absent) and the fence holds."""
        txn = self._client.transactions
        conditions = [self._at_revision(key, mod_revision)]
        if fence is not None:
            conditions.append(txn.mod(fence[0]) == fence[1])
        succeeded, _ = self._client.transaction(compare=conditions, success=[txn.put(key, _encode(value))], failure=[])
        return succeeded

    def update(self, key: str, change: Callable[[Any], Any], attempts_max: int, what: str) -> bool:
        """Read, change and compare-and-swap ``key``, read again after each race another writer won.

        ``change(value)`` gives the new value, ``Update.KEEP`` (True, nothing written) or
        ``Update.REFUSE`` (False, nothing written). False too when the key is absent. A key that
        keeps changing under the writer for ``attempts_max`` tries is contended, not one try away
        from success: the retriable ``CoordinatorUnavailable``, naming ``what``.
        """
        for _ in range(attempts_max):
            current = self.get(key)
            if current is None:
                return False
            new = change(current.value)
            if new is Update.REFUSE:
                return False
            if new is Update.KEEP or self.compare_and_swap(key, new, current.mod_revision):
                return True
        raise CoordinatorUnavailable(f"{what} kept conflicting; retrying")

    @_etcd_call(repeatable=False)
    def put_and_delete(self, key: str, value: Any, delete: str, fence: Fence, lease: etcd3.Lease | None = None) -> bool:
        """Write ``key`` (under ``lease``) and delete ``delete`` in one transaction, only while the fence holds."""
        txn = self._client.transactions
        succeeded, _ = self._client.transaction(
            compare=[txn.mod(fence[0]) == fence[1]],
            success=[txn.put(key, _encode(value), lease=lease), txn.delete(delete)],
            failure=[],
        )
        return succeeded

    @_etcd_call(repeatable=False)
    def put_fenced(self, key: str, value: Any, fence: Fence) -> bool:
        """Write ``key`` only while the fence holds (a deposed controller's write is refused)."""
        txn = self._client.transactions
        succeeded, _ = self._client.transaction(compare=[txn.mod(fence[0]) == fence[1]],
                                                success=[txn.put(key, _encode(value))], failure=[])
        return succeeded

    @_etcd_call(repeatable=False)
    def delete_fenced(self, key: str, fence: Fence) -> bool:
        """Delete ``key`` (absent or not) only while the fence holds; False: the fence did not hold."""
        txn = self._client.transactions
        succeeded, _ = self._client.transaction(compare=[txn.mod(fence[0]) == fence[1]],
                                                success=[txn.delete(key)], failure=[])
        return succeeded

    @_etcd_call(repeatable=False)
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

    @_etcd_call(repeatable=True)
    def watch_prefix(self, prefix: str, on_events: Callable[[list[WatchEvent]], None], on_broken: Callable[[], None],
                     start_revision: int | None = None) -> int:
        """Call ``on_events`` for every change under ``prefix`` (from ``start_revision``); returns the watch id.

        Both callbacks run on the client's watch thread and must not block. ``on_broken`` is
        called once when the watch ends for any reason other than ``cancel_watch``.
        """
        watch_id, member = next(self._watch_ids), self.member
        ended = threading.Event()

        def callback(response) -> None:
            if not isinstance(response, etcd3.watch.WatchResponse):  # an error, or None: the stream closed
                ended.set()
                self._watches.pop(watch_id, None)
                if _blames_member(response):
                    self._move_on_from(member)  # before on_broken: watching again goes elsewhere
                on_broken()
                return
            on_events([
                WatchEvent(event.key.decode(), json.loads(event.value) if isinstance(event, etcd3.events.PutEvent) else None,
                           event.mod_revision)
                for event in response.events
            ])

        watcher = self._client.watcher
        etcd_watch_id = watcher.add_callback(prefix, callback, range_end=prefix_range_end(prefix),
                                             start_revision=start_revision)
        self._watches[watch_id] = (watcher, etcd_watch_id)
        if ended.is_set():  # it ended before it was recorded: nothing to cancel later
            self._watches.pop(watch_id, None)
        return watch_id

    def cancel_watch(self, watch_id: int) -> None:
        """Stop a watch; quietly does nothing if it already ended (etcd may be away)."""
        watcher, etcd_watch_id = self._watches.pop(watch_id, (None, None))
        if watcher is None:
            return
        if watcher is self._client._stubs.get("watcher"):
            watcher.cancel(etcd_watch_id)  # queues a cancel request on the open stream: nothing to fail here
            return
        # A watcher the client replaced after a failure has closed its side of the stream: a
        # cancel request would wait in a queue nothing reads (and block the tenth caller). Its
        # stream ends with the member or the store; until then, deliver nothing.
        with watcher._lock:
            watcher._callbacks.pop(etcd_watch_id, None)

    @_etcd_call(repeatable=False)
    def delete_prefix(self, prefix: str) -> None:
        """Delete every key under ``prefix``."""
        self._client.delete_prefix(prefix)

    @_etcd_call(repeatable=False)
    def delete_children_of_absent(self, key: str, children_prefix: str) -> int:
        """Delete every key below ``children_prefix`` while ``key`` is absent, in one transaction; how
        many were deleted (0 if ``key`` exists). What a ``create_with_children`` that died between its
        runs left: its caller makes sure no creation of ``key`` is under way, which looks the same."""
        txn = self._client.transactions
        below = txn.delete(children_prefix, range_end=prefix_range_end(children_prefix))
        succeeded, responses = self._client.transaction(compare=[txn.version(key) == 0], success=[below], failure=[])
        return responses[0].response_delete_range.deleted if succeeded else 0

    @_etcd_call(repeatable=False)
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

    @_etcd_call(repeatable=False)
    def grant_lease(self, ttl_s: int) -> etcd3.Lease:
        return self._client.lease(ttl_s)

    @_etcd_call(repeatable=True)
    def refresh_lease(self, lease: etcd3.Lease) -> int:
        """Refresh ``lease``; return its remaining TTL in seconds (0: it had already expired)."""
        responses = lease.refresh()
        return max((response.TTL for response in responses), default=0)

    @_etcd_call(repeatable=True)
    def lease_keys(self, lease: etcd3.Lease) -> frozenset[str]:
        """The keys under ``lease`` now (none once it expired)."""
        return frozenset(key.decode() for key in lease.keys)

    @_etcd_call(repeatable=False)
    def revoke_lease(self, lease: etcd3.Lease) -> None:
        lease.revoke()

    @_etcd_call(repeatable=True)
    def leader_name(self) -> str | None:
        """The name of the etcd cluster's leader as the member answering sees it; None during an election."""
        leader = self._client.status().leader
        return None if leader is None else leader.name
