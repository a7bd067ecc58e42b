"""The Groups pages' data and changes.

The list merges every master's ``ListGroups`` (live members, model) with each
group's total lag (``GroupProgress``, any valid account). A group's page adds its
settings and members (``GetGroup``), its clients with address, language and
version (``GetConnections``), its consumption over the last minute
(``GetTrafficStats``) -- those three admin-only under the ACL: the page says so
for other accounts -- its lag per queue, and its dead letters
(``ListDeadLetters``, SUB on the group). Changes are the CLI's: ``ResetOffset``
(to a time, the earliest or the latest offset; live consumers follow),
``ResendDeadLetters`` and ``UpsertGroup`` (retry settings).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import grpc

from boltmq.console.calls import ClusterCalls, ConsoleError, denied, error_text
from boltmq.v1 import broker_pb2, message_pb2
from boltmq.wire.topic import InvalidGroup, validate_group

DEAD_LETTERS_SHOWN = 100
"""Dead letters listed per master on a group's page."""
RETRY_MAX_TIMES = (1, 1000)
MINUTE_S = 60


def checked_group(name: str) -> str:
    try:
        return validate_group(name)
    except InvalidGroup as exc:
        raise ConsoleError(str(exc)) from None


@dataclass
class GroupRow:
    name: str
    model: str = ""
    orderly: bool = False
    members: set[str] = field(default_factory=set)
    lag: int | None = None


def _total_lag(calls: ClusterCalls, group: str) -> int | None:
    total, known = 0, False
    for _, answer in calls.each("GroupProgress", broker_pb2.GroupProgressRequest(group=group)):
        if isinstance(answer, grpc.RpcError):
            continue
        known = True
        total += sum(q.lag for q in answer.queues)
    return total if known else None


def group_rows(calls: ClusterCalls, search: str = "") -> list[GroupRow]:
    """Every consumer group the masters know whose name contains ``search``, with lag."""
    rows: dict[str, GroupRow] = {}
    needle = search.strip().lower()
    for _, answer in calls.each_ok("ListGroups", broker_pb2.ListGroupsRequest()):
        for g in answer.groups:
            if needle not in g.group.lower():
                continue
            row = rows.setdefault(g.group, GroupRow(g.group))
            row.model = row.model or g.model
            row.orderly = row.orderly or g.orderly
            row.members.update(g.client_ids)
    ordered = sorted(rows.values(), key=lambda r: r.name)
    for row, lag in zip(
        ordered, calls.in_parallel(lambda r: _total_lag(calls, r.name), ordered), strict=True
    ):
        row.lag = lag
    return ordered


@dataclass
class DeadLetter:
    broker: str
    message: message_pb2.MessageExt

    @property
    def topic(self) -> str:
        return self.message.properties.get("RETRY_TOPIC", "-")


def _admin_answers(
    calls: ClusterCalls, method: str, request: Any, notes: list[str]
) -> list[tuple[str, Any]]:
    """Every master's answer to an admin read; a note instead for a refusal."""
    answers = []
    for broker, answer in calls.each(method, request):
        if isinstance(answer, grpc.RpcError):
            if answer.code() == grpc.StatusCode.NOT_FOUND:
                continue
            if denied(answer):
                notes.append(f"{method}: needs an admin account")
                return []
            notes.append(f"{method} on {broker.broker_name}: {error_text(answer)}")
            continue
        answers.append((broker.broker_name, answer))
    return answers


def group_page(calls: ClusterCalls, name: str) -> dict[str, Any]:
    name = checked_group(name)
    notes: list[str] = []
    settings = _admin_answers(calls, "GetGroup", broker_pb2.GetGroupRequest(group=name), notes)
    clients = _admin_answers(
        calls,
        "GetConnections",
        broker_pb2.GetConnectionsRequest(group=name, kind="consumer"),
        notes,
    )
    traffic = _admin_answers(
        calls, "GetTrafficStats", broker_pb2.GetTrafficStatsRequest(group=name), notes
    )
    progress = []
    for broker, answer in calls.each("GroupProgress", broker_pb2.GroupProgressRequest(group=name)):
        if isinstance(answer, grpc.RpcError):
            notes.append(f"GroupProgress on {broker.broker_name}: {error_text(answer)}")
            continue
        progress += [
            (broker.broker_name, q)
            for q in sorted(answer.queues, key=lambda q: (q.topic, q.queue_id))
        ]
    consumed = sum(a.consumed.last_minute for _, a in traffic)
    return {
        "name": name,
        "settings": [(b, a.settings) for b, a in settings if a.HasField("settings")],
        "inconsistent": any(a.inconsistent for _, a in settings),
        "clients": [(b, c) for b, a in clients for c in a.connections],
        "progress": progress,
        "total_lag": sum(q.lag for _, q in progress),
        "topics": sorted({q.topic for _, q in progress}, key=lambda t: (t.startswith("%"), t)),
        "rate": round(consumed / MINUTE_S, 2) if traffic else None,
        "dead_letters": dead_letters(calls, name, notes),
        "notes": notes,
    }


