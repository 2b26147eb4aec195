"""``mafka4 bench redis-streams``: its settings, its arithmetic, a member's loop, its refusals, and one smoke run.

The arithmetic is pure (``benchmarks.redis_streams_figures``); a member's read loop runs here against a
fake client. The last test runs the smoke-sized bench for real: it needs ``redis-server`` on the
PATH and the ``redis`` extra, which CI does not install, so it is skipped there.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import sys
import time

import pytest

from benchmarks import redis_streams
from benchmarks.redis_streams_figures import (CLIENTS, MemberRead, RedisStreamsBenchSettings, delivery,
                                              drain_elapsed_ns, drain_row, matched_pipeline_messages,
                                              matched_read_count, pipeline_sizes, rate_msgs_per_s, summary, table)
from benchmarks.redis_streams_member import MemberSpec, read_until_empty
from declared_entry_points import declared_entry_points, installed
from mafka4 import cli
from mafka4.bench.drain import ConsumeBenchSettings
from mafka4.bench.drain_terms import AckCadence, AckKind
from mafka4.bench.produce_settings import ProduceBenchSettings
from mafka4.errors import InvalidConfig, MissingDependency
from mafka4.limits import ConsumerConfig

MS = 1_000_000  # ns


@pytest.fixture(autouse=True)
def declared_plugins(monkeypatch):
    """``mafka4 bench redis-streams`` comes through the entry points of this checkout's ``pyproject.toml``."""
    installed(monkeypatch, declared_entry_points())


# --- settings -----------------------------------------------------------------------------------


def test_the_defaults_are_mafka4s_benches_and_sweep_redis_usual_sizes_against_matched_ones():
    settings = RedisStreamsBenchSettings()
    assert settings.produce_messages == ProduceBenchSettings().messages, "as bench produce's runs"
    assert settings.messages == ConsumeBenchSettings().messages == 1_000_000, "the same backlog as bench consume"
    assert settings.ack_cadences == ConsumeBenchSettings().ack_cadences == ("per-read", "every-5000ms")
    assert settings.message_bytes == 1024 and settings.consumers == (1, 4) and settings.repetitions == 2
    assert settings.pipelines == (("1000", 1000), ("matched", 10_240)), "2 partitions x 5 batches x 1 MiB in flight"
    assert settings.reads == (("1000", 1000), ("matched", 4096)), "one fetch of 4 MiB"
    assert settings.quiet_wait_s_max > 0 and not settings.smoke


def test_matched_sizes_hold_the_bytes_mafka4_keeps_in_flight_and_fetches_at_once():
    produce = ProduceBenchSettings(partitions=4, batch_bytes_max=512 * 1024)
    assert matched_pipeline_messages(1024, produce) == 4 * 5 * 512, "4 partitions x 5 batches x 512 KiB"
    assert matched_pipeline_messages(100, ProduceBenchSettings()) == 10 * 1024 * 1024 // 100
    assert matched_pipeline_messages(64 * 1024 * 1024, ProduceBenchSettings()) == 1, "at least one XADD"
    assert matched_read_count(1024, ConsumerConfig(fetch_bytes_max=1024 * 1024)) == 1024
    assert matched_read_count(256) == 4 * 1024 * 4
    assert RedisStreamsBenchSettings(message_bytes=256, pipeline_messages=("matched", "10")).pipelines == (
        ("matched", 40_960), ("10", 10))


