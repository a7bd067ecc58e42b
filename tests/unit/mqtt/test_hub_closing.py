"""A CONNECT waits for the close of its client id's previous connection on the pod.

The closing connection saves its session; a clean connect that arrived meanwhile must
write its own record after that save, or the older record would win the next lookup.
"""

from __future__ import annotations

import asyncio
import types

from services.mqtt import sessions
from services.mqtt.config import MqttConfig
from services.mqtt.hub import Hub


def _hub() -> Hub:
    bridge = types.SimpleNamespace(consumer=lambda group: None, producer=None)
    return Hub(MqttConfig(sdk_threads=1), bridge)  # type: ignore[arg-type]


def _connection(client_id: str) -> types.SimpleNamespace:
    return types.SimpleNamespace(client_id=client_id)


def test_a_connect_waits_until_the_previous_connection_has_closed() -> None:
    async def run() -> None:
        hub = _hub()
        old = _connection("dev-1")
        hub.connections["dev-1"] = old  # type: ignore[assignment]
        async with hub.leaving(old) as attached:  # type: ignore[arg-type]
            assert attached
            assert "dev-1" not in hub.connections
            waiting = asyncio.create_task(hub.settle("dev-1"))
            for _ in range(5):
                await asyncio.sleep(0)
            assert not waiting.done()  # the session is not saved yet
        async with asyncio.timeout(1):
            await waiting
        assert hub.closing == {}

    asyncio.run(run())


def test_a_connection_taken_over_neither_saves_nor_holds_the_next_connect() -> None:
    async def run() -> None:
        hub = _hub()
        old, new = _connection("dev-2"), _connection("dev-2")
        hub.connections["dev-2"] = new  # type: ignore[assignment]
        async with hub.leaving(old) as attached:  # type: ignore[arg-type]
            assert not attached
            assert hub.connections["dev-2"] is new
            async with asyncio.timeout(1):
                await hub.settle("dev-2")

    asyncio.run(run())


def test_a_will_the_closing_connection_scheduled_is_cancelled_by_the_reconnect() -> None:
    async def run() -> None:
        hub = _hub()
        old = _connection("dev-3")
        hub.connections["dev-3"] = old  # type: ignore[assignment]
        will = asyncio.create_task(asyncio.sleep(60))
        async with hub.leaving(old):  # type: ignore[arg-type]
            waiting = asyncio.create_task(hub.settle("dev-3"))
            await asyncio.sleep(0)
        hub.wills["dev-3"] = will  # as the close schedules it, after its session is saved
        async with asyncio.timeout(1):
            await waiting
        await asyncio.sleep(0)
        assert will.cancelled()
        assert "dev-3" not in hub.wills

    asyncio.run(run())


def test_session_records_of_one_pod_are_stamped_in_the_order_they_are_saved() -> None:
    sent: list[sessions.SessionRecord] = []
    for n in range(200):
        record = sessions.SessionRecord(f"dev-{n % 2}", [], 60)
        sessions.save(
            lambda message: sent.append(sessions.SessionRecord.decode(message.body)), record
        )
    stamps = [record.saved_ms for record in sent]
    assert all(a < b for a, b in zip(stamps, stamps[1:], strict=False))