def dead_letters(calls: ClusterCalls, name: str, notes: list[str]) -> list[DeadLetter]:
    """The first dead letters of group ``name`` on every master."""
    found = []
    request = broker_pb2.ListDeadLettersRequest(group=name, max_messages=DEAD_LETTERS_SHOWN)
    for broker, answer in calls.each("ListDeadLetters", request):
        if isinstance(answer, grpc.RpcError):
            if answer.code() != grpc.StatusCode.NOT_FOUND:  # NOT_FOUND: no DLQ there
                notes.append(f"ListDeadLetters on {broker.broker_name}: {error_text(answer)}")
            continue
        found += [DeadLetter(broker.broker_name, m) for m in answer.messages]
    return found


def reset_offset(
    calls: ClusterCalls, name: str, topic: str, to: str, timestamp_ms: int | None
) -> list[str]:
    """Reset group ``name``'s offsets of ``topic`` on every master (``to``: time,
    earliest or latest); a line per queue."""
    name = checked_group(name)
    if to == "time":
        if timestamp_ms is None or timestamp_ms < 0:
            raise ConsoleError("reset to a time: give the time")
        request = broker_pb2.ResetOffsetRequest(group=name, topic=topic, timestamp_ms=timestamp_ms)
    elif to == "earliest":
        request = broker_pb2.ResetOffsetRequest(group=name, topic=topic, earliest=True)
    elif to == "latest":
        request = broker_pb2.ResetOffsetRequest(group=name, topic=topic, latest=True)
    else:
        raise ConsoleError(f"reset to: time, earliest or latest, not {to!r}")
    lines = []
    for broker, answer in calls.each_ok("ResetOffset", request):
        for q in answer.queues:
            old = "none" if q.old_offset < 0 else str(q.old_offset)
            lines.append(f"{broker} {topic}/{q.queue_id}: {old} -> {q.new_offset}")
    return lines or [f"group {name} has no queue of {topic} to reset"]


def resend(calls: ClusterCalls, name: str, offsets: dict[str, list[int]]) -> list[str]:
    """Resend group ``name``'s dead letters at ``offsets`` (by broker group name)."""
    name = checked_group(name)
    by_name = {b.broker_name: b for b in calls.masters()}
    lines = []
    for broker_name, chosen in sorted(offsets.items()):
        broker = by_name.get(broker_name)
        if broker is None:
            raise ConsoleError(f"broker group {broker_name!r} has no live master")
        request = broker_pb2.ResendDeadLettersRequest(group=name, commitlog_offsets=chosen)
        try:
            answer = calls.call(broker, "ResendDeadLetters", request)
        except grpc.RpcError as exc:
            raise ConsoleError(f"ResendDeadLetters on {broker_name}: {error_text(exc)}") from None
        for offset, result in zip(chosen, answer.results, strict=True):
            status = broker_pb2.SendStatus.Name(result.statuses[0]) if result.statuses else "?"
            lines.append(
                f"{broker_name}: {offset} resent to {result.topic}/{result.queue_id}: {status}"
            )
    return lines


def update_retry(calls: ClusterCalls, name: str, retry_max_times: int) -> list[str]:
    """Set group ``name``'s deliveries before its dead-letter topic, on every master."""
    name = checked_group(name)
    low, high = RETRY_MAX_TIMES
    if not low <= retry_max_times <= high:
        raise ConsoleError(f"retry max times: between {low} and {high}, not {retry_max_times}")
    request = broker_pb2.UpsertGroupRequest(group=name, retry_max_times=retry_max_times)
    return [
        f"{broker}: group {a.group} retry max times {a.settings.retry_max_times}"
        for broker, a in calls.each_ok("UpsertGroup", request)
    ]