@pytest.mark.parametrize("changes, named", [
    ({"messages": 0}, "messages=0 is out of range"),
    ({"produce_messages": -1}, "produce_messages=-1"),
    ({"message_bytes": 0}, "message_bytes=0"),
    ({"message_bytes": 2 * 1024 * 1024}, "message_bytes=2097152"),
    ({"produce_messages": 2_000_000}, "a stream of 1024 MiB of 1024-byte messages"),
    ({"messages": 3_000_000}, "messages=3000000 is out of range: use 1 to 1048576 (1024-byte messages: the drains "
                              "of bench consume and bench redis-streams take equal backlogs"),
    ({"message_bytes": 1024 * 1024, "produce_messages": 1000, "messages": 2000},
     "messages=2000 is out of range: use 1 to 1024 (1048576-byte messages"),
    ({"pipeline_messages": ("0",)}, "pipeline_messages=0: give distinct counts from 1 to 65536"),
    ({"pipeline_messages": ("1000", "1000")}, "pipeline_messages=1000,1000"),
    ({"pipeline_messages": ()}, "pipeline_messages=: give distinct"),
    ({"read_count": ("100000",)}, "64 MiB of 1024-byte messages at once) or matched"),
    ({"read_count": ("most",)}, "read_count=most"),
    ({"ack_cadences": ("xack",)}, "'xack' is not one: use per-read, every-<N>ms"),
    ({"ack_cadences": ()}, "ack_cadences=: give one or more"),
    ({"repetitions": 0}, "repetitions=0"),
    ({"consumers": ()}, "consumers=: give distinct"),
    ({"consumers": (1, 0)}, "consumers=1,0"),
    ({"consumers": (4, 4)}, "distinct"),
    ({"consumers": (33,)}, "from 1 to 32"),
    ({"quiet_wait_s_max": -1.0}, "quiet_wait_s_max=-1.0 must be 0"),
    ({"drain_s_max": 0.0}, "drain_s_max=0.0"),
])
def test_settings_refuse_what_cannot_be_measured_naming_it(changes, named):
    with pytest.raises(InvalidConfig, match=re.escape(named)):
        RedisStreamsBenchSettings(**changes)


def test_a_smoke_run_is_small_does_not_wait_and_says_so():
    smoke = RedisStreamsBenchSettings.smoke_sized(consumers=(3,))
    assert smoke.smoke and smoke.messages <= 5_000 and smoke.produce_messages <= 5_000 and smoke.repetitions == 1
    assert smoke.quiet_wait_s_max == 0 and smoke.consumers == (3,)


# --- the arithmetic -----------------------------------------------------------------------------


def test_pipelines_are_full_but_the_last():
    assert pipeline_sizes(2500, 1000) == [1000, 1000, 500]
    assert pipeline_sizes(2000, 1000) == [1000, 1000]
    assert pipeline_sizes(3, 1000) == [3] and pipeline_sizes(0, 10) == []


def test_a_rate_is_messages_over_the_time_they_took():
    assert rate_msgs_per_s(100_000, 2_000 * MS) == 50_000.0
    assert rate_msgs_per_s(3, 7 * MS) == 428.6
    assert rate_msgs_per_s(5, 0) is None and rate_msgs_per_s(0, None) is None


def member(index, first_ms, last_ms, ids, reads=2, complete=True, end_ms=None, acks=0) -> MemberRead:
    end_ms = last_ms if end_ms is None else end_ms
    return MemberRead(index, first_ms * MS, None if last_ms is None else last_ms * MS,
                      None if end_ms is None else end_ms * MS, tuple(ids), reads, acks, complete)


def test_a_drain_runs_from_the_earliest_first_read_to_the_latest_end():
    members = [member(0, 10, 90, [b"1-0"]), member(1, 5, 60, [b"1-1"]), member(2, 3, None, [], reads=1)]
    assert drain_elapsed_ns(members) == 87 * MS, "a member given nothing starts the drain but does not end it"
    assert drain_elapsed_ns([member(0, 3, None, [], reads=1)]) is None
    acknowledged = [member(0, 10, 90, [b"1-0"], end_ms=95, acks=1), member(1, 5, 60, [b"1-1"], end_ms=99, acks=1)]
    assert drain_elapsed_ns(acknowledged) == 94 * MS, "the last XACK ends the drain, inside the timed window"


def test_every_backlog_id_given_exactly_once_across_members_is_a_clean_delivery():
    counted = delivery([b"1-0", b"1-1", b"1-2"], [[b"1-0", b"1-2"], [b"1-1"], []])
    assert (counted.messages, counted.delivered, counted.read, counted.missing) == (3, 3, 3, 0)
    assert counted.exactly_once


