"""``benchmarks/vp_memory_micro.py`` builds idle hosted VP replicas as a read node does and reports
what each costs: memory, descriptors, files and time, in one JSON row per VP count."""

from __future__ import annotations

import json

import pytest

from benchmarks import vp_memory_micro


def test_one_row_per_vp_count_with_every_cost_per_vp(tmp_path):
    output = tmp_path / "micro.json"
    vp_memory_micro.main(["--vps", "5,20", "--traced-vps", "10", "--output", str(output)])
    out = json.loads(output.read_text())
    assert {"command", "commit", "load_average", "results"} <= out.keys()
    rows = out["results"]
    assert [row["vps"] for row in rows] == [5, 20]
    for row in rows:
        assert {"create_s", "create_ms_per_vp", "housekeeping_s", "rss", "tracemalloc", "objects", "fds",
                "files"} <= row.keys()
        assert row["housekeeping_visited"] == row["vps"], "one pass visits every VP just hosted"
        assert {"before_bytes", "after_bytes", "bytes_per_vp"} <= row["rss"].keys()
        assert row["tracemalloc"]["vps"] == min(row["vps"], 10)
        assert row["tracemalloc"]["top_sites"] and row["tracemalloc"]["top_files"]
        assert {"per_vp", "per_vp_by_kind", "open_total", "soft_limit"} <= row["fds"].keys()
        assert row["files"]["by_kind"][".log"]["files"] == 1, "one segment per idle VP"
        assert row["objects"]["per_vp_by_type"]["HostedVp"] == 1


def test_bad_settings_are_refused_with_what_to_change():
    with pytest.raises(SystemExit):
        vp_memory_micro.main(["--vps", "0"])
    with pytest.raises(SystemExit, match="give 0"):
        vp_memory_micro.main(["--traced-vps", "-1"])
