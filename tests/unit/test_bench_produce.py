"""Unit tests of what ``mafka4 bench produce`` decides without a cluster: its settings, the values it
sends (``bench.payloads``), and bytes written per message and the codec comparison (``bench.written_bytes``).

A real segment log in a temporary directory stands in for a leader's: the bench's batches are
appended to it, and what it reports is what the bench would read from a leader's ``describe()``.
"""

from __future__ import annotations

import json

import pytest

from mafka4 import batch_frame, cli
from mafka4.bench.payloads import (JSON_FILL_SLACK_BYTES, JSON_MESSAGE_BYTES_MIN, POOL_SIZE_MAX, POOL_SIZE_MIN,
                                   payload_bytes, payload_pool, pool_size)
from mafka4.bench import produce
from mafka4.bench.produce import bench_payloads, encoded_batches
from mafka4.bench.produce_settings import ProduceBenchSettings
from mafka4.bench.written_bytes import LogTotals, bytes_written, compression_comparison
from mafka4.compression import Codec, compress
from mafka4.errors import InvalidConfig
from mafka4.limits import COMPRESSION_ENV
from mafka4.limits.servers import LogConfig
from mafka4.log.log import Log

MiB = 1024 * 1024


# --- settings ----------------------------------------------------------------------------------


def test_the_defaults_send_random_bytes_with_the_producers_own_codec(monkeypatch):
    monkeypatch.delenv(COMPRESSION_ENV, raising=False)
    settings = ProduceBenchSettings()
    assert (settings.payload, settings.compression, settings.codecs()) == ("random", None, (Codec.NONE,))
    monkeypatch.setenv(COMPRESSION_ENV, "zstd")
    assert settings.codecs() == (Codec.ZSTD,), "no codec given: $MAFKA4_COMPRESSION, as every Producer"
    monkeypatch.setenv(COMPRESSION_ENV, "gzip")
    with pytest.raises(InvalidConfig, match=f"{COMPRESSION_ENV}='gzip' is not valid: use one of 'none', 'lz4', 'zstd'"):
        settings.codecs()


def test_codecs_are_measured_in_the_order_given_whatever_the_environment_says(monkeypatch):
    monkeypatch.setenv(COMPRESSION_ENV, "lz4")
    settings = ProduceBenchSettings(compression=("None", " zstd"))
    assert settings.compression == ("none", "zstd") and settings.codecs() == (Codec.NONE, Codec.ZSTD)


@pytest.mark.parametrize("changes, message", [
    ({"compression": ("gzip",)}, "compression='gzip' is not valid: use one of 'none', 'lz4', 'zstd'"),
    ({"compression": ("none", "snappy")}, "compression='snappy' is not valid: use one of 'none', 'lz4', 'zstd'"),
    ({"compression": ("zstd", "ZSTD")}, "compression=zstd,ZSTD: give one or more codecs, each once"),
    ({"compression": ()}, "compression=: give one or more codecs"),
    ({"payload": "xml"}, "payload='xml' is not valid: use one of random, json"),
    ({"payload": "json", "message_bytes": JSON_MESSAGE_BYTES_MIN - 1},
     f"too small for payload=json: a JSON event needs {JSON_MESSAGE_BYTES_MIN} bytes"),
    ({"message_bytes": 0}, "message_bytes=0 is out of range"),
    ({"segment_bytes_max": 1024}, "segment_bytes_max=1024 must be at least 4096"),
])
def test_settings_refuse_what_cannot_be_measured_saying_what_to_give(changes, message):
    with pytest.raises(InvalidConfig, match=message.replace("(", r"\(")):
        ProduceBenchSettings(**changes)


def test_the_command_line_takes_a_list_of_codecs_and_a_payload_kind(monkeypatch, capsys):
    given = []

    def fake_driver(settings, output_path):
        given.append(settings)
        return {"summary": {}}

    monkeypatch.setattr("mafka4.bench.produce.run_produce_bench", fake_driver)
    assert cli.main(["bench", "produce", "--compression", "none,zstd", "--payload", "json"]) == 0
    assert given == [ProduceBenchSettings(compression=("none", "zstd"), payload="json")]


def test_gc_freeze_is_off_unless_asked_for_on_the_command_line(monkeypatch, capsys):
    given = []
    monkeypatch.setattr("mafka4.bench.produce.run_produce_bench", lambda settings, _: given.append(settings) or {"summary": {}})
    assert cli.main(["bench", "produce"]) == 0 and cli.main(["bench", "produce", "--gc-freeze"]) == 0
    assert [settings.gc_freeze for settings in given] == [False, True]


