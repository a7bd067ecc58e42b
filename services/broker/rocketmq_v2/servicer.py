"""The apache.rocketmq.v2.MessagingService edge: the official RocketMQ 5 clients' calls.

Every unary call is answered with gRPC OK and a Status in its response (the
protocol's way): :func:`_answers` authenticates the caller
(:mod:`services.broker.rocketmq_v2.credentials`), runs the handler, and turns a
:class:`~services.broker.rocketmq_v2.status.Refused`, a BoltMQ error or an
unexpected failure into the response's Status, so no call ends in a gRPC error or a
hang. A call the broker does not serve is answered UNSUPPORTED with the reason.

The calls and who serves them: QueryRoute and QueryAssignment (:mod:`.route`);
Heartbeat and NotifyClientTermination (:mod:`.client_registry`); SendMessage,
EndTransaction, RecallMessage (:mod:`.sender`); Telemetry (:mod:`.telemetry_session`);
ReceiveMessage, AckMessage, ChangeInvisibleDuration, ForwardMessageToDeadLetterQueue
(:mod:`.receiver`, on POP). Not served (UNSUPPORTED): PullMessage, UpdateOffset,
GetOffset, QueryOffset (the protocol's pull consumer), SyncLiteSubscription (lite
topics).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import grpc

from boltmq.kernel.caller_limits import peer_host
from boltmq.rocketmq.v2 import definition_pb2 as v2
from boltmq.rocketmq.v2 import service_pb2 as service
from boltmq.rocketmq.v2 import service_pb2_grpc
from services.broker.access.caller import Caller, set_caller
from services.broker.config import BrokerConfig
from services.broker.errors import BrokerError
from services.broker.rocketmq_v2.client_registry import ClientRegistry
from services.broker.rocketmq_v2.credentials import (
    CLIENT_ID_HEADER,
    Credentials,
    header,
    may_consume_as,
    may_publish,
    may_subscribe,
    require,
)
from services.broker.rocketmq_v2.message_mapping import topic_of
from services.broker.rocketmq_v2.receiver import Receiver, group_of
from services.broker.rocketmq_v2.route import Routes
from services.broker.rocketmq_v2.sender import Sender
from services.broker.rocketmq_v2.status import OK, Refused, code_of_grpc, status
from services.broker.rocketmq_v2.telemetry_session import GroupPolicy, TelemetrySession
from services.broker.servicer import peer_address
from services.broker.transaction.check_channel import CheckChannels

log = logging.getLogger(__name__)

SERVICE_NAME = service.DESCRIPTOR.services_by_name["MessagingService"].full_name
Response = TypeVar("Response")
CLIENT_ID_MAX = 255
_LOGGED_REFUSALS = frozenset((v2.UNAUTHORIZED, v2.FORBIDDEN))


def _status_of(exc: Exception, method: str) -> v2.Status:
    if isinstance(exc, Refused):
        if exc.code in _LOGGED_REFUSALS:  # access refusals, as BoltMQ's gate logs them
            log.warning("refused %s: %s: %s", method, v2.Code.Name(exc.code), exc.message)
        return exc.status()
    if isinstance(exc, BrokerError):
        return status(code_of_grpc(exc.code), str(exc))
    log.exception("%s failed", method)
    return status(v2.INTERNAL_SERVER_ERROR, f"{method}: {type(exc).__name__} in the broker")


def _answers(
    response: Callable[..., Response],
) -> Callable[
    [Callable[..., Awaitable[Response]]],
    Callable[..., Awaitable[Response]],
]:
    """Wrap a unary handler ``(self, request, context, caller)``: authenticated, its
    failures answered as ``response(status=...)``."""

    def wrap(handler: Callable[..., Awaitable[Response]]) -> Callable[..., Awaitable[Response]]:
        @functools.wraps(handler)
        async def answering(self: Any, request: Any, context: grpc.aio.ServicerContext) -> Any:
            try:
                caller = self.credentials.caller(context.invocation_metadata())
                if caller is not None:
                    set_caller(caller)
                return await handler(self, request, context, caller)
            except Exception as exc:
                return response(status=_status_of(exc, handler.__name__))

        return answering

    return wrap


def _unsupported(what: str) -> v2.Status:
    return status(v2.UNSUPPORTED, f"{what} is not supported by BoltMQ (docs/rocketmq-clients.md)")


def client_id_of(context: grpc.aio.ServicerContext) -> str:
    """The calling client's id (header ``x-mq-client-id``); CLIENT_ID_REQUIRED without."""
    client_id = header(context.invocation_metadata(), CLIENT_ID_HEADER)
    if not client_id or len(client_id) > CLIENT_ID_MAX or not client_id.isprintable():
        raise Refused(
            v2.CLIENT_ID_REQUIRED,
            f"header {CLIENT_ID_HEADER}: the client's id (1..{CLIENT_ID_MAX} printable "
            "characters) is required",
        )
    return client_id


