"""A join's hops from its trace's rows (``mafka4.join_trace``): when each step from the joiner's
JOIN request to its first message happened, in ms after the join.

``JOIN_HOPS`` lists the hops in the order a split join takes them. Each is the first row of its
kind at or after the hop it follows (``after``; the join itself for the first), of the joiner's
rows only where the hop is the joiner's, of any member's otherwise (the split is asked and the
parent released by other members). A hop that leads to a later one (``leads_to``: the wake and
the sync that claimed the child) is instead the last row of its kind before that one: a joiner
is woken and syncs several times during a join, and only the round that claimed counts. A hop
with no such row (a joiner that needed no new connection, a trace that lost its rows) is None,
and the hops that follow it count from the hop it follows instead. Rows come from several
processes; their wall clocks are one machine's.

**The round trips of a split join**, hop by hop (a connection is TCP, then ``API_VERSIONS``,
``SASL_HANDSHAKE`` and two ``SASL_AUTHENTICATE``: four round trips; the salted password is
derived once per process, ``security.scram_client``):

* before ``join_sent``: the consumer reads the topic's metadata (a connection, ``METADATA``,
  closed) and its fetcher the VP layout (a second connection, ``VP_METADATA``);
* ``coordinator_found``: ``FIND_COORDINATOR``, over that second connection (the member's
  fetcher and group link share their connections, ``client.virtual_group_consumer``);
* ``join_received`` .. ``join_answered``: a third connection, to the coordinator, and
  ``GROUP_JOIN``, in which the coordinator reads the topic's config, the group's snapshot (one
  transaction) and writes the member key under its lease: three etcd round trips;
* ``split_asked``: the member key's watch event answers the waiting heartbeat of the group's
  smallest member (no round trip of its own), whose sync (one client and one etcd round trip)
  plans the split; its coordinator writes the intent (one etcd round trip, its result watched);
* ``intent_taken`` .. ``children_hosted``: the intent's watch event wakes the controller, which
  reads the pending intents, marks this one started, reads the topic in one transaction (three
  etcd round trips), asks the parent's leader node to hold (one call, ``hold_received`` ..
  ``hold_offered``: the feed streams stop and write their hold keys), stores the epoch and the
  children's states in one transaction, and asks the nodes to host the children and release
  the holds (one call per node: a holder that leads a child does both; ``host_received`` ..
  ``children_opening``: a node reads the epoch it has not seen yet, one etcd round trip;
  ``children_opening`` .. ``children_opened``: it opens the children's logs on its worker
  thread, about 0.4 ms a child here (``virtual.vp_opening``), and they take their roles on its
  loop, about as long again: a leader's epoch checkpoint is fsynced);
* ``split_answered``: the controller writes the result (a lease grant and one transaction); the
  coordinator's watch reads it. Nothing in the group waits for this hop;
* ``parent_sealed``: the released feed hands the parent its records up to the cut; its leader
  records the sealed end (one etcd write);
* ``released``: the sealed end wakes the parent's owner, whose sync (one client, one etcd round
  trip) tells it the sealed end; it reads the parent to it (its fetches already out; at once if
  it had read there already) and syncs again: one client round trip, the snapshot and the transaction that commits and releases the
  parent. This is what the joiner waits for, and must: the child's records follow the parent's
  below the cut for each key, so a child is read only once its parent was consumed to its
  sealed end (with an empty parent backlog, this is as soon as the feed passed the cut);
* ``woken`` .. ``assigned``: the released owner key answers the joiner's waiting heartbeat; its
  sync (one client round trip) reads the snapshot and claims a child (two etcd round trips);
  the answer carries the layout, the child's state and the read nodes' addresses, so no
  ``VP_METADATA`` follows (``metadata_read`` stays empty);
* ``connected`` .. ``first_data``: a connection to the child's leader node, opened ahead while
  the joiner owned nothing (``VpFetcher.connect_ahead``; then ``connected`` stays empty, as when
  it is the coordinator's node) or else now, for ``VP_LIST_OFFSETS`` (a child without a
  committed offset starts at its log start, which only its leader knows), then the first
  ``VP_FETCH``.

Pure: rows in, times out.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Mapping

if TYPE_CHECKING:  # the rows' type only: the trace itself reads a clock
    from mafka4.join_trace import JoinRow


@dataclass(frozen=True, slots=True)
class Hop:
    name: str  # the row's hop (``mafka4.join_trace``) and the figure's name
    joiners: bool  # only the joiner's rows count
    after: str | None  # the hop it follows (None: the join)
    what: str  # for the summary's readers
    leads_to: str | None = None  # the later hop it is the last row before (see the module docstring)


JOIN_HOPS = (
    Hop("join_sent", True, None, "the joiner's consumer, its metadata read, starts to join (FIND_COORDINATOR)"),
    Hop("coordinator_found", True, "join_sent", "FIND_COORDINATOR answered (a connection to any node first)"),
    Hop("join_received", True, "coordinator_found", "GROUP_JOIN reached the coordinator (a connection to it first)"),
    Hop("coordinator_join", True, "join_received", "the coordinator registered the member (its etcd transactions)"),
    Hop("join_answered", True, "coordinator_join", "the joiner has its session"),
    Hop("split_asked", False, "join_sent", "the splitter's sync planned the split; its coordinator wrote the intent"),
    Hop("intent_taken", False, "split_asked", "the controller's intent worker picked the intent up"),
    Hop("holds_asked", False, "intent_taken", "the controller read the topic and asked the parent's node to hold"),
    Hop("hold_received", False, "holds_asked", "the parent's leader node received the hold (a Ray call)"),
    Hop("hold_offered", False, "hold_received", "its feed streams stopped and wrote their hold keys"),
    Hop("holds_answered", False, "hold_offered", "the controller has the offered cuts"),
    Hop("epoch_stored", False, "holds_answered", "the split epoch and the children's states are stored"),
    Hop("host_received", False, "epoch_stored", "a child's node received the call to host it"),
    Hop("children_opening", False, "host_received", "that node read the new epoch and starts opening the child's logs"),
    Hop("children_opened", False, "children_opening", "that node opened the child's logs and took its role"),
    Hop("children_hosted", False, "epoch_stored", "the read nodes host the children and released the holds"),
    Hop("split_answered", False, "children_hosted", "the coordinator read the intent's result"),
    Hop("parent_sealed", False, "epoch_stored", "the parent's leader stored its sealed end (etcd watch)"),
    Hop("released", False, "epoch_stored", "the parent's owner, drained to the sealed end, released it"),
    Hop("woken", True, "split_asked", "the coordinator answered the joiner's heartbeat: sync", "sync_received"),
    Hop("sync_received", True, "split_asked", "the joiner's sync that claimed reached the coordinator", "claimed"),
    Hop("claimed", True, "split_asked", "the coordinator claimed a child for the joiner"),
    Hop("assigned", True, "claimed", "the joiner read the sync answer that gives it the child"),
    Hop("metadata_read", True, "assigned", "the joiner read the layout (a child born after its last read)"),
    Hop("offsets_listed", True, "assigned", "the joiner listed the child's offsets at its leader"),
    Hop("connected", True, "assigned", "the joiner connected and authenticated to the child's read node"),
    Hop("fetch_sent", True, "assigned", "the joiner's first fetch of the child went out"),
    Hop("first_data", True, "fetch_sent", "the first non-empty answer of the child"),
)
HOP_NAMES = tuple(hop.name for hop in JOIN_HOPS)


def join_hops_ms(rows: Iterable["JoinRow"], join_ms: float, joiner: str) -> dict[str, float | None]:
    """Per hop of ``JOIN_HOPS``, its time in ms after ``join_ms`` (rounded to 0.1), or None."""
    by_hop: dict[str, list[tuple[float, str]]] = {}
    for hop, ms, member, _ in rows:
        by_hop.setdefault(hop, []).append((ms, member))
    hops = {hop.name: hop for hop in JOIN_HOPS}
    stamped: dict[str, float | None] = {}
    since: dict[str, float] = {}  # hop -> the time the hops after it count from

    def resolve(name: str) -> None:
        if name in since:
            return
        hop = hops[name]
        start = join_ms
        if hop.after is not None:
            resolve(hop.after)
            start = since[hop.after]
        stamps = [ms for ms, member in by_hop.get(name, ()) if ms >= start and (not hop.joiners or member == joiner)]
        if hop.leads_to is None:
            found = min(stamps, default=None)
        else:
            resolve(hop.leads_to)
            end = stamped[hop.leads_to]
            found = None if end is None else max((ms for ms in stamps if ms <= end), default=None)
        stamped[name], since[name] = found, start if found is None else found

    for hop in JOIN_HOPS:
        resolve(hop.name)
    return {name: None if ms is None else round(ms - join_ms, 1) for name, ms in
            ((hop.name, stamped[hop.name]) for hop in JOIN_HOPS)}


def hop_medians(trials: Iterable[Mapping[str, float | None]]) -> dict[str, float | None]:
    """Per hop, the median over the trials that have it (None if none)."""
    trials = list(trials)
    medians: dict[str, float | None] = {}
    for name in HOP_NAMES:
        values = [t[name] for t in trials if t.get(name) is not None]
        medians[name] = round(statistics.median(values), 1) if values else None
    return medians