def test_an_unknown_codec_on_the_command_line_exits_2_naming_the_choices_before_anything_runs(monkeypatch, capsys):
    monkeypatch.setattr("mafka4.bench.produce.run_produce_bench", lambda *_: pytest.fail("the driver ran"))
    assert cli.main(["bench", "produce", "--compression", "none,gzip"]) == 2
    error = capsys.readouterr().err
    assert error.startswith("mafka4: error: compression='gzip' is not valid") and "'none', 'lz4', 'zstd'" in error
    with pytest.raises(SystemExit) as exited:
        cli.main(["bench", "produce", "--payload", "xml"])
    assert exited.value.code == 2 and "invalid choice: 'xml'" in capsys.readouterr().err


def test_the_help_names_the_codecs_the_payload_kinds_and_the_environment_default():
    parser = cli.build_parser()
    for name in ("bench", "produce"):
        parser = next(action for action in parser._subparsers._group_actions).choices[name]
    help_text = " ".join(parser.format_help().split())
    assert "--compression NAME[,NAME...]" in help_text and "none, lz4, zstd" in help_text
    assert "$MAFKA4_COMPRESSION if set, else none" in help_text and "--payload {random,json}" in help_text


# --- payloads ----------------------------------------------------------------------------------


@pytest.mark.parametrize("message_bytes", [JSON_MESSAGE_BYTES_MIN, 256, 300, 512, 1000, 1024, 4096])
def test_json_events_are_valid_json_objects_of_about_the_size_asked(message_bytes):
    pool = payload_pool("json", message_bytes, 200, seed=7)
    for value in pool:
        assert message_bytes - JSON_FILL_SLACK_BYTES <= len(value) <= message_bytes, (len(value), message_bytes)
        event = json.loads(value)
        assert {"event_id", "type", "ts", "user"} <= event.keys() and isinstance(event["user"], dict)
    if message_bytes >= 512:
        assert all("context" in json.loads(value) for value in pool), "nested fields once they fit"
        assert {json.loads(value)["type"] for value in pool} == {"page_view", "click", "add_to_cart", "order_placed",
                                                                   "search"}


def test_values_depend_on_the_seed_alone():
    for kind, message_bytes in (("json", 1024), ("random", 100)):
        assert payload_pool(kind, message_bytes, 50, seed=3) == payload_pool(kind, message_bytes, 50, seed=3)
        assert payload_pool(kind, message_bytes, 50, seed=3) != payload_pool(kind, message_bytes, 50, seed=4)
    assert all(len(value) == 100 for value in payload_pool("random", 100, 50, seed=3))


def test_json_events_are_distinct_but_share_users_and_fields_as_real_traffic_does():
    events = [json.loads(value) for value in payload_pool("json", 512, 1_000, seed=1)]
    assert len({event["event_id"] for event in events}) == len(events)
    users = [event["user"]["id"] for event in events]
    assert len(set(users)) < len(users), "users come back"
    times = [event["ts"] for event in events]
    assert times == sorted(times), "each event a few ms after the one before"


def test_one_batch_of_json_compresses_as_json_does_and_one_of_random_bytes_does_not():
    """The gain comes from repeated fields, not from repeated messages: bounded both ways."""
    batch_bytes = 256 * 1024
    for kind, low, high in (("json", 3.0, 12.0), ("random", 0.99, 1.01)):
        values = payload_pool(kind, 1024, pool_size(1024, batch_bytes), seed=0)
        assert len(set(values)) == len(values)
        payload = b"".join(values)[:batch_bytes]
        assert low < len(payload) / len(compress(Codec.ZSTD, payload)) < high, kind


def test_a_pool_holds_more_values_than_one_batch_within_its_bounds():
    assert pool_size(1024, MiB) == 1025 > MiB // 1024
    assert pool_size(MiB, MiB) == POOL_SIZE_MIN
    assert pool_size(1, MiB) == POOL_SIZE_MAX


def test_payload_bytes_counts_the_values_sent_in_turn():
    pool = [b"a", b"bb", b"ccc"]
    assert [payload_bytes(pool, n) for n in (0, 1, 2, 3, 4, 7)] == [0, 1, 3, 6, 7, 13]


