"""``join_gap_ms`` of the join benches (``bench vp-join``, ``bench rebalance``): each existing
member's longest gap between non-empty polls in the second after the join, the window that
``baseline_gap_ms`` looks at before it, so the two compare; and the split / other members'."""

from __future__ import annotations

from mafka4.bench.join_trial import MemberLog
from mafka4.bench.rebalance import NS_PER_MS, _trial_figures, join_gaps_ms
from mafka4.bench.vp_join import _figures

JOIN_NS = 100_000 * NS_PER_MS
END_NS = JOIN_NS + 10_000 * NS_PER_MS


def polled(name: str, *gaps_ms: tuple[int, int]) -> MemberLog:
    """A member polling messages every 100 ms from 1 s before the join to the end, but not inside
    ``gaps_ms`` ((from, to) in ms after the join)."""
    log = MemberLog(name)
    log.receive_ns = [JOIN_NS + ms * NS_PER_MS for ms in range(-1_000, 10_001, 100)
                      if not any(start < ms < end for start, end in gaps_ms)]
    return log


def test_a_gap_after_the_join_counts_within_its_second_and_a_later_one_does_not():
    quiet, split, later = polled("m0", (200, 500)), polled("m1", (500, 1_500)), polled("m2", (2_000, 2_800))
    gaps = join_gaps_ms([quiet, split, later], JOIN_NS, END_NS)
    # m1's gap runs past the window: it counts up to the window's end, as the baseline's does at the join.
    assert gaps == {"m0": 300.0, "m1": 500.0, "m2": 100.0}


def test_the_window_ends_with_the_measured_window_if_that_is_shorter():
    assert join_gaps_ms([polled("m0", (300, 5_000))], JOIN_NS, JOIN_NS + 500 * NS_PER_MS) == {"m0": 200.0}


def test_a_vp_join_trial_gives_the_longest_join_gap_of_the_split_member_and_of_the_others_beside_the_stall():
    logs = [polled("m0", (200, 500)), polled("m1", (500, 1_500)), polled("m2", (2_000, 2_800))]
    joiner = MemberLog("joiner", receive_ns=[JOIN_NS + 700 * NS_PER_MS])
    figures = _figures(logs + [joiner], joiner, JOIN_NS, END_NS, split_members={"m1"})
    assert figures["join_gap_ms"] == {"m0": 300.0, "m1": 500.0, "m2": 100.0}
    assert (figures["split_member_join_gap_ms"], figures["other_member_join_gap_ms"]) == (500.0, 300.0)
    assert figures["other_member_stall_ms"] == 800.0, "the stall still sees m2's gap, seconds after the join"
    assert figures["baseline_gap_ms"] == {"m0": 100.0, "m1": 100.0, "m2": 100.0}


def test_a_mafka3_trial_gives_each_members_join_gap_and_the_longest():
    logs = [polled("m0", (0, 600)), polled("m1")]
    joiner = MemberLog("joiner", receive_ns=[JOIN_NS + 900 * NS_PER_MS])
    figures = _trial_figures(logs + [joiner], joiner, JOIN_NS, END_NS, produced=0, lag=None)
    assert figures["join_gap_ms"] == {"m0": 600.0, "m1": 100.0} and figures["max_member_join_gap_ms"] == 600.0
