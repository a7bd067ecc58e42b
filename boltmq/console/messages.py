"""The Messages page: find messages and show them.

Lookups, as ``boltmq admin message`` does them:

By            | How                                                   | Needs (ACL on)
--------------+-------------------------------------------------------+------------------
offset id     | ``ViewMessage`` on every master                       | an admin account
unique id     | the SDK's :func:`boltmq.message_lookup.find_by_unique_id` | SUB on the topic
              | (the topic's index; every topic's without one)        |
key           | ``QueryMessageByKey`` of the topic on every master    | SUB on the topic
time range    | each queue's first offset at the start (``SearchOffset``), | SUB on the topic
              | then pulls as the read group (no offset is committed) | and the read group

A message is shown with its headers, properties, body as text, pretty JSON or
hex, its trace id (the W3C ``traceparent`` property producers add when
tracing is on) and, found by id or key, its track: for every consumer group of
its topic, consumed, waiting, retrying or dead-lettered (``TrackMessage``, asked
of every master and answered by the one storing it; an admin account's call).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime

import grpc

from boltmq.client import BoltMQError
from boltmq.console.calls import ClusterCalls, ConsoleError, denied, error_text
from boltmq.console.groups import checked_group
from boltmq.console.topics import READ_GROUP, checked_topic, is_system_topic
from boltmq.kernel.registry_client import RegistryError
from boltmq.kernel.telemetry import TRACEPARENT_PROPERTY
from boltmq.message import ReceivedMessage
from boltmq.message_lookup import find_by_unique_id
from boltmq.pull_consumer import PullStatus, pull_queue, search_offset
from boltmq.v1 import broker_pb2, message_pb2, store_pb2
from boltmq.wire.body_compression import CorruptBody, inflate_body
from boltmq.wire.record import PROPERTY_UNIQ_KEY, parse_msg_id

MAX_RESULTS = 64
"""Messages one lookup shows at most."""
HEX_BYTES = 4096
"""Body bytes the hex view shows."""


@dataclass
class Shown:
    """One found message, ready for the page."""

    broker: str
    msg_id: str
    topic: str
    queue_id: int
    queue_offset: int
    commitlog_offset: int
    store_ms: int
    born_ms: int
    born_host: str
    tags: str
    keys: list[str]
    properties: dict[str, str]
    body: bytes
    body_error: str = ""
    reconsume_times: int = 0
    views: dict[str, str] = field(default_factory=dict)
    tracks: list[tuple[str, str, str]] = field(default_factory=list)
    """(group, state, what the state rests on) per consumer group of the topic."""
    track_note: str = ""
    """Why there is no track (not asked, or refused)."""

    @property
    def unique_id(self) -> str:
        return self.properties.get(PROPERTY_UNIQ_KEY, "")

    @property
    def trace_id(self) -> str:
        """The trace id of ``traceparent`` (``00-<trace id>-<span id>-<flags>``)."""
        parts = self.properties.get(TRACEPARENT_PROPERTY, "").split("-")
        return parts[1] if len(parts) == 4 and len(parts[1]) == 32 else ""

    @property
    def stored(self) -> str:
        return iso_ms(self.store_ms)

    def render(self) -> Shown:
        text = self.body.decode("utf-8", errors="replace")
        self.views["text"] = text
        try:
            self.views["json"] = json.dumps(json.loads(text), indent=2, ensure_ascii=False)
        except ValueError:
            pass
        self.views["hex"] = hex_dump(self.body[:HEX_BYTES])
        return self


def iso_ms(ms: int) -> str:
    if ms <= 0:
        return "-"
    moment = datetime.fromtimestamp(ms / 1000, tz=UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def hex_dump(data: bytes) -> str:
    """16 bytes a line: offset, hex, printable ASCII."""
    lines = []
    for at in range(0, len(data), 16):
        chunk = data[at : at + 16]
        text = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{at:08x}  {chunk.hex(' '):<47}  {text}")
    return "\n".join(lines)


def from_ext(broker: str, m: message_pb2.MessageExt) -> Shown:
    try:
        body, body_error = bytes(inflate_body(m.body, m.sys_flag)), ""
    except CorruptBody as exc:
        body, body_error = bytes(m.body), f"body does not inflate: {exc}"
    return Shown(
        broker, m.msg_id, m.topic, m.queue_id, m.queue_offset, m.commitlog_offset,
        m.store_timestamp_ms, m.born_timestamp_ms, m.born_host, m.tags, list(m.keys),
        dict(m.properties), body, body_error, m.reconsume_times,
    ).render()  # fmt: skip


def from_record(broker: str, r: ReceivedMessage) -> Shown:
    try:
        body, body_error = r.body_bytes(), ""
    except CorruptBody as exc:
        body, body_error = b"", f"body does not inflate: {exc}"
    return Shown(
        broker, r.msg_id, r.topic, r.queue_id, r.queue_offset, r.commitlog_offset,
        r.store_timestamp, r.born_timestamp, r.born_host, r.tags or "", list(r.keys),
        dict(r.properties), body, body_error, r.reconsume_times,
    ).render()  # fmt: skip


def _clean(value: str, what: str) -> str:
    value = value.strip()
    if not value or any(c.isspace() for c in value):
        raise ConsoleError(f"{what}: give one without spaces")
    return value


def by_id(calls: ClusterCalls, msg_id: str, topic: str = "") -> list[Shown]:
    """An offset id's message (admin accounts), else the copies of a unique id."""
    msg_id = _clean(msg_id, "message id")
    found: list[Shown] = []
    try:
        parse_msg_id(msg_id)
    except ValueError:
        pass  # a unique id only
    else:
        for broker, answer in calls.each("ViewMessage", store_pb2.GetRequest(msg_id=msg_id)):
            if isinstance(answer, grpc.RpcError):
                continue  # not an admin, or not that group's: the unique-id search follows
            if answer.found and answer.message.msg_id == msg_id.upper():
                found.append(from_ext(broker.broker_name, answer.message))
    if found:
        return found
    topics = [checked_topic(topic)] if topic else _user_topics(calls)
    for name in topics:
        try:
            copies = find_by_unique_id(calls.client, name, msg_id)
        except (BoltMQError, RegistryError) as exc:
            if topic:
                raise ConsoleError(str(exc)) from None
            continue  # a topic this account may not read, or gone
        found += [from_ext("-", m) for m in copies]  # the index answer names no group
    return found[:MAX_RESULTS]


