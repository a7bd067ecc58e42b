"""The broker's errors: the kernel's vocabulary, and the servicer ends a call with them."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import grpc
import pytest

from boltmq.kernel import errors as kernel
from boltmq.v1 import broker_pb2
from services.broker.errors import (
    BrokerError,
    CorruptMetadata,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    StoreFailed,
    StoreUnavailable,
)
from services.broker.servicer import BrokerServicer


@pytest.mark.parametrize(
    ("error", "kernel_class", "code"),
    [
        (InvalidArgument, kernel.InvalidArgument, grpc.StatusCode.INVALID_ARGUMENT),
        (NotFound, kernel.NotFound, grpc.StatusCode.NOT_FOUND),
        (PermissionDenied, kernel.PermissionDenied, grpc.StatusCode.PERMISSION_DENIED),
        (FailedPrecondition, kernel.FailedPrecondition, grpc.StatusCode.FAILED_PRECONDITION),
        (StoreUnavailable, kernel.Unavailable, grpc.StatusCode.UNAVAILABLE),
        (CorruptMetadata, kernel.ServiceError, grpc.StatusCode.INTERNAL),
    ],
)
def test_each_named_error_is_a_broker_error_of_the_kernel_s_kind(
    error: type[BrokerError], kernel_class: type[kernel.ServiceError], code: grpc.StatusCode
) -> None:
    raised = error("topic: 'x' does not exist")
    assert isinstance(raised, BrokerError) and isinstance(raised, kernel_class)
    assert raised.code == code and str(raised) == "topic: 'x' does not exist"


def test_a_store_failure_carries_the_store_s_code() -> None:
    raised = StoreFailed(grpc.StatusCode.RESOURCE_EXHAUSTED, "store Append failed")
    assert isinstance(raised, BrokerError)
    assert (raised.code, str(raised)) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "store Append failed")


class Aborted(Exception):
    """What ``context.abort`` raises (grpc's own is internal)."""


class Context:
    def __init__(self) -> None:
        self.status: tuple[grpc.StatusCode, str] | None = None

    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        self.status = (code, details)
        raise Aborted


class DeadLetters:
    async def list(self, request: Any) -> Any:
        raise NotFound("group: group 'g' has no dead letters (%DLQ%g does not exist)")


def test_the_servicer_ends_a_call_with_the_error_s_status_and_message() -> None:
    unused = cast(Any, None)
    servicer = BrokerServicer(
        unused,
        unused,
        unused,
        unused,
        unused,
        unused,
        cast(Any, DeadLetters()),
        unused,
        unused,
        unused,
        unused,
    )
    context = Context()
    with pytest.raises(Aborted):
        asyncio.run(servicer.ListDeadLetters(broker_pb2.ListDeadLettersRequest(group="g"), context))
    assert context.status == (
        grpc.StatusCode.NOT_FOUND,
        "group: group 'g' has no dead letters (%DLQ%g does not exist)",
    )


def test_the_check_back_stream_refuses_a_bad_group_with_its_status() -> None:
    unused = cast(Any, None)
    servicer = BrokerServicer(
        unused, unused, unused, unused, unused, unused, unused, unused, unused, unused, unused
    )
    context = Context()

    async def first() -> None:
        request = broker_pb2.TransactionChecksRequest(producer_group="", client_id="c")
        async for _ in servicer.TransactionChecks(request, context):
            pass

    with pytest.raises(Aborted):
        asyncio.run(first())
    assert context.status == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "producer_group: a group name is required",
    )
