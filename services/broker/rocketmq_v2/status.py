"""Status: BoltMQ's outcomes as the RocketMQ 5 protocol's business codes.

The protocol answers every unary call with gRPC OK and a ``Status`` (a ``Code`` and a
message) in the response; the official clients turn the code into their exceptions
(BAD_REQUEST and the ILLEGAL_* codes: bad request; UNAUTHORIZED; FORBIDDEN; NOT_FOUND
and TOPIC_NOT_FOUND; TOO_MANY_REQUESTS, which ends a producer's retries; ...). So a
:class:`~services.broker.errors.BrokerError` raised anywhere below a handler becomes a
Status here, never a gRPC error, and a refused message names its field.

=============================  ====================================================
BoltMQ                         Code
=============================  ====================================================
INVALID_ARGUMENT               BAD_REQUEST (or the field's own ILLEGAL_* code)
NOT_FOUND                      NOT_FOUND (TOPIC_NOT_FOUND for a topic)
PERMISSION_DENIED              FORBIDDEN
UNAUTHENTICATED                UNAUTHORIZED
RESOURCE_EXHAUSTED             TOO_MANY_REQUESTS
FAILED_PRECONDITION            PRECONDITION_FAILED
DEADLINE_EXCEEDED              PROXY_TIMEOUT
anything else (store down...)  INTERNAL_SERVER_ERROR
stored, not flushed in time    MASTER_PERSISTENCE_TIMEOUT
stored, no replica acked       SLAVE_PERSISTENCE_TIMEOUT / HA_NOT_AVAILABLE
not stored: message illegal    BAD_REQUEST (MESSAGE_PROPERTIES_TOO_LARGE for those)
=============================  ====================================================
"""

from __future__ import annotations

from typing import TypeAlias

import grpc

from boltmq.rocketmq.v2 import definition_pb2 as v2
from boltmq.v1 import broker_pb2, message_pb2

Code: TypeAlias = v2.Code.ValueType
"""A value of the protocol's ``Code`` enum."""

OK = v2.Status(code=v2.OK, message="OK")

_CODE_OF_GRPC: dict[grpc.StatusCode, Code] = {
    grpc.StatusCode.INVALID_ARGUMENT: v2.BAD_REQUEST,
    grpc.StatusCode.NOT_FOUND: v2.NOT_FOUND,
    grpc.StatusCode.PERMISSION_DENIED: v2.FORBIDDEN,
    grpc.StatusCode.UNAUTHENTICATED: v2.UNAUTHORIZED,
    grpc.StatusCode.RESOURCE_EXHAUSTED: v2.TOO_MANY_REQUESTS,
    grpc.StatusCode.FAILED_PRECONDITION: v2.PRECONDITION_FAILED,
    grpc.StatusCode.DEADLINE_EXCEEDED: v2.PROXY_TIMEOUT,
    grpc.StatusCode.UNIMPLEMENTED: v2.NOT_IMPLEMENTED,
}

_CODE_OF_SEND: dict[int, Code] = {
    broker_pb2.SEND_OK: v2.OK,
    broker_pb2.SEND_FLUSH_DISK_TIMEOUT: v2.MASTER_PERSISTENCE_TIMEOUT,
    broker_pb2.SEND_FLUSH_SLAVE_TIMEOUT: v2.SLAVE_PERSISTENCE_TIMEOUT,
    broker_pb2.SEND_SLAVE_NOT_AVAILABLE: v2.HA_NOT_AVAILABLE,
}

_CODE_OF_PUT: dict[int, Code] = {
    message_pb2.MESSAGE_ILLEGAL: v2.BAD_REQUEST,
    message_pb2.PROPERTIES_SIZE_EXCEEDED: v2.MESSAGE_PROPERTIES_TOO_LARGE,
    message_pb2.OS_PAGE_CACHE_BUSY: v2.TOO_MANY_REQUESTS,
}


class Refused(Exception):
    """A request the protocol answers with ``code`` (not OK) and ``message``."""

    def __init__(self, code: Code, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def status(self) -> v2.Status:
        return v2.Status(code=self.code, message=self.message)


def status(code: Code, message: str) -> v2.Status:
    """A Status of ``code`` saying ``message``."""
    return v2.Status(code=code, message=message)


def code_of_grpc(code: grpc.StatusCode) -> Code:
    """The protocol's code for a BoltMQ error's gRPC code."""
    return _CODE_OF_GRPC.get(code, v2.INTERNAL_SERVER_ERROR)


def code_of_send(send_status: int, put_status: int) -> Code:
    """The code of one message of a BoltMQ SendResponse."""
    if send_status in _CODE_OF_SEND:
        return _CODE_OF_SEND[send_status]
    return _CODE_OF_PUT.get(put_status, v2.INTERNAL_SERVER_ERROR)