def test_a_delivery_counts_what_is_missing_given_twice_or_not_in_the_backlog():
    counted = delivery([b"1-0", b"1-1", b"1-2", b"1-3"], [[b"1-0", b"1-0"], [b"1-0", b"1-1", b"9-9"]])
    assert counted.missing == 2, "1-2 and 1-3"
    assert counted.duplicates == 2, "1-0 twice more: once in the same member, once in another"
    assert counted.outside_backlog == 1 and counted.delivered == 5 and counted.read == 2
    assert not counted.exactly_once
    assert not delivery([b"1-0"], [[b"1-0", b"2-0"]]).exactly_once, "an id from outside the backlog"
    with pytest.raises(AssertionError):
        delivery([b"1-0", b"1-0"], [])


def test_a_drain_row_combines_the_members_stamps_and_ids():
    backlog = [f"1-{n}".encode() for n in range(4000)]
    members = [member(1, 2, 200, backlog[2000:], reads=3), member(0, 0, 100, backlog[:2000], reads=3)]
    row = drain_row(backlog, members, 1024)
    assert row["messages"] == row["messages_read"] == row["delivered"] == 4000 and row["exactly_once"]
    assert row["elapsed_s"] == 0.2 and row["msgs_per_s"] == 20_000.0 and row["mb_per_s"] == 20.48
    assert row["reads"] == 6 and row["acks"] == 0 and row["consumers_with_work"] == 2
    assert [(m["member"], m["first_read_ms"], m["last_message_ms"], m["end_ms"]) for m in row["members"]] == [
        (0, 0.0, 100.0, 100.0), (1, 2.0, 200.0, 200.0)]
    assert drain_row(backlog, [member(0, 0, 100, backlog[:3000])], 1024)["missing"] == 1000


def produce_row(client, msgs_per_s, quiet=True, pipeline=("1000", 1000)):
    return {"workload": "produce", "client": client, "pipeline_choice": pipeline[0], "pipeline_messages": pipeline[1],
            "msgs_per_s": msgs_per_s, "quiet": quiet}


def consume_row(ack, consumers, msgs_per_s, exactly_once=True, read=("1000", 1000)):
    return {"workload": "consume", "ack": ack, "read_count_choice": read[0], "read_count": read[1],
            "consumers": consumers, "msgs_per_s": msgs_per_s, "quiet": True, "exactly_once": exactly_once,
            "member_cpu_us_per_message": 1e6 / msgs_per_s if msgs_per_s else None,
            "machine_cpu_us_per_message": 2e6 / msgs_per_s if msgs_per_s else None}


def test_the_summary_gives_medians_of_every_cell_with_every_run():
    matched = ("matched", 4096)
    rows = [produce_row("redis-py", 40_000), produce_row("raw", 100_000), consume_row("per-read", 1, 80_000),
            consume_row("none", 1, 90_000), produce_row("raw", 120_000, pipeline=("matched", 10_240)),
            consume_row("per-read", 1, 85_000, read=matched),
            produce_row("redis-py", 50_000, quiet=False), produce_row("raw", 90_000),
            consume_row("per-read", 1, 70_000), consume_row("none", 1, None, exactly_once=False)]
    figures = summary(rows)
    assert figures["produce"]["redis-py"]["1000"] == {"repetitions": 2, "msgs_per_s_median": 45_000.0,
                                                      "msgs_per_s_each": [40_000, 50_000], "quiet_each": [True, False],
                                                      "pipeline_messages": 1000}
    assert figures["produce"]["raw"]["1000"]["msgs_per_s_median"] == 95_000.0
    assert figures["produce"]["raw"]["matched"]["msgs_per_s_each"] == [120_000], "the matched pipeline: its own cell"
    per_read = figures["consume"]["per-read"]
    assert per_read["1000"]["1"]["msgs_per_s_median"] == 75_000.0
    assert {"msgs_per_s_each": [85_000], "read_count": 4096}.items() <= per_read["matched"]["1"].items()
    assert figures["consume"]["none"]["1000"]["1"]["msgs_per_s_median"] == 90_000.0, "a drain without a rate is out"
    assert figures["consume"]["none"]["1000"]["1"]["exactly_once_each"] == [True, False]
    assert per_read["1000"]["1"]["member_cpu_us_per_message_median"] == 13.393, "of 12.5 and 14.29"
    assert per_read["1000"]["1"]["machine_cpu_us_per_message_median"] == 26.786
    assert set(figures["clients"]) == {"redis-py", "raw", "consume"}, "the report says which client is which"
    assert "2 partitions x 5 batches x 1 MiB" in figures["matched"] and "fetch_bytes_max 4 MiB" in figures["matched"]


