"""The broker's access gate fails closed for the calls it cannot check.

The gate checks a request before the handler sees it; a client-streaming call has no
single request to check, so a handler of that kind reached through the gate is
refused (UNIMPLEMENTED) rather than let through. The test builds the gate with the
ACL on and hands it each kind of handler, as gRPC's server would.
"""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest

from services.broker.access.acl_file import AclDocument
from services.broker.access.authorizer import Authorizer
from services.broker.access.gate import BrokerGate
from services.broker.access.replay_cache import ReplayCache

METHOD = "/boltmq.v1.BrokerService/SomeLaterUpload"


class Aborted(Exception):
    pass


class Context:
    """What the refusing behaviour touches of a servicer context."""

    def __init__(self) -> None:
        self.code: grpc.StatusCode | None = None
        self.details = ""

    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        self.code, self.details = code, details
        raise Aborted


class Details:
    method = METHOD


def _gate() -> BrokerGate:
    document = AclDocument.parse('{"accounts": []}')
    return BrokerGate(Authorizer(lambda: document, 30_000, ReplayCache(30_000, 16)), None)


async def _requests() -> Any:
    yield b"anything"


async def _through_gate(handler: Any) -> Any:
    async def continuation(_details: Any) -> Any:
        return handler

    return await _gate().intercept_service(continuation, Details())


@pytest.mark.parametrize("kind", ["stream_unary", "stream_stream"])
def test_a_client_streaming_handler_is_refused_not_let_through(kind: str) -> None:
    reached: list[str] = []

    async def behaviour(requests: Any, context: Any) -> Any:
        reached.append("handler")

    factory = getattr(grpc, f"{kind}_rpc_method_handler")
    gated = asyncio.run(_through_gate(factory(behaviour)))
    context = Context()

    async def call() -> None:
        outcome = getattr(gated, kind)(_requests(), context)
        if kind == "stream_stream":
            async for _ in outcome:
                pass
        else:
            await outcome

    with pytest.raises(Aborted):
        asyncio.run(call())
    assert context.code is grpc.StatusCode.UNIMPLEMENTED
    assert METHOD in context.details
    assert reached == []
