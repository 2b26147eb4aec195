"""``mafka4 bench stream`` (``mafka4.bench.stream_transfer``): its answer is what a read node
serves, its settings are checked, and a smoke run reports every figure. No cluster."""

from __future__ import annotations

import json

import pytest

from mafka4.bench.stream_transfer import RECORDS_PER_BATCH, StreamBenchSettings, run_stream_bench, vp_answer_data
from mafka4.client.vp_messages import take_vp_messages
from mafka4.errors import InvalidConfig
from mafka4.limits import MiB


def test_the_answer_is_stamped_vp_batches_of_about_the_size_asked_that_a_consumer_reads_whole():
    data = vp_answer_data(2 * MiB, 1024)
    messages: list = []
    taken = take_vp_messages(data, "bench", 0, 0, messages, 10**6, check_crc=True)
    assert 1.9 * MiB <= len(data) <= 2.1 * MiB
    assert [m.offset for m in messages] == list(range(len(messages))) and taken.next_offset == len(messages)
    assert len(messages) > RECORDS_PER_BATCH, "more than one batch, the last one shorter"
    assert {len(m.value) for m in messages} == {1024}


def test_a_tiny_answer_still_holds_one_record():
    messages: list = []
    take_vp_messages(vp_answer_data(1, 100), "bench", 0, 0, messages, 10, check_crc=True)
    assert len(messages) == 1


@pytest.mark.parametrize("changes, problem", [({"calls": 0}, "calls=0"), ({"answer_bytes": 0}, "answer_bytes=0"),
                                              ({"repetitions": 101}, "repetitions=101")])
def test_settings_out_of_range_are_refused_by_name(changes, problem):
    with pytest.raises(InvalidConfig, match=problem):
        StreamBenchSettings(**changes)


def test_a_smoke_run_reports_each_side_s_cpu_per_mib_and_the_decoding_per_message(tmp_path):
    output = tmp_path / "bench_stream.json"
    report = run_stream_bench(StreamBenchSettings.smoke_sized(decode=True), str(output))
    assert json.loads(output.read_text()) == report and report["result"] is False, "a smoke run is no result"
    row, = report["rows"]
    assert row["calls"] == 5 and row["messages_decoded"] > 0
    for figure in ("caller_cpu_ms_per_mib", "server_cpu_ms_per_mib", "wall_ms_per_mib", "caller_cpu_us_per_message"):
        assert row[figure] > 0 and report["summary"][figure] == row[figure]
