"""``mafka4.collector``: the cyclic collector is off inside a pause and as it was after the last one."""

from __future__ import annotations

import gc
import threading

import pytest

from mafka4 import batch_frame, batch_payload
from mafka4.client.fetched_messages import take_messages
from mafka4.collector import collection_paused


@pytest.fixture(autouse=True)
def collector_on():
    assert gc.isenabled()
    yield
    gc.enable()  # whatever a failed test left


class Collections:
    """Counts the collections that start while it is installed."""

    def __init__(self):
        self.started = 0

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self.started += 1

    def __enter__(self) -> "Collections":
        gc.callbacks.append(self)
        return self

    def __exit__(self, *exc) -> None:
        gc.callbacks.remove(self)


def test_the_collector_is_off_inside_a_pause_and_on_after_it():
    with collection_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_a_pause_that_raises_still_turns_the_collector_back_on():
    with pytest.raises(ValueError), collection_paused():
        raise ValueError("inside")
    assert gc.isenabled()


def test_a_collector_the_application_turned_off_stays_off():
    gc.disable()
    with collection_paused():
        pass
    assert not gc.isenabled()


def test_nested_pauses_end_with_the_outermost():
    with collection_paused():
        with collection_paused():
            pass
        assert not gc.isenabled()
    assert gc.isenabled()


def test_overlapping_pauses_of_two_threads_end_when_the_last_ends():
    first_inside, second_done, first_may_end = threading.Event(), threading.Event(), threading.Event()
    seen: dict[str, bool] = {}

    def first() -> None:
        with collection_paused():
            first_inside.set()
            first_may_end.wait(10)
            seen["first, after the second ended"] = gc.isenabled()

    thread = threading.Thread(target=first)
    thread.start()
    assert first_inside.wait(10)
    with collection_paused():
        pass
    second_done.set()
    seen["after the second"] = gc.isenabled()
    first_may_end.set()
    thread.join(10)
    assert seen == {"after the second": False, "first, after the second ended": False}
    assert gc.isenabled()


def _batches(count: int, records_per_batch: int) -> bytes:
    data = bytearray()
    for index in range(count):
        batch = bytearray(batch_payload.encode_batch([(None, b"v" * 100, 1_000, None)] * records_per_batch))
        batch_frame.stamp(batch, index * records_per_batch, 0)
        data += batch
    return bytes(data)


def test_a_batch_is_decoded_with_the_collector_off_and_left_on():
    data = _batches(1, 5_000)
    header = batch_frame.check_batch(data)
    collector_on_per_record = batch_payload.decode_checked_batch(data, 0, header, build=lambda *fields: gc.isenabled())
    assert collector_on_per_record == [False] * 5_000
    assert gc.isenabled()


def test_a_consumers_take_of_several_batches_runs_one_collection_at_most_after_it():
    data = _batches(4, 2_000)  # 8,000 messages kept: unpaused, a dozen young collections or more
    messages: list = []
    with Collections() as collections:
        next_offset = take_messages(data, "t", 0, 0, messages, 10_000)
    assert next_offset == 8_000 and [m.offset for m in messages] == list(range(8_000))
    assert collections.started <= 1 and gc.isenabled()
