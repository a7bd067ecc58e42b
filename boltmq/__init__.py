"""BoltMQ: a RocketMQ-style message queue. SDK and shared kernel.

    from boltmq import Producer, PushConsumer, PullConsumer, SimpleConsumer, Message
    from boltmq import ProducerOptions, PushConsumerOptions  # when the defaults do not fit

Names are imported on first use, so ``import boltmq`` (and the CLI) stay fast.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "Message": "boltmq.message",
    "MessageError": "boltmq.message",
    "MessageQueue": "boltmq.message",
    "MessageSelector": "boltmq.message_selector",
    "SendResult": "boltmq.message",
    "SendStatus": "boltmq.message",
    "ConsumeResult": "boltmq.message",
    "ReceivedMessage": "boltmq.message",
    "Producer": "boltmq.producer",
    "AsyncProducer": "boltmq.async_producer",
    "ProducerOptions": "boltmq.options",
    "SendError": "boltmq.producer",
    "PullConsumer": "boltmq.pull_consumer",
    "PullResult": "boltmq.pull_consumer",
    "PullStatus": "boltmq.pull_consumer",
    "PullError": "boltmq.pull_consumer",
    "PushConsumer": "boltmq.push_consumer",
    "SimpleConsumer": "boltmq.simple_consumer",
    "SimpleConsumerError": "boltmq.simple_consumer",
    "SimpleMessage": "boltmq.simple_consumer",
    "StaleReceiptHandle": "boltmq.simple_consumer",
    "PushConsumerOptions": "boltmq.options",
    "RequestTimeout": "boltmq.request_reply",
    "reply": "boltmq.request_reply",
    "TransactionProducer": "boltmq.transaction_producer",
    "TransactionSendResult": "boltmq.transaction_producer",
    "LocalTransactionState": "boltmq.transaction_producer",
    "BoltMQError": "boltmq.client",
    "BrokerUnavailable": "boltmq.client",
    "TopicNotFound": "boltmq.kernel.registry_client",
    "RegistryUnavailable": "boltmq.kernel.registry_client",
}
__all__ = [
    "AsyncProducer",
    "BoltMQError",
    "BrokerUnavailable",
    "ConsumeResult",
    "LocalTransactionState",
    "Message",
    "MessageError",
    "MessageQueue",
    "MessageSelector",
    "Producer",
    "ProducerOptions",
    "PullConsumer",
    "PullError",
    "PullResult",
    "PullStatus",
    "PushConsumer",
    "PushConsumerOptions",
    "ReceivedMessage",
    "RegistryUnavailable",
    "RequestTimeout",
    "SendError",
    "SendResult",
    "SendStatus",
    "SimpleConsumer",
    "SimpleConsumerError",
    "SimpleMessage",
    "StaleReceiptHandle",
    "TopicNotFound",
    "TransactionProducer",
    "TransactionSendResult",
    "reply",
]

if TYPE_CHECKING:
    from boltmq.async_producer import AsyncProducer
    from boltmq.client import BoltMQError, BrokerUnavailable
    from boltmq.kernel.registry_client import RegistryUnavailable, TopicNotFound
    from boltmq.message import (
        ConsumeResult,
        Message,
        MessageError,
        MessageQueue,
        ReceivedMessage,
        SendResult,
        SendStatus,
    )
    from boltmq.message_selector import MessageSelector
    from boltmq.options import ProducerOptions, PushConsumerOptions
    from boltmq.producer import Producer, SendError
    from boltmq.pull_consumer import PullConsumer, PullError, PullResult, PullStatus
    from boltmq.push_consumer import PushConsumer
    from boltmq.request_reply import RequestTimeout, reply
    from boltmq.simple_consumer import (
        SimpleConsumer,
        SimpleConsumerError,
        SimpleMessage,
        StaleReceiptHandle,
    )
    from boltmq.transaction_producer import (
        LocalTransactionState,
        TransactionProducer,
        TransactionSendResult,
    )


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'boltmq' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
