"""Stage traces: bounded rows, and the rows a traced VP replica writes (its appends and HW moves)."""

from __future__ import annotations

from mafka4.stage_trace import StageTrace
from tests.unit.test_hosted_vp import Node, feed, open_vp


def test_a_trace_keeps_rows_up_to_its_bound_counts_the_rest_and_starts_empty_after_a_take():
    trace = StageTrace(rows_max=2)
    for row in range(5):
        trace.record((row,))
    assert trace.take() == {"rows": [(0,), (1,)], "dropped": 3}
    assert trace.take() == {"rows": [], "dropped": 0}


def test_a_traced_lone_leader_stamps_each_append_and_each_high_watermark_move(tmp_path):
    leader = open_vp(tmp_path, "r0", Node())
    leader.become_leader(1, ("r0",), ("r0",), 0)
    feed(leader, 0, [0, 1])  # untraced: no rows
    leader.trace = StageTrace()
    feed(leader, 0, [2, 3, 4])
    feed(leader, 1, [0])
    rows = leader.trace.take()["rows"]
    appends = [row[:4] for row in rows if row[0] == "append"]
    moves = [row[:3] for row in rows if row[0] == "hw"]
    assert appends == [("append", 3, 2, 5), ("append", 3, 5, 6)]
    assert moves == [("hw", 3, 5), ("hw", 3, 6)]  # one replica: the HW follows each append
    stamps = [row[-1] for row in rows]
    assert stamps == sorted(stamps)
