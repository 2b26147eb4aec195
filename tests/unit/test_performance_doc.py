"""docs/performance.md is what ``simulations.analysis.performance_doc`` renders from ``reports/``, and each
bench's section renders from the JSON that bench writes.

The bench reports here are synthetic, so that each section is shown to render before the first
real run of its bench is committed. Where a driver builds a part of its report with a function
that needs no cluster, the report is built with that very function, so that these tests break
when the driver's JSON changes: ``produce_summary`` and ``_throughput`` (bench produce), the
settings dataclasses of every bench, ``drain_row``, ``summary``, ``cpu_per_message`` and
``Backlog.to_json`` (bench consume), ``redis_streams_figures``' ``drain_row``, ``summary``,
``rate_msgs_per_s`` and ``matched_from`` (bench redis-streams), ``rebalance._trial_figures`` and
``vp_join._figures`` (bench vp-join), ``vp_density._summary`` (bench vp-density), and
``benchmarks.lag``'s figures with ``feed_lag._summary`` (bench feed-lag). The rest (the dicts each
driver assembles inline around those, while it runs against a cluster or a server: the keys of
``run_*_bench``, ``drain_once``, ``produce_once``, ``producer_run``, ``raw_run``,
``run_vp_join_trial``, ``run_one_vp_count``, and bench stream's whole report) mirrors the
driver's keys exactly.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict
from pathlib import Path

import pytest

from benchmarks import feed_lag
from benchmarks.lag import FeedLagBenchSettings, LagSample, halves_p99_records, is_bounded, lag_figures
from benchmarks.redis_streams_figures import (CLIENTS, CONSUME_CLIENT, MemberRead, RedisStreamsBenchSettings,
                                              matched_from, rate_msgs_per_s)
from benchmarks.redis_streams_figures import drain_row as redis_drain_row
from benchmarks.redis_streams_figures import summary as redis_summary
from mafka4.bench import join_trial, rebalance, vp_density, vp_join
from mafka4.bench.consume import Backlog
from mafka4.bench.cpu_cost import MachineCpu, cpu_per_message
from mafka4.bench.density import VpDensityBenchSettings
from mafka4.bench.drain import ConsumeBenchSettings, MemberDrain, OffsetRange, drain_row, row_quiet, summary
from mafka4.bench.gc_pauses import GcPauses
from mafka4.bench.produce import _throughput, produce_summary
from mafka4.bench.produce_settings import ProduceBenchSettings
from mafka4.bench.stream_transfer import StreamBenchSettings
from mafka4.bench.usage import is_quiet
from mafka4.bench.written_bytes import LogTotals, bytes_written
from mafka4.limits import ReadMode
from simulations.analysis import bench_figures, performance_doc
from simulations.analysis.readme_figures import BLOCK
from simulations.fleet import sensitivity
from simulations.fleet.params import DEFAULT_CALIBRATION

ROOT = Path(__file__).resolve().parents[2]
COMPARE = ROOT / "reports" / "2026-11-26-compare"
MS = 1_000_000  # ns
BACKLOG = 10_000  # messages: both drains' backlog, small enough to build fast


def as_written(report: dict) -> dict:
    """The report as its JSON file holds it (tuples are lists)."""
    return json.loads(json.dumps(report))


def _cpu(member_cpu_ns: list[int], messages_read: int) -> dict:
    """``cpu_per_message`` of a drain over a 2-second window of the machine, half of it busy on one of 2 cores."""
    return cpu_per_message(member_cpu_ns, MachineCpu(0, 0), MachineCpu(2_000_000_000, 100), 100, messages_read)


# --- bench produce ------------------------------------------------------------------------------


def _producer_run(settings: ProduceBenchSettings, msgs_per_s: int, codec: str, paced: bool = False,
                  callbacks: bool = True, many: bool = False, p999: float = 11.7, written: float = 1060.0) -> dict:
    """A run as ``producer_run`` and ``measured_run`` write it."""
    messages = settings.paced_msgs_per_s * settings.paced_seconds if paced else settings.messages
    payload = messages * settings.message_bytes
    elapsed_s = messages / msgs_per_s
    log_bytes = round(written * messages)
    return {**_throughput(messages, payload, elapsed_s), "compression": codec, "payload": settings.payload,
            "target_msgs_per_s": settings.paced_msgs_per_s if paced else None, "callbacks": callbacks and not many,
            "send_many_values": 1000 if many else None,
            "latency_ms": {"p50": 6.6, "p99": 9.2, "p99.9": p999} if callbacks and not many else None,
            "driver_gc": GcPauses().report(elapsed_s),
            "bytes_written": bytes_written(LogTotals(0, 0, 0), LogTotals(log_bytes, 0, messages), messages, payload)}


def _raw_run(settings: ProduceBenchSettings, msgs_per_s: int) -> dict:
    """A run as ``raw_run`` writes it."""
    return {**_throughput(settings.messages, settings.messages * settings.message_bytes, settings.messages / msgs_per_s),
            "batches": 300, "batch_latency_ms": {"p50": 8.0, "p99": 20.0, "p99.9": 25.0}}


def produce_report(producer: int = 172_800, bare_stream: int = 400_000, bare_actor: int = 283_700,
                   codecs: tuple[str, ...] = ("none",), gc_freeze: bool = False) -> dict:
    settings = ProduceBenchSettings(compression=codecs, gc_freeze=gc_freeze, stalled_producer=False)
    runs = [{"compression": codec, "payload": settings.payload,
             "producer": _producer_run(settings, producer - 1000 * number, codec, written=1060.0 / (number + 1)),
             "paced": _producer_run(settings, 10_000, codec, paced=True, p999=11.7 + number,
                                    written=1100.0 / (number + 1))}
            for number, codec in enumerate(codecs)]
    no_callbacks = _producer_run(settings, 272_200, codecs[0], callbacks=False)
    send_many = _producer_run(settings, 451_800, codecs[0], many=True)
    raw_leaders, actor, stream = (_raw_run(settings, rate) for rate in (600_000, bare_actor, bare_stream))
    memory = {"partition_actor_rss_mb": [180.2, 175.9, 181.0, 176.4]}
    return as_written({
        "settings": asdict(settings), "producer": runs[0]["producer"], "paced": runs[0]["paced"],
        "producer_no_callbacks": no_callbacks, "producer_send_many": send_many, "raw_leaders": raw_leaders,
        "bare_actor": actor, "bare_stream": stream, "compression_runs": runs,
        "summary": produce_summary(settings, runs, no_callbacks, send_many, raw_leaders, actor, stream, memory),
        "cpu_count": 2})


# --- bench consume ------------------------------------------------------------------------------


def consume_row(mode: str, ack: str, consumers: int, repetition: int, elapsed_ms: float, load: float = 1.9,
                missing: int = 0) -> dict:
    """One drain as ``drain_once`` writes it: ``consumers`` members owning one partition (or VP) each, all starting
    together and ending ``elapsed_ms`` later, the first one missing the last ``missing`` offsets of its own."""
    per_member = BACKLOG // consumers
    ranges = {member: OffsetRange(0, per_member) for member in range(consumers)}
    drains = []
    for member in range(consumers):
        given = per_member - (missing if member == 0 else 0)
        drains.append(MemberDrain(member, (member,), 0, int(elapsed_ms * MS), int(elapsed_ms * MS),
                                  (2 * MS, 9 * MS, 20 * MS + MS // 2), given, 0, 0,
                                  {member: b"\x01" * given + b"\x00" * (per_member - given)}, given == per_member,
                                  cpu_ns=given * 1700))
    figures = drain_row(ranges, drains, 1024)
    return {"read_mode": mode, "ack": ack, "consumers": consumers, "repetition": repetition, "group": "g",
            "join_s": 3.1, "quiet_wait_s": 12.0, **figures,
            **_cpu([drain.cpu_ns for drain in drains], figures["messages_read"]),
            "messages_while_joining": 0, "late_messages": 0, "close_errors": [],
            "load_average_1m": [load, 2.6], "quiet": row_quiet([load, 2.6])}


def consume_report(rows: list[dict], smoke: bool = False, messages: int = BACKLOG) -> dict:
    """A report as ``run_consume_bench`` writes it, of ``rows`` (``consume_row``)."""
    settings = ConsumeBenchSettings(messages=messages, consumers=tuple(sorted({row["consumers"] for row in rows})),
                                    read_modes=tuple(dict.fromkeys(row["read_mode"] for row in rows)),
                                    ack_cadences=tuple(dict.fromkeys(row["ack"] for row in rows)),
                                    repetitions=1 + max(row["repetition"] for row in rows), smoke=smoke)
    backlogs = [Backlog(ReadMode.parse(mode), f"bench-consume-{mode}",
                        settings.mafka4_virtual_partitions if mode == "mafka4" else 0,
                        {0: OffsetRange(0, messages)}, {"msgs_per_s": 451_800}).to_json()
                for mode in settings.read_modes]
    return as_written({"settings": asdict(settings), "backlogs": backlogs, "rows": rows, "summary": summary(rows),
                       "cpu_count": 2, "load_average_1m": [0.8, 2.5], "quiet": is_quiet([0.8])})


# --- bench redis-streams ------------------------------------------------------------------------


def _conditions(load: float, forks: int = 0) -> dict:
    """The keys ``redis_streams._conditions`` gives every row."""
    return {"quiet_wait_s": 0.0, "load_average_1m": [load, 1.9], "quiet": is_quiet([load]), "server_forks": forks}


def redis_produce_row(settings: RedisStreamsBenchSettings, client: str, pipeline: tuple[str, int], repetition: int,
                      elapsed_ms: float) -> dict:
    """One produce run as ``produce_once`` writes it."""
    rate = rate_msgs_per_s(settings.produce_messages, int(elapsed_ms * MS))
    return {"workload": "produce", "client": client, "pipeline_choice": pipeline[0], "pipeline_messages": pipeline[1],
            "repetition": repetition, "messages": settings.produce_messages, "elapsed_s": round(elapsed_ms / 1000, 4),
            "msgs_per_s": rate, "mb_per_s": round(rate * settings.message_bytes / 1e6, 2), **_conditions(1.7)}


def redis_drain_row_of(settings: RedisStreamsBenchSettings, ack: str, reading: tuple[str, int], consumers: int,
                       repetition: int, elapsed_ms: float, load: float = 1.5) -> dict:
    """One drain as ``drain_once`` writes it: the backlog's ids dealt round the members, all ending together."""
    ids = [f"1700000000000-{index}".encode() for index in range(settings.messages)]
    members = [MemberRead(member, 0, int(elapsed_ms * MS), int(elapsed_ms * MS), tuple(ids[member::consumers]),
                          reads=10, acks=10, complete=True, cpu_ns=2000 * len(ids[member::consumers]))
               for member in range(consumers)]
    figures = redis_drain_row(ids, members, settings.message_bytes)
    return {"workload": "consume", "ack": ack, "read_count_choice": reading[0], "read_count": reading[1],
            "consumers": consumers, "repetition": repetition, "group": f"bench-{ack}-{reading[0]}",
            "join_s": 1.0, **figures, **_cpu([member.cpu_ns for member in members], figures["messages_read"]),
            "pending_after": 0, **_conditions(load)}


