"""``runtime.cancel_and_wait``: the tasks it cancels end, and the caller's own
cancellation is never swallowed on the way.

The case it exists for: a task stopping its helpers (a follower's session in its
``finally``) is itself cancelled while it waits for them. ``await task`` under
``suppress(CancelledError)`` swallowed that cancellation, and the task ran on for
good (an HA service never noticed its store's promotion).
"""

from __future__ import annotations

import asyncio

import pytest

from boltmq.kernel import runtime


async def _forever() -> None:
    await asyncio.Event().wait()


async def _slow_to_stop(stopping: asyncio.Event) -> None:
    try:
        await asyncio.Event().wait()
    finally:  # a helper that takes a while to end (a stream being closed)
        stopping.set()
        await asyncio.sleep(0.05)


def test_every_task_is_cancelled_and_waited_for() -> None:
    async def scenario() -> list[bool]:
        tasks = [asyncio.create_task(_forever()) for _ in range(3)]
        await asyncio.sleep(0)
        await runtime.cancel_and_wait(tasks[0], None, *tasks[1:])
        return [t.cancelled() for t in tasks]

    assert asyncio.run(scenario()) == [True, True, True]


def test_a_task_that_failed_does_not_raise_into_the_caller() -> None:
    async def fails() -> None:
        raise ValueError("broken")

    async def scenario() -> BaseException | None:
        task = asyncio.create_task(fails())
        await asyncio.sleep(0)
        try:
            raise KeyError("what the caller handles")
        finally:  # the caller's error, not the task's, leaves the finally
            await runtime.cancel_and_wait(task)

    with pytest.raises(KeyError, match="what the caller handles"):
        asyncio.run(scenario())


def test_the_callers_own_cancellation_while_it_waits_is_not_swallowed() -> None:
    async def scenario() -> tuple[bool, int]:
        stopping = asyncio.Event()
        rounds = 0

        async def owner() -> None:  # loops until cancelled, stopping a helper each round
            nonlocal rounds
            while rounds < 20:  # (ends in the end even if its cancellation were lost)
                rounds += 1
                helper = asyncio.create_task(_slow_to_stop(stopping))
                await asyncio.sleep(0)
                await runtime.cancel_and_wait(helper)

        task = asyncio.create_task(owner())
        await stopping.wait()  # the owner waits for its helper to end
        task.cancel()
        await asyncio.wait((task,), timeout=5.0)
        return task.cancelled(), rounds

    cancelled, rounds = asyncio.run(scenario())
    assert cancelled and rounds == 1
