"""``boltmq admin message track ID``: what became of one message for every group of its topic.

The id is an offset id (every master is asked; the one storing it answers) or a
producer's unique id (found through the masters' index first, every copy tracked).
For each copy: the message, then one line per consumer group that committed
offsets on its topic or consumes it live (``TrackMessage``,
services/broker/admin/message_track.py)::

    broker-a: 7F0000010000... Orders/1@17 commitlog 5120 ... body=b'...'
      cg-billing   CONSUMED          offset 18 on Orders/1
      cg-audit     RETRYING          sent back 2 times, retry 2 waits for its delay
      cg-search    NOT_CONSUMED_YET  offset 9 on Orders/1, the message is at 17
      cg-legacy    DEAD_LETTERED     in %DLQ%cg-legacy
"""

from __future__ import annotations

from typing import Any

import click
import grpc

from boltmq.cli.admin import (
    RPC_TIMEOUT_S,
    Admin,
    _by_unique_id,
    _rpc_text,
    _show,
    _with_admin,
    message,
)
from boltmq.cli.messages import fail
from boltmq.v1 import broker_pb2
from boltmq.wire.record import parse_msg_id


@message.command("track")
@click.argument("msg_id")
@click.option(
    "--topic",
    "topic_name",
    default=None,
    help="For a unique id: search this topic's index only (default: every topic).",
)
@_with_admin
def message_track(admin_: Admin, msg_id: str, topic_name: str | None) -> None:
    """Whether each consumer group of the message's topic consumed MSG_ID, waits for it,
    retries it or dead-lettered it (RocketMQ's message track)."""
    if not msg_id or any(c.isspace() for c in msg_id):
        raise fail(f"message id {msg_id!r} must be non-empty without spaces")
    masters = {b.broker_name: b for b in admin_.masters()}

    def ask(wanted: list[tuple[str, str]], by_offset_id: bool) -> list[tuple[str, Any]]:
        answers = []
        for name, offset_id in wanted:
            request = broker_pb2.TrackMessageRequest(msg_id=offset_id)
            try:
                stub = admin_.stub_of(masters[name])
                answers.append((name, stub.TrackMessage(request, timeout=RPC_TIMEOUT_S)))
            except grpc.RpcError as exc:
                if by_offset_id and exc.code() is grpc.StatusCode.NOT_FOUND:
                    continue  # stored on another group
                raise fail(f"TrackMessage on {masters[name].address}: {_rpc_text(exc)}") from None
        return answers

    answers = []
    try:
        parse_msg_id(msg_id)
    except ValueError:
        pass  # a unique id only
    else:
        answers = ask([(name, msg_id) for name in sorted(masters)], True)
    if not answers:  # a unique id (which may look like an offset id)
        copies = _by_unique_id(admin_, msg_id, topic_name)
        answers = ask([(name, m.msg_id) for name, m in copies if name in masters], False)
    if not answers:
        raise fail(f"no message with id {msg_id}")
    for name, answer in answers:
        _show(name, answer.message)
        if not answer.tracks:
            click.echo("  no consumer group has consumed or subscribed its topic here")
        width = max((len(t.group) for t in answer.tracks), default=0)
        for track in answer.tracks:
            state = broker_pb2.TrackState.Name(track.state)
            click.echo(f"  {track.group:<{width}}  {state:<21}  {track.detail}")
