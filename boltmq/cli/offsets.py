"""``boltmq admin group reset-offset GROUP TOPIC --to-time T|--to-earliest|--to-latest``.

Sets the committed offset of GROUP on every queue of TOPIC, on every master
broker (or the one ``--broker`` names): to the first message stored at or after
T, to the first message retained, or to the end (skipping the backlog), as
RocketMQ's ``resetOffsetByTime`` and ``skipAccumulatedMessage`` do. Live
consumers of the group follow on their next pull, without a restart
(docs/offsets.md). T is epoch milliseconds (``1767225600000``) or an ISO-8601
time with its zone (``2026-01-01T00:00:00Z``, ``2026-01-01T01:00:00+01:00``); a
time without a zone is refused, as its meaning would depend on the machine.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import click

from boltmq.cli.admin import Admin, _with_admin, group
from boltmq.cli.messages import fail
from boltmq.v1 import broker_pb2

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def parse_time_ms(text: str) -> int:
    """``text`` as epoch ms: digits are ms, anything else an ISO-8601 time with a zone;
    click.BadParameter naming what is wrong otherwise."""
    text = text.strip()
    if text.isdigit():
        return int(text)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise click.BadParameter(
            f"{text!r} is neither epoch milliseconds nor an ISO-8601 time "
            "(e.g. 1767225600000 or 2026-01-01T00:00:00Z)"
        ) from None
    if moment.tzinfo is None:
        raise click.BadParameter(
            f"{text!r} has no time zone: add one (2026-01-01T00:00:00Z, ...+01:00)"
        )
    ms = (moment - EPOCH) // timedelta(milliseconds=1)  # exact: no float on the way
    if ms < 0:
        raise click.BadParameter(f"{text!r} is before 1970-01-01T00:00:00Z")
    return ms


@group.command("reset-offset")
@click.argument("name")
@click.argument("topic")
@click.option("--to-time", "to_time", metavar="T", help="Epoch ms or ISO-8601 with a zone.")
@click.option("--to-earliest", is_flag=True, help="The first message retained.")
@click.option("--to-latest", is_flag=True, help="The end of each queue: skip the backlog.")
@_with_admin
def group_reset_offset(
    admin_: Admin,
    name: str,
    topic: str,
    to_time: str | None,
    to_earliest: bool,
    to_latest: bool,
) -> None:
    """Reset group NAME's offsets of TOPIC on every master (live consumers follow)."""
    chosen = [to_time is not None, to_earliest, to_latest]
    if sum(chosen) != 1:
        raise fail("give exactly one of --to-time T, --to-earliest, --to-latest")
    if to_time is not None:
        try:
            request = broker_pb2.ResetOffsetRequest(
                group=name, topic=topic, timestamp_ms=parse_time_ms(to_time)
            )
        except click.BadParameter as exc:
            raise fail(f"--to-time: {exc.message}") from None
    elif to_earliest:  # one field of the oneof only: setting another, even False, moves it
        request = broker_pb2.ResetOffsetRequest(group=name, topic=topic, earliest=True)
    else:
        request = broker_pb2.ResetOffsetRequest(group=name, topic=topic, latest=True)
    total = 0
    for broker_name, response in admin_.each_master("ResetOffset", request):
        for q in response.queues:
            total += 1
            old = "none" if q.old_offset < 0 else str(q.old_offset)
            click.echo(f"{broker_name:<12} {topic}/{q.queue_id:<4} {old:>12} -> {q.new_offset}")
    click.echo(f"group {name}: {total} queue(s) of {topic} reset")
