"""``freeze_what_start_up_left``: what it keeps out of collections, and what it does not."""

from __future__ import annotations

import gc
import weakref

import pytest

from mafka4.collector import freeze_what_start_up_left


class Thing:
    """A tracked object that a weak reference can watch."""


@pytest.fixture
def frozen():
    yield
    gc.unfreeze()  # the setting holds for the whole process: give the other tests theirs back


def tracked(thing) -> bool:
    return any(candidate is thing for candidate in gc.get_objects())


def test_objects_alive_at_the_call_leave_the_collections_and_later_ones_stay_in_them(frozen):
    early = Thing()
    count = freeze_what_start_up_left()
    late = Thing()
    assert count == gc.get_freeze_count() > 0
    assert not tracked(early), "frozen: no collection walks it"
    assert tracked(late)


def test_a_frozen_object_is_still_freed_when_its_last_reference_goes(frozen):
    early = Thing()
    watch = weakref.ref(early)
    freeze_what_start_up_left()
    del early
    assert watch() is None, "reference counting frees it without a collection"


def test_a_cycle_made_afterwards_is_collected_as_before(frozen):
    freeze_what_start_up_left()
    first, second = Thing(), Thing()
    first.other, second.other = second, first
    watch = weakref.ref(first)
    del first, second
    gc.collect()
    assert watch() is None
