"""docs/performance.md is what ``simulations.analysis.performance_doc`` renders from ``reports/``, and each
bench's section renders from the JSON that bench writes.

The bench reports here are synthetic, built key for key to what the drivers under
``mafka4/bench/`` write (``run_produce_bench``, ``run_consume_bench``, ``run_stream_bench``,
``run_vp_join_bench``, ``run_vp_density_bench``, ``run_feed_lag_bench``,
``run_redis_streams_bench``), so that each section is shown to render before the first real run
of its bench is committed.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from simulations.analysis import bench_figures, performance_doc
from simulations.analysis.readme_figures import BLOCK

ROOT = Path(__file__).resolve().parents[2]
COMPARE = ROOT / "reports" / "2026-11-26-compare"


# --- synthetic reports, as the bench drivers write them -----------------------------------------


def _throughput(msgs_per_s: int, messages: int = 300_000) -> dict:
    return {"messages": messages, "elapsed_s": round(messages / msgs_per_s, 3), "msgs_per_s": msgs_per_s,
            "mb_per_s": round(msgs_per_s * 1024 / 1e6, 2), "payload_bytes": messages * 1024}


def _written(per_message: float) -> dict:
    return {"messages": 300_000, "log_bytes": int(per_message * 300_000), "payload_bytes": 307_200_000,
            "bytes_written_per_message": per_message, "payload_bytes_per_message": 1024.0,
            "written_vs_payload_ratio": round(per_message / 1024, 4)}


def _gc() -> dict:
    return {"collections": {"young": 40, "middle": 3, "full": 1}, "pause_ms": {"young": 4.0, "middle": 1.0, "full": 90.0},
            "longest_pause_ms": 90.0, "share_of_run": 0.05}


def produce_report(producer: int = 172_800, bare_stream: int = 400_000, paced_p999: float = 11.7,
                   codecs: tuple[str, ...] = ("none",)) -> dict:
    runs = []
    for number, codec in enumerate(codecs):
        saturated = {**_throughput(producer - 1000 * number), "compression": codec, "payload": "json",
                     "target_msgs_per_s": None, "callbacks": True, "send_many_values": None,
                     "latency_ms": {"p50": 900.0, "p99": 1400.0, "p99.9": 1500.0}, "driver_gc": _gc(),
                     "bytes_written": _written(1060.0 / (number + 1))}
        paced = {**_throughput(10_000, 100_000), "compression": codec, "payload": "json", "target_msgs_per_s": 10_000,
                 "callbacks": True, "send_many_values": None,
                 "latency_ms": {"p50": 6.6, "p99": 9.2, "p99.9": paced_p999 + number}, "driver_gc": _gc(),
                 "bytes_written": _written(1100.0 / (number + 1))}
        runs.append({"compression": codec, "payload": "json", "producer": saturated, "paced": paced})
    baseline = runs[0]

    def figures(run):
        return {"producer_msgs_per_s": run["producer"]["msgs_per_s"], "paced_msgs_per_s": run["paced"]["msgs_per_s"],
                "paced_latency_ms": run["paced"]["latency_ms"], "payload_bytes_per_message": 1024.0,
                "bytes_written_per_message": run["producer"]["bytes_written"]["bytes_written_per_message"],
                "paced_bytes_written_per_message": run["paced"]["bytes_written"]["bytes_written_per_message"],
                "written_vs_payload_ratio": run["producer"]["bytes_written"]["written_vs_payload_ratio"],
                "producer_msgs_per_s_vs_baseline_ratio": round(run["producer"]["msgs_per_s"]
                                                               / baseline["producer"]["msgs_per_s"], 3),
                "paced_p99_9_ms_vs_baseline_ratio": round(run["paced"]["latency_ms"]["p99.9"]
                                                          / baseline["paced"]["latency_ms"]["p99.9"], 3),
                "bytes_written_vs_baseline_ratio": 1.0}

    raw = {**_throughput(600_000), "batches": 300, "batch_latency_ms": {"p50": 8.0, "p99": 20.0, "p99.9": 25.0}}
    report = {
        "settings": {"messages": 300_000, "message_bytes": 1024, "payload": "json", "compression": list(codecs),
                     "partitions": 2, "replication_factor": 2, "segment_bytes_max": 64 * 2**20, "acks": "all",
                     "linger_ms": 5, "batch_bytes_max": 2**20, "in_flight_batches_max": 5, "paced_msgs_per_s": 10_000,
                     "paced_seconds": 10, "gc_freeze": False, "stalled_producer": False, "stalled_seconds": 20,
                     "stalled_buffer_bytes_max": 64 * 2**20, "payload_seed": 0},
        "producer": runs[0]["producer"], "paced": runs[0]["paced"],
        "producer_no_callbacks": {**runs[0]["producer"], **_throughput(272_200), "callbacks": False, "latency_ms": None},
        "producer_send_many": {**runs[0]["producer"], **_throughput(451_800), "callbacks": False,
                               "send_many_values": 1000, "latency_ms": None},
        "raw_leaders": raw, "bare_actor": {**raw, **_throughput(283_700)}, "bare_stream": {**raw, **_throughput(bare_stream)},
        "compression_runs": runs, "cpu_count": 2,
    }
    report["summary"] = {
        "producer_msgs_per_s": producer, "paced_latency_ms": runs[0]["paced"]["latency_ms"],
        "driver_gc_frozen": False, "raw_leaders_msgs_per_s": 600_000, "bare_actor_msgs_per_s": 283_700,
        "producer_vs_bare_ratio": round(producer / 283_700, 3), "bare_stream_msgs_per_s": bare_stream,
        "producer_vs_bare_stream_ratio": round(producer / bare_stream, 3), "memory": {"partition_actor_rss_mb": []},
        "compression_comparison": {"baseline": codecs[0], "codecs": {run["compression"]: figures(run) for run in runs}},
    }
    return report


def consume_row(mode: str, consumers: int, repetition: int, msgs_per_s: int, load: float = 1.9,
                missing: int = 0) -> dict:
    return {"read_mode": mode, "consumers": consumers, "repetition": repetition, "group": "g", "join_s": 3.1,
            "quiet_wait_s": 12.0, "messages": 1_000_000, "messages_read": 1_000_000 - missing, "missing": missing,
            "delivered": 1_000_000 - missing, "duplicates": 0, "duplicates_across_members": 0, "outside_backlog": 0,
            "consumers_with_work": consumers, "elapsed_s": round(1e6 / msgs_per_s, 4), "msgs_per_s": msgs_per_s,
            "mb_per_s": round(msgs_per_s * 1024 / 1e6, 2), "fetches": 900,
            "fetch_latency_ms": {"p50": 2.0, "p99": 9.0, "p99.9": 20.5}, "poll_errors": 0, "first_poll_error": None,
            "members": [], "member_cpu_us_per_message": 1.7, "machine_cpu_us_per_message": 3.1,
            "rest_cpu_us_per_message": 1.4, "machine_busy_cores": 1.9, "messages_while_joining": 0, "late_messages": 0,
            "close_errors": [], "load_average_1m": [load, 2.6], "quiet": load <= 2.0}


def consume_report(rows: list[dict], smoke: bool = False) -> dict:
    return {"settings": {"messages": 1_000_000, "message_bytes": 1024, "partitions": 4, "virtual_partitions": None,
                         "replication_factor": 2, "consumers": [4], "read_modes": ["mafka4"], "repetitions": 3,
                         "gc_freeze": False, "check_crcs": True, "read_replicas": 1, "linger_ms": 5,
                         "ready_s_max": 300.0, "join_s_max": 180.0, "settle_s": 2.0, "drain_s_max": 300.0,
                         "quiet_wait_s_max": 180.0, "smoke": smoke},
            "backlogs": [{"read_mode": "mafka4", "topic": "t", "virtual_partitions": 4, "ranges": {}, "produced": {}}],
            "rows": rows, "summary": {}, "cpu_count": 2, "load_average_1m": [0.8, 2.5], "quiet": True}


def stream_report() -> dict:
    rows = [{"answer_bytes": 4_190_000, "calls": 400, "mib": 1598.4, "caller_cpu_ms_per_mib": caller,
             "server_cpu_ms_per_mib": 0.25, "wall_ms_per_mib": 0.3, "mib_per_s": 3300.0, "messages_decoded": 0,
             "caller_cpu_us_per_message": None, "load_average_1m": [0.3, 0.6], "quiet": True}
            for caller in (0.2, 0.24, 0.17)]
    return {"settings": {"calls": 400, "answer_bytes": 4 * 2**20, "message_bytes": 1024, "repetitions": 3,
                         "decode": False, "smoke": False},
            "rows": rows, "summary": {}, "cpu_count": 2, "result": True}


def vp_join_report() -> dict:
    trials = [{"other_member_stall_ms": stall, "split_member_stall_ms": 150.0, "baseline_gap_ms": {"m0": 25.0, "m1": 21.0},
               "new_member_first_message_ms": 209.0, "split_stored_ms": 79.0, "child_claimed_ms": 120.0,
               "member_stall_ms": {}, "member_stall_start_ms": {}, "messages_produced": 30_000,
               "messages_unique": 30_000, "messages_consumed": 30_000} for stall in (47.7, 40.1, 52.3)]
    eager = [{"max_member_stall_ms": 54.7, "baseline_gap_ms": {"m0": 20.0}, "new_member_first_message_ms": 86.5,
              "protocol_rebalance_ms": 30.0, "messages_produced": 30_000, "messages_unique": 30_000}] * 3
    return {"settings": {"partitions": 2, "consumers": 3, "virtual_partitions": None, "rate_msgs_per_s": 2000,
                         "warmup_s": 5.0, "after_join_s": 10.0, "trials": 3, "read_replicas": 1,
                         "replication_factor": 1, "compare_mafka3": True},
            "mafka4_trials": trials, "mafka3_trials": eager, "summary": {}, "cpu_count": 2,
            "load_average_1m": {"before": 0.89, "after": 2.4}}


def vp_density_report() -> dict:
    summary = {"rss_bytes_per_vp": 22_016.0, "rss_bytes_per_vp_replica": 11_008.0, "idle_cores_per_vp": 7.7e-5,
               "idle_cores_per_vp_replica": 3.85e-5, "bare_actor_rss_bytes": 131 * 2**20, "bare_actor_uss_bytes": 60 * 2**20,
               "bare_actor_idle_cores": 0.0053, "bare_actor_vs_vp_rss_ratio": 6239.0,
               "bare_actor_uss_vs_vp_rss_ratio": 2857.0, "bare_actor_vs_vp_cores_ratio": 68.8, "create_topic_s": 4.0,
               "risr_complete_s": 6.5, "quiet": True}
    return {"settings": {"virtual_partitions": 1024, "partitions": 2, "replication_factor": 1, "read_replicas": 2,
                         "window_s": 30.0, "settle_s": 10.0, "ready_s_max": 300.0, "smoke": False},
            "topic": "t", "read_nodes": ["r0", "r1"], "creation": {}, "nodes": {}, "bare_actor": {},
            "windows": {"baseline": {}, "idle": {}}, "summary": summary, "cpu_count": 2, "load_average_1m": [0.97, 1.1]}


def feed_lag_report() -> dict:
    def run(vps, msgs_per_s, drain_s):
        return {"virtual_partitions": vps, "topic": "t", "producer": {"messages": 600_000, "failed": 0, "flushed": True,
                                                                     "elapsed_s": 20.0, "msgs_per_s": msgs_per_s,
                                                                     "mb_per_s": 32.4, "first_error": None},
                "lag": {"samples": 40, "records": {"max": 121_000, "p50": 60_000, "p99": 120_000, "final": 121_000},
                        "ms": {"max": 6900, "p50": 3000, "p99": 6800, "final": 6900}},
                "lag_p99_records_halves": [50_000, 120_000], "samples_without_fed_offset": 0, "drain_s": drain_s,
                "bounded": False, "feeds_at_end": {}, "load_average_1m": [0.83, 5.1], "quiet": True}
    return {"settings": {"virtual_partitions": [8, 256], "partitions": 2, "replication_factor": 2, "read_replicas": 2,
                         "duration_s": 20.0, "sample_interval_s": 0.5, "message_bytes": 1024, "smoke": False},
            "read_nodes": ["r0", "r1"], "runs": [run(8, 31_600, 4.7), run(256, 38_100, None)], "summary": {},
            "lag_ms_resolution_ms": 500.0, "cpu_count": 2, "load_average_1m": [0.83, 4.0]}


def redis_streams_report() -> dict:
    produce = [{"workload": "produce", "client": client, "repetition": r, "messages": 200_000, "elapsed_s": 1.0,
                "msgs_per_s": rate, "mb_per_s": 200.0, "quiet_wait_s": 0.0, "load_average_1m": [1.7, 1.8], "quiet": True}
               for client, rates in (("redis-py", (118_700.0, 106_900.0)), ("raw", (215_100.0, 166_500.0)))
               for r, rate in enumerate(rates)]
    consume = [{"workload": "consume", "ack": ack, "consumers": 4, "repetition": r, "group": "g", "join_s": 1.0,
                "messages": 1_000_000, "messages_read": 1_000_000, "missing": 0, "delivered": 1_000_000,
                "duplicates": 0, "outside_backlog": 0, "exactly_once": True, "elapsed_s": 2.0, "msgs_per_s": rate,
                "mb_per_s": 600.0, "reads": 1000, "consumers_with_work": 4, "members": [],
                "member_cpu_us_per_message": 2.0, "machine_cpu_us_per_message": 3.3, "rest_cpu_us_per_message": 1.3,
                "machine_busy_cores": 1.9, "pending_after": 0, "quiet_wait_s": 0.0, "load_average_1m": [1.5, 1.9],
                "quiet": True}
               for ack, rates in (("xack", (247_500.0, 253_700.0, 244_900.0)), ("noack", (644_500.0, 597_500.0, 616_600.0)))
               for r, rate in enumerate(rates)]
    return {"settings": {"messages": 200_000, "backlog_messages": 1_000_000, "message_bytes": 1024, "consumers": [4],
                         "repetitions": 3, "pipeline_messages": 1000, "read_count": 1000, "quiet_wait_s_max": 180.0,
                         "smoke": False},
            "redis_server": {"version": "Redis server v=7.0.15 sha=00000000:0 malloc=jemalloc-5.3.0", "command": [],
                             "pid": 1},
            "redis_py_version": "5.0.1", "hiredis_version": "2.3.2", "clients": {}, "backlog": {},
            "rows": produce + consume, "summary": {}, "cpu_count": 2, "load_average_1m": [1.76, 1.53], "quiet": True}


BUILDERS = {"produce": produce_report, "consume": lambda: consume_report([consume_row("mafka4", 4, 0, 686_700)]),
            "stream": stream_report, "vp-join": vp_join_report, "vp-density": vp_density_report,
            "feed-lag": feed_lag_report, "redis-streams": redis_streams_report}


# --- each bench's tables ------------------------------------------------------------------------


@pytest.mark.parametrize("kind", bench_figures.KINDS)
def test_a_report_is_told_by_the_keys_its_bench_writes(kind):
    assert bench_figures.bench_kind(BUILDERS[kind]()) == kind


@pytest.mark.parametrize("other", [{"date": "2026-12-03", "command": "mafka4 bench produce"}, [{"parameter": "x"}],
                                   {"rows": []}])
def test_json_of_no_bench_is_no_report(other):
    assert bench_figures.bench_kind(other) is None


@pytest.mark.parametrize("kind", bench_figures.KINDS)
def test_every_bench_renders_a_table(kind):
    text = bench_figures.render(kind, [("run.json", BUILDERS[kind]())])
    assert text.count("\n|") >= 2 and "|---|" in text


def test_the_producer_table_has_every_run_its_ratio_to_the_bare_stream_and_their_median():
    text = bench_figures.render("produce", [("a.json", produce_report(producer=172_800)),
                                            ("b.json", produce_report(producer=167_900, bare_stream=420_000))])
    assert "172,800 (0.43)" in text and "167,900 (0.40)" in text
    assert "median (min–max)" in text and "170,350 (167,900–172,800)" in text
    assert "6.6 / 9.2 / 11.7" in text


def test_the_producer_table_compares_codecs_within_their_run():
    text = bench_figures.render("produce", [("zstd.json", produce_report(codecs=("none", "zstd")))])
    assert "Codecs of `zstd.json`" in text and "| zstd | 171,800 (0.99) | 12.7 (1.08) | 530.0 / 550.0 |" in text


def test_the_consume_table_gives_the_median_every_drain_and_which_were_not_quiet():
    rows = [consume_row("mafka4", 4, r, rate, load) for r, (rate, load) in
            enumerate(((600_000, 1.9), (686_700, 2.3), (699_400, 1.95)))]
    text = bench_figures.render("consume", [("c.json", consume_report(rows))])
    assert "686,700 (600,000–699,400)" in text
    assert "600.0 [1.90], 686.7 [2.30*], 699.4 [1.95]" in text
    assert "mafka4 4 VPs" in text


def test_missing_messages_are_summed_not_hidden():
    rows = [consume_row("mafka3", 1, 0, 400_000, missing=3), consume_row("mafka3", 1, 1, 410_000, missing=2)]
    table_row = next(line for line in bench_figures.render("consume", [("c.json", consume_report(rows))]).splitlines()
                     if line.startswith("| mafka3"))
    assert table_row.endswith("| 5 | 0 |")


def test_the_redis_table_keeps_every_run_and_the_server_version():
    text = bench_figures.render("redis-streams", [("r.json", redis_streams_report())])
    assert "Redis server v=7.0.15," in text and "`read_count` 1000" in text and "`pipeline_messages` 1000" in text
    assert "| consume | noack | 4 | 616,600 (597,500–644,500) | 644.5, 597.5, 616.6 |" in text
    assert "| produce | raw | – | 190,800 (166,500–215,100) | 215.1, 166.5 |" in text


def test_trials_and_repetitions_each_get_a_row_and_a_median():
    join = bench_figures.render("vp-join", [("j.json", vp_join_report())])
    assert join.count("| `j.json` |") == 3 and "47.7 (40.1–52.3)" in join
    stream = bench_figures.render("stream", [("s.json", stream_report())])
    assert stream.count("| `s.json` |") == 3 and "0.20 (0.17–0.24)" in stream
    lag = bench_figures.render("feed-lag", [("l.json", feed_lag_report())])
    assert "| `l.json` | 256 | 38,100 |" in lag and "| – | no |" in lag


def test_a_smoke_run_is_not_a_result():
    with pytest.raises(bench_figures.NotAResult, match="smoke"):
        bench_figures.render("consume", [("c.json", consume_report([consume_row("mafka4", 1, 0, 1000)], smoke=True))])


def test_a_report_of_another_bench_is_refused():
    with pytest.raises(bench_figures.NotAResult, match="not of bench consume"):
        bench_figures.render("consume", [("p.json", produce_report())])


# --- the document -------------------------------------------------------------------------------


@pytest.fixture
def root(tmp_path):
    """A repository holding the shipped comparison and no bench report."""
    shutil.copytree(COMPARE, tmp_path / "reports" / COMPARE.name, ignore=shutil.ignore_patterns("*.png", "omb"))
    return tmp_path


def _report_dir(root: Path, name: str, files: dict[str, dict]) -> Path:
    directory = root / "reports" / name
    directory.mkdir(parents=True)
    for file_name, content in files.items():
        (directory / file_name).write_text(json.dumps(content))
    return directory


def test_docs_performance_md_is_what_the_reports_render():
    assert (ROOT / performance_doc.DOCUMENT).read_text() == performance_doc.render_document(ROOT), \
        "regenerate it: python3 -m simulations.analysis.performance_doc"


def test_a_bench_without_a_report_says_so_and_renders_once_one_is_committed(root):
    assert "## The Producer" in performance_doc.render_document(root)
    assert "<!-- figures: reports/2026-12-03-produce produce -->" not in performance_doc.render_document(root)
    _report_dir(root, "2026-12-03-produce", {"bench_produce.json": produce_report()})
    document = performance_doc.render_document(root)
    assert "<!-- figures: reports/2026-12-03-produce produce -->" in document
    assert "`reports/2026-12-03-produce/` (`bench_produce.json`)" in document
    assert "How it was run (command, commit, load): `2026-12-03-produce/README.md`." in document


def test_each_section_takes_the_newest_directory_and_its_run_json(root):
    _report_dir(root, "2026-12-02-benches", {"p.json": produce_report(producer=100_000),
                                             "r.json": redis_streams_report()})
    _report_dir(root, "2026-12-04-produce", {"p.json": produce_report(producer=172_800), "run.json": {
        "date": "2026-12-04", "commit": "abc1234", "command": "mafka4 bench produce --skip-memory",
        "load_average_1m": [0.69, 2.1]}})
    document = performance_doc.render_document(root)
    assert "<!-- figures: reports/2026-12-04-produce produce -->" in document
    assert "<!-- figures: reports/2026-12-02-benches redis-streams -->" in document
    assert "172,800" in document and "100,000" not in document
    assert ("From its `run.json`: date: 2026-12-04; commit: abc1234; command: `mafka4 bench produce --skip-memory`; "
            "1-minute load average: [0.69, 2.1].") in document


def test_every_block_of_the_document_renders_again_from_the_directory_it_names(root):
    _report_dir(root, "2026-12-03-benches", {f"{kind}.json": build() for kind, build in BUILDERS.items()})
    blocks = list(BLOCK.finditer(performance_doc.render_document(root)))
    assert sorted(match["kind"] for match in blocks) == sorted(("compare", *bench_figures.KINDS))
    for match in blocks:
        assert match["body"] == performance_doc.render_block(match["kind"], Path(match["dir"]), root)


def test_the_compare_section_states_the_goals_and_both_sides_of_the_sensitivity():
    body = performance_doc.render_block("compare", Path("reports") / COMPARE.name, ROOT)
    assert "| fleet model, consumer scale x1, most topics: nodes Mafka3 / Mafka4 | >= 2 | 1.19 (2,024 / 1,704 at " \
           "40,000 topics) | not met |" in body
    assert "| pass_ms_per_replica | 1.19 (35.4 / 46.0) | 1.19 (35.4 / 46.0) | 1.19 (35.4 / 46.0) | 5.57 (49.5 / 284.5) |" \
           in body


def test_a_block_of_an_unknown_kind_or_a_directory_without_its_bench_fails(root):
    with pytest.raises(ValueError, match="use compare or one of"):
        performance_doc.render_block("latency", Path("reports") / COMPARE.name, root)
    with pytest.raises(ValueError, match="holds no JSON report of bench produce"):
        performance_doc.render_block("produce", Path("reports") / COMPARE.name, root)


def test_check_fails_until_the_document_is_written(root, capsys):
    assert performance_doc.main(["--root", str(root), "--check"]) == 1
    assert "run python3 -m simulations.analysis.performance_doc" in capsys.readouterr().err
    assert performance_doc.main(["--root", str(root)]) == 0
    assert performance_doc.main(["--root", str(root), "--check"]) == 0


def test_runs_of_different_settings_are_not_pooled_into_a_median():
    frozen = produce_report()
    frozen["settings"] = {**frozen["settings"], "gc_freeze": True}
    text = bench_figures.render("produce", [("a.json", produce_report()), ("b.json", frozen)])
    assert "median (min–max)" not in text and "of `b.json`: " in text and "`gc_freeze` True" in text