class MessagingServicer(service_pb2_grpc.MessagingServiceServicer):
    """MessagingService over the broker's parts."""

    def __init__(
        self,
        config: BrokerConfig,
        credentials: Credentials,
        routes: Routes,
        sender: Sender,
        receiver: Receiver,
        clients: ClientRegistry,
        checks: CheckChannels,
        group_policy: Callable[[str], GroupPolicy],
    ) -> None:
        self._config = config
        self.credentials = credentials
        self._routes = routes
        self._sender = sender
        self._receiver = receiver
        self._clients = clients
        self._checks = checks
        self._group_policy = group_policy
        self._closing = asyncio.Event()
        """Set when the broker stops: Telemetry streams end."""

    @_answers(service.QueryRouteResponse)
    async def QueryRoute(
        self,
        request: service.QueryRouteRequest,
        context: grpc.aio.ServicerContext,
        caller: Caller | None,
    ) -> service.QueryRouteResponse:
        topic = topic_of(request.topic, "topic")
        if caller is not None and not (
            caller.may(may_publish(topic)) or caller.may(may_subscribe(topic))
        ):
            require(caller, may_publish(topic))  # refused, naming what is missing
        return service.QueryRouteResponse(
            status=OK, message_queues=await self._routes.queues(topic)
        )

    @_answers(service.HeartbeatResponse)
    async def Heartbeat(
        self,
        request: service.HeartbeatRequest,
        context: grpc.aio.ServicerContext,
        caller: Caller | None,
    ) -> service.HeartbeatResponse:
        client_id = client_id_of(context)
        if request.client_type not in v2.ClientType.values() or not request.client_type:
            raise Refused(
                v2.UNRECOGNIZED_CLIENT_TYPE, f"client_type {request.client_type} is not known"
            )
        self._clients.seen(client_id, request.client_type, request.group.name)
        return service.HeartbeatResponse(status=OK)

    @_answers(service.NotifyClientTerminationResponse)
    async def NotifyClientTermination(
        self,
        request: service.NotifyClientTerminationRequest,
        context: grpc.aio.ServicerContext,
        caller: Caller | None,
    ) -> service.NotifyClientTerminationResponse:
        self._clients.forget(client_id_of(context))
        return service.NotifyClientTerminationResponse(status=OK)

    @_answers(service.SendMessageResponse)
    async def SendMessage(
        self,
        request: service.SendMessageRequest,
        context: grpc.aio.ServicerContext,
        caller: Caller | None,
    ) -> service.SendMessageResponse:
        return await self._sender.send(request, caller, peer_address(context.peer() or ""))

    @_answers(service.EndTransactionResponse)
    async def EndTransaction(
        self,
        request: service.EndTransactionRequest,
        context: grpc.aio.ServicerContext,
        caller: Caller | None,
    ) -> service.EndTransactionResponse:
        return await self._sender.end_transaction(request, caller)

    @_answers(service.RecallMessageResponse)
    async def RecallMessage(
        self,
        request: service.RecallMessageRequest,
        context: grpc.aio.ServicerContext,
        caller: Caller | None,
    ) -> service.RecallMessageResponse:
        return self._sender.recall()

    async def Telemetry(
        self,
        request_iterator: AsyncIterator[service.TelemetryCommand],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[service.TelemetryCommand]:
        try:
            caller = self.credentials.caller(context.invocation_metadata())
            client_id = client_id_of(context)
        except Refused as exc:
            yield service.TelemetryCommand(status=exc.status())
            return
        session = TelemetrySession(
            client_id,
            caller,
            caller.access_key if caller is not None else peer_host(context.peer() or ""),
            self._config,
            self._clients,
            self._checks,
            self._group_policy,
            self._closing,
        )
        async for command in session.run(request_iterator):
            yield command

    # ------------------------------------------------------------ not served
    async def PullMessage(
        self, request: service.PullMessageRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[service.PullMessageResponse]:
        yield service.PullMessageResponse(status=_unsupported("PullMessage (pull consumer)"))

    async def UpdateOffset(
        self, request: service.UpdateOffsetRequest, context: grpc.aio.ServicerContext
    ) -> service.UpdateOffsetResponse:
        return service.UpdateOffsetResponse(status=_unsupported("UpdateOffset (pull consumer)"))

    async def GetOffset(
        self, request: service.GetOffsetRequest, context: grpc.aio.ServicerContext
    ) -> service.GetOffsetResponse:
        return service.GetOffsetResponse(status=_unsupported("GetOffset (pull consumer)"))

    async def QueryOffset(
        self, request: service.QueryOffsetRequest, context: grpc.aio.ServicerContext
    ) -> service.QueryOffsetResponse:
        return service.QueryOffsetResponse(status=_unsupported("QueryOffset (pull consumer)"))

    async def SyncLiteSubscription(
        self, request: service.SyncLiteSubscriptionRequest, context: grpc.aio.ServicerContext
    ) -> service.SyncLiteSubscriptionResponse:
        return service.SyncLiteSubscriptionResponse(status=_unsupported("lite topics"))

    @_answers(service.QueryAssignmentResponse)
    async def QueryAssignment(
        self,
        request: service.QueryAssignmentRequest,
        context: grpc.aio.ServicerContext,
        caller: Caller | None,
    ) -> service.QueryAssignmentResponse:
        group = group_of(request.group)
        topic = topic_of(request.topic, "topic")
        require(caller, may_consume_as(group), may_subscribe(topic))
        return service.QueryAssignmentResponse(
            status=OK, assignments=await self._routes.assignments(topic)
        )

    async def ReceiveMessage(
        self, request: service.ReceiveMessageRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[service.ReceiveMessageResponse]:
        try:
            caller = self.credentials.caller(context.invocation_metadata())
            if caller is not None:
                set_caller(caller)
            async for answer in self._receiver.receive(request, caller, client_id_of(context)):
                yield answer
        except Exception as exc:
            yield service.ReceiveMessageResponse(status=_status_of(exc, "ReceiveMessage"))

    @_answers(service.AckMessageResponse)
    async def AckMessage(
        self,
        request: service.AckMessageRequest,
        context: grpc.aio.ServicerContext,
        caller: Caller | None,
    ) -> service.AckMessageResponse:
        return await self._receiver.ack(request, caller)

    @_answers(service.ChangeInvisibleDurationResponse)
    async def ChangeInvisibleDuration(
        self,
        request: service.ChangeInvisibleDurationRequest,
        context: grpc.aio.ServicerContext,
        caller: Caller | None,
    ) -> service.ChangeInvisibleDurationResponse:
        return await self._receiver.change_invisible(request, caller)

    @_answers(service.ForwardMessageToDeadLetterQueueResponse)
    async def ForwardMessageToDeadLetterQueue(
        self,
        request: service.ForwardMessageToDeadLetterQueueRequest,
        context: grpc.aio.ServicerContext,
        caller: Caller | None,
    ) -> service.ForwardMessageToDeadLetterQueueResponse:
        return await self._receiver.forward_to_dead_letter(request, caller)

    def end_streams(self) -> None:
        """End every Telemetry stream now (the broker is stopping; parked receives end
        with the long-poll hub)."""
        self._closing.set()

    async def close(self) -> None:
        """Close the registry channels (the broker is stopping)."""
        await self._routes.close()