def test_every_run_of_one_settings_sends_the_same_values():
    settings = ProduceBenchSettings(payload="json", message_bytes=512, batch_bytes_max=64 * 1024)
    assert bench_payloads(settings) is bench_payloads(ProduceBenchSettings(payload="json", message_bytes=512,
                                                                            batch_bytes_max=64 * 1024))
    assert len(bench_payloads(settings)) == pool_size(512, 64 * 1024)


# --- bytes written per message -----------------------------------------------------------------


def test_bytes_written_is_the_logs_growth_per_message_next_to_the_payload():
    figures = bytes_written(LogTotals(1_000, 0, 10), LogTotals(3_000, 0, 30), messages=20, payload_bytes=8_000)
    assert figures == {"messages": 20, "log_bytes": 2_000, "payload_bytes": 8_000, "bytes_written_per_message": 100.0,
                       "payload_bytes_per_message": 400.0, "written_vs_payload_ratio": 0.25}


def test_bytes_written_refuses_a_growth_that_is_not_the_runs_alone():
    with pytest.raises(ValueError, match="grew by 25 messages while the run wrote 20"):
        bytes_written(LogTotals(0, 0, 0), LogTotals(900, 0, 25), messages=20, payload_bytes=800)
    with pytest.raises(ValueError, match="retention removed segments"):
        bytes_written(LogTotals(5_000, 0, 40), LogTotals(2_000, 30, 60), messages=20, payload_bytes=800)


def test_log_totals_sum_what_each_leader_describes():
    described = [{"size_bytes": 100, "log_start_offset": 0, "log_end_offset": 4, "role": "leader"},
                 {"size_bytes": 50, "log_start_offset": 2, "log_end_offset": 3, "role": "leader"}]
    assert LogTotals.of(described) == LogTotals(150, 2, 7)


@pytest.mark.parametrize("codec", list(Codec))
def test_bytes_written_per_message_is_what_a_log_stores_of_the_benchs_batches(codec, tmp_path):
    settings = ProduceBenchSettings(messages=3_000, message_bytes=1024, payload="json", partitions=2,
                                    batch_bytes_max=256 * 1024)
    logs = [Log.open(tmp_path / str(p), LogConfig(flush_interval_ms=None, flush_interval_messages=None), now_ms=0)
            for p in range(settings.partitions)]

    def totals() -> LogTotals:
        return LogTotals.of({"size_bytes": log.size_bytes, "log_start_offset": log.log_start_offset,
                             "log_end_offset": log.log_end_offset} for log in logs)

    before = totals()
    stored = 0
    for log, batches in zip(logs, encoded_batches(settings, codec)):
        for batch in batches:
            header = batch_frame.read_header(batch)
            assert header.attributes & 0x07 == codec.value
            stamped = bytearray(batch)
            batch_frame.stamp(stamped, log.log_end_offset, 0)
            log.append(bytes(stamped), now_ms=0)
            stored += len(batch)
    values = payload_bytes(bench_payloads(settings), settings.messages)
    figures = bytes_written(before, totals(), settings.messages, values)
    for log in logs:
        log.close()
    assert figures["log_bytes"] == stored and figures["bytes_written_per_message"] == round(stored / 3_000, 2)
    assert 1014 <= figures["payload_bytes_per_message"] <= 1024
    if codec is Codec.NONE:
        assert 1.0 < figures["written_vs_payload_ratio"] < 1.05, "framing only: headers and msgpack"
    else:
        assert figures["written_vs_payload_ratio"] < 0.5, f"{codec} shrinks JSON events"


def test_a_measured_run_waits_for_logs_still_growing_then_counts_their_growth(monkeypatch):
    """With acks=0 the producer is answered before the leaders append: the run waits for its messages."""
    seen = iter([LogTotals(500, 0, 10), LogTotals(900, 0, 15), LogTotals(1_300, 0, 20), LogTotals(1_500, 0, 30)])
    monkeypatch.setattr(produce, "leader_log_totals", lambda admin, topic: next(seen))
    monkeypatch.setattr(produce, "producer_run", lambda *_: {"messages": 20, "payload_bytes": 4_000})
    monkeypatch.setattr(produce, "LOG_SETTLE_POLL_S", 0.0)
    measured = produce.measured_run(None, None, "t", ProduceBenchSettings(), Codec.ZSTD)
    written = measured["bytes_written"]
    assert (written["log_bytes"], written["bytes_written_per_message"]) == (1_000, 50.0), "from 10 to 30 messages"


