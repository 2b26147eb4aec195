"""The event-log schema: round trip, validation errors that name the column, atomic writes."""

from __future__ import annotations

import subprocess
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import simulations.schema as schema
from mafka4.errors import InvalidEventLog, MafkaError, NoEventLogs
from simulations.schema import (ANALYSIS_MARKER, EVENT_SCHEMA, ROW_COLUMNS, RUN_COLUMNS, RunInfo, event_log_files, events_table,
                                git_commit, read_events, write_events)

RUN4 = RunInfo(experiment_id="scaling-7", source="runtime", mode="mafka4", consumers=4, topics=1, physical_partitions=2,
               virtual_partitions=4, write_nodes=2, read_nodes=2, actors=8, seed=7, git_commit="abc")
RUN3 = replace(RUN4, mode="mafka3", physical_partitions=4, virtual_partitions=0, read_nodes=0)
START_MS = 1.7e12


def rows(count: int = 5) -> dict[str, object]:
    produce = START_MS + np.arange(count, dtype=np.float64)
    consume = produce + 3.0
    consume[1:2] = np.nan
    return {
        "partition": np.arange(count) % 2,
        "virtual_partition": [index % 4 for index in range(count - 1)] + [None],
        "produce_time_ms": produce,
        "ack_time_ms": produce + 1.5,
        "consume_time_ms": consume,
    }


def test_every_column_is_documented_in_the_module_docstring():
    for name in EVENT_SCHEMA.names:
        assert f"\n{name} " in schema.__doc__, name
    assert set(RUN_COLUMNS) | set(ROW_COLUMNS) == set(EVENT_SCHEMA.names)


def test_round_trip_keeps_values_derives_latencies_and_turns_nan_into_null(tmp_path):
    path = write_events(tmp_path / "run" / "events.parquet", RUN4, rows())
    table = read_events(tmp_path)
    assert table.schema.equals(EVENT_SCHEMA, check_metadata=False)
    assert pq.read_schema(path).metadata[b"mafka4.event_schema_version"] == schema.SCHEMA_VERSION.encode()
    data = table.to_pydict()
    assert data["partition"] == [0, 1, 0, 1, 0]
    assert data["virtual_partition"] == [0, 1, 2, 3, None]
    assert data["produce_latency_ms"] == [1.5] * 5
    assert data["end_to_end_latency_ms"] == [3.0, None, 3.0, 3.0, 3.0]
    assert data["consume_time_ms"][1] is None
    assert set(data["mode"]) == {"mafka4"} and set(data["seed"]) == {7} and set(data["sample_rate"]) == {1.0}


def test_read_events_concatenates_files_below_a_directory_and_skips_analysis_output(tmp_path):
    write_events(tmp_path / "a" / "mafka4.parquet", RUN4, rows(3))
    write_events(tmp_path / "b" / "mafka3.parquet", RUN3, {"partition": [0, 3], "produce_time_ms": [START_MS, START_MS]})
    analysis = tmp_path / "analysis"
    analysis.mkdir()
    (analysis / ANALYSIS_MARKER).write_text("")
    pq.write_table(pa.table({"count": [1]}), analysis / "latency_by_config.parquet")
    table = read_events(tmp_path)
    assert table.num_rows == 5
    assert sorted(set(table.column("mode").to_pylist())) == ["mafka3", "mafka4"]
    assert table.column("virtual_partition").to_pylist()[-2:] == [None, None]


def test_latencies_may_be_given_without_times():
    table = events_table(replace(RUN4, source="fleet_model", topics=3),
                         {"partition": [0, 1], "produce_time_ms": [0.0, 1.0], "produce_latency_ms": [2.0, 4.0],
                          "end_to_end_latency_ms": [5.0, None]})
    assert table.column("produce_latency_ms").to_pylist() == [2.0, 4.0]
    assert table.column("ack_time_ms").null_count == 2


