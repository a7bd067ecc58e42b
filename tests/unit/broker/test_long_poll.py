"""LongPollHub: parked pulls wake on an arrival past their offset, never by a timer."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

from services.broker.arrivals.long_poll import LongPollHub

LONG_S = 60.0
"""A suspend that no test waits out: a wake-up must come from an event."""


def run(coroutine: Awaitable[object]) -> object:
    async def main() -> object:
        async with asyncio.timeout(LONG_S):
            return await coroutine

    return asyncio.run(main())


async def park(
    hub: LongPollHub, offset: int, timeout_s: float = LONG_S, queue_id: int = 0
) -> asyncio.Task[bool]:
    token = hub.token("orders", queue_id)
    task = asyncio.create_task(hub.wait("orders", queue_id, offset, token, timeout_s))
    await asyncio.sleep(0)  # let it park
    return task


def test_an_arrival_past_the_offset_wakes_the_pull() -> None:
    async def scenario() -> None:
        hub = LongPollHub(max_parked=10)
        task = await park(hub, offset=5)
        assert hub.parked_count == 1
        assert hub.notify("orders", 0, 6) == 1
        assert await task is True
        assert hub.parked_count == 0

    run(scenario())


def test_arrivals_not_past_the_offset_or_on_other_queues_do_not_wake() -> None:
    async def scenario() -> None:
        hub = LongPollHub(max_parked=10)
        task = await park(hub, offset=5)
        assert hub.notify("orders", 0, 5) == 0
        assert hub.notify("orders", 1, 100) == 0
        assert hub.notify("payments", 0, 100) == 0
        await asyncio.sleep(0)
        assert not task.done()
        assert hub.notify("orders", 0, 7) == 1
        assert await task is True

    run(scenario())


def test_an_arrival_between_the_store_answer_and_parking_is_not_lost() -> None:
    async def scenario() -> None:
        hub = LongPollHub(max_parked=10)
        token = hub.token("orders", 0)  # taken before asking the store
        hub.notify("orders", 0, 6)  # arrives while the store answers "nothing"
        assert await hub.wait("orders", 0, 5, token, LONG_S) is True
        assert hub.parked_count == 0

    run(scenario())


def test_an_unwoken_pull_times_out_with_false() -> None:
    async def scenario() -> None:
        hub = LongPollHub(max_parked=10)
        assert await hub.wait("orders", 0, 5, hub.token("orders", 0), 0.01) is False
        assert hub.parked_count == 0

    run(scenario())


def test_wake_all_wakes_every_queue_and_close_answers_with_false() -> None:
    async def scenario() -> None:
        hub = LongPollHub(max_parked=10)
        first, second = await park(hub, 5, queue_id=0), await park(hub, 9, queue_id=1)
        assert hub.wake_all() == 2
        assert (await first, await second) == (True, True)
        third = await park(hub, 5)
        hub.close()
        assert await third is False
        assert await hub.wait("orders", 0, 5, hub.token("orders", 0), LONG_S) is False

    run(scenario())


def test_a_full_hub_answers_at_once() -> None:
    async def scenario() -> None:
        hub = LongPollHub(max_parked=1)
        first = await park(hub, 5)
        assert await hub.wait("orders", 0, 5, hub.token("orders", 0), LONG_S) is False
        hub.notify("orders", 0, 6)
        assert await first is True

    run(scenario())


def test_a_cancelled_pull_leaves_nothing_parked() -> None:
    async def scenario() -> None:
        hub = LongPollHub(max_parked=10)
        task = await park(hub, 5)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert hub.parked_count == 0
        assert hub.notify("orders", 0, 6) == 0

    run(scenario())


def test_the_store_is_told_of_each_queue_a_pull_waits_on() -> None:
    """``on_wait`` names a queue when its first pull parks, when a pull waits below the
    others, and again for the pulls an arrival leaves waiting; never otherwise."""

    async def scenario() -> None:
        told: list[tuple[str, int, int]] = []
        hub = LongPollHub(
            max_parked=10,
            on_wait=lambda topic, queue_id, offset: told.append((topic, queue_id, offset)),
        )
        high = await park(hub, offset=8)
        assert told == [("orders", 0, 8)]
        same = await park(hub, offset=9)  # waits above the first: nothing new
        assert told == [("orders", 0, 8)]
        low = await park(hub, offset=5)  # waits below: the store must know
        assert told == [("orders", 0, 8), ("orders", 0, 5)]
        assert hub.notify("orders", 0, 6) == 1  # wakes 5; 8 and 9 still wait
        assert await low is True
        assert told[-1] == ("orders", 0, 8)
        assert hub.notify("orders", 0, 10) == 2  # wakes the rest: nobody to name
        assert await high is True and await same is True
        assert len(told) == 3
        other = await park(hub, offset=0, queue_id=3)
        assert told[-1] == ("orders", 3, 0)
        hub.wake_all()
        assert await other is True
        assert len(told) == 4

    run(scenario())


def test_a_pull_of_several_queues_wakes_on_an_arrival_on_any_of_them() -> None:
    async def scenario() -> None:
        hub = LongPollHub(max_parked=10)
        waits = [
            ("orders", 0, 5, hub.token("orders", 0)),
            ("payments", 2, 0, hub.token("payments", 2)),
        ]
        task = asyncio.create_task(hub.wait_any(waits, LONG_S))
        await asyncio.sleep(0)
        assert hub.parked_count == 1  # one client call, however many queues
        assert hub.notify("orders", 0, 5) == 0  # not past its offset
        assert hub.notify("payments", 2, 1) == 1
        assert await task is True
        assert hub.parked_count == 0
        assert hub.notify("orders", 0, 9) == 0  # its other queue holds nothing any more

    run(scenario())


def test_a_pull_of_several_queues_returns_at_once_after_an_arrival_on_one() -> None:
    async def scenario() -> None:
        hub = LongPollHub(max_parked=10)
        waits = [(topic, 0, 0, hub.token(topic, 0)) for topic in ("a", "b", "c")]
        hub.notify("c", 0, 1)  # between the store's answer and parking
        assert await hub.wait_any(waits, LONG_S) is True

    run(scenario())


def test_a_pull_of_several_queues_times_out_and_leaves_nothing_parked() -> None:
    async def scenario() -> None:
        told: list[tuple[str, int, int]] = []
        hub = LongPollHub(
            max_parked=10,
            on_wait=lambda topic, queue_id, offset: told.append((topic, queue_id, offset)),
        )
        waits = [(topic, 1, 4, hub.token(topic, 1)) for topic in ("a", "b")]
        assert await hub.wait_any(waits, 0.01) is False
        assert told == [("a", 1, 4), ("b", 1, 4)] and hub.parked_count == 0
        assert hub.notify("a", 1, 9) == 0 and hub.notify("b", 1, 9) == 0

    run(scenario())


def test_a_queue_the_store_still_watches_is_not_named_again() -> None:
    """The store keeps a named queue until its next arrival: a pull that parks again on a
    quiet queue (after a timeout) names nothing; one below the named offset, an arrival
    or a reconnect of the stream make the hub name it again."""

    async def scenario() -> None:
        told: list[tuple[str, int, int]] = []
        hub = LongPollHub(
            max_parked=10,
            on_wait=lambda topic, queue_id, offset: told.append((topic, queue_id, offset)),
        )
        assert await hub.wait("orders", 0, 5, hub.token("orders", 0), 0.01) is False
        assert await hub.wait("orders", 0, 5, hub.token("orders", 0), 0.01) is False
        assert await hub.wait("orders", 0, 7, hub.token("orders", 0), 0.01) is False
        assert told == [("orders", 0, 5)]
        assert await hub.wait("orders", 0, 3, hub.token("orders", 0), 0.01) is False
        assert told[-1] == ("orders", 0, 3)
        hub.notify("orders", 0, 4)
        assert await hub.wait("orders", 0, 4, hub.token("orders", 0), 0.01) is False
        assert told[-1] == ("orders", 0, 4)
        hub.wake_all()
        assert await hub.wait("orders", 0, 4, hub.token("orders", 0), 0.01) is False
        assert told == [("orders", 0, 5), ("orders", 0, 3), ("orders", 0, 4), ("orders", 0, 4)]

    run(scenario())


def test_an_idle_answer_is_given_again_only_while_the_store_watches_from_its_offset() -> None:
    async def scenario() -> None:
        hub = LongPollHub(max_parked=10)
        token = hub.token("orders", 0)
        hub.remember_idle("orders", 0, 5, token, "empty at 5")
        assert hub.idle_answers([("orders", 0, 5)])[0] is None  # not watched yet: may be stale
        assert await hub.wait("orders", 0, 5, token, 0.01) is False
        assert hub.idle_answers([("orders", 0, 5)])[0] == "empty at 5"
        assert hub.idle_answers([("orders", 0, 6)])[0] is None  # another offset: ask the store
        assert hub.idle_answers([("orders", 1, 5)])[0] is None
        hub.notify("orders", 0, 6)  # an arrival: the answer no longer holds
        assert hub.idle_answers([("orders", 0, 5)])[0] is None
        for forget in (hub.wake_all, hub.close):
            token = hub.token("orders", 0)
            hub.remember_idle("orders", 0, 6, token, "empty at 6")
            if forget is hub.wake_all:
                assert await hub.wait("orders", 0, 6, token, 0.01) is False
                assert hub.idle_answers([("orders", 0, 6)])[0] == "empty at 6"
            forget()
            assert hub.idle_answers([("orders", 0, 6)])[0] is None

    run(scenario())


def test_an_idle_answer_read_before_an_arrival_is_not_kept() -> None:
    async def scenario() -> None:
        hub = LongPollHub(max_parked=10)
        assert await hub.wait("orders", 0, 5, hub.token("orders", 0), 0.01) is False
        token = hub.token("orders", 0)  # taken, then the store is asked ...
        hub.notify("orders", 0, 6)  # ... and a message arrives meanwhile
        assert await hub.wait("orders", 0, 5, hub.token("orders", 0), 0.01) is False
        hub.remember_idle("orders", 0, 5, token, "empty at 5")
        assert hub.idle_answers([("orders", 0, 5)])[0] is None

    run(scenario())


def test_watching_holds_from_a_wait_until_the_queue_s_next_arrival_or_a_reconnect() -> None:
    async def scenario() -> None:
        hub = LongPollHub(max_parked=10)
        assert not hub.watching("orders", 0, 5)
        task = await park(hub, offset=5, timeout_s=0.01)
        assert await task is False  # timed out: the store still watches the queue
        assert hub.watching("orders", 0, 5) and hub.watching("orders", 0, 9)
        assert not hub.watching("orders", 0, 4) and not hub.watching("orders", 1, 5)
        hub.notify("orders", 0, 6)
        assert not hub.watching("orders", 0, 5)
        await (await park(hub, offset=6, timeout_s=0.01))
        assert hub.watching("orders", 0, 6)
        hub.wake_all()  # a new arrival stream: the store watches nothing
        assert not hub.watching("orders", 0, 6)

    run(scenario())
