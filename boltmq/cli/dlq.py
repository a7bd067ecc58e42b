"""``boltmq admin group dlq GROUP [--resend]``: a group's dead letters.

Lists ``%DLQ%<group>`` on every master broker (a dead-letter topic is never
pulled by consumers, so the broker reads it for the operator) and, with
``--resend``, appends a copy of each listed message to the topic it first
failed on, where the group consumes it again with ``reconsume_times`` 0
(docs/retry-and-delay.md).
"""

from __future__ import annotations

import click
import grpc

from boltmq.cli.admin import RPC_TIMEOUT_S, Admin, _rpc_text, _with_admin, group
from boltmq.cli.messages import fail
from boltmq.cli.security import signed_channel
from boltmq.v1 import broker_pb2, broker_pb2_grpc, message_pb2
from boltmq.wire.body_compression import CorruptBody, inflate_body

PAGE_MESSAGES = 256
"""Dead letters fetched per ListDeadLetters call."""
RESEND_BATCH_MESSAGES = 1024
"""Dead letters per ResendDeadLetters call (the broker's limit)."""


def _dead_letters(
    stub: broker_pb2_grpc.BrokerServiceStub, name: str, limit: int
) -> list[message_pb2.MessageExt]:
    """Up to ``limit`` dead letters of group ``name`` on one broker ([] when it has none)."""
    letters: list[message_pb2.MessageExt] = []
    offset = 0
    while len(letters) < limit:
        try:
            page = stub.ListDeadLetters(
                broker_pb2.ListDeadLettersRequest(
                    group=name,
                    queue_offset=offset,
                    max_messages=min(PAGE_MESSAGES, limit - len(letters)),
                ),
                timeout=RPC_TIMEOUT_S,
            )
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.NOT_FOUND:
                return letters  # no DLQ topic on this broker
            raise
        letters.extend(page.messages)
        if page.next_offset <= offset or page.next_offset >= page.max_offset:
            return letters
        offset = page.next_offset
    return letters


@group.command("dlq")
@click.argument("name")
@click.option("--resend", is_flag=True, help="Resend every listed dead letter to its topic.")
@click.option(
    "--max",
    "limit",
    default=10_000,
    show_default=True,
    type=click.IntRange(1, 1_000_000),
    help="Dead letters per broker at most.",
)
@_with_admin
def group_dlq(admin_: Admin, name: str, resend: bool, limit: int) -> None:
    """Dead letters of group NAME; --resend sends them back to their original topics."""
    total = 0
    for broker in admin_.masters():
        channel = signed_channel(broker.address, admin_.target(broker))
        try:
            stub = broker_pb2_grpc.BrokerServiceStub(channel)
            letters = _dead_letters(stub, name, limit)
            for m in letters:
                click.echo(
                    f"{broker.broker_name}: {m.msg_id} commitlog {m.commitlog_offset} "
                    f"topic {m.properties.get('RETRY_TOPIC', '-')} "
                    f"reconsumed {m.reconsume_times} stored {m.store_timestamp_ms} "
                    f"{_body_text(m)}"
                )
            total += len(letters)
            if resend and letters:
                _resend(stub, broker.broker_name, name, letters)
        except grpc.RpcError as exc:
            raise fail(f"dead letters of {name!r} on {broker.address}: {_rpc_text(exc)}") from None
        finally:
            channel.close()
    click.echo(f"{total} dead letter(s) of group {name}" + (", resent" if resend and total else ""))


def _resend(
    stub: broker_pb2_grpc.BrokerServiceStub,
    broker_name: str,
    name: str,
    letters: list[message_pb2.MessageExt],
) -> None:
    for start in range(0, len(letters), RESEND_BATCH_MESSAGES):
        batch = letters[start : start + RESEND_BATCH_MESSAGES]
        response = stub.ResendDeadLetters(
            broker_pb2.ResendDeadLettersRequest(
                group=name, commitlog_offsets=[m.commitlog_offset for m in batch]
            ),
            timeout=RPC_TIMEOUT_S,
        )
        for letter, result in zip(batch, response.results, strict=True):
            status = broker_pb2.SendStatus.Name(result.statuses[0]) if result.statuses else "?"
            click.echo(
                f"{broker_name}: resent {letter.msg_id} to {result.topic}/"
                f"{result.queue_id}: {status}"
            )


def _body_text(letter: message_pb2.MessageExt) -> str:
    """``body=b'...'`` (80 bytes at most; a compressed body inflated), or why it is unreadable."""
    try:
        body = inflate_body(letter.body, letter.sys_flag)
    except CorruptBody as exc:
        return f"body unreadable: {exc}"
    return f"body={bytes(body[:80])!r}"
