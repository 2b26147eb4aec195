"""Join traces: rows kept only for traced topics and bounded; a join's hop times from the rows of its processes."""

from __future__ import annotations

from mafka4.bench.join_hops import HOP_NAMES, JOIN_HOPS, hop_medians, join_hops_ms
from mafka4.join_trace import JoinTraces, vps_detail

JOIN_MS = 1_000_000.0
JOINER, SPLITTER = "joiner", "m0"


def test_an_untraced_topic_keeps_no_rows_and_a_traced_one_keeps_them_until_taken():
    traces = JoinTraces()
    traces.record("orders", "join_sent", JOINER)
    assert not traces.on("orders") and traces.take("orders") == {"rows": [], "dropped": 0}
    traces.start("orders")
    traces.record("orders", "join_sent", JOINER, ms=5.0)
    traces.record("orders", "claimed", JOINER, vps_detail({4, 3}), ms=7.5)
    traces.record("other", "claimed", JOINER)
    assert traces.take("orders") == {"rows": [("join_sent", 5.0, JOINER, ""), ("claimed", 7.5, JOINER, "3,4")],
                                     "dropped": 0}
    assert traces.take("orders")["rows"] == []
    traces.record("orders", "woken", JOINER)
    traces.stop("orders")
    assert not traces.on("orders") and traces.take("orders")["rows"] == []


def test_a_row_is_stamped_now_unless_told_when():
    traces = JoinTraces()
    traces.start("orders")
    traces.record("orders", "woken", JOINER)
    (_, ms, _, _), = traces.take("orders")["rows"]
    assert ms > 1.7e12  # wall-clock ms: comparable across the processes of one machine


def test_starting_one_trace_more_than_the_bound_stops_the_oldest():
    traces = JoinTraces(topics_max=2)
    for topic in ("a", "b", "c"):
        traces.start(topic)
    assert [traces.on(topic) for topic in ("a", "b", "c")] == [False, True, True]
    traces.start("b")  # on already: nothing stops
    assert traces.on("b") and traces.on("c")


def _split_join_rows() -> list[tuple[str, float, str, str]]:
    """The rows of one split join, in ms after the join (``JOIN_MS``), from its three processes."""
    at = {"join_sent": 2, "coordinator_found": 3, "join_received": 4, "coordinator_join": 6, "join_answered": 8, "split_asked": 30, "intent_taken": 35,
          "holds_asked": 40, "hold_received": 45, "hold_offered": 55, "holds_answered": 60, "epoch_stored": 70,
          "host_received": 80, "children_opening": 95, "children_opened": 110, "children_hosted": 120,
          "split_answered": 125,
          "parent_sealed": 90, "released": 140, "woken": 150, "sync_received": 160, "claimed": 165,
          "assigned": 170, "metadata_read": 180, "offsets_listed": 190, "connected": 200, "fetch_sent": 201,
          "first_data": 210}
    split_side = {"split_asked", "intent_taken", "holds_asked", "holds_answered", "epoch_stored", "children_hosted",
                  "split_answered", "released"}
    nodes_side = {"parent_sealed", "hold_received", "hold_offered", "host_received", "children_opening",
                  "children_opened"}
    return [(hop, JOIN_MS + ms, SPLITTER if hop in split_side else "" if hop in nodes_side else JOINER, "")
            for hop, ms in at.items()]


def test_each_hop_is_the_first_row_of_its_kind_after_the_hop_it_follows():
    rows = _split_join_rows()
    noise = [("woken", JOIN_MS + 20, JOINER, ""),  # woken by the split member's key writes, before the release
             ("sync_received", JOIN_MS + 25, JOINER, ""),
             ("claimed", JOIN_MS + 145, SPLITTER, "5"),  # the splitter claims the other child: not the joiner's
             ("metadata_read", JOIN_MS + 1, JOINER, ""),  # its consumer's first metadata read, before the claim
             ("first_data", JOIN_MS - 500, "m1", "")]  # before the join
    hops = join_hops_ms(noise + rows, JOIN_MS, JOINER)
    assert list(hops) == list(HOP_NAMES)
    assert hops == {hop: ms - JOIN_MS for hop, ms, _, _ in rows}


def test_a_missing_hop_is_none_and_the_hops_after_it_count_from_the_one_it_follows():
    rows = [row for row in _split_join_rows() if row[0] not in ("connected", "released")]
    hops = join_hops_ms(rows, JOIN_MS, JOINER)
    assert hops["connected"] is None and hops["released"] is None
    assert hops["woken"] == 150 and hops["fetch_sent"] == 201  # counted from the epoch and the assignment
    assert join_hops_ms([], JOIN_MS, JOINER) == dict.fromkeys(HOP_NAMES)


def test_the_wake_and_sync_of_a_claim_are_the_last_before_it_not_the_first_after_the_release():
    """The joiner's sync that claims may start before the parent's release lands (woken by the
    split epoch or the sealed end); its later wakes and syncs do not count."""
    rows = [row for row in _split_join_rows() if row[0] not in ("woken", "sync_received")]
    rows += [("woken", JOIN_MS + ms, JOINER, "") for ms in (20, 100, 300)]
    rows += [("sync_received", JOIN_MS + ms, JOINER, "") for ms in (25, 110, 320)]
    hops = join_hops_ms(rows, JOIN_MS, JOINER)
    assert (hops["woken"], hops["sync_received"], hops["claimed"]) == (100, 110, 165)


def test_every_hop_follows_one_listed_before_it_and_leads_to_one_listed_after_it():
    seen: set[str] = set()
    for hop in JOIN_HOPS:
        assert hop.after is None or hop.after in seen, hop
        seen.add(hop.name)
    for hop in JOIN_HOPS:
        assert hop.leads_to is None or HOP_NAMES.index(hop.leads_to) > HOP_NAMES.index(hop.name), hop


def test_the_median_of_a_hop_counts_only_the_trials_that_have_it():
    trials = [dict.fromkeys(HOP_NAMES, 10.0), {**dict.fromkeys(HOP_NAMES, 30.0), "connected": None},
              {**dict.fromkeys(HOP_NAMES, 20.0), "connected": None}]
    medians = hop_medians(trials)
    assert medians["join_sent"] == 20.0 and medians["connected"] == 10.0
    assert hop_medians([]) == dict.fromkeys(HOP_NAMES)
