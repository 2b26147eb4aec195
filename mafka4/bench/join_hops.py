"""A join's hops from its trace's rows (``mafka4.join_trace``): when each step from the joiner's
JOIN request to its first message happened, in ms after the join.

``JOIN_HOPS`` lists the hops in the order a split join takes them. Each is the first row of its
kind at or after the hop it follows (``after``; the join itself for the first), of the joiner's
rows only where the hop is the joiner's, of any member's otherwise (the split is asked and the
parent released by other members). A hop with no such row (a joiner that needed no new
connection, a trace that lost its rows) is None, and the hops that follow it count from the hop
it follows instead. Rows come from several processes; their wall clocks are one machine's.

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


JOIN_HOPS = (
    Hop("join_sent", True, None, "the joiner's consumer, its metadata read, starts to join (FIND_COORDINATOR)"),
    Hop("coordinator_found", True, "join_sent", "FIND_COORDINATOR answered (a connection to any node first)"),
    Hop("join_received", True, "coordinator_found", "GROUP_JOIN reached the coordinator (a connection to it first)"),
    Hop("coordinator_join", True, "join_received", "the coordinator registered the member (its etcd transactions)"),
    Hop("join_answered", True, "coordinator_join", "the joiner has its session"),
    Hop("split_asked", False, "join_sent", "the splitter's sync planned the split; its coordinator wrote the intent"),
    Hop("intent_taken", False, "split_asked", "the controller's intent worker picked the intent up"),
    Hop("holds_asked", False, "intent_taken", "the controller read the topic and asked the parent's node to hold"),
    Hop("holds_answered", False, "holds_asked", "the held feed streams offered their cut"),
    Hop("epoch_stored", False, "holds_answered", "the split epoch and the children's states are stored"),
    Hop("children_hosted", False, "epoch_stored", "the read nodes host the children and released the holds"),
    Hop("split_answered", False, "children_hosted", "the coordinator read the intent's result"),
    Hop("parent_sealed", False, "epoch_stored", "the parent's leader stored its sealed end (etcd watch)"),
    Hop("released", False, "epoch_stored", "the parent's owner, drained to the sealed end, released it"),
    Hop("woken", True, "released", "the coordinator answered the joiner's heartbeat: sync"),
    Hop("sync_received", True, "woken", "the joiner's sync reached the coordinator"),
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
    found: dict[str, float | None] = {}
    since: dict[str, float] = {}  # hop -> the time the hops after it count from
    for hop in JOIN_HOPS:
        start = join_ms if hop.after is None else since[hop.after]
        stamps = [ms for ms, member in by_hop.get(hop.name, ()) if ms >= start and (not hop.joiners or member == joiner)]
        first = min(stamps, default=None)
        found[hop.name] = None if first is None else round(first - join_ms, 1)
        since[hop.name] = start if first is None else first
    return found


def hop_medians(trials: Iterable[Mapping[str, float | None]]) -> dict[str, float | None]:
    """Per hop, the median over the trials that have it (None if none)."""
    trials = list(trials)
    medians: dict[str, float | None] = {}
    for name in HOP_NAMES:
        values = [t[name] for t in trials if t.get(name) is not None]
        medians[name] = round(statistics.median(values), 1) if values else None
    return medians
