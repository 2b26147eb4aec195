"""Joining stage-trace rows to messages: by offset range on the leader, by VP offset on the read node."""

from __future__ import annotations

from simulations.scaling.stage_stamps import physical_stamps, vp_stamps


def test_a_message_takes_the_stamps_of_the_leader_batch_that_covers_its_offset():
    rows = {0: [(0, 2, 10.0, 10.5, 12.0), (2, 3, 20.0, 20.2, 21.0)], 1: [(0, 1, 30.0, 30.1, 31.0)]}
    stamps = physical_stamps(rows, partitions=[0, 0, 0, 1, 1, 0], offsets=[0, 1, 2, 0, 1, None])
    assert stamps["leader_received_time_ms"] == [10.0, 10.0, 20.0, 30.0, None, None]
    assert stamps["leader_appended_time_ms"] == [10.5, 10.5, 20.2, 30.1, None, None]
    assert stamps["committed_time_ms"] == [12.0, 12.0, 21.0, 31.0, None, None]


def test_a_vp_message_takes_its_append_and_the_first_high_watermark_move_past_it():
    rows = [("append", 3, 0, 2, 5.0), ("hw", 3, 1, 6.0), ("append", 3, 2, 3, 7.0), ("hw", 3, 3, 8.0),
            ("append", 4, 0, 1, 9.0)]  # VP 4's HW never moved while traced
    stamps = vp_stamps(rows, vps=[3, 3, 3, 4, None], vp_offsets=[0, 1, 2, 0, None])
    assert stamps["vp_appended_time_ms"] == [5.0, 5.0, 7.0, 9.0, None]
    assert stamps["vp_committed_time_ms"] == [6.0, 8.0, 8.0, None, None]
