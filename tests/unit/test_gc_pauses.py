"""``bench.gc_pauses``: what a run reports of its process's garbage collections."""

from __future__ import annotations

import gc

from mafka4.bench.gc_pauses import GENERATIONS, GcPauses


def test_a_full_collection_inside_is_counted_timed_and_the_longest_pause():
    with GcPauses() as pauses:
        gc.collect(2)
    report = pauses.report(elapsed_s=10.0)
    assert report["collections"]["full"] >= 1 and set(report["collections"]) == set(GENERATIONS)
    assert 0 < pauses.longest_pause_ns <= sum(pauses.pause_ns)
    assert report["longest_pause_ms"] == round(pauses.longest_pause_ns / 1e6, 1)
    assert report["share_of_run"] == round(sum(pauses.pause_ns) / 1e9 / 10.0, 3)


def test_collections_after_the_run_are_not_counted():
    with GcPauses() as pauses:
        pass
    gc.collect(2)
    assert pauses.collections == [0, 0, 0] and pauses._on_collection not in gc.callbacks


def test_a_collection_under_way_when_the_run_began_is_not_counted():
    pauses = GcPauses()
    pauses._on_collection("stop", {"generation": 2})  # its start came before the run
    assert pauses.collections == [0, 0, 0] and pauses.longest_pause_ns == 0


def test_a_run_of_no_time_has_no_share():
    assert GcPauses().report(elapsed_s=0)["share_of_run"] is None
