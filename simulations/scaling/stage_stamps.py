"""The stage stamps of an experiment's messages: turning a topic's stage trace on, taking it, and
joining its rows to the messages (``mafka4.stage_trace`` writes the rows; ``simulations.schema``
documents the stamps and the stages between them).

The joins are pure (``physical_stamps``, ``vp_stamps``): a message is found in its partition's
leader rows by offset (each row covers the batch ``[base_offset, next_offset)``), and in its VP's
rows by VP offset: the append that wrote it, and the first high-watermark move past it. A
message with no covering row (a batch produced while tracing was off, a row dropped at the
trace's bound, a leader that changed during the run) gets null stamps, which the analysis
leaves out of that stage.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from typing import Iterable, Sequence

PHYSICAL_COLUMNS = ("leader_received_time_ms", "leader_appended_time_ms", "committed_time_ms")
VP_COLUMNS = ("vp_appended_time_ms", "vp_committed_time_ms")


class _Ranges:
    """Rows covering ``[base, next)`` offset ranges, found by offset."""

    def __init__(self, rows: Iterable[tuple]):  # (base, next, *values)
        self._rows = sorted(rows)
        self._bases = [row[0] for row in self._rows]

    def find(self, offset: int) -> tuple | None:
        index = bisect.bisect_right(self._bases, offset) - 1
        if index >= 0 and offset < self._rows[index][1]:
            return self._rows[index]
        return None


def physical_stamps(rows_by_partition: dict[int, Sequence[tuple]], partitions: Sequence[int],
                    offsets: Sequence[int | None]) -> dict[str, list[float | None]]:
    """Per message (its partition and offset, None if never acknowledged): received, appended and
    committed at its leader, from rows ``(base, next, received, appended, committed)``."""
    ranges = {partition: _Ranges(rows) for partition, rows in rows_by_partition.items()}
    columns: dict[str, list[float | None]] = {name: [] for name in PHYSICAL_COLUMNS}
    for partition, offset in zip(partitions, offsets):
        row = ranges[partition].find(offset) if offset is not None and partition in ranges else None
        for index, name in enumerate(PHYSICAL_COLUMNS):
            columns[name].append(None if row is None else row[2 + index])
    return columns


def vp_stamps(rows: Sequence[tuple], vps: Sequence[int | None], vp_offsets: Sequence[int | None]
              ) -> dict[str, list[float | None]]:
    """Per message (the VP and VP offset it was consumed at, None if never consumed): when its VP
    leader appended it and when the VP's high watermark first passed it, from read-node rows
    ``("append", vp, base, next, ms)`` and ``("hw", vp, high_watermark, ms)``."""
    appends: dict[int, list[tuple]] = defaultdict(list)
    moves: dict[int, list[tuple[int, float]]] = defaultdict(list)
    for row in rows:
        if row[0] == "append":
            appends[row[1]].append((row[2], row[3], row[4]))
        elif row[0] == "hw":
            moves[row[1]].append((row[2], row[3]))
    append_ranges = {vp: _Ranges(vp_rows) for vp, vp_rows in appends.items()}
    # A high watermark only grows while one leader leads: the first move past an offset is found
    # by bisection over the watermarks in the order they were stamped.
    for vp_moves in moves.values():
        vp_moves.sort(key=lambda move: move[1])
    columns: dict[str, list[float | None]] = {name: [] for name in VP_COLUMNS}
    for vp, offset in zip(vps, vp_offsets):
        appended = committed = None
        if vp is not None and offset is not None:
            row = append_ranges[vp].find(offset) if vp in append_ranges else None
            appended = None if row is None else row[2]
            vp_moves = moves.get(vp, [])
            index = bisect.bisect_right([high_watermark for high_watermark, _ in vp_moves], offset)
            committed = vp_moves[index][1] if index < len(vp_moves) else None
        columns["vp_appended_time_ms"].append(appended)
        columns["vp_committed_time_ms"].append(committed)
    return columns


def _answer_or_empty(ref) -> dict:
    """An actor's answer, or an empty trace if the actor died meanwhile (the controller restarts
    a replica it finds dead, e.g. on a machine overloaded past its liveness leases): the
    messages it stamped then have no stamps, and ``lost_actors`` counts it."""
    import ray

    try:
        return ray.get(ref) or {"rows": [], "dropped": 0}
    except ray.exceptions.RayActorError:
        return {"rows": [], "dropped": 0, "lost_actor": 1}


class TopicTrace:
    """The stage trace of one topic across its physical replicas and the read nodes hosting its VPs."""

    def __init__(self, cluster: str, topic: str, replicas_by_partition: dict[int, Sequence[str]],
                 read_nodes: Sequence[str]):
        from mafka4.physical.handles import replica_handle
        from mafka4.virtual.handles import read_node_handle

        self.topic = topic
        self._replicas = {(partition, replica): replica_handle(cluster, topic, partition, replica)
                          for partition, replicas in replicas_by_partition.items() for replica in replicas}
        self._read_nodes = [read_node_handle(cluster, node) for node in read_nodes]
        self.lost_actors = 0  # actors whose rows the last take could not get

    def _set(self, enabled: bool) -> None:
        for handle in self._replicas.values():
            _answer_or_empty(handle.set_stage_trace.remote(enabled))
        for node in self._read_nodes:
            _answer_or_empty(node.set_stage_trace.remote(self.topic, enabled))

    def start(self) -> None:
        self._set(True)

    def take_and_stop(self) -> tuple[dict[int, list[tuple]], list[tuple], int]:
        """(physical rows by partition, read-node rows, rows dropped at the bound), then tracing stops."""
        physical_answers = [_answer_or_empty(handle.take_stage_trace.remote()) for handle in self._replicas.values()]
        node_answers = [_answer_or_empty(node.take_stage_trace.remote(self.topic)) for node in self._read_nodes]
        self._set(False)
        by_partition: dict[int, list[tuple]] = defaultdict(list)
        for (partition, _), answer in zip(self._replicas, physical_answers):
            by_partition[partition].extend(answer["rows"])
        node_rows = [row for answer in node_answers for row in answer["rows"]]
        dropped = sum(answer["dropped"] for answer in (*physical_answers, *node_answers))
        self.lost_actors = sum(answer.get("lost_actor", 0) for answer in (*physical_answers, *node_answers))
        return dict(by_partition), node_rows, dropped