def redis_streams_report(messages: int = BACKLOG, consumers: tuple[int, ...] = (4,),
                         ack_cadences: tuple[str, ...] = ("per-read", "none"), smoke: bool = False) -> dict:
    """A report as ``run_redis_streams_bench`` writes it: every cell of the sweep of its settings, two repetitions;
    a drain at the matched COUNT takes 20 ms (25 ms the second time), one at COUNT 1,000 twice that."""
    settings = RedisStreamsBenchSettings(messages=messages, consumers=consumers, ack_cadences=ack_cadences,
                                         repetitions=2, smoke=smoke)
    rows = []
    for repetition in range(settings.repetitions):
        rows += [redis_produce_row(settings, client, pipeline, repetition, (1000 + 400 * repetition) * (
                 2 if client == "redis-py" else 1)) for client in ("redis-py", "raw") for pipeline in settings.pipelines]
        rows += [redis_drain_row_of(settings, str(cadence), reading, count, repetition,
                                    (20 + 5 * repetition) * (1 if reading[0] == "matched" else 2))
                 for cadence in settings.cadences for reading in settings.reads for count in settings.consumers]
    return as_written({
        "settings": asdict(settings),
        "redis_server": {"version": "Redis server v=7.0.15 sha=00000000:0 malloc=jemalloc-5.3.0", "command": [],
                         "pid": 1},
        "redis_py_version": "5.0.1", "hiredis_version": "2.3.2", "clients": {**CLIENTS, "consume": CONSUME_CLIENT},
        "matched": matched_from(), "backlog": {"stream": "bench-backlog", "messages": messages},
        "rows": rows, "summary": redis_summary(rows), "cpu_count": 2, "load_average_1m": [1.76, 1.53],
        "quiet": is_quiet([1.76])})


