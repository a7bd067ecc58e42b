"""In-process calls (boltmq.kernel.in_process): what a caller sees is what a remote call gives.

Handlers are real grpc method handlers (the generated health servicer among
them); the same handlers are also served on a real gRPC server on loopback,
and both paths must answer alike. Checked here: the last registration of a
method wins; objects cross as they are and bytes are parsed or written for
the side that wants them; an abort, an unexpected exception, a deadline, an
unknown method and a closed channel arrive as ``AioRpcError`` with grpc's
code; a loop of calls answered at once still lets other tasks run; streams
in both directions, their initial metadata, their end and their
cancellation, and a stream under way finishing after its channel closes;
and ``channels.channel`` picks the in-process channel only for an address
this process serves.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from boltmq.kernel import channels, in_process
from boltmq.kernel.health_watches import EndingHealthServicer

SERVICE = "test.Echo"
Request = health_pb2.HealthCheckRequest
Answer = health_pb2.HealthCheckResponse


def _run(scenario: Callable[[], Awaitable[Any]]) -> Any:
    return asyncio.run(scenario())


def _table(**handlers: grpc.RpcMethodHandler) -> in_process.HandlerTable:
    table = in_process.HandlerTable()
    table.add_registered_method_handlers(SERVICE, handlers)
    return table


def _unary(
    behavior: Callable[..., Awaitable[Any]], answers_bytes: bool = False
) -> grpc.RpcMethodHandler:
    return grpc.unary_unary_rpc_method_handler(
        behavior,
        request_deserializer=Request.FromString,
        response_serializer=None if answers_bytes else Answer.SerializeToString,
    )


def _call(
    table: in_process.HandlerTable,
    method: str,
    *,
    wants_bytes: bool = False,
    hands_bytes: bool = False,
) -> Any:
    channel = in_process.InProcessChannel("test:1", table)
    return channel.unary_unary(
        f"/{SERVICE}/{method}",
        request_serializer=None if hands_bytes else Request.SerializeToString,
        response_deserializer=None if wants_bytes else Answer.FromString,
    )


def test_the_last_handler_registered_answers_with_the_objects_as_they_are() -> None:
    seen: list[Any] = []

    async def first(request: Any, context: Any) -> Any:
        return Answer(status=Answer.NOT_SERVING)

    async def second(request: Any, context: Any) -> Any:
        seen.append(request)
        return Answer(status=Answer.SERVING)

    table = _table(Check=_unary(first))
    table.add_registered_method_handlers(SERVICE, {"Check": _unary(second)})
    request = Request(service="a")

    async def scenario() -> Any:
        return await _call(table, "Check")(request)

    answer = _run(scenario)
    assert answer.status == Answer.SERVING
    assert seen == [request] and seen[0] is request  # not serialized and parsed again


def test_bytes_are_parsed_or_written_for_the_side_that_wants_them() -> None:
    async def writes_bytes(request: Any, context: Any) -> bytes:
        return Answer(status=Answer.SERVING).SerializeToString()

    async def builds_a_message(request: Any, context: Any) -> Any:
        assert isinstance(request, Request) and request.service == "b"
        return Answer(status=Answer.NOT_SERVING)

    table = _table(Bytes=_unary(writes_bytes, answers_bytes=True), Built=_unary(builds_a_message))

    async def scenario() -> tuple[Any, Any, Any]:
        parsed = await _call(table, "Bytes")(Request())
        raw = await _call(table, "Bytes", wants_bytes=True)(Request())
        written = await _call(table, "Built", wants_bytes=True, hands_bytes=True)(
            Request(service="b").SerializeToString()
        )
        return parsed, raw, written

    parsed, raw, written = _run(scenario)
    assert parsed == Answer(status=Answer.SERVING)
    assert raw == Answer(status=Answer.SERVING).SerializeToString()
    assert written == Answer(status=Answer.NOT_SERVING).SerializeToString()


def test_failures_reach_the_caller_with_grpcs_codes() -> None:
    async def aborts(request: Any, context: Any) -> Any:
        await context.abort(grpc.StatusCode.NOT_FOUND, "no such queue")

    async def breaks(request: Any, context: Any) -> Any:
        raise ValueError("a bug")

    async def sets_a_code(request: Any, context: Any) -> Any:
        context.set_code(grpc.StatusCode.INVALID_ARGUMENT)
        context.set_details("bad field")
        return Answer()

    async def sleeps(request: Any, context: Any) -> Any:
        await asyncio.sleep(10)
        return Answer()

    table = _table(
        Abort=_unary(aborts), Break=_unary(breaks), Code=_unary(sets_a_code), Slow=_unary(sleeps)
    )

    async def failure(method: str, **kwargs: Any) -> grpc.aio.AioRpcError:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await _call(table, method)(Request(), **kwargs)
        return caught.value

    async def scenario() -> list[tuple[grpc.StatusCode, str]]:
        errors = [
            await failure("Abort"),
            await failure("Break"),
            await failure("Code"),
            await failure("Slow", timeout=0.05),
            await failure("Missing"),
        ]
        channel = in_process.InProcessChannel("test:1", table)
        await channel.close()
        with pytest.raises(grpc.aio.AioRpcError) as closed:
            await channel.unary_unary(f"/{SERVICE}/Abort")(Request())
        errors.append(closed.value)
        return [(e.code(), e.details() or "") for e in errors]

    outcomes = _run(scenario)
    assert outcomes[0] == (grpc.StatusCode.NOT_FOUND, "no such queue")
    assert outcomes[1][0] == grpc.StatusCode.UNKNOWN and "ValueError: a bug" in outcomes[1][1]
    assert outcomes[2] == (grpc.StatusCode.INVALID_ARGUMENT, "bad field")
    assert outcomes[3][0] == grpc.StatusCode.DEADLINE_EXCEEDED
    assert outcomes[4][0] == grpc.StatusCode.UNIMPLEMENTED and "Missing" in outcomes[4][1]
    assert outcomes[5][0] == grpc.StatusCode.UNAVAILABLE and "closed" in outcomes[5][1]


def test_a_loop_of_calls_answered_at_once_lets_other_tasks_run() -> None:
    async def at_once(request: Any, context: Any) -> Any:
        return Answer()

    table = _table(Check=_unary(at_once))

    async def scenario() -> int:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        ticking = asyncio.create_task(ticker())
        await asyncio.sleep(0)
        start = ticks
        call = _call(table, "Check")
        for _ in range(50):
            await call(Request())
        ticking.cancel()
        return ticks - start

    assert _run(scenario) >= 50  # the ticker ran between the calls


def test_a_health_watch_streams_its_statuses_and_ends_when_cancelled() -> None:
    async def scenario() -> tuple[list[int], bool, bool]:
        servicer = EndingHealthServicer()
        table = in_process.HandlerTable()
        health_pb2_grpc.add_HealthServicer_to_server(servicer, table)
        await servicer.set("store", Answer.NOT_SERVING)
        stub = health_pb2_grpc.HealthStub(in_process.InProcessChannel("test:1", table))
        call = stub.Watch(Request(service="store"), timeout=30)
        statuses = [(await call.read()).status]
        await servicer.set("store", Answer.SERVING)
        statuses.append((await call.read()).status)
        cancelled = call.cancel()
        with pytest.raises(grpc.aio.AioRpcError) as ended:
            await call.read()
        return statuses, cancelled, ended.value.code() == grpc.StatusCode.CANCELLED

    statuses, cancelled, ended_cancelled = _run(scenario)
    assert statuses == [Answer.NOT_SERVING, Answer.SERVING]
    assert cancelled and ended_cancelled


def _streaming_table() -> in_process.HandlerTable:
    async def echo(requests: AsyncIterator[Any], context: Any) -> None:
        await context.send_initial_metadata(())
        async for request in requests:
            await context.write(Answer(status=len(request.service)))

    async def counted(requests: AsyncIterator[Any], context: Any) -> AsyncIterator[Any]:
        n = 0
        async for _ in requests:
            n += 1
            yield Answer(status=n)
            if n == 2:
                raise RuntimeError("the second one broke it")

    async def summed(requests: AsyncIterator[Any], context: Any) -> Any:
        return Answer(status=sum([len(r.service) async for r in requests]))

    def streams(behavior: Any) -> grpc.RpcMethodHandler:
        return grpc.stream_stream_rpc_method_handler(
            behavior, Request.FromString, Answer.SerializeToString
        )

    return _table(
        Echo=streams(echo),
        Count=streams(counted),
        Sum=grpc.stream_unary_rpc_method_handler(
            summed, Request.FromString, Answer.SerializeToString
        ),
    )


def test_bidi_streams_answer_each_write_and_end_with_the_handler() -> None:
    table = _streaming_table()
    channel = in_process.InProcessChannel("test:1", table)

    def stream(method: str) -> Any:
        return channel.stream_stream(
            f"/{SERVICE}/{method}", Request.SerializeToString, Answer.FromString
        )

    async def scenario() -> tuple[list[int], Any, list[int], grpc.StatusCode, int]:
        call = stream("Echo")()
        await call.initial_metadata()  # the handler sent it before reading
        for service in ("a", "bb", "ccc"):
            await call.write(Request(service=service))
        await call.done_writing()
        echoed = [(await call.read()).status for _ in range(3)]
        end = await call.read()
        broken = stream("Count")(iter([Request(), Request(), Request()]))
        statuses = []
        with pytest.raises(grpc.aio.AioRpcError) as failed:
            async for answer in broken:
                statuses.append(answer.status)
        total = await channel.stream_unary(
            f"/{SERVICE}/Sum", Request.SerializeToString, Answer.FromString
        )(iter([Request(service="ab"), Request(service="cde")]))
        return echoed, end, statuses, failed.value.code(), total.status

    echoed, end, statuses, code, total = _run(scenario)
    assert echoed == [1, 2, 3] and end is grpc.aio.EOF
    assert statuses == [1, 2] and code == grpc.StatusCode.UNKNOWN
    assert total == 5


def test_a_stream_under_way_when_its_channel_closes_finishes() -> None:
    channel = in_process.InProcessChannel("test:1", _streaming_table())

    async def scenario() -> tuple[list[int], Any, grpc.StatusCode]:
        call = channel.stream_stream(
            f"/{SERVICE}/Echo", Request.SerializeToString, Answer.FromString
        )()
        await call.write(Request(service="a"))
        await channel.close()
        await call.write(Request(service="bb"))
        await call.done_writing()
        echoed = [(await call.read()).status for _ in range(2)]
        end = await call.read()
        with pytest.raises(grpc.aio.AioRpcError) as later:
            await channel.unary_unary(f"/{SERVICE}/Echo")(b"")
        return echoed, end, later.value.code()

    echoed, end, code = _run(scenario)
    assert echoed == [1, 2] and end is grpc.aio.EOF
    assert code == grpc.StatusCode.UNAVAILABLE


def test_the_recorded_handlers_answer_alike_over_grpc_and_in_process() -> None:
    async def check(request: Any, context: Any) -> Any:
        return Answer(status=Answer.SERVING if request.service == "up" else Answer.NOT_SERVING)

    async def scenario() -> tuple[Any, Any]:
        server = grpc.aio.server()
        table = in_process.HandlerTable()
        recorded = in_process.recording(server, table)
        recorded.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(SERVICE, {"Check": _unary(check)}),)
        )
        port = server.add_insecure_port("127.0.0.1:0")  # forwarded to the real server
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as remote:
                over_grpc = await remote.unary_unary(
                    f"/{SERVICE}/Check", Request.SerializeToString, Answer.FromString
                )(Request(service="up"))
            local = await _call(table, "Check")(Request(service="up"))
            return over_grpc, local
        finally:
            await server.stop(0)

    over_grpc, local = _run(scenario)
    assert over_grpc == local == Answer(status=Answer.SERVING)


def test_a_channel_is_in_process_only_for_an_address_served_here() -> None:
    async def scenario() -> tuple[bool, bool, bool]:
        address = "127.0.0.1:1"  # nothing listens: only the in-process table can answer
        in_process.serve_here(address, _table())
        try:
            served = isinstance(channels.channel(address), in_process.InProcessChannel)
            other = channels.channel("127.0.0.1:2")
            elsewhere = isinstance(other, in_process.InProcessChannel)
            await other.close()
        finally:
            in_process.withdraw(address)
        withdrawn = channels.channel(address)
        after = isinstance(withdrawn, in_process.InProcessChannel)
        await withdrawn.close()
        return served, elsewhere, after

    assert _run(scenario) == (True, False, False)
