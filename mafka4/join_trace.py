"""Join traces: when each hop of a group member's join happened, for ``mafka4 bench vp-join``
(``mafka4.bench.join_hops`` turns the rows into hop times).

A join crosses four processes: the joining client, the group's coordinator (a read node's
port), the controller (which splits the VP the joiner will take) and the read nodes hosting the
children. Each process keeps its own rows of a traced topic here, stamped with
``clocks.wall_ms_fine`` (every process of a local cluster reads the same wall clock, so stamps
of different processes compare). A row is ``(hop, ms, member, detail)``: ``hop`` one of the
names below, ``member`` the group member id it concerns ("" if none), ``detail`` a short str.

* the client (``client.virtual_group_consumer``, ``client.vp_fetcher``): ``join_sent``,
  ``coordinator_found``, ``join_answered``, ``assigned`` (a sync answer that claimed VPs; detail: them),
  ``metadata_read``, ``offsets_listed``, ``connected`` (a new authenticated connection to a read
  node), ``fetch_sent`` and ``first_data`` (the first fetch of a claimed VP, its first non-empty
  answer), ``sync_sent`` and ``synced`` (every sync of every member with the coordinator, sent
  and answered: how often a join makes each member sync, and how long each sync took),
  ``sealed_learned`` (a sync told the member the sealed end of a VP it reads; detail: the VP, its
  sealed end and the member's position then) and ``drained`` (the member read such a VP to its
  sealed end and syncs to release it; detail: the VPs);
* the coordinator (``frontend.group_sessions``, ``frontend.hosted_members``,
  ``coordinator.groups.vp_groups``): ``join_received``, ``coordinator_join``, ``woken`` (the
  member's heartbeat is answered: it should sync), ``sync_arrived`` (a sync request decoded on
  the port's loop, before it waits for the member's previous call and a group thread),
  ``sync_received`` (the sync starts on a group thread), ``sync_read`` (its snapshot of the group
  and the topic's layout read: one etcd round trip), ``release_written`` (a sync's release
  transaction answered; detail: the VPs), ``released`` and ``claimed`` (a sync's release and
  claim transactions, stamped once the sync is done; detail: the VPs), ``split_asked`` (the split intent written) and ``split_answered`` (its
  result read);
* the controller, whose rows travel back in the split intent's result (it runs in a process
  no bench reaches) and are recorded by the coordinator that asked: ``intent_taken``,
  ``holds_asked``, ``holds_answered``, ``epoch_stored``, ``children_hosted`` (the read nodes
  opened the children's logs and released the held feed streams);
* the read nodes (``virtual.read_node``): ``hold_received`` and ``hold_offered`` (a parent's
  leader asked to hold, its feed streams stopped at their offers), ``host_received`` (a node
  asked to host children), ``children_opening`` (it knows their epoch and starts opening their
  logs) and ``children_opened`` (their logs open, their roles taken); detail: the node.

Off by default and free when off: a process keeps rows only for the topics ``start``ed in it
(a read node's ``set_join_trace``; a join bench's member process for its consumer), and a recording
point asks ``on(topic)`` (one dict lookup) before it builds a row. At most
``JOIN_TRACE_TOPICS_MAX`` topics are traced at once in a process, and each keeps at most
``STAGE_TRACE_ROWS_MAX`` rows until taken (the rest counted), so a forgotten trace stays bounded
(and the oldest trace is stopped when one more starts).
"""

from __future__ import annotations

from mafka4.clocks import wall_ms_fine
from mafka4.limits import JOIN_TRACE_TOPICS_MAX
from mafka4.stage_trace import StageTrace

# A row: (hop, wall ms, member id or "", detail).
JoinRow = tuple[str, float, str, str]


class JoinTraces:
    """The join traces of one process, by topic; see the module docstring."""

    __slots__ = ("topics_max", "_traces")

    def __init__(self, topics_max: int = JOIN_TRACE_TOPICS_MAX):
        self.topics_max = topics_max
        self._traces: dict[str, StageTrace] = {}

    def start(self, topic: str) -> None:
        """Keep rows of ``topic`` from now on (a trace already on keeps its rows). With
        ``topics_max`` traces on, the oldest is stopped first: one a crashed bench never stopped."""
        if topic not in self._traces and len(self._traces) >= self.topics_max:
            del self._traces[next(iter(self._traces))]
        self._traces.setdefault(topic, StageTrace())

    def stop(self, topic: str) -> None:
        """Stop tracing ``topic`` and discard its rows."""
        self._traces.pop(topic, None)

    def on(self, topic: str) -> bool:
        return topic in self._traces

    def record(self, topic: str, hop: str, member: str = "", detail: str = "", ms: float | None = None) -> None:
        """A row of ``topic``'s trace if it is on (stamped now unless ``ms`` says when)."""
        trace = self._traces.get(topic)
        if trace is not None:
            trace.record((hop, wall_ms_fine() if ms is None else ms, member, detail))

    def take(self, topic: str) -> dict:
        """``{"rows": [...], "dropped": n}`` of ``topic`` so far (empty if untraced); its trace starts empty again."""
        trace = self._traces.get(topic)
        return {"rows": [], "dropped": 0} if trace is None else trace.take()


# This process's traces: the recording points of every layer share them (a read node's port and
# its coordinator threads, a bench member's consumer), so none needs a trace handed down to it.
JOIN_TRACES = JoinTraces()


def vps_detail(vps) -> str:
    """The detail of a row about VPs: their ids, comma-separated."""
    return ",".join(str(vp) for vp in sorted(vps))