# --- bench stream, vp-join, vp-density, feed-lag ------------------------------------------------


def stream_report() -> dict:
    """A report as ``run_stream_bench`` writes it (assembled inline there: its keys mirrored)."""
    rows = [{"answer_bytes": 4_190_000, "calls": 400, "mib": 1598.4, "caller_cpu_ms_per_mib": caller,
             "server_cpu_ms_per_mib": 0.25, "wall_ms_per_mib": 0.3, "mib_per_s": 3300.0, "messages_decoded": 0,
             "caller_cpu_us_per_message": None, "load_average_1m": [0.3, 0.6], "quiet": True}
            for caller in (0.2, 0.24, 0.17)]
    summary_ = {"caller_cpu_ms_per_mib": 0.2, "server_cpu_ms_per_mib": 0.25, "wall_ms_per_mib": 0.3,
                "mib_per_s": 3300.0, "caller_cpu_us_per_message": None, "quiet_repetitions": "3/3"}
    return as_written({"settings": asdict(StreamBenchSettings()), "rows": rows, "summary": summary_, "cpu_count": 2,
                       "result": True})


def _member_log(name: str, receive_ms: list[float]) -> join_trial.MemberLog:
    return join_trial.MemberLog(name, [int(at * MS) for at in receive_ms], len(receive_ms),
                               [f"{name}-{at}".encode() for at in receive_ms])