@pytest.mark.parametrize(
    "columns, named",
    [
        ({"partition": [0], "produce_time_ms": [1.0], "mode": ["mafka3"]}, "'mode' is the same for the whole run"),
        ({"partition": [0], "produce_time_ms": [1.0], "latency": [1.0]}, "unknown column 'latency'"),
        ({"produce_time_ms": [1.0]}, "column 'partition' is missing"),
        ({"partition": [0, 1], "produce_time_ms": [1.0]}, "column 'partition' has 2 values"),
        ({"partition": [0.5], "produce_time_ms": [1.0]}, "column 'partition' cannot be stored as int32"),
        ({"partition": [True], "produce_time_ms": [1.0]}, "column 'partition' cannot be stored as int32"),
        ({"partition": [2**40], "produce_time_ms": [1.0]}, "column 'partition' cannot be stored as int32"),
        ({"partition": [0], "produce_time_ms": ["1.0"]}, "column 'produce_time_ms' cannot be stored as double"),
        ({"partition": [0], "produce_time_ms": [np.nan]}, "column 'produce_time_ms' holds 1 null"),
        ({"partition": [0], "produce_time_ms": [np.inf]}, "column 'produce_time_ms' holds an infinite value"),
        ({"partition": [2], "produce_time_ms": [1.0]}, "column 'partition' holds values in [2, 2], outside [0, 2)"),
        ({"partition": [0], "produce_time_ms": [1.0], "virtual_partition": [4]}, "column 'virtual_partition' holds values"),
        ({"partition": [0], "produce_time_ms": [5.0], "ack_time_ms": [4.0]}, "column 'produce_latency_ms' holds a negative"),
        ({"partition": [0], "produce_time_ms": [1.0], "consume_time_ms": [4.0], "end_to_end_latency_ms": [2.0]},
         "column 'end_to_end_latency_ms' disagrees with its times"),
    ],
)
def test_bad_columns_are_refused_with_an_error_naming_the_column(columns, named):
    with pytest.raises(InvalidEventLog) as raised:
        events_table(RUN4, columns)
    assert named in raised.value.message


def test_mafka3_rows_have_no_virtual_partition():
    with pytest.raises(InvalidEventLog, match="'virtual_partition' must be null in mafka3 mode"):
        events_table(RUN3, {"partition": [0], "produce_time_ms": [1.0], "virtual_partition": [0]})


@pytest.mark.parametrize(
    "changes, named",
    [
        ({"mode": "kafka"}, "RunInfo.mode"),
        ({"source": "lab"}, "RunInfo.source"),
        ({"consumers": 0}, "RunInfo.consumers"),
        ({"virtual_partitions": 0}, "0 in mafka4 mode"),
        ({"mode": "mafka3"}, "in mafka3 mode"),
        ({"sample_rate": 0.0}, "RunInfo.sample_rate"),
        ({"experiment_id": ""}, "RunInfo.experiment_id"),
        ({"seed": 2**63}, "RunInfo.seed"),
        ({"lanes": -1}, "RunInfo.lanes"),
        ({"lanes": True}, "RunInfo.lanes"),
    ],
)
def test_run_info_is_validated_on_construction(changes, named):
    with pytest.raises(InvalidEventLog, match=named):
        replace(RUN4, **changes)


def test_a_crash_while_writing_leaves_neither_a_partial_file_nor_a_temp_file(tmp_path, monkeypatch):
    target = tmp_path / "events.parquet"
    write_events(target, RUN4, rows(2))
    before = target.read_bytes()

    def crash(table, sink, **options):
        sink.write(b"PAR1 half a file")
        raise OSError("disk full")

    monkeypatch.setattr(schema.pq, "write_table", crash)
    with pytest.raises(OSError, match="disk full"):
        write_events(target, RUN4, rows(5))
    assert target.read_bytes() == before
    assert sorted(path.name for path in tmp_path.iterdir()) == ["events.parquet"]


def test_a_temp_file_left_by_a_killed_writer_is_not_read(tmp_path):
    write_events(tmp_path / "events.parquet", RUN4, rows(2))
    (tmp_path / ".other.parquet.x1y2.tmp").write_bytes(b"PAR1 half a file")
    (tmp_path / ".half.parquet").write_bytes(b"PAR1 half a file")
    assert [path.name for path in event_log_files(tmp_path)] == ["events.parquet"]


def test_write_path_must_be_a_visible_parquet_file(tmp_path):
    for name in ("events.csv", ".events.parquet", "_events.parquet"):
        with pytest.raises(InvalidEventLog, match="must end in '.parquet'"):
            write_events(tmp_path / name, RUN4, rows(1))


def test_missing_or_empty_directory_is_a_clear_error(tmp_path):
    with pytest.raises(NoEventLogs, match="does not exist") as raised:
        read_events(tmp_path / "nowhere")
    assert str(tmp_path / "nowhere") in raised.value.message and not raised.value.retriable
    (tmp_path / "notes.txt").write_text("no logs here")
    with pytest.raises(NoEventLogs, match="no event-log Parquet files"):
        read_events(tmp_path)
    assert issubclass(NoEventLogs, MafkaError) and issubclass(InvalidEventLog, MafkaError)


