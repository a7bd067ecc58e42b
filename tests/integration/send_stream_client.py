"""A bare SendStream client for integration tests: requests written as given, answers read.

What a client in another language (or an attacker) would do with nothing but
the proto: open ``BrokerService/SendStream`` with whatever metadata, write
SendStreamRequests exactly as built (ids, deadlines, signatures), and read the
answers in the order the broker sends them.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Sequence

import grpc

from boltmq.kernel.channels import sync_channel
from boltmq.kernel.signing import NONCE_HEADER, Credentials, stream_signature
from boltmq.send_stream import METHOD
from boltmq.v1 import broker_pb2, message_pb2

READ_TIMEOUT_S = 15.0
"""Generous bound for an answer the test expects."""


def send_request(topic: str, body: bytes, queue_id: int = 0) -> bytes:
    """A serialized SendRequest of one message (what a SendStreamRequest carries)."""
    return broker_pb2.SendRequest(
        producer_group="stream-test",
        messages=[message_pb2.Message(topic=topic, queue_id=queue_id, body=body)],
    ).SerializeToString()


def signed(
    credentials: Credentials,
    metadata: Sequence[tuple[str, str]],
    message_id: int,
    send: bytes,
    timeout_ms: int = 5_000,
    traceparent: str = "",
) -> broker_pb2.SendStreamRequest:
    """A request signed for the stream opened with ``metadata`` (its nonce)."""
    nonce = dict(metadata)[NONCE_HEADER]
    return broker_pb2.SendStreamRequest(
        id=message_id,
        send=send,
        timeout_ms=timeout_ms,
        traceparent=traceparent,
        signature=stream_signature(
            credentials.secret_key,
            credentials.algorithm,
            nonce,
            message_id,
            timeout_ms,
            traceparent,
            send,
        ),
    )


class RawStream:
    """One SendStream opened with ``metadata``; :meth:`write` and :meth:`read` by hand."""

    def __init__(self, address: str, metadata: Sequence[tuple[str, str]] = ()) -> None:
        self._channel = sync_channel(address)
        self._out: queue.SimpleQueue[broker_pb2.SendStreamRequest | None] = queue.SimpleQueue()
        self._answers: queue.SimpleQueue[broker_pb2.SendStreamResponse | grpc.RpcError | None] = (
            queue.SimpleQueue()
        )
        method = self._channel.stream_stream(
            METHOD,
            request_serializer=broker_pb2.SendStreamRequest.SerializeToString,
            response_deserializer=broker_pb2.SendStreamResponse.FromString,
        )
        self._call = method(iter(self._out.get, None), metadata=tuple(metadata))
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        try:
            for answer in self._call:
                self._answers.put(answer)
            self._answers.put(None)
        except grpc.RpcError as exc:
            self._answers.put(exc)

    def write(self, *requests: broker_pb2.SendStreamRequest) -> None:
        for request in requests:
            self._out.put(request)

    def send(self, message_id: int, send: bytes, timeout_ms: int = 5_000) -> None:
        """Write an unsigned request."""
        self.write(broker_pb2.SendStreamRequest(id=message_id, send=send, timeout_ms=timeout_ms))

    def read(self, timeout_s: float = READ_TIMEOUT_S) -> broker_pb2.SendStreamResponse:
        """The next answer; AssertionError when the stream ended instead."""
        answer = self._answers.get(timeout=timeout_s)
        assert isinstance(answer, broker_pb2.SendStreamResponse), f"stream ended: {answer!r}"
        return answer

    def initial_metadata(self) -> tuple[tuple[str, str], ...]:
        """The broker's initial metadata (waits for it)."""
        return tuple((key, value) for key, value in self._call.initial_metadata() or ())

    def read_each(self, count: int) -> tuple[int, dict[int, broker_pb2.SendStreamResponse]]:
        """The next ``count`` answers by id, those carried in ``more`` included, and how many
        stream messages brought them."""
        answers: dict[int, broker_pb2.SendStreamResponse] = {}
        messages = 0
        while len(answers) < count:
            answer = self.read()
            messages += 1
            for each in (answer, *answer.more):
                answers[each.id] = each
        return messages, answers

    def read_many(self, count: int) -> dict[int, broker_pb2.SendStreamResponse]:
        """The next ``count`` answers by id."""
        answers = [self.read() for _ in range(count)]
        return {a.id: a for a in answers}

    def ended(self, timeout_s: float = READ_TIMEOUT_S) -> grpc.RpcError:
        """The status the stream ended with (AssertionError when an answer came instead or
        it ended OK)."""
        answer = self._answers.get(timeout=timeout_s)
        assert isinstance(answer, grpc.RpcError), f"expected the stream to fail, got {answer!r}"
        return answer

    def ended_after_answers(self, timeout_s: float = READ_TIMEOUT_S) -> grpc.RpcError:
        """The status the stream ended with, past any answers before it."""
        while True:
            answer = self._answers.get(timeout=timeout_s)
            if not isinstance(answer, broker_pb2.SendStreamResponse):
                assert isinstance(answer, grpc.RpcError), "expected the stream to fail"
                return answer

    def close(self) -> None:
        self._out.put(None)
        self._call.cancel()
        self._channel.close()
