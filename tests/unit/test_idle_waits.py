"""How long a consumer's next fetch to a destination may wait (``client.idle_waits``)."""

from __future__ import annotations

from mafka4.client.idle_waits import IdleWaits


def waits_after(waits: IdleWaits, answers: list[bool], destination: str = "r0") -> list[int]:
    """The wait of each fetch, answered empty (True) or not (False) in turn."""
    asked = []
    for empty in answers:
        asked.append(waits.wait_ms(destination))
        waits.answered(destination, empty)
    return asked


def test_empty_answers_double_the_wait_up_to_the_idle_bound_and_data_brings_it_back():
    waits = IdleWaits(500, 10_000)
    assert waits_after(waits, [True] * 7 + [False, True]) == [500, 1_000, 2_000, 4_000, 8_000, 10_000, 10_000,
                                                               10_000, 500]
    assert waits.wait_ms("r0") == 1_000


def test_each_destination_backs_off_on_its_own():
    waits = IdleWaits(500, 10_000)
    waits_after(waits, [True, True], "r0")
    assert (waits.wait_ms("r0"), waits.wait_ms("r1")) == (2_000, 500)


def test_an_idle_bound_at_or_below_the_wait_means_no_backing_off_and_no_wait_stays_no_wait():
    assert waits_after(IdleWaits(500, 0), [True] * 3) == [500, 500, 500]
    assert waits_after(IdleWaits(0, 10_000), [True] * 3) == [0, 0, 0]