def test_the_table_prints_every_cell_names_each_client_and_flags_a_smoke_run():
    rows = [produce_row("redis-py", 45_000), produce_row("raw", 100_000), consume_row("none", 4, 150_000),
            produce_row("raw", 130_000, pipeline=("matched", 10_240)),
            consume_row("none", 4, 160_000, read=("matched", 4096))]
    report = {"summary": summary(rows), "load_average_1m": [0.5, 1.0], "redis_py_version": "8.1.0",
              "hiredis_version": "3.5.0", "redis_server": {"version": "Redis server v=7.0.15 sha=0:0 bits=64"},
              "settings": {"repetitions": 1, "smoke": True}}
    text = table(report)
    assert "45,000" in text and "100,000" in text and "150,000" in text
    lines = text.splitlines()
    assert lines[3].split() == ["produce", "raw", "matched=10,240", "-", "130,000", "130,000", "yes", "-", "-", "-"]
    assert lines[5].split()[:6] == ["consume", "none", "matched=4,096", "4", "160,000", "160,000"]
    assert "matched pipeline: the bytes bench produce's Producer keeps in flight" in text
    assert "members us/msg" in text and " 6.67 " in text and " 13.33 " in text, "the drain's CPU per message"
    assert CLIENTS["raw"] in text and CLIENTS["redis-py"] in text
    assert "Redis server v=7.0.15, redis-py 8.1.0" in text and text.endswith("a smoke run: not a result")


# --- a member's reads ---------------------------------------------------------------------------


class FakeGroupClient:
    """XREADGROUP of a backlog: each read gives up to ``count`` ids no read gave before."""

    def __init__(self, ids, read_s=0.0):
        self.left = list(ids)
        self.read_s = read_s
        self.acked = []
        self.noack_flags = []
        self.calls = []

    def xreadgroup(self, group, consumer, streams, count, noack):
        self.noack_flags.append(noack)
        self.calls.append("read")
        time.sleep(self.read_s)
        given, self.left = self.left[:count], self.left[count:]
        return [[b"s", [(entry_id, {b"v": b"x"}) for entry_id in given]]] if given else []

    def xack(self, stream, group, *ids):
        self.acked.append(ids)
        self.calls.append("ack")


PER_READ, NONE = AckCadence(AckKind.PER_READ), AckCadence(AckKind.NONE)


def spec(cadence, read_count=2, drain_s_max=60.0) -> MemberSpec:
    return MemberSpec(0, 1, "s", "g", cadence, read_count, 1.0, 1.0, drain_s_max)


def test_a_member_reads_until_a_read_returns_nothing_and_acks_each_read_per_read():
    client = FakeGroupClient([b"1-0", b"1-1", b"1-2"])
    read = read_until_empty(client, spec(PER_READ))
    assert read.ids == (b"1-0", b"1-1", b"1-2") and read.reads == 3 and read.acks == 2 and read.complete
    assert client.acked == [(b"1-0", b"1-1"), (b"1-2",)] and client.noack_flags == [False] * 3
    assert client.calls == ["read", "ack", "read", "ack", "read"]
    assert read.first_read_ns <= read.last_message_ns <= read.end_ns, "its last XACK ends its part of the drain"
    assert read.cpu_ns is not None and read.cpu_ns >= 0