def test_a_parquet_file_of_another_schema_is_named_in_the_error(tmp_path):
    write_events(tmp_path / "good.parquet", RUN4, rows(1))
    pq.write_table(pa.table({"partition": pa.array([0], pa.int64())}), tmp_path / "other.parquet")
    with pytest.raises(InvalidEventLog, match="other.parquet") as raised:
        read_events(tmp_path)
    assert "partition" in raised.value.message


def test_git_commit_names_head_here_and_unknown_outside_a_repository(tmp_path):
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(schema.__file__).parent, capture_output=True,
                          text=True).stdout.strip()
    assert git_commit().removesuffix("-dirty") == head
    assert git_commit(tmp_path) == "unknown"


def test_stage_stamps_and_deliveries_round_trip_and_every_stage_names_known_columns(tmp_path):
    produce = START_MS + np.arange(3, dtype=np.float64)
    stamps = {"sent_time_ms": produce + 0.5, "leader_received_time_ms": produce + 1.0,
              "leader_appended_time_ms": produce + 1.2, "committed_time_ms": produce + 2.0,
              "vp_appended_time_ms": produce + 3.0, "vp_committed_time_ms": produce + 3.5}
    columns = {**rows(3), **stamps, "deliveries": [1, 0, 2]}
    data = read_events(write_events(tmp_path / "events.parquet", replace(RUN4, repetition=2), columns)).to_pydict()
    assert data["deliveries"] == [1, 0, 2] and set(data["repetition"]) == {2}
    assert data["vp_committed_time_ms"] == list(produce + 3.5)
    stages = {**schema.PRODUCE_STAGES, **schema.READ_STAGES["mafka3"], **schema.READ_STAGES["mafka4"]}
    for later, earlier in stages.values():
        assert {later, earlier} <= set(EVENT_SCHEMA.names)


def test_vp_stamps_in_mafka3_mode_and_negative_deliveries_are_refused():
    with pytest.raises(InvalidEventLog, match="vp_appended_time_ms.*mafka3"):
        events_table(RUN3, {"partition": [0], "produce_time_ms": [START_MS], "vp_appended_time_ms": [START_MS]})
    with pytest.raises(InvalidEventLog, match="deliveries"):
        events_table(RUN4, {"partition": [0], "produce_time_ms": [START_MS], "deliveries": [-1]})


def test_a_run_with_lanes_records_them_and_a_run_before_lanes_records_none(tmp_path):
    assert RUN4.lanes == 0, "a run that names no lanes ran on the trunk"
    write_events(tmp_path / "lanes" / "events.parquet", replace(RUN4, lanes=8), rows(2))
    write_events(tmp_path / "trunk" / "events.parquet", RUN4, rows(3))
    table = read_events(tmp_path)
    assert table.column("lanes").to_pylist() == [8, 8, 0, 0, 0]
    assert EVENT_SCHEMA.names.index("lanes") == EVENT_SCHEMA.names.index("topics") + 1


def write_version_2(path: Path, run: RunInfo, count: int) -> None:
    """An event log as it was written before the ``lanes`` column (schema version 2)."""
    old = schema.READABLE_SCHEMAS["2"]
    table = events_table(run, rows(count)).drop_columns(["lanes"])
    pq.write_table(table.cast(old), path)


def test_a_log_written_before_lanes_reads_as_lanes_0(tmp_path):
    write_version_2(tmp_path / "old.parquet", RUN4, 3)
    write_events(tmp_path / "new.parquet", replace(RUN4, lanes=2, experiment_id="new"), rows(2))
    assert pq.read_schema(tmp_path / "old.parquet").metadata[b"mafka4.event_schema_version"] == b"2"
    assert "lanes" not in pq.read_schema(tmp_path / "old.parquet").names
    assert schema.check_event_file(tmp_path / "old.parquet") == "2"
    assert schema.check_event_file(tmp_path / "new.parquet") == schema.SCHEMA_VERSION != "2"
    table = read_events(tmp_path)
    assert table.schema.equals(EVENT_SCHEMA, check_metadata=False)
    assert table.column("lanes").to_pylist() == [2, 2, 0, 0, 0]
    assert table.column("experiment_id").to_pylist() == ["new", "new", "scaling-7", "scaling-7", "scaling-7"]
    assert schema.added_since("2") == {"lanes": 0} and schema.added_since(schema.SCHEMA_VERSION) == {}


def test_a_log_of_version_2_with_a_column_changed_is_still_refused(tmp_path):
    table = events_table(RUN4, rows(1)).drop_columns(["lanes", "seed"])
    pq.write_table(table, tmp_path / "bad.parquet")
    with pytest.raises(InvalidEventLog, match=r"bad.parquet.*\['lanes', 'seed'\]"):
        read_events(tmp_path)
