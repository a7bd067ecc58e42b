"""The BrokerService gRPC edge: requests in, processors called, errors mapped once.

Every method delegates to a processor; a :class:`BrokerError` raised anywhere
below becomes the gRPC status it names (INVALID_ARGUMENT naming the field,
NOT_FOUND, PERMISSION_DENIED, UNAVAILABLE when the store cannot be reached),
here and nowhere else: every handler is wrapped in the kernel's
:func:`~boltmq.kernel.errors.answers_errors`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc

from boltmq.kernel import telemetry
from boltmq.kernel.errors import answers_errors
from boltmq.v1 import broker_pb2, broker_pb2_grpc, store_pb2
from services.broker.access.acl_admin import AclAdmin
from services.broker.access.acl_file import Perm
from services.broker.access.acl_seal import SEALED_ACL_FILE
from services.broker.access.caller import current_caller, current_client_key
from services.broker.access.gate import peer_host
from services.broker.access.resources import group_need, topic_need
from services.broker.access.stream_access import current_stream_access
from services.broker.admin import group_settings
from services.broker.admin.admin_processor import AdminProcessor
from services.broker.admin.offset_admin import OffsetAdmin
from services.broker.clients.client_processor import ClientProcessor
from services.broker.metadata.names import check_client_id, check_group
from services.broker.metadata.pop_state import SEALED_POP_SECRET_FILE
from services.broker.metrics import BrokerMetrics
from services.broker.pop import receipt_handle
from services.broker.pop.pop_service import PopService
from services.broker.pull.pull_processor import PullProcessor
from services.broker.retry.dead_letter import DeadLetterProcessor
from services.broker.retry.send_back import SendBackProcessor
from services.broker.send.send_processor import SendProcessor
from services.broker.send.send_stream import MORE_METADATA, SECTIONS_METADATA, SendStreamer
from services.broker.transaction.check_channel import CHECKS_OPEN_METADATA
from services.broker.transaction.transaction_service import TransactionService
from services.broker.wire import queues_to_proto, topic_to_proto


def peer_address(peer: str) -> str:
    """``ipv4:1.2.3.4:5`` -> ``1.2.3.4:5``; ``ipv6:[::1]:5`` -> ``[::1]:5``; else ""."""
    kind, _, address = peer.partition(":")
    return address if kind in ("ipv4", "ipv6") else ""


class BrokerServicer(broker_pb2_grpc.BrokerServiceServicer):
    """BrokerService over the broker's processors."""

    def __init__(
        self,
        send: SendProcessor,
        pull: PullProcessor,
        clients: ClientProcessor,
        admin: AdminProcessor,
        transactions: TransactionService,
        send_back: SendBackProcessor,
        dead_letters: DeadLetterProcessor,
        acl: AclAdmin,
        metrics: BrokerMetrics,
        offset_admin: OffsetAdmin,
        pop: PopService,
        send_stream: SendStreamer | None = None,
    ) -> None:
        self._send = send
        self._pull = pull
        self._clients = clients
        self._admin = admin
        self._transactions = transactions
        self._send_back = send_back
        """ConsumerSendBack."""
        self._dead_letters = dead_letters
        """ListDeadLetters and ResendDeadLetters."""
        self._acl = acl
        """GetAcl and UpdateAcl."""
        self._metrics = metrics
        """Pull traffic counters (the send processor counts sends)."""
        self._offset_admin = offset_admin
        """SearchOffset and ResetOffset."""
        self._pop = pop
        """ReceiveMessages, AckMessage and ChangeInvisibleDuration."""
        self._send_stream = send_stream
        """SendStream (None: not served, UNIMPLEMENTED)."""

    @answers_errors
    async def SendMessage(
        self, request: broker_pb2.SendRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.SendResponse:
        """Validate a batch and append it to the store in one call (or each of a request's
        sections as a batch of its own: send/send_sections.py)."""
        return await self._send.send(request, peer_address(context.peer()))

    def close_streams(self) -> None:
        """Shutting down: end the open send streams once their sends are answered."""
        if self._send_stream is not None:
            self._send_stream.close()

    @answers_errors
    async def SendStream(
        self,
        requests: AsyncIterator[broker_pb2.SendStreamRequest],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[broker_pb2.SendStreamResponse]:
        """Sends on one open stream, each answered by its id (send/send_stream.py)."""
        if self._send_stream is None:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "SendStream is not served")
            return
        await context.send_initial_metadata(MORE_METADATA + SECTIONS_METADATA)
        together = MORE_METADATA[0] in (context.invocation_metadata() or ())
        peer = peer_address(context.peer())
        access = current_stream_access()
        async for answer in self._send_stream.serve(requests, peer, access, together):
            yield answer

    @answers_errors
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
        self._metrics.pulled(
            request.consumer_group,
            request.topic,
            request.queue_id,
            answer.record_count,
            size,
            answer.response.max_offset,
        )
        return answer.encoded

    @answers_errors
    async def PullQueues(
        self, request: broker_pb2.BrokerPullQueuesRequest, context: grpc.aio.ServicerContext
    ) -> bytes:
        """Read several queues of one group, long-polling while none has anything new.

        Answers the store's PullQueuesResponse encoding as it came, like PullMessage.
        """
        answer = await self._pull.pull_queues(request)
        # fewer answers than pulls when the store's answers ran out of max_bytes
        for pull, response in zip(request.pulls, answer.responses, strict=False):
            self._metrics.pulled(
                request.consumer_group,
                pull.topic,
                pull.queue_id,
                response.record_count,
                response.ByteSize(),
                response.max_offset,
            )
        return answer.encoded

    @answers_errors
    async def Heartbeat(
        self, request: broker_pb2.HeartbeatRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.HeartbeatResponse:
        """Record a client in its producer and consumer groups."""
        await self._clients.heartbeat(request, context.peer() or "")
        return broker_pb2.HeartbeatResponse()

    @answers_errors
    async def UnregisterClient(
        self, request: broker_pb2.UnregisterClientRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.UnregisterClientResponse:
        """Remove a client from the groups it names."""
        self._clients.unregister(request)
        return broker_pb2.UnregisterClientResponse()

    @answers_errors
    async def GetConsumerList(
        self, request: broker_pb2.GetConsumerListRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.GetConsumerListResponse:
        """Live members of a consumer group, sorted."""
        return broker_pb2.GetConsumerListResponse(client_ids=self._clients.consumer_list(request))

    @answers_errors
    async def UpdateConsumerOffset(
        self, request: broker_pb2.UpdateConsumerOffsetRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.UpdateConsumerOffsetResponse:
        """Commit a group's offset on one queue."""
        await self._clients.update_offset(request)
        return broker_pb2.UpdateConsumerOffsetResponse()

    @answers_errors
    async def UpdateConsumerOffsets(
        self, request: broker_pb2.UpdateConsumerOffsetsRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.UpdateConsumerOffsetsResponse:
        """Commit a group's offsets on several queues (all checked first)."""
        await self._clients.update_offsets(request)
        return broker_pb2.UpdateConsumerOffsetsResponse()

    @answers_errors
    async def QueryConsumerOffset(
        self, request: broker_pb2.QueryConsumerOffsetRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.QueryConsumerOffsetResponse:
        """A group's committed offset on one queue (found false: none)."""
        return _offset_answer(self._clients.query_offset(request))

    @answers_errors
    async def QueryConsumerOffsets(
        self, request: broker_pb2.QueryConsumerOffsetsRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.QueryConsumerOffsetsResponse:
        """A group's committed offsets on several queues, in the order asked."""
        return broker_pb2.QueryConsumerOffsetsResponse(
            offsets=[_offset_answer(offset) for offset in self._clients.query_offsets(request)]
        )

    @answers_errors
    async def LockQueues(
        self, request: broker_pb2.LockQueuesRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.LockQueuesResponse:
        """Lock or renew queues for an orderly consumer; ``locked`` lists those held."""
        return broker_pb2.LockQueuesResponse(locked=queues_to_proto(self._clients.lock(request)))

    @answers_errors
    async def UnlockQueues(
        self, request: broker_pb2.LockQueuesRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.LockQueuesResponse:
        """Release queues; ``locked`` lists the queues this call released."""
        released = self._clients.unlock(request)
        return broker_pb2.LockQueuesResponse(locked=queues_to_proto(released))

    @answers_errors
    async def UpsertTopic(
        self, request: broker_pb2.UpsertTopicRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.UpsertTopicResponse:
        """Create or change a topic and register it at once."""
        config = await self._admin.upsert_topic(request)
        return broker_pb2.UpsertTopicResponse(topic=topic_to_proto(config))

    @answers_errors
    async def DeleteTopic(
        self, request: broker_pb2.DeleteTopicRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.DeleteTopicResponse:
        """Remove a topic and its offsets, and register the change at once."""
        await self._admin.delete_topic(request)
        return broker_pb2.DeleteTopicResponse()

    @answers_errors
    async def ListTopics(
        self, request: broker_pb2.ListTopicsRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.ListTopicsResponse:
        """Every topic this broker serves."""
        return broker_pb2.ListTopicsResponse(
            topics=[topic_to_proto(t) for t in self._admin.list_topics()]
        )

    @answers_errors
    async def TopicStatus(
        self, request: broker_pb2.TopicStatusRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.TopicStatusResponse:
        """Min and max offsets of every queue of a topic."""
        return broker_pb2.TopicStatusResponse(queues=await self._admin.topic_status(request))

    @answers_errors
    async def ListGroups(
        self, request: broker_pb2.ListGroupsRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.ListGroupsResponse:
        """Every known consumer group with its live members."""
        return broker_pb2.ListGroupsResponse(groups=self._admin.list_groups())

    @answers_errors
    async def GroupProgress(
        self, request: broker_pb2.GroupProgressRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.GroupProgressResponse:
        """Broker offset, committed offset and lag per queue of a group."""
        return broker_pb2.GroupProgressResponse(queues=await self._admin.group_progress(request))

    @answers_errors
    async def SearchOffset(
        self, request: broker_pb2.SearchOffsetRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.SearchOffsetResponse:
        """The first offset of a queue stored at or after a time."""
        offset = await self._offset_admin.search_offset(request)
        return broker_pb2.SearchOffsetResponse(queue_offset=offset)

    @answers_errors
    async def ResetOffset(
        self, request: broker_pb2.ResetOffsetRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.ResetOffsetResponse:
        """Reset a group's offsets of a topic on this broker; live consumers follow."""
        return broker_pb2.ResetOffsetResponse(queues=await self._offset_admin.reset_offset(request))

    @answers_errors
    async def ViewMessage(
        self, request: store_pb2.GetRequest, context: grpc.aio.ServicerContext
    ) -> store_pb2.GetResponse:
        """One message by commitlog offset or message id."""
        return await self._admin.view_message(request)

    @answers_errors
    async def TrackMessage(
        self, request: broker_pb2.TrackMessageRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.TrackMessageResponse:
        """What became of one message for every consumer group of its topic."""
        return await self._admin.track_message(request)

    @answers_errors
    async def QueryMessageByKey(
        self, request: store_pb2.QueryByKeyRequest, context: grpc.aio.ServicerContext
    ) -> store_pb2.QueryByKeyResponse:
        """Messages of a topic with a key, through the store's index."""
        return await self._admin.query_by_key(request)

    @answers_errors
    async def GetBrokerInfo(
        self, request: broker_pb2.GetBrokerInfoRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.BrokerInfo:
        """Who this broker is, and its store's state."""
        return await self._admin.broker_info()

    @answers_errors
    async def GetMetadata(
        self, request: broker_pb2.GetMetadataRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.GetMetadataResponse:
        """The metadata documents (replicas of the group copy them); the ACL and the POP
        secret only sealed for the brokers' own account."""
        response = self._admin.metadata()
        caller = current_client_key()
        sealed = self._acl.sealed_copy_for(caller)
        if sealed is not None:
            response.documents[SEALED_ACL_FILE] = sealed
        pop_secret = self._acl.sealed_for(caller, self._pop.secret_document())
        if pop_secret is not None:
            response.documents[SEALED_POP_SECRET_FILE] = pop_secret
        return response

    @answers_errors
    async def GetAcl(
        self, request: broker_pb2.GetAclRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.AclDocument:
        """The ACL document, secret keys masked."""
        return self._acl.get(context.peer())

    @answers_errors
    async def UpdateAcl(
        self, request: broker_pb2.UpdateAclRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.AclDocument:
        """Upsert or delete an account, or replace every account; saved in the store."""
        return await self._acl.update(request, context.peer())

    @answers_errors
    async def UpsertGroup(
        self, request: broker_pb2.UpsertGroupRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.UpsertGroupResponse:
        """Create or change a consumer group's settings."""
        config = await self._admin.upsert_group(request)
        return broker_pb2.UpsertGroupResponse(
            group=config.group_name,
            retry_max_times=config.retry_max_times,
            consume_message_orderly=config.consume_message_orderly,
            settings=group_settings.settings_message(config),
        )

    @answers_errors
    async def DeleteGroup(
        self, request: broker_pb2.DeleteGroupRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.DeleteGroupResponse:
        """Forget a consumer group's settings (refused while it has live consumers unless
        forced)."""
        await self._admin.delete_group(request)
        return broker_pb2.DeleteGroupResponse()

    @answers_errors
    async def GetGroup(
        self, request: broker_pb2.GetGroupRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.GetGroupResponse:
        """A consumer group's settings and live members with their subscriptions."""
        return self._admin.get_group(request)

    @answers_errors
    async def GetConnections(
        self, request: broker_pb2.GetConnectionsRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.GetConnectionsResponse:
        """A group's live producer or consumer clients with how they connect."""
        return self._admin.connections(request)

    @answers_errors
    async def GetTrafficStats(
        self, request: broker_pb2.GetTrafficStatsRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.GetTrafficStatsResponse:
        """A topic's or group's messages produced and consumed over the last minute and hour."""
        return self._admin.traffic(request)

    @answers_errors
    async def Promote(
        self, request: broker_pb2.PromoteRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.BrokerInfo:
        """Make this broker's store the master of its group."""
        return await self._admin.promote(request)

    @answers_errors
    async def EndTransaction(
        self, request: broker_pb2.EndTransactionRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.EndTransactionResponse:
        """Commit or roll back a half message (once; a repeat answers the first decision)."""
        return await self._transactions.end(request)

    @answers_errors
    async def TransactionChecks(
        self, request: broker_pb2.TransactionChecksRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[broker_pb2.TransactionCheck]:
        """Stream check-backs of the producer group's undecided half messages."""
        group = check_group("producer_group", request.producer_group)
        client_id = check_client_id("client_id", request.client_id)
        channels = self._transactions.channels
        caller = current_caller()  # the gate checked the group's PUB; the topic per check
        channel = channels.open(
            group,
            client_id,
            lambda topic: (
                caller is None
                or caller.may(group_need(group, Perm.PUB), topic_need(topic, Perm.PUB))
            ),
            owner=caller.access_key if caller is not None else peer_host(context.peer()),
        )
        try:
            await context.send_initial_metadata(CHECKS_OPEN_METADATA)
            while True:
                yield await channel.queue.get()
        finally:
            channels.close(channel)

    @answers_errors
    async def ConsumerSendBack(
        self, request: broker_pb2.ConsumerSendBackRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.ConsumerSendBackResponse:
        """A consumer's failed message to %RETRY%<group> (delayed) or %DLQ%<group>."""
        return await self._send_back.send_back(request)

    @answers_errors
    async def ListDeadLetters(
        self, request: broker_pb2.ListDeadLettersRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.ListDeadLettersResponse:
        """Dead letters of a group, oldest first."""
        return await self._dead_letters.list(request)

    @answers_errors
    async def ResendDeadLetters(
        self, request: broker_pb2.ResendDeadLettersRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.ResendDeadLettersResponse:
        """Copies of dead letters back to the topics they first failed on."""
        return await self._dead_letters.resend(request)

    @answers_errors
    async def ReceiveMessages(
        self, request: broker_pb2.ReceiveMessagesRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.ReceiveMessagesResponse:
        """POP: messages for a group, each invisible until acked; long-polls."""
        popped = await self._pop.receive(
            request.group,
            request.topic,
            request.subscription,
            request.max_messages,
            request.invisible_ms,
            request.wait_ms,
            request.fifo,
        )
        for p in popped:
            self._metrics.pulled(
                request.group, request.topic, p.message.queue_id, 1, p.message.ByteSize(), 0
            )
        return broker_pb2.ReceiveMessagesResponse(
            messages=[
                broker_pb2.ReceivedMessage(
                    message=p.message,
                    receipt_handle=p.receipt_handle,
                    delivery_attempt=p.delivery_attempt,
                    invisible_until_ms=p.invisible_until_ms,
                )
                for p in popped
            ]
        )

    @answers_errors
    async def AckMessage(
        self, request: broker_pb2.AckMessageRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.AckMessageResponse:
        """POP: the delivery a receipt handle names is done."""
        await self._pop.ack(request.group, request.topic, request.receipt_handle)
        return broker_pb2.AckMessageResponse()

    @answers_errors
    async def ChangeInvisibleDuration(
        self,
        request: broker_pb2.ChangeInvisibleDurationRequest,
        context: grpc.aio.ServicerContext,
    ) -> broker_pb2.ChangeInvisibleDurationResponse:
        """POP: a delivery stays invisible longer (or shorter); answers its new handle."""
        handle = await self._pop.change_invisible(
            request.group, request.topic, request.receipt_handle, request.invisible_ms
        )
        return broker_pb2.ChangeInvisibleDurationResponse(
            receipt_handle=handle, invisible_until_ms=receipt_handle.visible_at_ms(handle)
        )

    @answers_errors
    async def ForwardToDeadLetter(
        self, request: broker_pb2.ForwardToDeadLetterRequest, context: grpc.aio.ServicerContext
    ) -> broker_pb2.ForwardToDeadLetterResponse:
        """POP: give up on a delivery; the message goes to the group's dead-letter queue."""
        await self._pop.forward_to_dead_letter(request.group, request.topic, request.receipt_handle)
        return broker_pb2.ForwardToDeadLetterResponse()


def _offset_answer(offset: int | None) -> broker_pb2.QueryConsumerOffsetResponse:
    """A committed offset as answered (None: found false, offset -1)."""
    if offset is None:
        return broker_pb2.QueryConsumerOffsetResponse(found=False, offset=-1)
    return broker_pb2.QueryConsumerOffsetResponse(found=True, offset=offset)
