"""The services' background loops outlive a CancelledError that comes from below them.

grpc.aio raises CancelledError out of a call that was cancelled locally, while
nothing cancelled the task awaiting it. The HA role watcher, follower, progress
forwarder and controller, and the broker's registrar, delay levels, arrival
watcher and metadata sync must treat that, and any unexpected error, as one
failed round and go on (a dead watcher never starts following; a dead follower
never reconnects; a dead registrar lets the registries drop a running broker; a
dead delay level never delivers), and still stop when they themselves are
cancelled.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Coroutine
from types import SimpleNamespace
from typing import Any

import pytest

from boltmq.kernel import runtime
from boltmq.v1 import store_pb2
from services.broker.arrivals import arrival_watcher
from services.broker.arrivals.arrival_watcher import ArrivalWatcher, QueueInterests
from services.broker.cluster.metadata_sync import MetadataSync
from services.broker.cluster.registration import BrokerIdentity, Registrar
from services.broker.delay import schedule_service
from services.broker.delay.schedule_service import ScheduleService
from services.ha.config import HAConfig
from services.ha.follower import Follower
from services.ha.node import HANode
from services.ha.progress import ProgressForwarder
from tests.unit.ha.test_controller import FakeEtcd, FakeStore, controller

CONFIG = HAConfig(
    store_address="127.0.0.1:1",
    master_address="127.0.0.1:2",
    role_check_interval_ms=1,
    reconnect_min_ms=1,
    reconnect_max_ms=2,
)


async def cancelled_call() -> None:
    """What awaiting a locally cancelled grpc.aio call does: a future that was cancelled."""
    future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    future.cancel()
    await future


async def wait_for_count(counts: list[int], at_least: int) -> None:
    async with asyncio.timeout(10):
        while len(counts) < at_least:
            await asyncio.sleep(0.001)


async def outlives_rounds(loop: Coroutine[Any, Any, None], rounds: list[int]) -> None:
    """Run a background loop until it has begun four rounds (the first ones fail, by the
    test's step), then cancel it: it must still have been running, and stop cancelled."""
    task = asyncio.create_task(loop)
    await wait_for_count(rounds, 4)
    assert not task.done()
    await runtime.cancel_and_wait(task)
    assert task.cancelled()


async def failing_round(rounds: list[int]) -> None:
    """A round: the first is cancelled from below, the second raises, the rest pass."""
    rounds.append(1)
    if len(rounds) == 1:
        await cancelled_call()
    if len(rounds) == 2:
        raise RuntimeError("a bug in one round")


def test_a_cancelled_call_is_from_below_and_a_cancelled_task_is_not() -> None:
    seen: list[bool] = []

    async def catch_below() -> None:
        try:
            await cancelled_call()
        except asyncio.CancelledError:
            seen.append(runtime.cancelled_from_below())

    async def catch_own(started: asyncio.Event) -> None:
        try:
            started.set()
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            seen.append(runtime.cancelled_from_below())
            raise

    async def main() -> None:
        await catch_below()
        started = asyncio.Event()
        task = asyncio.create_task(catch_own(started))
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert seen == [True, False]


def test_the_follower_retries_a_session_cancelled_from_below_and_stops_when_told() -> None:
    follower = Follower(CONFIG, store=None, locator=None, own_address="r:1")  # type: ignore[arg-type]
    sessions: list[int] = []

    async def session() -> None:
        sessions.append(1)
        if len(sessions) < 3:
            await cancelled_call()
        await asyncio.sleep(10)

    follower._session = session  # type: ignore[method-assign]

    async def main() -> None:
        follower.start()
        await wait_for_count(sessions, 3)
        assert follower.running
        await follower.stop()
        assert not follower.running

    asyncio.run(main())
    assert len(sessions) == 3


class CancellingStore:
    """A store client whose first ReportReplicas calls end cancelled from below."""

    def __init__(self) -> None:
        self.calls: list[int] = []
        self.received: list[store_pb2.ReplicaProgress] = []

    async def report_replicas(self, progress: AsyncIterator[store_pb2.ReplicaProgress]) -> None:
        self.calls.append(1)
        if len(self.calls) < 3:
            await cancelled_call()
        async for one in progress:
            self.received.append(one)


def test_the_forwarder_reopens_a_stream_cancelled_from_below_and_stops_cleanly() -> None:
    store = CancellingStore()
    forwarder = ProgressForwarder(store, lambda: {"r:1": 7})  # type: ignore[arg-type]

    async def main() -> None:
        forwarder.start()
        await wait_for_count(store.calls, 3)
        await wait_for_count(store.received, 1)  # type: ignore[arg-type]
        forwarder.acked("r:1", 9)
        await wait_for_count(store.received, 2)  # type: ignore[arg-type]
        await forwarder.stop()
        assert not forwarder.running

    asyncio.run(main())
    assert [p.acked_offset for p in store.received] == [7, 9]


def test_the_role_watcher_outlives_a_pass_cancelled_from_below_or_failing() -> None:
    passes: list[int] = []

    async def store_info() -> store_pb2.StoreInfo:
        return store_pb2.StoreInfo(role="MASTER")

    async def main() -> None:
        node = HANode(CONFIG)
        node.store.store_info = store_info  # type: ignore[method-assign,assignment]
        node._apply_role = lambda info: failing_round(passes)  # type: ignore[method-assign]
        await outlives_rounds(node._watch(), passes)
        await node.store.close()

    asyncio.run(main())


def test_the_controller_outlives_a_step_cancelled_from_below_or_failing() -> None:
    node = controller(FakeEtcd(), FakeStore("REPLICA"), "a:1")
    steps: list[int] = []
    node.step = lambda: failing_round(steps)  # type: ignore[method-assign]
    node.tick_s = 0.001
    asyncio.run(outlives_rounds(node._run(), steps))


def test_the_registrar_outlives_a_round_cancelled_from_below_or_failing() -> None:
    registrar = Registrar(
        BrokerIdentity("DefaultCluster", "broker-a", ""),
        role=None,  # type: ignore[arg-type]
        registry_addresses=(),
        topics=None,  # type: ignore[arg-type]
        interval_ms=1,
        timeout_ms=1000,
    )
    rounds: list[int] = []
    registrar.register_all = lambda: failing_round(rounds)  # type: ignore[assignment,method-assign,return-value]
    asyncio.run(outlives_rounds(registrar._run(), rounds))


def test_a_delay_level_outlives_a_step_cancelled_from_below_or_failing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(schedule_service, "RETRY_PAUSE_S", 0.001)
    service = ScheduleService(
        SimpleNamespace(count=1),  # type: ignore[arg-type]
        store=None,  # type: ignore[arg-type]
        offsets=None,  # type: ignore[arg-type]
        hub=None,  # type: ignore[arg-type]
        role=SimpleNamespace(is_master=True),  # type: ignore[arg-type]
    )
    steps: list[int] = []

    async def step(level: int) -> None:
        await failing_round(steps)
        await asyncio.sleep(0.001)  # a step that found nothing due waits

    service._step = step  # type: ignore[method-assign]
    asyncio.run(outlives_rounds(service._run(1), steps))


def test_the_arrival_watcher_outlives_a_stream_cancelled_from_below_or_failing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(arrival_watcher, "RECONNECT_MIN_S", 0.001)
    opened: list[int] = []

    async def watch_queues(interests: object, on_open: object) -> AsyncIterator[object]:
        await failing_round(opened)
        return
        yield  # an async generator that ends: the store ended the stream

    store = SimpleNamespace(address="store:1", watch_queues=watch_queues)
    hub = SimpleNamespace(wake_all=lambda: None)
    watcher = ArrivalWatcher(store, hub, QueueInterests(), reconnect_max_ms=2)  # type: ignore[arg-type]
    asyncio.run(outlives_rounds(watcher._run(), opened))


def test_a_replicas_metadata_sync_outlives_a_round_cancelled_from_below_or_failing() -> None:
    sync = MetadataSync(
        "DefaultCluster",
        "broker-a",
        role=SimpleNamespace(is_master=False),  # type: ignore[arg-type]
        registry_addresses=(),
        persister=None,  # type: ignore[arg-type]
        topics=None,  # type: ignore[arg-type]
        groups=None,  # type: ignore[arg-type]
        offsets=None,  # type: ignore[arg-type]
        acl=None,  # type: ignore[arg-type]
        interval_ms=1,
        timeout_ms=1000,
    )
    rounds: list[int] = []
    sync.sync_once = lambda: failing_round(rounds)  # type: ignore[method-assign]
    asyncio.run(outlives_rounds(sync._run(), rounds))


def test_one_round_logs_and_swallows_a_failure_and_passes_the_tasks_own_cancel(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def failing() -> None:
        with runtime.one_round("the round"):
            raise RuntimeError("a bug")

    async def cancelled_below() -> None:
        with runtime.one_round("the round"):
            await cancelled_call()

    async def main() -> bool:
        await failing()
        await cancelled_below()
        started = asyncio.Event()

        async def waiting() -> None:
            with runtime.one_round("the round"):
                started.set()
                await asyncio.sleep(10)

        task = asyncio.create_task(waiting())
        await started.wait()
        task.cancel()
        await asyncio.wait([task])
        return task.cancelled()

    assert asyncio.run(main())
    messages = [record.getMessage() for record in caplog.records]
    assert messages == ["the round failed", "the round: a call was cancelled under it"]