TRACKED_MAX = 8
"""Messages of one lookup whose track is asked (a call to every master each)."""


def with_tracks(calls: ClusterCalls, found: list[Shown]) -> list[Shown]:
    """``found``, the first TRACKED_MAX with their track per consumer group."""
    for shown in found[:TRACKED_MAX]:
        try:
            parse_msg_id(shown.msg_id)
        except ValueError:
            shown.track_note = "no offset id: no track"
            continue
        request = broker_pb2.TrackMessageRequest(msg_id=shown.msg_id)
        for _, answer in calls.each("TrackMessage", request):
            if isinstance(answer, grpc.RpcError):
                if denied(answer):
                    shown.track_note = "the track needs an admin account"
                    break
                continue  # not this group's message
            shown.tracks = [
                (t.group, broker_pb2.TrackState.Name(t.state), t.detail) for t in answer.tracks
            ]
            shown.track_note = "" if shown.tracks else "no consumer group reads its topic"
            break
    return found


def _user_topics(calls: ClusterCalls) -> list[str]:
    return sorted(
        {
            t.name
            for _, answer in calls.each_ok("ListTopics", broker_pb2.ListTopicsRequest())
            for t in answer.topics
            if not is_system_topic(t.name)
        }
    )


def by_key(calls: ClusterCalls, topic: str, key: str) -> list[Shown]:
    """Messages of ``topic`` whose key is ``key`` (SUB on the topic)."""
    topic = checked_topic(topic)
    key = _clean(key, "key")
    request = store_pb2.QueryByKeyRequest(topic=topic, key=key, max_count=MAX_RESULTS)
    found = []
    for broker, answer in calls.each("QueryMessageByKey", request):
        if isinstance(answer, grpc.RpcError):
            if answer.code() == grpc.StatusCode.NOT_FOUND:
                continue
            raise ConsoleError(f"QueryMessageByKey on {broker.broker_name}: {error_text(answer)}")
        found += [from_ext(broker.broker_name, m) for m in answer.messages if key in m.keys]
    return sorted(found, key=lambda m: m.store_ms)[:MAX_RESULTS]


def by_time(calls: ClusterCalls, topic: str, begin_ms: int, end_ms: int, group: str) -> list[Shown]:
    """Messages of ``topic`` stored in [begin_ms, end_ms), read as ``group`` (no commit)."""
    topic = checked_topic(topic)
    group = checked_group(group or READ_GROUP)
    if not 0 <= begin_ms < end_ms:
        raise ConsoleError("time range: the start must be before the end")
    client = calls.client
    found: list[Shown] = []
    try:
        queues = client.read_queues(topic)
        for queue in queues:
            offset = search_offset(client, queue, begin_ms)
            while len(found) < MAX_RESULTS:
                result = pull_queue(
                    client, group, queue, offset, max_messages=32, subscription="*", wait_ms=0
                )
                if result.status is not PullStatus.FOUND or not result.messages:
                    break
                inside = [m for m in result.messages if m.store_timestamp < end_ms]
                found += [from_record(queue.broker_name, m) for m in inside]
                if len(inside) < len(result.messages):
                    break
                offset = result.next_begin_offset
    except (BoltMQError, RegistryError, ValueError) as exc:
        raise ConsoleError(f"messages of {topic} by time: {exc}") from None
    return sorted(found, key=lambda m: m.store_ms)[:MAX_RESULTS]
