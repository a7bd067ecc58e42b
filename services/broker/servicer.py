"""The BrokerService gRPC edge: requests in, processors called, errors mapped once.

Every method delegates to a processor; a :class:`BrokerError` raised anywhere
below becomes the gRPC status it names (INVALID_ARGUMENT naming the field,
NOT_FOUND, PERMISSION_DENIED, UNAVAILABLE when the store cannot be reached),
here and nowhere else.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import grpc

from boltmq.kernel import telemetry
from boltmq.v1 import broker_pb2, broker_pb2_grpc, store_pb2
from services.broker.access.acl_admin import AclAdmin
from services.broker.access.acl_file import ACL_FILE
from services.broker.admin_processor import AdminProcessor
from services.broker.client_processor import ClientProcessor
from services.broker.dead_letter import DeadLetterProcessor
from services.broker.errors import BrokerError, FailedPrecondition
from services.broker.metrics import BrokerMetrics
from services.broker.names import check_client_id, check_group
from services.broker.pull_processor import PullProcessor
from services.broker.send_back import SendBackProcessor
from services.broker.send_processor import SendProcessor
from services.broker.transaction_service import TransactionService
from services.broker.wire import queues_to_proto, topic_to_proto

log = logging.getLogger(__name__)

R = TypeVar("R")
Handler = Callable[[Any, Any, grpc.aio.ServicerContext], Awaitable[R]]


def _rpc(method: Handler[R]) -> Handler[R]:
    """Map BrokerErrors raised by ``method`` to their gRPC status."""

    @functools.wraps(method)
    async def wrapper(self: Any, request: Any, context: grpc.aio.ServicerContext) -> R:
        try:
            return await method(self, request, context)
        except BrokerError as exc:
            if exc.code not in (
                grpc.StatusCode.INVALID_ARGUMENT,
                grpc.StatusCode.NOT_FOUND,
                grpc.StatusCode.PERMISSION_DENIED,
            ):
                log.warning("%s failed: %s", method.__name__, exc)
            await context.abort(exc.code, str(exc))
            raise AssertionError("context.abort returned") from None

    return wrapper


def peer_address(peer: str) -> str:
    """``ipv4:1.2.3.4:5`` -> ``1.2.3.4:5``; ``ipv6:[::1]:5`` -> ``[::1]:5``; else ""."""
    kind, _, address = peer.partition(":")
    return address if kind in ("ipv4", "ipv6") else ""


class BrokerServicer(broker_pb2_grpc.BrokerServiceServicer):  # type: ignore[misc]
    """BrokerService over the broker's processors."""

    def __init__(
        self,
        send: SendProcessor,
        pull: PullProcessor,
        clients: ClientProcessor,
        admin: AdminProcessor,
        transactions: TransactionService | None = None,
    ) -> None:
        self._transactions = transactions
        self._send = send
        self._pull = pull
        self._clients = clients
        self._admin = admin
        self.metrics: BrokerMetrics | None = None
        """Pull traffic counters (set by the broker; the send processor counts sends)."""

    @_rpc
    async def SendMessage(
        self, request: broker_pb2.SendRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.SendResponse:
        """Validate a batch and append it to the store in one call."""
        return await self._send.send(request, peer_address(context.peer()))

    @_rpc
    async def PullMessage(
        self, request: broker_pb2.BrokerPullRequest, context: grpc.aio.ServicerContext
    ) -> bytes:
        """Read a queue, long-polling while it has nothing new.

        Answers the store's PullResponse encoding as it came (plus a suggestion to
        read from a replica): the broker never copies the records into a message.
        """
        answer = await self._pull.pull(request)
        size = len(answer.encoded)
        telemetry.annotate(request.topic, request.queue_id, answer.record_count, size)
        if self.metrics is not None:
            self.metrics.pulled(
                request.topic,
                request.queue_id,
                answer.record_count,
                size,
                answer.response.max_offset,
            )
        return answer.encoded

    @_rpc
    async def PullQueues(
        self, request: broker_pb2.BrokerPullQueuesRequest, context: grpc.aio.ServicerContext
    ) -> bytes:
        """Read several queues of one group, long-polling while none has anything new.

        Answers the store's PullQueuesResponse encoding as it came, like PullMessage.
        """
        answer = await self._pull.pull_queues(request)
        if self.metrics is not None:
            for pull, response in zip(
                request.pulls, answer.responses, strict=False
            ):  # fewer answers than pulls
                self.metrics.pulled(
                    pull.topic,
                    pull.queue_id,
                    response.record_count,
                    response.ByteSize(),
                    response.max_offset,
                )
        return answer.encoded

    @_rpc
    async def Heartbeat(
        self, request: broker_pb2.HeartbeatRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.HeartbeatResponse:
        """Record a client in its producer and consumer groups."""
        await self._clients.heartbeat(request)
        return broker_pb2.HeartbeatResponse()

    @_rpc
    async def UnregisterClient(
        self, request: broker_pb2.UnregisterClientRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.UnregisterClientResponse:
        """Remove a client from the groups it names."""
        self._clients.unregister(request)
        return broker_pb2.UnregisterClientResponse()

    @_rpc
    async def GetConsumerList(
        self, request: broker_pb2.GetConsumerListRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.GetConsumerListResponse:
        """Live members of a consumer group, sorted."""
        return broker_pb2.GetConsumerListResponse(client_ids=self._clients.consumer_list(request))

    @_rpc
    async def UpdateConsumerOffset(
        self, request: broker_pb2.UpdateConsumerOffsetRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.UpdateConsumerOffsetResponse:
        """Commit a group's offset on one queue."""
        await self._clients.update_offset(request)
        return broker_pb2.UpdateConsumerOffsetResponse()

    @_rpc
    async def QueryConsumerOffset(
        self, request: broker_pb2.QueryConsumerOffsetRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.QueryConsumerOffsetResponse:
        """A group's committed offset on one queue (found false: none)."""
        return _offset_answer(self._clients.query_offset(request))

    @_rpc
    async def QueryConsumerOffsets(
        self, request: broker_pb2.QueryConsumerOffsetsRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.QueryConsumerOffsetsResponse:
        """A group's committed offsets on several queues, in the order asked."""
        return broker_pb2.QueryConsumerOffsetsResponse(
            offsets=[_offset_answer(offset) for offset in self._clients.query_offsets(request)]
        )

    @_rpc
    async def LockQueues(
        self, request: broker_pb2.LockQueuesRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.LockQueuesResponse:
        """Lock or renew queues for an orderly consumer; ``locked`` lists those held."""
        return broker_pb2.LockQueuesResponse(locked=queues_to_proto(self._clients.lock(request)))

    @_rpc
    async def UnlockQueues(
        self, request: broker_pb2.LockQueuesRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.LockQueuesResponse:
        """Release queues; ``locked`` lists the queues this call released."""
        released = self._clients.unlock(request)
        return broker_pb2.LockQueuesResponse(locked=queues_to_proto(released))

    @_rpc
    async def UpsertTopic(
        self, request: broker_pb2.UpsertTopicRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.UpsertTopicResponse:
        """Create or change a topic and register it at once."""
        config = await self._admin.upsert_topic(request)
        return broker_pb2.UpsertTopicResponse(topic=topic_to_proto(config))

    @_rpc
    async def DeleteTopic(
        self, request: broker_pb2.DeleteTopicRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.DeleteTopicResponse:
        """Remove a topic and its offsets, and register the change at once."""
        await self._admin.delete_topic(request)
        return broker_pb2.DeleteTopicResponse()

    @_rpc
    async def ListTopics(
        self, request: broker_pb2.ListTopicsRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.ListTopicsResponse:
        """Every topic this broker serves."""
        return broker_pb2.ListTopicsResponse(
            topics=[topic_to_proto(t) for t in self._admin.list_topics()]
        )

    @_rpc
    async def TopicStatus(
        self, request: broker_pb2.TopicStatusRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.TopicStatusResponse:
        """Min and max offsets of every queue of a topic."""
        return broker_pb2.TopicStatusResponse(queues=await self._admin.topic_status(request))

    @_rpc
    async def ListGroups(
        self, request: broker_pb2.ListGroupsRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.ListGroupsResponse:
        """Every known consumer group with its live members."""
        return broker_pb2.ListGroupsResponse(groups=self._admin.list_groups())

    @_rpc
    async def GroupProgress(
        self, request: broker_pb2.GroupProgressRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.GroupProgressResponse:
        """Broker offset, committed offset and lag per queue of a group."""
        return broker_pb2.GroupProgressResponse(queues=await self._admin.group_progress(request))

    @_rpc
    async def ViewMessage(
        self, request: store_pb2.GetRequest, context: grpc.aio.ServicerContext
    ) -> store_pb2.GetResponse:
        """One message by commitlog offset or message id."""
        return await self._admin.view_message(request)

    @_rpc
    async def QueryMessageByKey(
        self, request: store_pb2.QueryByKeyRequest, context: grpc.aio.ServicerContext
    ) -> store_pb2.QueryByKeyResponse:
        """Messages of a topic with a key, through the store's index."""
        return await self._admin.query_by_key(request)

    @_rpc
    async def GetBrokerInfo(
        self, request: broker_pb2.GetBrokerInfoRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.BrokerInfo:
        """Who this broker is, and its store's state."""
        return await self._admin.broker_info()

    @_rpc
    async def GetMetadata(
        self, request: broker_pb2.GetMetadataRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.GetMetadataResponse:
        """The metadata documents (replicas of the group copy them), the ACL included."""
        response = self._admin.metadata()
        if self.acl is not None:
            response.documents[ACL_FILE] = self.acl.table.to_json()
        return response

    acl: AclAdmin | None = None
    """GetAcl and UpdateAcl; set by the broker."""

    @_rpc
    async def GetAcl(
        self, request: broker_pb2.GetAclRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.AclDocument:
        """The ACL document, secret keys masked."""
        assert self.acl is not None, "the broker sets acl"
        return self.acl.get()

    @_rpc
    async def UpdateAcl(
        self, request: broker_pb2.UpdateAclRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.AclDocument:
        """Upsert or delete an account, or replace every account; saved in the store."""
        assert self.acl is not None, "the broker sets acl"
        return await self.acl.update(request)

    @_rpc
    async def Promote(
        self, request: broker_pb2.PromoteRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.BrokerInfo:
        """Make this broker's store the master of its group."""
        return await self._admin.promote(request)

    @_rpc
    async def EndTransaction(
        self, request: broker_pb2.EndTransactionRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.EndTransactionResponse:
        """Commit or roll back a half message (once; a repeat answers the first decision)."""
        return await self._transaction_service().end(request)

    async def TransactionChecks(
        self, request: broker_pb2.TransactionChecksRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[broker_pb2.TransactionCheck]:
        """Stream check-backs of the producer group's undecided half messages."""
        try:
            service = self._transaction_service()
            group = check_group("producer_group", request.producer_group)
            client_id = check_client_id("client_id", request.client_id)
        except BrokerError as exc:
            await context.abort(exc.code, str(exc))
            return
        channel = service.channels.open(group, client_id)
        try:
            while True:
                yield await channel.queue.get()
        finally:
            service.channels.close(channel)

    def _transaction_service(self) -> TransactionService:
        if self._transactions is None:
            raise FailedPrecondition("this broker takes no transactions")
        return self._transactions

    send_back: SendBackProcessor | None = None
    """ConsumerSendBack; set by the broker."""
    dead_letters: DeadLetterProcessor | None = None
    """ListDeadLetters and ResendDeadLetters; set by the broker."""

    @_rpc
    async def ConsumerSendBack(
        self, request: broker_pb2.ConsumerSendBackRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.ConsumerSendBackResponse:
        """A consumer's failed message to %RETRY%<group> (delayed) or %DLQ%<group>."""
        assert self.send_back is not None, "the broker sets send_back"
        return await self.send_back.send_back(request)

    @_rpc
    async def ListDeadLetters(
        self, request: broker_pb2.ListDeadLettersRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.ListDeadLettersResponse:
        """Dead letters of a group, oldest first."""
        assert self.dead_letters is not None, "the broker sets dead_letters"
        return await self.dead_letters.list(request)

    @_rpc
    async def ResendDeadLetters(
        self, request: broker_pb2.ResendDeadLettersRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.ResendDeadLettersResponse:
        """Copies of dead letters back to the topics they first failed on."""
        assert self.dead_letters is not None, "the broker sets dead_letters"
        return await self.dead_letters.resend(request)


def _offset_answer(offset: int | None) -> broker_pb2.QueryConsumerOffsetResponse:
    """A committed offset as answered (None: found false, offset -1)."""
    if offset is None:
        return broker_pb2.QueryConsumerOffsetResponse(found=False, offset=-1)
    return broker_pb2.QueryConsumerOffsetResponse(found=True, offset=offset)