def test_a_member_with_cadence_none_reads_with_noack_and_ends_at_its_last_message():
    client = FakeGroupClient([b"1-0", b"1-1", b"1-2"])
    read = read_until_empty(client, spec(NONE))
    assert read.ids == (b"1-0", b"1-1", b"1-2") and client.acked == [] and client.noack_flags == [True] * 3
    assert read.acks == 0 and read.end_ns == read.last_message_ns


def test_a_member_acking_every_n_ms_acks_what_it_read_since_its_last_ack_and_the_rest_at_the_end():
    client = FakeGroupClient([b"1-0", b"1-1", b"1-2", b"1-3", b"1-4"])
    read = read_until_empty(client, spec(AckCadence(AckKind.EVERY, 60_000)))
    assert client.calls == ["read", "read", "read", "read", "ack"], "not due within the drain: once, after the end"
    assert client.acked == [(b"1-0", b"1-1", b"1-2", b"1-3", b"1-4")] and client.noack_flags == [False] * 4
    assert read.acks == 1 and read.last_message_ns <= read.end_ns
    client = FakeGroupClient([b"1-0", b"1-1", b"1-2"], read_s=0.002)
    read_until_empty(client, spec(AckCadence(AckKind.EVERY, 1), read_count=1))
    assert len(client.acked) >= 2 and sum(map(len, client.acked)) == 3, "due often: each id acknowledged once"


def test_an_ack_is_due_per_read_every_n_ms_after_the_last_or_never():
    assert PER_READ.due(0, 0) and not NONE.due(10**12, 0)
    every = AckCadence(AckKind.EVERY, 5)
    assert not every.due(4_999_999, 0) and every.due(5_000_000, 0)


def test_a_member_given_nothing_reads_once_and_one_past_its_deadline_stops():
    read = read_until_empty(FakeGroupClient([]), spec(NONE))
    assert read.ids == () and read.reads == 1 and read.last_message_ns is None and read.end_ns is None
    assert read.complete
    client = FakeGroupClient([b"1-0", b"1-1", b"1-2"])
    read = read_until_empty(client, spec(AckCadence(AckKind.EVERY, 60_000), drain_s_max=0.0))
    assert read.ids == (b"1-0", b"1-1") and not read.complete
    assert client.acked == [(b"1-0", b"1-1")], "what it read is acknowledged before it stops"


# --- what the user is told to install -------------------------------------------------------------


