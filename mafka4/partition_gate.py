"""Network partitions between named nodes, for fault injection: a gate every caller passes.

Nodes are named as the cluster names them: write nodes (``w0``, ...; a physical replica is named
by its node), read nodes (``r0``, ...), and ``client`` (``CLIENT``) for every producer and
consumer of one process. A ``NetworkFault`` lists ``Link`` s, each one direction of traffic
between two nodes, either dropped or delayed by ``delay_ms``. A link it does not list works.

A remote call from A to B sends its request over the link A→B and gets its answer over B→A, so
the caller applies both (``PartitionGate.call``, planned by ``NetworkFault.plan``):

* **request dropped**: the call is never made (B never hears of it); the caller hears nothing
  until ``lost_after_ms`` passed, then the call fails with ``CallLost``;
* **answer dropped**: the call is made and B acts on it (a produce appends, a follower's fetch
  counts as its progress), but its answer (a result or an error) never arrives: the call
  fails with ``CallLost`` ``lost_after_ms`` after it was made;
* **delayed**: the request waits ``delay_ms`` before it is sent, the answer ``delay_ms`` after
  it arrived.

A lost call fails after ``lost_after_ms``, not at once, because that is what a lost packet costs
a caller: its timeout. ``CallLost`` is a ``RequestTimedOut`` (retriable) and a ``TimeoutError``:
what a call that timed out raises, so every caller handles a lost call as it handles a
timed-out one (retry, back off, avoid the node). The module imports no Ray: clients pass the
gate too. A caller whose own timeout is
shorter sees that timeout first.

One direction or both: ``NetworkFault.between(side_a, side_b, both_ways=False)`` cuts only the
traffic from side A to side B. Which side calls matters: physical replication is pulled by
followers, so cutting leader→follower loses the answers of the follower's fetches (the
leader has seen the follower ask from an offset that never moves), while follower→leader
loses the fetches themselves (the leader sees none). Either way the follower falls behind.

Where it applies, always at the caller:

* actor to actor: a physical follower's fetches from its leader (``PhysicalPartition``), a
  read node's feed fetches from physical replicas and its replication sessions with other read
  nodes (``ReadNode``), through ``GatedHandle``; set by each actor's ``set_partition``
  (``Admin.set_network_fault`` sets every actor of a topic);
* client to actor: producer sends (``client.sender``) and mafka4-mode consumer fetches
  (``client.vp_fetcher``) of this process, through the process's gate (``set_client_fault``).
  A consumer fetch has no effect on the read node, so a lost request and a lost answer look
  the same to it: the fetcher skips the node until its next metadata read, as it skips a node
  that is not running;
* client to actor: Mafka3-mode consumer fetches from partition leaders (``client.partition_fetcher``): a
  leader the process is cut off from is not asked until the fault heals or the leader moves;
  a slowed one is asked after the delay.

A client in another process takes a fault from a JSON file (``NetworkFault.to_json`` /
``from_json``): the chaos run's group members do (``simulations.chaos.fault_relay``).

Not gated: the controller's calls, etcd, and ``Admin`` calls. An actor started while a fault is
in force (the controller restarting one) starts without it: it was not told. Off by default:
with no links a call costs one check.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Awaitable, Callable, Iterable, TypeVar

from mafka4.errors import InvalidConfig, RequestTimedOut
from mafka4.limits import FAULT_DELAY_MS_MAX

CLIENT = "client"

T = TypeVar("T")


class CallLost(RequestTimedOut, TimeoutError):
    """A call whose request or answer a network fault dropped; raised when its time ran out."""


@dataclass(frozen=True, slots=True)
class Link:
    """One direction of traffic, ``source`` → ``destination``: dropped, or delayed by ``delay_ms``."""

    source: str
    destination: str
    dropped: bool = True
    delay_ms: int = 0

    def __post_init__(self) -> None:
        for name in (self.source, self.destination):
            if not isinstance(name, str) or not name:
                raise InvalidConfig(f"link {self.source!r} -> {self.destination!r}: nodes are named by non-empty strings")
        if self.source == self.destination:
            raise InvalidConfig(f"link {self.source} -> {self.destination}: a node is never cut from itself")
        if isinstance(self.delay_ms, bool) or not isinstance(self.delay_ms, int) or not 0 <= self.delay_ms <= FAULT_DELAY_MS_MAX:
            raise InvalidConfig(f"delay_ms={self.delay_ms!r} must be an integer from 0 to {FAULT_DELAY_MS_MAX}")
        if self.dropped == (self.delay_ms > 0):
            raise InvalidConfig(f"link {self.source} -> {self.destination}: either dropped or delayed (delay_ms > 0), "
                                f"not {'both' if self.dropped else 'neither'}")

    def describe(self) -> str:
        return f"{self.source}->{self.destination} " + ("dropped" if self.dropped else f"+{self.delay_ms} ms")


@dataclass(frozen=True, slots=True)
class CallPlan:
    """What the links between a caller and a callee do to one call."""

    request_lost: bool = False
    answer_lost: bool = False
    request_delay_ms: int = 0
    answer_delay_ms: int = 0

    @property
    def lost(self) -> bool:
        return self.request_lost or self.answer_lost


UNTOUCHED = CallPlan()


@dataclass(frozen=True, slots=True)
class NetworkFault:
    """The links cut or slowed; ``lost_after_ms``: how long a caller waits for a dropped call."""

    links: tuple[Link, ...] = ()
    lost_after_ms: int = 1000

    def __post_init__(self) -> None:
        object.__setattr__(self, "links", tuple(self.links))
        if not all(isinstance(link, Link) for link in self.links):
            raise InvalidConfig("a network fault lists Link values")
        directions = [(link.source, link.destination) for link in self.links]
        if len(set(directions)) != len(directions):
            raise InvalidConfig(f"a link is listed twice in {[link.describe() for link in self.links]}")
        if isinstance(self.lost_after_ms, bool) or not isinstance(self.lost_after_ms, int) or not (
                1 <= self.lost_after_ms <= FAULT_DELAY_MS_MAX):
            raise InvalidConfig(f"lost_after_ms={self.lost_after_ms!r} must be an integer from 1 to {FAULT_DELAY_MS_MAX}")

    @classmethod
    def between(cls, side_a: Iterable[str], side_b: Iterable[str], both_ways: bool = True, delay_ms: int = 0,
                lost_after_ms: int = 1000) -> "NetworkFault":
        """Cut (``delay_ms`` 0) or slow every link from a node of ``side_a`` to one of ``side_b``, and
        back too if ``both_ways``."""
        side_a, side_b = sorted(set(side_a)), sorted(set(side_b))
        if not side_a or not side_b or set(side_a) & set(side_b):
            raise InvalidConfig(f"a partition needs two disjoint, non-empty sides, not {side_a} and {side_b}")
        pairs = [(a, b) for a in side_a for b in side_b]
        if both_ways:
            pairs += [(b, a) for a, b in pairs]
        return cls(tuple(Link(source, destination, delay_ms == 0, delay_ms) for source, destination in pairs),
                   lost_after_ms)

    def link(self, source: str, destination: str) -> Link | None:
        return next((link for link in self.links if (link.source, link.destination) == (source, destination)), None)

    def plan(self, caller: str, callee: str) -> CallPlan:
        """What a call from ``caller`` to ``callee`` meets: its request goes caller→callee, its answer back."""
        request, answer = self.link(caller, callee), self.link(callee, caller)
        if request is None and answer is None:
            return UNTOUCHED
        return CallPlan(request is not None and request.dropped, answer is not None and answer.dropped,
                        0 if request is None else request.delay_ms, 0 if answer is None else answer.delay_ms)

    def describe(self) -> dict:
        """What ``set_partition`` answers."""
        return {"links": [link.describe() for link in self.links], "lost_after_ms": self.lost_after_ms}

    def to_json(self) -> dict:
        """A JSON form that ``from_json`` reads back: how a fault reaches clients in other processes."""
        return {"links": [[link.source, link.destination, link.dropped, link.delay_ms] for link in self.links],
                "lost_after_ms": self.lost_after_ms}

    @classmethod
    def from_json(cls, data: dict) -> "NetworkFault":
        """The fault ``to_json`` wrote; ``InvalidConfig`` names what is malformed."""
        try:
            links = tuple(Link(source, destination, dropped, delay_ms)
                          for source, destination, dropped, delay_ms in data["links"])
            return cls(links, data["lost_after_ms"])
        except (KeyError, TypeError, ValueError) as error:
            raise InvalidConfig(f"not a network fault in JSON form ({type(error).__name__}: {error}): "
                                f"expected {{'links': [[source, destination, dropped, delay_ms], ...], "
                                f"'lost_after_ms': N}}") from None


HEALED = NetworkFault()


class PartitionGate:
    """The network fault as one node sees it; ``node`` is the caller of every call it passes."""

    def __init__(self, node: str):
        self.node = node
        self.fault = HEALED

    def set(self, fault: NetworkFault) -> NetworkFault:
        if not isinstance(fault, NetworkFault):
            raise InvalidConfig(f"set_partition takes a NetworkFault, not {type(fault).__name__}")
        self.fault = fault
        return fault

    @property
    def active(self) -> bool:
        return bool(self.fault.links)

    def plan(self, callee: str) -> CallPlan:
        return self.fault.plan(self.node, callee) if self.fault.links else UNTOUCHED

    async def call(self, callee: str, send: Callable[[], Awaitable[T]]) -> T:
        """``await send()`` (which makes the call) as the links between this node and ``callee`` allow."""
        plan = self.plan(callee)
        if plan is UNTOUCHED:
            return await send()
        lost_after_s = self.fault.lost_after_ms / 1000
        if plan.request_lost:
            await asyncio.sleep(lost_after_s)
            raise self._lost(callee, "request")
        if plan.request_delay_ms:
            await asyncio.sleep(plan.request_delay_ms / 1000)
        if plan.answer_lost:
            loop = asyncio.get_running_loop()
            began = loop.time()
            try:
                await asyncio.wait_for(send(), lost_after_s)
            except Exception:  # a result, an error or a timeout: the caller hears none of them
                pass
            await asyncio.sleep(max(0.0, lost_after_s - (loop.time() - began)))
            raise self._lost(callee, "answer")
        try:
            result = await send()
        except Exception:
            await asyncio.sleep(plan.answer_delay_ms / 1000)  # an error is an answer too
            raise
        await asyncio.sleep(plan.answer_delay_ms / 1000)
        return result

    def _lost(self, callee: str, what: str) -> CallLost:
        return CallLost(f"a network fault dropped the {what} of a call from {self.node} to {callee} "
                        f"(lost after {self.fault.lost_after_ms} ms)")


class GatedHandle:
    """An actor handle whose calls pass ``gate`` on their way to ``callee``.

    ``handle.method.remote(...)`` gives an awaitable instead of an ``ObjectRef``, for callers
    on an event loop that await it (or wrap it in ``asyncio.wait_for``); the call is made when
    it is awaited.
    """

    def __init__(self, handle, gate: PartitionGate, callee: str):
        self._handle, self._gate, self._callee = handle, gate, callee

    def __getattr__(self, method: str) -> "_GatedMethod":
        return _GatedMethod(getattr(self._handle, method), self._gate, self._callee)


class _GatedMethod:
    def __init__(self, method, gate: PartitionGate, callee: str):
        self._method, self._gate, self._callee = method, gate, callee

    def remote(self, *args, **kwargs) -> Awaitable:
        return self._gate.call(self._callee, lambda: self._method.remote(*args, **kwargs))


_client_gate = PartitionGate(CLIENT)


def client_gate() -> PartitionGate:
    """The gate of this process's clients (producers and consumers)."""
    return _client_gate


def set_client_fault(fault: NetworkFault) -> NetworkFault:
    """Cut or slow the links of this process's clients (``HEALED`` clears them)."""
    return _client_gate.set(fault)
