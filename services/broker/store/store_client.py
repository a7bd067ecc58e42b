"""The broker's connection to its store: every call with a deadline and named errors.

The store's gRPC failures become broker errors here, once: unreachable or
too slow becomes :class:`StoreUnavailable` with the address in the message,
a request the store calls malformed becomes :class:`InvalidArgument` with the
store's own text (which names the field), anything else :class:`StoreFailed`
with the store's code. Appends go over one long-lived AppendStream
(:mod:`services.broker.store.append_stream`), except a traced one, which stays a
unary Append so its trace shows the store's span, and every one to a store served by
the broker's own process (:mod:`boltmq.kernel.in_process`), where a unary call runs on
the same event loop in the caller's task. The batches of several topics and queues
that a request of sections stores together go as one Append of runs
(services/store/queue_runs.py), each batch answered with its share of the store's
answer. Every append, answered or not (one that timed out may still have been
written), is told to ``on_written`` per queue it wrote to:
the broker's long-poll hub forgets what it kept of those queues
(:meth:`services.broker.arrivals.long_poll.LongPollHub.written`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

import grpc
from google.protobuf.message import DecodeError
from grpc_health.v1 import health_pb2, health_pb2_grpc
from opentelemetry import trace

from boltmq.kernel.store_channel import StoreChannel
from boltmq.kernel.tls import ClientTLS
from boltmq.v1 import message_pb2, store_pb2
from boltmq.wire.pull_answer import PullAnswer, QueuesAnswer
from boltmq.wire.record_batch import RecordBatch
from services.broker.errors import (
    BrokerError,
    InvalidArgument,
    NotFound,
    StoreFailed,
    StoreUnavailable,
)
from services.broker.store.append_stream import AppendStream

STORE_SERVICE_NAME = store_pb2.DESCRIPTOR.services_by_name["StoreService"].full_name
PULL_METHOD = f"/{STORE_SERVICE_NAME}/Pull"
PULL_QUEUES_METHOD = f"/{STORE_SERVICE_NAME}/PullQueues"
_UNREACHABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


class StoreClient(StoreChannel):
    """Typed, deadline-bound calls to the StoreService at ``address``."""

    def __init__(
        self,
        address: str,
        timeout_ms: int,
        tls: ClientTLS | None = None,
        on_written: Callable[[str, int], None] | None = None,
    ) -> None:
        super().__init__(address, timeout_ms, tls)
        self._on_written = on_written or _nobody
        """``(topic, queue_id)``: an append to the queue was answered or failed."""
        self._pull_encoded = self._channel.unary_unary(
            PULL_METHOD, request_serializer=store_pb2.PullRequest.SerializeToString
        )
        """Pull with the answer left as bytes (no response deserializer): see pull_answer."""
        self._pull_queues_encoded = self._channel.unary_unary(
            PULL_QUEUES_METHOD, request_serializer=store_pb2.PullQueuesRequest.SerializeToString
        )
        """PullQueues with the answer left as bytes: see pull_queues_answer."""
        self._appends = AppendStream(
            self._stub.AppendStream, self._timeout_s, self.translate_status
        )

    async def close(self) -> None:
        """Close the append stream, then the channel (pending calls fail)."""
        await self._appends.close()
        await super().close()

    def translate(self, method: str, exc: grpc.aio.AioRpcError) -> BrokerError:
        """The broker error for a failed store call."""
        return self.translate_status(method, exc.code(), exc.details() or "")

    def translate_status(self, method: str, code: grpc.StatusCode, details: str) -> BrokerError:
        """The broker error for a store call that failed with ``code``."""
        if code in _UNREACHABLE:
            return StoreUnavailable(
                f"store at {self.address} is unavailable ({method}: {code.name.lower()}: {details})"
            )
        if code == grpc.StatusCode.INVALID_ARGUMENT:
            return InvalidArgument(details)
        if code == grpc.StatusCode.NOT_FOUND:
            return NotFound(details)
        return StoreFailed(code, f"store {method} failed: {code.name}: {details}")

    async def append(
        self, messages: Iterable[message_pb2.Message], born_host: str
    ) -> store_pb2.AppendResponse:
        """Append one batch under the store's lock; one result per message."""
        return await self._append(store_pb2.AppendRequest(messages=messages, born_host=born_host))

    @property
    def appends_written(self) -> tuple[int, int]:
        """(stream messages, appends) the append stream has written (coalescing)."""
        return self._appends.written

    async def append_records(self, batch: RecordBatch, born_host: str) -> store_pb2.AppendResponse:
        """Append client-encoded records (one ``bytes``) under the store's lock."""
        return await self._append(_records_request(batch, born_host))

    async def append_runs(
        self, batches: list[RecordBatch], born_host: str
    ) -> store_pb2.AppendResponse:
        """Several batches (any topics and queues) as one Append of runs
        (services/store/queue_runs.py: one request, one engine call): the answer, an entry
        per record in batch order; StoreFailed when it has another number of entries."""
        written = [(batch.topic, batch.queue_id) for batch in batches]
        response = await self._append(runs_request(batches, born_host), written)
        total = sum(batch.count for batch in batches)
        if not len(response.statuses) == len(response.commitlog_offsets) == total:
            raise StoreFailed(
                grpc.StatusCode.INTERNAL,
                f"store answered {len(response.statuses)} results for {total} records",
            )
        return response

    async def _append(
        self,
        request: store_pb2.AppendRequest,
        written: Iterable[tuple[str, int]] | None = None,
    ) -> store_pb2.AppendResponse:
        """On the append stream; a traced append as a unary call, so its trace shows the store;
        every append to a store in this process as a unary call: a call on the same event
        loop, where the stream costs three tasks' turns (writer, store, reader).
        ``written``: the queues it writes, when the caller knows them (else read from the
        request)."""
        try:
            if self.in_process or trace.get_current_span().is_recording():
                response: store_pb2.AppendResponse = await self._call("Append", request)
                return response
            return await self._appends.append(request)
        finally:
            on_written = self._on_written
            if written is not None:
                for topic, queue_id in written:
                    on_written(topic, queue_id)
            elif request.messages:
                for topic, queue_id in {(m.topic, m.queue_id) for m in request.messages}:
                    on_written(topic, queue_id)
            else:
                on_written(request.topic, request.queue_id)

    async def pull(self, request: store_pb2.PullRequest) -> store_pb2.PullResponse:
        """Read a consume queue from an offset."""
        response: store_pb2.PullResponse = await self._call("Pull", request)
        return response

    async def pull_answer(self, request: store_pb2.PullRequest) -> PullAnswer:
        """:meth:`pull`, keeping the store's bytes to forward to a consumer as they are."""
        encoded: bytes = await self._call_on(self._pull_encoded, "Pull", request)
        try:
            return PullAnswer.parse(encoded)
        except DecodeError as exc:
            raise StoreFailed(
                grpc.StatusCode.INTERNAL,
                f"store Pull answered bytes that are no PullResponse: {exc}",
            ) from None

    async def pull_queues_answer(self, request: store_pb2.PullQueuesRequest) -> QueuesAnswer:
        """Several queues in one call, keeping the store's bytes like :meth:`pull_answer`."""
        encoded: bytes = await self._call_on(self._pull_queues_encoded, "PullQueues", request)
        try:
            return QueuesAnswer.parse(encoded)
        except DecodeError as exc:
            raise StoreFailed(
                grpc.StatusCode.INTERNAL,
                f"store PullQueues answered bytes that are no PullQueuesResponse: {exc}",
            ) from None

    async def get(self, request: store_pb2.GetRequest) -> store_pb2.GetResponse:
        """One message by commitlog offset or message id."""
        response: store_pb2.GetResponse = await self._call("Get", request)
        return response

    async def query_by_key(
        self, request: store_pb2.QueryByKeyRequest
    ) -> store_pb2.QueryByKeyResponse:
        """Messages of a topic whose key matches, through the index."""
        response: store_pb2.QueryByKeyResponse = await self._call("QueryByKey", request)
        return response

    async def offset_by_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """The first offset of the queue stored at or after ``timestamp_ms`` (its max offset
        when none is; 0 for a queue the store does not hold)."""
        response = await self._call(
            "OffsetByTime",
            store_pb2.OffsetByTimeRequest(
                topic=topic, queue_id=queue_id, timestamp_ms=timestamp_ms
            ),
        )
        return int(response.queue_offset)

    async def list_queues(self, topic: str) -> list[store_pb2.QueueInfo]:
        """Every queue the store holds for ``topic`` ("" for all), with its offsets."""
        response = await self._call("ListQueues", store_pb2.ListQueuesRequest(topic=topic))
        return list(response.queues)

    async def store_info(self) -> store_pb2.StoreInfo:
        """Offsets, role and disk usage of the store."""
        response: store_pb2.StoreInfo = await self._call(
            "GetStoreInfo", store_pb2.GetStoreInfoRequest()
        )
        return response

    async def set_role(self, request: store_pb2.SetRoleRequest) -> store_pb2.StoreInfo:
        """Promote or demote the store (durable); its state afterwards."""
        response: store_pb2.StoreInfo = await self._call("SetRole", request)
        return response

    async def get_config(self, name: str) -> bytes | None:
        """A metadata file's content, or None when the store has none."""
        response = await self._call(
            "GetConfig", store_pb2.GetConfigRequest(name=name), wait_for_ready=True
        )
        return bytes(response.content) if response.found else None

    async def put_config(self, name: str, content: bytes) -> None:
        """Write a metadata file atomically.

        Waits (within the call's deadline) for a store that is reconnecting:
        metadata, consumer offsets above all, must not be dropped because the
        store restarted a moment ago; sends and pulls fail fast instead.
        """
        await self._call(
            "PutConfig", store_pb2.PutConfigRequest(name=name, content=content), wait_for_ready=True
        )

    async def wait_until_serving(self, timeout_s: float) -> None:
        """Wait (without polling) until the store's health says SERVING, at most ``timeout_s``.

        The store binds its port before it recovers and refuses calls until
        it has, so "reachable" is not enough at start-up.
        """
        stub = health_pb2_grpc.HealthStub(self._channel)
        call = stub.Watch(
            health_pb2.HealthCheckRequest(service=STORE_SERVICE_NAME),
            timeout=timeout_s,
            wait_for_ready=True,
        )
        try:
            async for status in call:
                if status.status == health_pb2.HealthCheckResponse.SERVING:
                    return
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.UNIMPLEMENTED:
                raise self.translate("Health.Watch", exc) from None
        finally:
            call.cancel()

    async def watch_queues(
        self, interests: asyncio.Queue[store_pb2.QueueInterest], on_open: Callable[[], None]
    ) -> AsyncIterator[store_pb2.Arrival]:
        """Arrivals on the queues put in ``interests``; ``on_open`` runs once the store watches.

        The store sends its initial metadata only after it registered the
        listener, so an interest sent after ``on_open`` is never missed; the
        caller uses ``on_open`` to re-check pulls parked before that moment.
        A task of this stream's own writes the interests (it ends with the
        stream; grpc's request-iterator task would outlive a cancelled call).
        """
        call = self._stub.WatchQueues()
        writer: asyncio.Task[None] | None = None
        try:
            await call.initial_metadata()
            writer = asyncio.create_task(
                _send_interests(call, interests), name="watch-queues-writer"
            )
            on_open()
            async for arrival in call:
                yield arrival
        except grpc.aio.AioRpcError as exc:
            raise self.translate("WatchQueues", exc) from None
        finally:
            call.cancel()
            if writer is not None:
                writer.cancel()