def _join_logs(stall_ms: float, first_ms: float) -> tuple[list[join_trial.MemberLog], join_trial.MemberLog]:
    """Members polling every 20 ms from 1 s before a join at 2 s, one of them stopping ``stall_ms`` after it; the
    joiner's first message ``first_ms`` after the join."""
    steady = [1000.0 + 20 * step for step in range(150)]
    stalled = [at for at in steady if not 2000 < at < 2000 + stall_ms]
    joiner = _member_log("joiner", [2000 + first_ms])
    return [_member_log("m0", steady), _member_log("m1", stalled), joiner], joiner


def vp_join_report() -> dict:
    """A report as ``run_vp_join_bench`` writes it: the stalls from ``vp_join._figures`` and
    ``rebalance._trial_figures``, the rest of each trial mirrored from ``run_vp_join_trial`` and ``run_trial``."""
    join_ns, end_ns = 2000 * MS, 4000 * MS
    trials, eager = [], []
    for stall in (60.0, 40.0, 80.0):
        logs, joiner = _join_logs(stall, 209.0)
        trials.append({**vp_join._figures(logs, joiner, join_ns, end_ns, {"m0"}), "handed_over_vps": [],
                       "split_vps": [0], "split_members": ["m0"], "virtual_partitions_after": 4,
                       "split_stored_ms": 79.0, "child_claimed_ms": 120.0, "messages_produced": 30_000,
                       "messages_unique": 30_000, "messages_consumed": 30_000})
        logs, joiner = _join_logs(stall + 100, 86.5)
        eager.append({**rebalance._trial_figures(logs, joiner, join_ns, end_ns, 30_000, 0),
                      "protocol_rebalance_ms": 30.0})
    return as_written({"settings": asdict(vp_join.VpJoinBenchSettings()), "mafka4_trials": trials,
                       "mafka3_trials": eager, "summary": {}, "cpu_count": 2,
                       "load_average_1m": {"before": 0.89, "after": 2.4}})


def vp_density_report() -> dict:
    """A report as ``run_vp_density_bench`` writes it, its summary from ``vp_density._summary``."""
    settings = VpDensityBenchSettings()
    nodes = {node: {"pid": pid, "rss_bytes_before": 300 * 2**20, "rss_bytes_after": 300 * 2**20 + 11_272_192,
                    "cores_before": 0.01, "cores_after": 0.01 + 0.0394, "hosted_vps_before": 0,
                    "hosted_vps_after": 1024, "topic_vps_hosted": 1024} for node, pid in (("r0", 11), ("r1", 12))}
    bare = {"pid": 13, "rss_bytes_before": 131 * 2**20, "rss_bytes_after": 131 * 2**20, "cores_before": 0.0053,
            "cores_after": 0.0053, "node": "r0", "uss_bytes": 60 * 2**20}
    creation = {"create_topic_s": 4.0, "risr_complete_s": 6.5}
    return as_written({
        "settings": asdict(settings), "topic": "t", "read_nodes": list(nodes), "creation": creation, "nodes": nodes,
        "bare_actor": bare, "windows": {"baseline": {}, "idle": {}},
        "summary": vp_density._summary(settings, nodes, bare, creation, True), "cpu_count": 2,
        "load_average_1m": [0.97, 1.1]})


