"""SendStreamer: a send alone runs in the stream's reader only when the store answers at once.

The real streamer and StreamAccess over a SendProcessor stand-in that records the
task each send ran in: inline sends share the reader's task, the others each get
one. A deadline passed inside an inline send answers that send alone and the
stream reads on.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc

from boltmq.v1 import broker_pb2
from services.broker.access.stream_access import StreamAccess
from services.broker.send.send_stream import SendStreamer

TOPIC = "Orders"


class RecordingSend:
    """Answers each send with its topic; notes the task it ran in; a ``Slow`` topic waits."""

    def __init__(self) -> None:
        self.tasks: list[asyncio.Task[object] | None] = []

    async def send(self, request: broker_pb2.SendRequest, peer: str) -> broker_pb2.SendResponse:
        self.tasks.append(asyncio.current_task())
        await asyncio.sleep(10 if request.topic == "Slow" else 0)
        return broker_pb2.SendResponse(topic=request.topic)


def message(
    message_id: int, topic: str = TOPIC, timeout_ms: int = 5000, more: int = 0
) -> broker_pb2.SendStreamRequest:
    carried = broker_pb2.SendStreamRequest(
        id=message_id,
        send=broker_pb2.SendRequest(topic=topic).SerializeToString(),
        timeout_ms=timeout_ms,
    )
    for n in range(more):
        carried.more.append(message(message_id + 1 + n, topic, timeout_ms))
    return carried


async def requests(
    messages: list[broker_pb2.SendStreamRequest], answered: asyncio.Queue[int]
) -> AsyncIterator[broker_pb2.SendStreamRequest]:
    """Each message once the one before it was answered, as one waiting sender sends."""
    for carried in messages:
        yield carried
        for _ in range(1 + len(carried.more)):
            await answered.get()


def run(
    messages: list[broker_pb2.SendStreamRequest], inline: bool
) -> tuple[list[broker_pb2.SendStreamResponse], RecordingSend]:
    sender = RecordingSend()
    streamer = SendStreamer(sender, 8, inline=lambda: inline)  # type: ignore[arg-type]
    access = StreamAccess("/boltmq.v1.BrokerService/SendStream", None, None, None, "client")

    async def main() -> list[broker_pb2.SendStreamResponse]:
        answered: asyncio.Queue[int] = asyncio.Queue()
        answers = []
        async for answer in streamer.serve(requests(messages, answered), "peer", access):
            answers.append(answer)
            answered.put_nowait(answer.id)
        return answers

    return asyncio.run(main()), sender


def test_sends_alone_run_in_the_reader_when_the_store_answers_at_once() -> None:
    answers, sender = run([message(1), message(2), message(3)], inline=True)
    assert [(a.id, a.code, a.response.topic) for a in answers] == [(n, 0, TOPIC) for n in (1, 2, 3)]
    assert len(set(map(id, sender.tasks))) == 1  # the reader's task, each time


def test_each_send_has_a_task_of_its_own_otherwise() -> None:
    answers, sender = run([message(1), message(2), message(3)], inline=False)
    assert [(a.id, a.code) for a in answers] == [(1, 0), (2, 0), (3, 0)]
    assert len(set(map(id, sender.tasks))) == 3


def test_sends_carried_together_run_at_once_each_in_a_task() -> None:
    answers, sender = run([message(1, more=2)], inline=True)
    assert sorted(a.id for a in answers) == [1, 2, 3]
    assert len(set(map(id, sender.tasks))) == 3


def test_a_deadline_inside_an_inline_send_answers_it_alone_and_the_stream_reads_on() -> None:
    answers, sender = run([message(1, "Slow", timeout_ms=50), message(2)], inline=True)
    assert [(a.id, a.code) for a in answers] == [
        (1, grpc.StatusCode.DEADLINE_EXCEEDED.value[0]),
        (2, 0),
    ]
    assert "deadline of 50 ms" in answers[0].error
    assert len(set(map(id, sender.tasks))) == 1