async def _send_interests(call: Any, interests: asyncio.Queue[store_pb2.QueueInterest]) -> None:
    """Write the interests to the WatchQueues call until it ends (its reader reports why):
    all those waiting in ``interests`` in one message (the first, the rest as ``more``)."""
    try:
        while True:
            message = await interests.get()
            message.more.extend(interests.get_nowait() for _ in range(interests.qsize()))
            await call.write(message)
    except Exception:  # grpc's error type differs by where the call died
        return  # the stream's reader reports why it ended


def _nobody(topic: str, queue_id: int) -> None:
    """The default ``on_written``: nobody to tell."""


def _records_request(batch: RecordBatch, born_host: str) -> store_pb2.AppendRequest:
    """The Append of client-encoded records (one ``bytes``), born at ``born_host``."""
    return store_pb2.AppendRequest(
        records=batch.records,
        record_count=batch.count,
        topic=batch.topic,
        queue_id=batch.queue_id,
        born_host=born_host,
    )


def runs_request(batches: list[RecordBatch], born_host: str) -> store_pb2.AppendRequest:
    """One Append of runs carrying every batch's records, born at ``born_host``."""
    request = store_pb2.AppendRequest(
        records=b"".join(batch.records for batch in batches),
        record_count=sum(batch.count for batch in batches),
        born_host=born_host,
    )
    add = request.runs.add  # built in place: a QueueRun made apart is copied in
    for batch in batches:
        add(topic=batch.topic, queue_id=batch.queue_id, record_count=batch.count)
    return request