def _feed_lag_run(vps: int, msgs_per_s: int, drain_s: float | None, lags: list[int]) -> dict:
    """One VP count as ``run_one_vp_count`` writes it, its lag figures from ``benchmarks.lag``."""
    samples = [LagSample(index * 500 * MS, records, records / 20.0) for index, records in enumerate(lags)]
    return {"virtual_partitions": vps, "topic": "t",
            "producer": {"messages": 600_000, "failed": 0, "flushed": True, "elapsed_s": 20.0,
                         "msgs_per_s": msgs_per_s, "mb_per_s": 32.4, "first_error": None},
            "lag": lag_figures(samples), "lag_p99_records_halves": halves_p99_records(samples),
            "samples_without_fed_offset": 0, "drain_s": drain_s, "bounded": is_bounded(samples, drain_s),
            "feeds_at_end": {}, "load_average_1m": [0.83, 5.1], "quiet": is_quiet([0.83])}


def feed_lag_report() -> dict:
    """A report as ``run_feed_lag_bench`` writes it."""
    settings = FeedLagBenchSettings()
    runs = [_feed_lag_run(8, 31_600, 4.7, [1000, 2000, 1500, 1800]),
            _feed_lag_run(256, 38_100, None, [50_000, 60_000, 100_000, 121_000])]
    return as_written({
        "settings": asdict(settings), "read_nodes": ["r0", "r1"], "runs": runs,
        "summary": {str(run["virtual_partitions"]): feed_lag._summary(run) for run in runs},
        "lag_ms_resolution_ms": settings.sample_interval_s * 1000, "cpu_count": 2, "load_average_1m": [0.83, 4.0]})


