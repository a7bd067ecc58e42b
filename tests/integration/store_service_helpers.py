"""What the StoreService tests share: a small store process, a stub per process, put outcomes.

Every ``test_store_service_*`` test starts its own ``boltmq serve store``
process on port 0 (:func:`start_store`, through the ``spawn`` fixture) with
64 KiB CommitLog segments, so a few hundred KiB of messages cross segments and
leave blank markers behind. The ``connect`` fixture defined here is imported
by each of those modules (as ``connect_fixture``; pytest knows it as
``connect``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from boltmq.kernel.channels import sync_channel
from boltmq.v1 import message_pb2, store_pb2, store_pb2_grpc
from tests.conftest import DISK_RATIOS_OFF_SETTINGS
from tests.integration.procs import ServiceProcess

SEGMENT_BYTES = 65536
SMALL = (
    f"mapped_file_size_commitlog={SEGMENT_BYTES}",
    "mapped_file_size_consume_queue=20000",
    "max_hash_slot_num=1000",
    "max_index_num=4000",
    "max_message_size_bytes=8192",
    *DISK_RATIOS_OFF_SETTINGS,
)
OK = message_pb2.PUT_OK
ILLEGAL = message_pb2.MESSAGE_ILLEGAL

Spawn = Callable[..., ServiceProcess]


def start_store(spawn: Spawn, root: Path, *settings: str) -> ServiceProcess:
    """A started store process on ``root`` with the small geometry and ``settings``."""
    return spawn("store", f"root_dir={root}", *SMALL, *settings)


@pytest.fixture(name="connect")
def connect_fixture() -> Iterator[Callable[[ServiceProcess], store_pb2_grpc.StoreServiceStub]]:
    """``connect(proc)``: a stub on a blocking channel, closed at the end of the test."""
    with ExitStack() as channels:
        yield lambda proc: store_pb2_grpc.StoreServiceStub(
            channels.enter_context(sync_channel(proc.address))
        )


def msg(topic: str, queue_id: int = 0, body: bytes = b"", **fields: object) -> message_pb2.Message:
    """A Message proto; ``fields`` are any of its other fields."""
    return message_pb2.Message(topic=topic, queue_id=queue_id, body=body, **fields)  # type: ignore[arg-type]


@dataclass(frozen=True)
class PutOutcome:
    """One message's entry of an AppendResponse's packed arrays."""

    status: int
    error: str
    queue_id: int
    queue_offset: int
    commitlog_offset: int
    msg_id: str
    store_timestamp_ms: int


def outcomes(
    response: store_pb2.AppendResponse, messages: Sequence[message_pb2.Message]
) -> list[PutOutcome]:
    """One outcome per message sent, unpacked from the response's parallel arrays."""
    assert (
        len(response.statuses)
        == len(response.commitlog_offsets)
        == len(response.queue_offsets)
        == len(messages)
    )
    return [
        PutOutcome(
            status,
            response.errors.get(i, ""),
            messages[i].queue_id,
            queue_offset,
            offset,
            f"{response.msg_id_prefix}{offset:016X}" if offset >= 0 else "",
            response.store_timestamp_ms,
        )
        for i, (status, queue_offset, offset) in enumerate(
            zip(response.statuses, response.queue_offsets, response.commitlog_offsets, strict=True)
        )
    ]


def append(
    stub: store_pb2_grpc.StoreServiceStub, *messages: message_pb2.Message
) -> list[PutOutcome]:
    """Append ``messages`` in one request; one outcome each."""
    return outcomes(stub.Append(store_pb2.AppendRequest(messages=messages)), messages)


def bodies(messages: object) -> list[bytes]:
    """The body of each message (protos or decoded records)."""
    return [m.body for m in messages]  # type: ignore[attr-defined]


def invalid(call: Callable[[object], object], request: object) -> str:
    """The details of the INVALID_ARGUMENT that ``call(request)`` must fail with."""
    with pytest.raises(grpc.RpcError) as info:
        result = call(request)
        if isinstance(result, Iterator):  # a server stream fails on the first read
            list(result)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, info.value.details()
    return str(info.value.details())