# --- the comparison ----------------------------------------------------------------------------


def run(codec: str, msgs_per_s: int, p99_9_ms: float, per_message: float, paced_per_message: float) -> dict:
    def measured(rate, latency, written):
        return {"msgs_per_s": rate, "latency_ms": {"p50": 1.0, "p99": 2.0, "p99.9": latency},
                "bytes_written": {"bytes_written_per_message": written, "payload_bytes_per_message": 1020.0,
                                  "written_vs_payload_ratio": round(written / 1020, 4)}}
    return {"compression": codec, "payload": "json", "producer": measured(msgs_per_s, 50.0, per_message),
            "paced": measured(10_000, p99_9_ms, paced_per_message)}


def test_the_comparison_sets_each_codec_beside_the_first():
    comparison = compression_comparison([run("none", 40_000, 8.0, 1040.0, 1045.0),
                                         run("zstd", 30_000, 10.0, 208.0, 300.0)])
    assert comparison["baseline"] == "none" and list(comparison["codecs"]) == ["none", "zstd"]
    zstd = comparison["codecs"]["zstd"]
    assert (zstd["producer_msgs_per_s_vs_baseline_ratio"], zstd["paced_p99_9_ms_vs_baseline_ratio"],
            zstd["bytes_written_vs_baseline_ratio"]) == (0.75, 1.25, 0.2)
    assert (zstd["bytes_written_per_message"], zstd["paced_bytes_written_per_message"]) == (208.0, 300.0)
    assert comparison["codecs"]["none"]["bytes_written_vs_baseline_ratio"] == 1.0


@pytest.mark.parametrize("bare_actor, bare_stream, ceilings", [(50_000, 60_000, True), (40_000, 30_000, False)])
def test_the_summary_sets_the_bare_stream_ratio_beside_the_bare_actor_ratio_and_says_when_a_bare_run_is_no_ceiling(
        bare_actor, bare_stream, ceilings):
    runs = [run("none", 40_000, 8.0, 1040.0, 1045.0)]
    runs[0]["producer"]["compression"] = "none"
    runs[0]["producer"]["mb_per_s"] = 41.0
    runs[0]["paced"]["driver_gc"] = {"longest_pause_ms": 3.0}
    summary = produce.produce_summary(ProduceBenchSettings(), runs, {"msgs_per_s": 45_000}, {"msgs_per_s": 48_000},
                                      {"msgs_per_s": 55_000}, {"msgs_per_s": bare_actor}, {"msgs_per_s": bare_stream},
                                      {"partition_actor_rss_mb": []})
    keys = list(summary)
    assert keys[keys.index("producer_vs_bare_ratio") + 1] == "producer_vs_bare_stream_ratio", "printed side by side"
    assert summary["producer_vs_bare_ratio"] == round(40_000 / bare_actor, 3)
    assert summary["producer_vs_bare_stream_ratio"] == round(40_000 / bare_stream, 3)
    assert summary["bare_runs_are_ceilings"] is ceilings, "a ratio above 1: the Producer outran that bare run"
    bench = next(action for action in cli.build_parser("bench")._subparsers._group_actions).choices["bench"]
    assert "(a ratio above 1: that bare run is no ceiling)" in " ".join(bench.format_help().split())
    assert "the bare actor (or stream) is then no ceiling" in " ".join(produce.__doc__.split())


def test_the_comparison_refuses_a_codec_measured_twice():
    with pytest.raises(AssertionError):
        compression_comparison([run("none", 1, 1.0, 1.0, 1.0), run("none", 1, 1.0, 1.0, 1.0)])


def test_send_many_calls_carry_the_values_the_message_numbers_send_and_fill_one_batch_each():
    payloads = (b"a", b"b", b"c")
    assert produce._values_from(payloads, 1, 5) == [b"b", b"c", b"a", b"b", b"c"]
    assert produce._values_from(payloads, 3, 2) == [b"a", b"b"]
    settings = ProduceBenchSettings(message_bytes=1024, batch_bytes_max=MiB)
    per_call = produce.messages_per_batch(settings)
    assert per_call * (1024 + produce.RECORD_OVERHEAD_BYTES) + batch_frame.HEADER_BYTES <= MiB
    assert (per_call + 1) * (1024 + produce.RECORD_OVERHEAD_BYTES) + batch_frame.HEADER_BYTES > MiB
