"""Telemetry: one client's bidirectional stream, settings in and out, check-backs out.

A client opens Telemetry to each broker it uses and writes its ``Settings`` (its type,
the topics it publishes or the group and subscriptions it consumes); the broker
answers every Settings with its own (:func:`server_settings`): the retry policy, the
request timeout, the largest body, and for consumers the batch size and long-polling
time. The client also writes a Settings every few minutes; each refreshes its entry
in the :class:`~services.broker.rocketmq_v2.client_registry.ClientRegistry`.

A consumer's answer carries its group's policy (:class:`GroupPolicy`): the deliveries
before the dead-letter queue, FIFO when the group is orderly, and for push consumers
the waits before a failed message is delivered again (the broker's delay levels).

A producer's stream also carries transaction check-backs: for each topic its
Settings publish, the stream registers with BoltMQ's check channels
(:mod:`services.broker.transaction.check_channel`) under the topic's producer group
(:func:`~services.broker.rocketmq_v2.sender.producer_group_of`), and every check the
transaction service pushes there reaches the client as a
``RecoverOrphanedTransactionCommand`` (the half message as the protocol shows it,
its transaction id); the client answers with EndTransaction. With the ACL on only
topics the caller may publish to are registered.

Commands the broker does not serve (thread stack traces, message verification
results) are answered with a Status UNSUPPORTED on the stream; the stream stays open.
The stream ends when the client closes it, or at once when the broker stops.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from google.protobuf import duration_pb2

from boltmq.kernel import runtime
from boltmq.rocketmq.v2 import definition_pb2 as v2
from boltmq.rocketmq.v2 import service_pb2 as service
from boltmq.v1 import broker_pb2
from services.broker.access.caller import Caller
from services.broker.config import BrokerConfig
from services.broker.errors import BrokerError
from services.broker.rocketmq_v2.client_registry import ClientRegistry
from services.broker.rocketmq_v2.credentials import may_publish
from services.broker.rocketmq_v2.message_mapping import to_protocol, topic_of
from services.broker.rocketmq_v2.receiver import group_of
from services.broker.rocketmq_v2.sender import producer_group_of
from services.broker.rocketmq_v2.status import OK, Refused, status
from services.broker.transaction.check_channel import CheckChannel, CheckChannels

PRODUCER_MAX_ATTEMPTS = 3
RECEIVE_BATCH_SIZE = 32
LONG_POLLING_S = 20
OUTBOX_MAX = 256
"""Commands waiting for the client at most (checks wait in their channel's queue)."""


def _duration(ms: int) -> duration_pb2.Duration:
    return duration_pb2.Duration(seconds=ms // 1000, nanos=ms % 1000 * 1_000_000)


@dataclass(frozen=True)
class GroupPolicy:
    """What the broker tells a consumer group's clients."""

    max_attempts: int
    """Deliveries before the dead-letter queue (the group's retry_max_times + 1)."""
    orderly: bool
    """The group consumes in order (consume_message_orderly)."""
    backoff_ms: tuple[int, ...]
    """A push consumer's waits before redelivering a failed message, by attempt."""


def server_settings(
    settings: v2.Settings, config: BrokerConfig, policy: GroupPolicy | None = None
) -> v2.Settings:
    """The broker's answer to a client's Settings (``policy``: a consumer's group's)."""
    answer = v2.Settings(
        client_type=settings.client_type,
        request_timeout=_duration(config.store_timeout_ms),
        backoff_policy=v2.RetryPolicy(
            max_attempts=PRODUCER_MAX_ATTEMPTS,
            exponential_backoff=v2.ExponentialBackoff(
                initial=_duration(10), max=_duration(1000), multiplier=2.0
            ),
        ),
        user_agent=settings.user_agent,
    )
    if settings.WhichOneof("pub_sub") == "publishing":
        answer.publishing.CopyFrom(
            v2.Publishing(
                topics=settings.publishing.topics,
                max_body_size=config.max_message_size_bytes,
                validate_message_type=True,
            )
        )
    elif settings.WhichOneof("pub_sub") == "subscription":
        wanted = settings.subscription
        if policy is not None:
            answer.backoff_policy.CopyFrom(
                v2.RetryPolicy(
                    max_attempts=policy.max_attempts,
                    customized_backoff=v2.CustomizedBackoff(
                        next=[_duration(ms) for ms in policy.backoff_ms]
                    ),
                )
            )
        answer.subscription.CopyFrom(
            v2.Subscription(
                group=wanted.group,
                subscriptions=wanted.subscriptions,
                fifo=wanted.fifo or (policy is not None and policy.orderly),
                receive_batch_size=wanted.receive_batch_size or RECEIVE_BATCH_SIZE,
                long_polling_timeout=wanted.long_polling_timeout
                if wanted.HasField("long_polling_timeout")
                else duration_pb2.Duration(seconds=LONG_POLLING_S),
            )
        )
    return answer


def recover_command(check: broker_pb2.TransactionCheck) -> service.TelemetryCommand:
    """A check-back as the protocol's RecoverOrphanedTransactionCommand."""
    return service.TelemetryCommand(
        status=OK,
        recover_orphaned_transaction_command=service.RecoverOrphanedTransactionCommand(
            message=to_protocol(check.message, v2.TRANSACTION),
            transaction_id=str(check.prepared_commitlog_offset),
        ),
    )


def _accepting(topic: str, caller: Caller | None) -> Callable[[str], bool]:
    """A check channel's filter: the half messages of ``topic`` while the caller may
    publish to it (the ACL is read at each check)."""

    def accepts(half_topic: str) -> bool:
        return half_topic == topic and (caller is None or caller.may(may_publish(topic)))

    return accepts


class TelemetrySession:
    """One Telemetry stream."""

    def __init__(
        self,
        client_id: str,
        caller: Caller | None,
        owner: str,
        config: BrokerConfig,
        clients: ClientRegistry,
        checks: CheckChannels,
        group_policy: Callable[[str], GroupPolicy],
        closing: asyncio.Event,
    ) -> None:
        self._client_id = client_id
        self._closing = closing
        """Set when the broker stops: the stream ends at once (not after the grace period)."""
        self._group_policy = group_policy
        self._caller = caller
        self._owner = owner
        """Whom the check streams are counted against (access key, else host)."""
        self._config = config
        self._clients = clients
        self._checks = checks
        self._outbox: asyncio.Queue[service.TelemetryCommand] = asyncio.Queue(OUTBOX_MAX)
        self._channels: dict[str, CheckChannel] = {}
        self._forwarders: list[asyncio.Task[None]] = []

    async def run(
        self, requests: AsyncIterator[service.TelemetryCommand]
    ) -> AsyncIterator[service.TelemetryCommand]:
        """The commands to write to the client, until it closes its side."""
        reader = asyncio.create_task(self._read(requests), name="rocketmq-telemetry-read")
        closing = asyncio.ensure_future(self._closing.wait())
        try:
            while True:
                outgoing = asyncio.ensure_future(self._outbox.get())
                done, _ = await asyncio.wait(
                    (outgoing, reader, closing), return_when=asyncio.FIRST_COMPLETED
                )
                if outgoing in done:
                    yield outgoing.result()
                    continue
                outgoing.cancel()
                if closing in done:
                    return  # the broker is stopping
                while not self._outbox.empty():
                    yield self._outbox.get_nowait()
                reader.result()  # re-raises what ended the read
                return
        finally:
            await runtime.cancel_and_wait(reader, closing, *self._forwarders)
            for channel in self._channels.values():
                self._checks.close(channel)

    async def _read(self, requests: AsyncIterator[service.TelemetryCommand]) -> None:
        async for command in requests:
            await self._outbox.put(self._answer(command))

    def _answer(self, command: service.TelemetryCommand) -> service.TelemetryCommand:
        kind = command.WhichOneof("command")
        if kind != "settings":
            return service.TelemetryCommand(
                status=status(
                    v2.UNSUPPORTED,
                    f"telemetry command {kind or 'without content'} is not served by BoltMQ",
                )
            )
        settings = command.settings
        try:
            self._record(settings)
        except Refused as exc:
            return service.TelemetryCommand(status=exc.status())
        except BrokerError as exc:
            return service.TelemetryCommand(status=status(v2.TOO_MANY_REQUESTS, str(exc)))
        return service.TelemetryCommand(status=OK, settings=server_settings(settings, self._config))

    def _record(self, settings: v2.Settings) -> GroupPolicy | None:
        """Record the client; its group's policy when it is a consumer."""
        which = settings.WhichOneof("pub_sub")
        if which == "publishing":
            topics = frozenset(
                topic_of(t, f"settings.publishing.topics[{i}]")
                for i, t in enumerate(settings.publishing.topics)
            )
            self._clients.seen(self._client_id, settings.client_type, topics=topics)
            self._listen_for_checks(topics)
        elif which == "subscription":
            wanted = settings.subscription
            group = group_of(wanted.group, "settings.subscription.group")
            topics = frozenset(
                topic_of(s.topic, f"settings.subscription.subscriptions[{i}].topic")
                for i, s in enumerate(wanted.subscriptions)
            )
            self._clients.seen(self._client_id, settings.client_type, group, topics, wanted.fifo)
            return self._group_policy(group)
        else:
            self._clients.seen(self._client_id, settings.client_type)
        return None

    def _listen_for_checks(self, topics: frozenset[str]) -> None:
        """Register for the check-backs of the published topics (new ones only)."""
        caller = self._caller
        for topic in sorted(topics - self._channels.keys()):
            if caller is not None and not caller.may(may_publish(topic)):
                continue
            channel = self._checks.open(
                producer_group_of(topic),
                self._client_id,
                _accepting(topic, caller),
                owner=self._owner,
            )
            self._channels[topic] = channel
            self._forwarders.append(
                asyncio.create_task(self._forward(channel), name="rocketmq-telemetry-checks")
            )

    async def _forward(self, channel: CheckChannel) -> None:
        while True:
            check = await channel.queue.get()
            await self._outbox.put(recover_command(check))
