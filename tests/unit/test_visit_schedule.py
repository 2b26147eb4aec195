"""``VisitSchedule``: a periodic pass visits the changed VPs and those whose deadline came, each once, no others."""

from __future__ import annotations

import random

from mafka4.virtual.visit_schedule import VisitSchedule


def test_a_pass_visits_the_changed_keys_once_and_then_none_until_they_change_again():
    schedule: VisitSchedule[str] = VisitSchedule()
    assert schedule.take(0) == [], "nothing changed: nothing to visit"
    schedule.changed("a")
    schedule.changed("b")
    schedule.changed("a")
    assert sorted(schedule.take(0)) == ["a", "b"]
    assert schedule.take(10**12) == [], "visited keys are not visited again without a change or a deadline"
    schedule.changed("b")
    assert schedule.take(1) == ["b"]


def test_a_key_is_visited_once_its_deadline_came_and_its_deadline_is_then_forgotten():
    schedule: VisitSchedule[str] = VisitSchedule()
    schedule.at("a", 100)
    schedule.at("b", 50)
    assert schedule.take(49) == []
    assert schedule.take(50) == ["b"]
    assert schedule.deadline("b") is None and schedule.deadline("a") == 100
    assert schedule.take(1_000) == ["a"]
    assert schedule.take(10**12) == [] and len(schedule) == 0


def test_a_deadline_set_again_replaces_the_one_before_earlier_or_later():
    schedule: VisitSchedule[str] = VisitSchedule()
    schedule.at("a", 100)
    schedule.at("a", 300)
    assert schedule.take(299) == [], "the replaced deadline of 100 must not visit"
    schedule.at("a", 500)
    schedule.at("a", 200)
    assert schedule.take(200) == ["a"]
    schedule.at("a", 400)
    schedule.at("a", None)
    assert schedule.take(10**12) == [], "None: no visit by time"


def test_a_key_both_changed_and_due_is_visited_once():
    schedule: VisitSchedule[int] = VisitSchedule()
    schedule.changed(1)
    schedule.at(1, 10)
    assert schedule.take(10) == [1]
    assert schedule.take(10**12) == []


def test_a_forgotten_key_is_not_visited():
    schedule: VisitSchedule[int] = VisitSchedule()
    schedule.changed(1)
    schedule.at(2, 10)
    schedule.forget(1)
    schedule.forget(2)
    assert schedule.take(10**12) == [] and len(schedule) == 0


def test_stale_heap_entries_stay_bounded_by_the_keys_with_a_deadline():
    schedule: VisitSchedule[int] = VisitSchedule()
    for round_ in range(200):  # busy VPs whose deadline moves at every pass
        for key in range(100):
            schedule.at(key, 10_000 + round_)
    assert len(schedule._heap) <= 2 * 100 + 1
    assert sorted(schedule.take(10_000 + 198)) == [], "every deadline moved to 10,199"
    assert sorted(schedule.take(10_000 + 199)) == list(range(100))


def test_random_histories_match_a_walk_of_every_key():
    """Against the model it replaces: a walk of every key, visiting those changed or due."""
    rng = random.Random(7)
    schedule: VisitSchedule[int] = VisitSchedule()
    changed: set[int] = set()
    deadlines: dict[int, int] = {}
    now_ms = 0
    for _ in range(5_000):
        action, key = rng.random(), rng.randrange(50)
        if action < 0.3:
            schedule.changed(key)
            changed.add(key)
        elif action < 0.6:
            deadline = rng.choice([None, now_ms + rng.randrange(0, 100)])
            schedule.at(key, deadline)
            if deadline is None:
                deadlines.pop(key, None)
            else:
                deadlines[key] = deadline
        elif action < 0.65:
            schedule.forget(key)
            changed.discard(key)
            deadlines.pop(key, None)
        else:
            now_ms += rng.randrange(0, 30)
            expected = changed | {k for k, deadline in deadlines.items() if deadline <= now_ms}
            taken = schedule.take(now_ms)
            assert len(taken) == len(set(taken)), "each key once"
            assert set(taken) == expected
            changed.clear()
            for k in expected:
                deadlines.pop(k, None)