BUILDERS = {"produce": produce_report,
            "consume": lambda: consume_report([consume_row("mafka4", "per-read", 4, 0, 16.0)]),
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


def _line(text: str, start: str) -> str:
    return next(line for line in text.splitlines() if line.startswith(start))


def test_the_producer_table_quotes_both_ratios_of_its_own_run_and_says_whether_the_bare_runs_are_ceilings():
    text = bench_figures.render("produce", [("a.json", produce_report(producer=172_800)),
                                            ("b.json", produce_report(producer=300_000, bare_stream=420_000))])
    assert _line(text, "| `a.json` |").startswith("| `a.json` | 172,800 | 0.432 | 0.609 | yes | 272,200 | 451,800 | "
                                                   "600,000 | 400,000 | 283,700 | 6.6 / 9.2 / 11.7 |")
    assert _line(text, "| `b.json` |").startswith("| `b.json` | 300,000 | 0.714 | 1.057 | no |"), \
        "above 1: the Producer outran the bare actor, which is then no ceiling"
    assert "A ratio above 1 means the Producer outran that bare run: it is then no ceiling" in text
    assert _line(text, "| median").startswith("| median (min–max) | 236,400 (172,800–300,000) |  |  |  | "
                                              "272,200 (272,200–272,200) |"), "no median of ratios of two runs"


def test_the_producer_table_compares_codecs_within_their_run():
    text = bench_figures.render("produce", [("zstd.json", produce_report(codecs=("none", "zstd")))])
    assert "Codecs of `zstd.json`" in text and "| zstd | 171,800 (0.99) | 12.7 (1.08) | 530.0 / 550.0 |" in text


def test_the_consume_table_gives_every_cell_of_the_sweep_its_median_and_every_drain():
    rows = [consume_row("mafka4", "per-read", 4, r, elapsed, load)
            for r, (elapsed, load) in enumerate(((16.0, 1.9), (20.0, 2.3), (12.5, 1.95)))]
    rows += [consume_row("mafka4", "every-5000ms", 4, 0, 10.0), consume_row("mafka3", "per-read", 1, 0, 40.0)]
    text = bench_figures.render("consume", [("c.json", consume_report(rows))])
    assert _line(text, "| mafka4 | per-read | 4 |").startswith(
        "| mafka4 | per-read | 4 | 4/4/4 | 625,000 (500,000–800,000) | 625.0 [1.90], 500.0 [2.30*], 800.0 [1.95] |")
    assert _line(text, "| mafka4 | every-5000ms | 4 |").startswith("| mafka4 | every-5000ms | 4 | 4 | 1,000,000 | ")
    assert _line(text, "| mafka3 | per-read | 1 |").startswith("| mafka3 | per-read | 1 | 1 | 250,000 | ")
    assert "mafka4 4 VPs" in text and "`ack_cadences` per-read,every-5000ms" in text
    assert "its last commit's return" in text


def test_missing_messages_are_summed_not_hidden():
    rows = [consume_row("mafka3", "per-read", 1, 0, 40.0, missing=3),
            consume_row("mafka3", "per-read", 1, 1, 40.0, missing=2)]
    table_row = _line(bench_figures.render("consume", [("c.json", consume_report(rows))]), "| mafka3")
    assert table_row.endswith("| 0 | 5 | 0 |"), "no commit error, 5 missing, none duplicated"


def test_the_redis_tables_give_every_cell_of_the_sweep_and_the_server_and_clients():
    text = bench_figures.render("redis-streams", [("r.json", redis_streams_report())])
    assert "Redis server v=7.0.15, redis-py 5.0.1, hiredis 2.3.2" in text
    assert "`read_count` 1000,matched" in text and "`ack_cadences` per-read,none" in text and matched_from() in text
    assert _line(text, "| raw | 1,000 |").startswith("| raw | 1,000 | 257,143 (214,286–300,000) | 300.0 [1.70], 214.3 "
                                                      "[1.70] | 0/0 |")
    assert _line(text, "| redis-py | matched: 10,240 |").startswith("| redis-py | matched: 10,240 | 128,571 ")
    for ack in ("per-read", "none"):
        assert _line(text, f"| {ack} | matched: 4,096 | 4 |").startswith(
            f"| {ack} | matched: 4,096 | 4 | 4/4 | 450,000 (400,000–500,000) | 500.0 [1.50], 400.0 [1.50] |")
        assert _line(text, f"| {ack} | 1,000 | 4 |").startswith(f"| {ack} | 1,000 | 4 | 4/4 | 225,000 ")
    assert "XREADGROUP NOACK" in text


def test_every_run_of_one_side_stands_in_one_row_whatever_report_it_came_from():
    consume = [(f"c{r}.json", consume_report([consume_row("mafka4", "per-read", 4, r, elapsed)]))
               for r, elapsed in enumerate((16.0, 20.0))]
    text = bench_figures.even_drains(consume, [("r.json", redis_streams_report())])
    row = _line(text, "| per-read | 4 | mafka4, mafka4 read mode |")
    assert row.startswith("| per-read | 4 | mafka4, mafka4 read mode | 562,500 (500,000–625,000) |"), row
    assert "`c0.json` 0.80 / 2.50; `c1.json`" in text


def test_drains_on_the_same_terms_stand_side_by_side_and_no_other():
    consume = consume_report([consume_row(mode, ack, consumers, r, elapsed)
                              for mode in ("mafka3", "mafka4") for ack in ("per-read", "every-5000ms")
                              for consumers in (1, 4) for r, elapsed in enumerate((16.0, 20.0))])
    text = bench_figures.even_drains([("c.json", consume)], [("r.json", redis_streams_report())])
    body = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| ack")]
    assert [line.split(" | ")[:3] for line in body] == [
        ["| per-read", "4", "Redis Streams, COUNT 4,096"],
        ["| per-read", "4", "mafka4, mafka3 read mode"],
        ["| per-read", "4", "mafka4, mafka4 read mode"]], \
        "Redis' COUNT 1,000 reads less than a fetch, none and every-5000ms were measured on one side only"
    assert body[0].startswith("| per-read | 4 | Redis Streams, COUNT 4,096 | 450,000 (400,000–500,000) |")
    assert body[2].startswith("| per-read | 4 | mafka4, mafka4 read mode | 562,500 (500,000–625,000) |")
    assert "the same backlog, 10,000 messages of 1024 bytes" in text and matched_from() in text
    assert "neither is divided by the other" in text and "÷" not in text


def test_drains_of_different_backlogs_or_without_a_shared_cell_are_not_set_side_by_side():
    consume = consume_report([consume_row("mafka4", "per-read", 4, 0, 16.0)])
    larger = redis_streams_report(messages=2 * BACKLOG)
    assert "drained no backlog of the same size: none is set side by side" \
           in bench_figures.even_drains([("c.json", consume)], [("r.json", larger)])
    other_cadence = redis_streams_report(ack_cadences=("none",))
    assert "share no cell" in bench_figures.even_drains([("c.json", consume)], [("r.json", other_cadence)])


def test_trials_and_repetitions_each_get_a_row_and_a_median():
    report = vp_join_report()
    join = bench_figures.render("vp-join", [("j.json", report)])
    stalls = sorted(trial["other_member_stall_ms"] for trial in report["mafka4_trials"])
    assert join.count("| `j.json` |") == 3 and f"{stalls[1]:.1f} ({stalls[0]:.1f}–{stalls[2]:.1f})" in join
    stream = bench_figures.render("stream", [("s.json", stream_report())])
    assert stream.count("| `s.json` |") == 3 and "0.20 (0.17–0.24)" in stream
    lag = bench_figures.render("feed-lag", [("l.json", feed_lag_report())])
    assert "| `l.json` | 256 | 38,100 |" in lag and "| – | no |" in lag and "| 4.7 | yes |" in lag


def test_the_join_table_sets_each_trials_gaps_after_the_join_beside_mafka3s():
    report = vp_join_report()
    join = bench_figures.render("vp-join", [("j.json", report)])
    for trial, eager in zip(report["mafka4_trials"], report["mafka3_trials"]):
        gaps = (trial["other_member_join_gap_ms"], trial["split_member_join_gap_ms"])
        assert all(gap is not None for gap in gaps) and eager["max_member_join_gap_ms"] is not None
        assert " | ".join(f"{gap:.1f}" for gap in gaps) in join and f"| {eager['max_member_join_gap_ms']:.1f} |" in join


def test_a_smoke_run_is_not_a_result():
    with pytest.raises(bench_figures.NotAResult, match="smoke"):
        bench_figures.render("consume", [("c.json", consume_report([consume_row("mafka4", "per-read", 1, 0, 40.0)],
                                                                   smoke=True))])
    with pytest.raises(bench_figures.NotAResult, match="smoke"):
        bench_figures.even_drains([("c.json", consume_report([consume_row("mafka4", "per-read", 4, 0, 16.0)]))],
                                  [("r.json", redis_streams_report(smoke=True))])


def test_a_report_of_another_bench_is_refused():
    with pytest.raises(bench_figures.NotAResult, match="not of bench consume"):
        bench_figures.render("consume", [("p.json", produce_report())])


def test_runs_of_different_settings_are_not_pooled_into_a_median():
    text = bench_figures.render("produce", [("a.json", produce_report()), ("b.json", produce_report(gc_freeze=True))])
    assert "median (min–max)" not in text and "of `b.json`: " in text and "`gc_freeze` True" in text


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


def test_a_newer_comparison_of_the_quick_profile_is_not_the_one_rendered(root):
    quick = root / "reports" / "2026-12-31-compare-quick"
    shutil.copytree(root / "reports" / COMPARE.name, quick)
    (quick / "settings.json").write_text(json.dumps({"profile": "quick"}))
    assert performance_doc.newest_dir(root, "compare") == Path("reports", COMPARE.name)
    (quick / "settings.json").write_text(json.dumps({"profile": "default"}))
    assert performance_doc.newest_dir(root, "compare") == Path("reports", quick.name)


def test_drains_are_set_side_by_side_only_from_one_directory_holding_both_benches(root):
    _report_dir(root, "2026-12-02-redis", {"r.json": redis_streams_report()})
    _report_dir(root, "2026-12-03-consume", {"c.json": BUILDERS["consume"]()})
    document = performance_doc.render_document(root)
    assert "No report directory holds JSON of both benches yet." in document
    assert f"<!-- figures: reports/2026-12-04-drains {performance_doc.EVEN_DRAINS} -->" not in document
    _report_dir(root, "2026-12-04-drains", {"c.json": BUILDERS["consume"](), "r.json": redis_streams_report()})
    document = performance_doc.render_document(root)
    assert f"<!-- figures: reports/2026-12-04-drains {performance_doc.EVEN_DRAINS} -->" in document
    assert "`reports/2026-12-04-drains/` (`c.json`, `r.json`)" in document


def test_every_block_of_the_document_renders_again_from_the_directory_it_names(root):
    _report_dir(root, "2026-12-03-benches", {f"{kind}.json": build() for kind, build in BUILDERS.items()})
    blocks = list(BLOCK.finditer(performance_doc.render_document(root)))
    assert sorted(match["kind"] for match in blocks) == sorted(("compare", *bench_figures.KINDS,
                                                                performance_doc.EVEN_DRAINS))
    for match in blocks:
        assert match["body"] == performance_doc.render_block(match["kind"], Path(match["dir"]), root)


def test_the_compare_section_states_the_goals_the_setup_differences_and_both_sides_of_the_sensitivity():
    body = performance_doc.render_block("compare", Path("reports") / COMPARE.name, ROOT)
    assert "| fleet model, consumer scale x1, most topics: nodes Mafka3 / Mafka4 | >= 2 | 1.19 (2,024 / 1,704 at " \
           "40,000 topics) | not met |" in body
    assert "| pass_ms_per_replica | 1.19 (35.4 / 46.0) | 1.19 (35.4 / 46.0) | 1.19 (35.4 / 46.0) | 5.57 (49.5 / 284.5) |" \
           in body
    assert "| pass_ms_per_replica | +1sigma | 5.57 | 49.2 | 49.9 | 49.5 | 284.5 |" in body
    assert "* **CPU pinning**" in body and "* **node roles**" in body


def _tails_of_both(workload, params, settings):
    """A stand-in for the fleet model: Mafka4 cannot be sized with more replica memory than calibrated; every tail of
    both designs otherwise."""
    if params.replica_memory_mb > DEFAULT_CALIBRATION.replica_memory_mb:
        return {**dict.fromkeys(sensitivity.METRICS), "nodes_mafka3": 120}, "mafka4: no node holds a replica"
    return {"nodes_mafka3": 100, "nodes_mafka4": 50, "node_ratio": 2.0,
            **{name: 10.0 + index for index, name in enumerate(sensitivity.LATENCY_METRICS)}}, ""


def test_the_sensitivity_gives_every_tail_of_both_designs_and_a_design_the_model_could_not_size(root, monkeypatch):
    monkeypatch.setattr(sensitivity, "model_metrics", _tails_of_both)
    rows, _ = sensitivity.sensitivity_rows(DEFAULT_CALIBRATION, {"replica_memory_mb": 10.0}, sensitivity.SensitivitySettings(
        topics=50, consumer_scales=(1.0,), parameters=("replica_memory_mb",)))
    (root / "reports" / COMPARE.name / "sensitivity.json").write_text(json.dumps(rows))
    body = performance_doc.render_block("compare", Path("reports") / COMPARE.name, root)
    assert ("| parameter | change | node ratio | produce tp99 Mafka3 | produce tp99 Mafka4 | produce tp999 Mafka3 | "
            "produce tp999 Mafka4 | e2e tp99 Mafka3 | e2e tp99 Mafka4 | e2e tp999 Mafka3 | e2e tp999 Mafka4 |") in body
    assert "| baseline |  | 2.00 | 10.0 | 11.0 | 12.0 | 13.0 | 14.0 | 15.0 | 16.0 | 17.0 |" in body
    assert "| replica_memory_mb | +1sigma | not sized | – | – | – | – | – | – | – | – |" in body
    assert "| replica_memory_mb | 2.00 (16.0 / 17.0) | not sized (– / –) | 2.00 (16.0 / 17.0) | not sized (– / –) |" \
           in body


def test_a_block_of_an_unknown_kind_or_a_directory_without_its_bench_fails(root):
    with pytest.raises(ValueError, match="use compare, even-drains or one of"):
        performance_doc.render_block("latency", Path("reports") / COMPARE.name, root)
    with pytest.raises(ValueError, match="holds no JSON report of bench produce"):
        performance_doc.render_block("produce", Path("reports") / COMPARE.name, root)
    with pytest.raises(ValueError, match="holds no JSON report of bench consume"):
        performance_doc.render_block(performance_doc.EVEN_DRAINS, Path("reports") / COMPARE.name, root)


def test_check_fails_until_the_document_is_written(root, capsys):
    assert performance_doc.main(["--root", str(root), "--check"]) == 1
    assert "run python3 -m simulations.analysis.performance_doc" in capsys.readouterr().err
    assert performance_doc.main(["--root", str(root)]) == 0
    assert performance_doc.main(["--root", str(root), "--check"]) == 0
