"""``benchmarks/feed_split_micro.py`` feeds every record of its rounds, split by the column or decoded,
and writes one row per workload and VP count."""

from __future__ import annotations

import json

import pytest

from benchmarks import feed_split_micro


@pytest.mark.parametrize("without_column", [False, True])
def test_every_measured_record_is_fed_once_per_workload_and_vp_count(tmp_path, without_column):
    output = tmp_path / "micro.json"
    feed_split_micro.main(["--vps", "1,40", "--rounds", "3", "--warmup-rounds", "1", "--batch-records", "8",
                           "--round-batches", "2", "--keys", "5", "--output", str(output)]
                          + (["--without-column"] if without_column else []))
    rows = json.loads(output.read_text())["results"]
    assert [(row["keyed"], row["vps"]) for row in rows] == [(False, 1), (False, 40), (True, 1), (True, 40)]
    for row in rows:
        assert row["column"] is not without_column
        assert row["records"] == 2 * 2 * 8, "every record of the two measured rounds, once"
        assert row["cpu_ms_per_mb"] > 0
    one_vp = [row for row in rows if row["vps"] == 1]
    assert all(row["feed_calls"] == 2 for row in one_vp), "one VP: one feed call a round"


def test_bad_settings_are_refused_with_what_to_change():
    with pytest.raises(SystemExit, match="leaves none of rounds"):
        feed_split_micro.main(["--rounds", "2", "--warmup-rounds", "2"])
    with pytest.raises(SystemExit, match="give keyless, keyed or both"):
        feed_split_micro.main(["--workloads", "keyed,other"])
