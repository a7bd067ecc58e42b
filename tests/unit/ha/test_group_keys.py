"""GroupKeys' calls failing beside each other (the lease renewals run beside a step).

etcd here is a TCP listener that never speaks HTTP/2, so every call waits until its
deadline: the first to reach it closes the connection, which cuts off the call beside
it. The keys against a real etcd: tests/integration/test_ha_controller.py.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from services.ha.errors import ControllerUnavailable
from services.ha.group_keys import GroupKeys


@asynccontextmanager
async def silent_etcd(timeout_s: float) -> AsyncIterator[GroupKeys]:
    """GroupKeys whose one endpoint accepts TCP and never answers."""
    with socket.create_server(("127.0.0.1", 0)) as silent:
        endpoint = f"127.0.0.1:{silent.getsockname()[1]}"
        keys = GroupKeys((endpoint,), "/boltmq", "C", "g", timeout_s=timeout_s)
        try:
            yield keys
        finally:
            await keys.close()


def test_a_call_cut_off_by_a_failing_call_beside_it_fails_as_etcd_unavailable() -> None:
    async def scenario() -> list[BaseException | object]:
        async with silent_etcd(1.0) as keys:
            first = asyncio.create_task(keys.state())
            await asyncio.sleep(0.3)
            second = asyncio.create_task(keys.keep_alive(7))
            return await asyncio.gather(first, second, return_exceptions=True)

    first, second = asyncio.run(scenario())
    assert isinstance(first, ControllerUnavailable)
    assert "reading the group's keys failed: TimeoutError" in str(first)
    assert isinstance(second, ControllerUnavailable)
    assert "renewing the lease failed: the connection was closed" in str(second)


def test_a_cancelled_caller_is_cancelled_not_told_etcd_is_unavailable() -> None:
    async def scenario() -> None:
        async with silent_etcd(5.0) as keys:
            call = asyncio.create_task(keys.state())
            await asyncio.sleep(0.2)
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call

    asyncio.run(scenario())