def test_without_redis_server_on_the_path_the_bench_names_the_package_and_starts_nothing(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(MissingDependency, match="apt-get install redis-server"):
        redis_streams.server_binary()
    monkeypatch.setattr(redis_streams, "client_modules", lambda: (None, None))  # as if the extra were installed
    output = tmp_path / "report.json"
    with pytest.raises(MissingDependency, match="redis-server"):
        redis_streams.run_redis_streams_bench(RedisStreamsBenchSettings.smoke_sized(), str(output))
    assert not output.exists()


@pytest.mark.parametrize("module", ["redis", "hiredis"])
def test_without_the_python_clients_the_bench_names_the_extra(monkeypatch, module, tmp_path):
    monkeypatch.setitem(sys.modules, module, None)  # import fails as if not installed
    with pytest.raises(MissingDependency, match=r"pip install 'mafka4\[redis\]'"):
        redis_streams.run_redis_streams_bench(RedisStreamsBenchSettings.smoke_sized(), str(tmp_path / "r.json"))


def test_a_missing_dependency_exits_2_with_one_line(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setattr(redis_streams, "client_modules", lambda: (None, None))
    assert cli.main(["bench", "redis-streams", "--smoke", "--output", str(tmp_path / "r.json")]) == 2
    error = capsys.readouterr().err
    assert error.startswith("mafka4: error: ") and "apt-get install redis-server" in error


def test_the_command_passes_its_options_to_the_settings_and_prints_a_table(monkeypatch, capsys):
    calls = []

    def fake_driver(settings, output_path):
        calls.append((settings, output_path))
        return {"summary": summary([produce_row("redis-py", 45_000), produce_row("raw", 100_000)]),
                "load_average_1m": [0.5, 0.6], "redis_py_version": "8.1.0", "hiredis_version": "3.5.0",
                "redis_server": {"version": "Redis server v=7.0.15"}, "settings": {"repetitions": 1, "smoke": True}}

    monkeypatch.setattr(redis_streams, "run_redis_streams_bench", fake_driver)
    assert cli.main(["bench", "redis-streams", "--smoke", "--consumers", "1,4", "--read-count", "100,matched",
                     "--ack-cadences", "none,every-250ms"]) == 0
    assert calls == [(RedisStreamsBenchSettings.smoke_sized(consumers=(1, 4), read_count=("100", "matched"),
                                                            ack_cadences=("none", "every-250ms")),
                      "results/bench_redis_streams.json")]
    out, err = capsys.readouterr()
    assert out.split()[:4] == ["workload", "client/ack", "pipeline/read", "consumers"] and "100,000" in out
    assert "full report written to results/bench_redis_streams.json" in err


def test_the_bench_is_listed_and_its_options_come_from_the_settings(capsys):
    with pytest.raises(SystemExit):
        cli.main(["bench", "--help"])
    assert "redis-streams" in capsys.readouterr().out
    assert cli.main(["bench", "redis-streams", "--consumers", "0"]) == 2
    assert "consumers=0" in capsys.readouterr().err


# --- one run, for real ----------------------------------------------------------------------------


@pytest.mark.experiment
@pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server is not on the PATH "
                                                                 "(apt-get install redis-server)")
@pytest.mark.skipif(importlib.util.find_spec("redis") is None or importlib.util.find_spec("hiredis") is None,
                    reason="the redis extra (redis, hiredis) is not installed")
def test_the_smoke_bench_measures_every_cell_of_its_sweep_and_every_id_arrives_once(tmp_path):
    settings = RedisStreamsBenchSettings.smoke_sized(ack_cadences=("per-read", "every-1ms", "none"),
                                                     read_count=("1000",))
    output = tmp_path / "redis_streams.json"
    report = redis_streams.run_redis_streams_bench(settings, str(output))
    assert json.loads(output.read_text()) == json.loads(json.dumps(report))
    rows = report["rows"]
    assert [(row["workload"], row.get("client") or row["ack"], row.get("pipeline_choice"), row.get("consumers"))
            for row in rows] == [
        ("produce", "redis-py", "1000", None), ("produce", "redis-py", "matched", None),
        ("produce", "raw", "1000", None), ("produce", "raw", "matched", None),
        *(("consume", ack, None, consumers) for ack in ("per-read", "every-1ms", "none") for consumers in (1, 2))]
    for row in rows:
        assert row["msgs_per_s"] > 0 and len(row["load_average_1m"]) == 2 and isinstance(row["quiet"], bool)
    for row in rows[4:]:
        where = (row["ack"], row["consumers"])
        assert row["exactly_once"] and row["messages_read"] == settings.messages, where
        assert row["pending_after"] == 0, where
        assert (row["acks"] == 0) == (row["ack"] == "none"), where
        assert all(member["complete"] for member in row["members"]), where
        # A smoke drain takes milliseconds: too short for the machine's figures (bench.cpu_cost).
        assert row["member_cpu_us_per_message"] > 0, where
        assert row["machine_busy_cores"] is None or row["machine_busy_cores"] > 0, where
    assert report["backlog"]["messages"] == settings.messages
    assert report["redis_server"]["version"].startswith("Redis server v=") and report["redis_py_version"]
    command = report["redis_server"]["command"]
    assert command[command.index("--bind") + 1] == "127.0.0.1" and "everysec" in command
    assert not os.path.exists(command[command.index("--dir") + 1]), "the server's directory is removed"
    with pytest.raises(ProcessLookupError):  # the server was stopped and reaped
        os.kill(report["redis_server"]["pid"], 0)
    assert report["summary"]["smoke"] and "not a result" in table(report)
