"""``ChangeSignal``: the long polls of both replica actors, on a real event loop (no Ray).

A parked fetch wakes on the next ``notify`` and only on one that comes after it parked; a
fetch waiting for a condition looks again after each notify and gives up at its bound.
"""

from __future__ import annotations

import asyncio

from mafka4.long_poll import ChangeSignal

# Long enough that no test passes by the bound running out where it should pass by a notify.
LONG_S = 30.0
SHORT_S = 0.05


def run(coroutine):
    return asyncio.run(asyncio.wait_for(coroutine, LONG_S / 2))


def test_a_notify_wakes_every_parked_fetch():
    async def scenario():
        signal = ChangeSignal()
        parked = [asyncio.ensure_future(signal.next_change(LONG_S)) for _ in range(3)]
        await asyncio.sleep(0)
        signal.notify()
        return await asyncio.gather(*parked)

    assert run(scenario()) == [True, True, True]


def test_a_fetch_parked_after_a_notify_waits_for_the_next_one():
    async def scenario():
        signal = ChangeSignal()
        signal.notify()
        return await signal.next_change(SHORT_S)

    assert run(scenario()) is False


def test_without_a_notify_the_wait_ends_at_its_bound_and_at_once_without_one():
    async def scenario():
        signal = ChangeSignal()
        loop = asyncio.get_running_loop()
        started = loop.time()
        timed_out = await signal.next_change(SHORT_S)
        waited_s = loop.time() - started
        return timed_out, waited_s, await signal.next_change(0), await signal.next_change(-1)

    timed_out, waited_s, no_wait, past = run(scenario())
    assert timed_out is False and SHORT_S * 0.9 <= waited_s < LONG_S / 2
    assert no_wait is False and past is False


def test_wait_until_answers_at_once_when_the_condition_holds():
    assert run(ChangeSignal().wait_until(lambda: True, 0)) is True


def test_wait_until_looks_again_after_each_notify():
    async def scenario():
        signal, high_watermark, looks = ChangeSignal(), [0], []

        def passed() -> bool:
            looks.append(high_watermark[0])
            return high_watermark[0] > 5

        async def looked(times: int) -> None:
            while len(looks) < times:
                await asyncio.sleep(0)

        waiting = asyncio.ensure_future(signal.wait_until(passed, LONG_S))
        await looked(1)  # parked: a look that finds nothing is followed by a wait for the next notify
        for value in (3, 9):  # the first change does not concern the fetch, the second does
            high_watermark[0] = value
            signal.notify()
            await looked(len(looks) + 1)
        return await waiting, looks

    held, looks = run(scenario())
    assert held is True
    assert looks == [0, 3, 9]


def test_wait_until_gives_up_at_its_bound():
    async def scenario():
        signal = ChangeSignal()
        waiting = asyncio.ensure_future(signal.wait_until(lambda: False, SHORT_S))
        await asyncio.sleep(0)
        signal.notify()  # a change that does not help: the wait goes on, within the same bound
        return await waiting

    assert run(scenario()) is False


def test_a_fetch_that_left_unwoken_no_longer_counts_and_a_later_one_is_still_woken():
    """A notify with no fetch parked does nothing (the read node notifies once per VP append); the
    count of parked fetches never drops below the fetches really parked."""
    async def scenario():
        signal = ChangeSignal()
        for _ in range(3):
            signal.notify()  # no one parked: nothing to wake
        assert await signal.next_change(SHORT_S) is False  # timed out: it leaves the count
        cancelled = asyncio.ensure_future(signal.next_change(LONG_S))
        await asyncio.sleep(0)
        cancelled.cancel()
        await asyncio.gather(cancelled, return_exceptions=True)
        parked = [asyncio.ensure_future(signal.next_change(LONG_S)) for _ in range(2)]
        await asyncio.sleep(0)
        signal.notify()
        signal.notify()  # the same round's next append: the two are woken already
        woken = await asyncio.gather(*parked)
        late = asyncio.ensure_future(signal.next_change(LONG_S))
        await asyncio.sleep(0)
        signal.notify()
        return woken, await late

    assert run(scenario()) == ([True, True], True)
