"""``WakingEvent`` and ``SetFuture``: an event that wakes whoever waits beside it."""

from __future__ import annotations

import concurrent.futures
import threading

from mafka4.waking_event import SetFuture, WakingEvent


def test_every_set_calls_the_waker_from_the_setting_thread():
    calls = []
    event = WakingEvent(lambda: calls.append(threading.current_thread().name))
    setter = threading.Thread(target=event.set, name="setter")
    setter.start()
    setter.join()
    event.set()
    assert event.is_set() and calls == ["setter", threading.current_thread().name]


def test_a_future_is_done_once_the_event_is_set_and_at_once_if_it_is():
    changes = SetFuture()
    waiting = changes.future()
    assert changes.future() is waiting and not waiting.done(), "one future until the event is set"
    threading.Timer(0.05, changes.event.set).start()
    concurrent.futures.wait([waiting], timeout=30)
    assert waiting.done()
    assert changes.future().done(), "set already: the next future is done at once"
    changes.event.clear()
    assert not changes.future().done()
