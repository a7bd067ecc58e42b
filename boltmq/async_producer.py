"""AsyncProducer: ``await producer.send(message)`` for asyncio applications.

    async with AsyncProducer("127.0.0.1:9876", "orders-producers") as producer:
        result = await producer.send(Message("orders", b"..."))

It is a bridge over a :class:`boltmq.Producer`: each awaited send runs the
producer's synchronous ``send`` on one of ``concurrency`` worker threads, and
the awaiting task resumes when it returns; the event loop never blocks. So the
sends of many tasks share everything the producer's threads share: natural
batching (sends to one broker and topic that wait behind a call in flight
leave together, :mod:`boltmq.send_batcher`), the send stream of each broker
(:mod:`boltmq.send_stream`), routes, retries, fault avoidance and ``UNIQ_KEY``
ids. The task's context (its current OpenTelemetry span) goes with the send to
the thread, so the ``send <topic>`` span is a child of the task's span.

Back-pressure: at most ``concurrency`` sends run at once; more tasks wait in
``send`` (in order) without a thread each.

A native grpc.aio client was not built: it would need its own copy of the
routes, retries, batching and stream. The bridge has a price, measured with
``python -m bench.send_paths`` (bench/RESULTS.md): 64 tasks moved 0.54-0.92x
what 64 threads on one Producer did, at 70-100 us more client CPU a message
(the hand-off to a worker thread and back to the loop).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from boltmq.kernel.signing import Credentials
from boltmq.kernel.tls import ClientTLS
from boltmq.message import Message, SendResult
from boltmq.options import ProducerOptions
from boltmq.producer import Producer

T = TypeVar("T")
DEFAULT_CONCURRENCY = 64
"""Sends run at once by default (worker threads)."""


class AsyncProducer:
    """A producer for asyncio code (see the module docstring)."""

    def __init__(
        self,
        registry: str | Sequence[str],
        group: str = "DEFAULT_PRODUCER",
        *,
        options: ProducerOptions | None = None,
        tls: ClientTLS | None = None,
        credentials: Credentials | None = None,
        concurrency: int = DEFAULT_CONCURRENCY,
    ) -> None:
        if type(concurrency) is not int or concurrency < 1:
            raise ValueError(f"concurrency must be an int >= 1, got {concurrency!r}")
        self.producer = Producer(registry, group, options=options, tls=tls, credentials=credentials)
        """The synchronous producer the sends run on."""
        self.concurrency = concurrency
        self._threads = ThreadPoolExecutor(concurrency, thread_name_prefix="boltmq-async-send")
        self._running: asyncio.Semaphore | None = None
        """Created in the loop that first sends (a semaphore belongs to one loop)."""

    async def start(self, topics: Iterable[str] = ()) -> AsyncProducer:
        """Start the producer (``topics``: routes fetched now, as :meth:`Producer.start`)."""
        await self._run(self.producer.start, list(topics))
        return self

    async def shutdown(self) -> None:
        """Wait for the sends in progress, then stop the producer and its threads."""
        await asyncio.get_running_loop().run_in_executor(None, self._stop)

    def _stop(self) -> None:
        self._threads.shutdown(wait=True)
        self.producer.shutdown()

    async def __aenter__(self) -> AsyncProducer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    async def send(self, msg: Message, sharding_key: str | None = None) -> SendResult:
        """:meth:`Producer.send`, awaited: the result, or SendError if refused."""
        return await self._run(self.producer.send, msg, sharding_key)

    async def send_batch(
        self, msgs: Sequence[Message], sharding_key: str | None = None
    ) -> list[SendResult]:
        """:meth:`Producer.send_batch`, awaited: one request to one queue, one result each."""
        return await self._run(self.producer.send_batch, msgs, sharding_key)

    async def _run(self, function: Callable[..., T], *args: object) -> T:
        if self._running is None:
            self._running = asyncio.Semaphore(self.concurrency)
        call = functools.partial(contextvars.copy_context().run, function, *args)
        async with self._running:
            result: T = await asyncio.get_running_loop().run_in_executor(self._threads, call)
        return result
