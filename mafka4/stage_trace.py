"""Stage traces: when each batch reached each stage of its path, for experiments asking where
the milliseconds go (``mafka4 experiment scaling`` writes them into its event logs).

Off by default; an experiment turns it on for its topic (``set_stage_trace`` on the physical
replicas and the read nodes) and takes the rows afterwards (``take_stage_trace``). While on,
an actor appends one small tuple per event, stamped with ``clocks.wall_ms_fine`` (every actor
of a local cluster reads the same wall clock, so stamps of different processes compare):

* a physical leader, per produced batch: ``(base_offset, next_offset, received_ms,
  appended_ms, committed_ms)``: ``produce`` began, the batch was in the log, the high
  watermark passed it (acks=all) and the leader answered;
* a read node, per VP leader: ``("append", vp, base_offset, next_offset, ms)`` when fed records
  were appended, and ``("hw", vp, high_watermark, ms)`` when the VP's high watermark moved.

Both modes trace the same physical path, so tracing costs them alike; only mafka4 has the read
node's rows. A trace keeps at most ``STAGE_TRACE_ROWS_MAX`` rows until taken and counts the
ones it had to drop, so a forgotten trace cannot grow without bound.
"""

from __future__ import annotations

from mafka4.limits import STAGE_TRACE_ROWS_MAX


class StageTrace:
    """The rows of one traced topic on one actor, up to ``rows_max``."""

    __slots__ = ("rows_max", "_rows", "_dropped")

    def __init__(self, rows_max: int = STAGE_TRACE_ROWS_MAX):
        self.rows_max = rows_max
        self._rows: list[tuple] = []
        self._dropped = 0

    def record(self, row: tuple) -> None:
        if len(self._rows) < self.rows_max:
            self._rows.append(row)
        else:
            self._dropped += 1

    def take(self) -> dict:
        """The rows so far and how many were dropped; the trace starts empty again."""
        taken = {"rows": self._rows, "dropped": self._dropped}
        self._rows, self._dropped = [], 0
        return taken
