"""Queue metadata for planning on the driver: topics, queues and their offset ranges.

Everything here goes through the broker's public API: the registry for routes
and brokers, ``TopicStatus`` for each queue's min and max offsets, and
single-message pulls for offset-by-time. The broker has no offset-by-time call;
a binary search over the queue with one-message pulls costs ~log2(n) calls per
queue, which planning can afford, and needs no new RPC.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import grpc

from boltmq.client import PERM_READ, rpc_error_text
from boltmq.kernel.registry_client import RegistryError, TopicNotFound
from boltmq.message import MessageQueue
from boltmq.pull_consumer import pull_queue
from boltmq.spark.errors import OptionError
from boltmq.spark.options import EARLIEST, LATEST, OffsetSpec, SourceOptions, queue_key
from boltmq.v1 import broker_pb2, registry_pb2

Offsets = dict[str, dict[str, int]]
"""``{"topic": {"broker-a/0": offset}}``: the offsets Spark keeps in its checkpoint."""


@dataclass(frozen=True)
class QueueRange:
    """One queue and the offsets it holds now: ``[min_offset, max_offset)``."""

    topic: str
    broker_name: str
    queue_id: int
    min_offset: int
    max_offset: int

    @property
    def key(self) -> str:
        return queue_key(self.broker_name, self.queue_id)

    @property
    def queue(self) -> MessageQueue:
        return MessageQueue(self.topic, self.broker_name, self.queue_id)


class Catalog:
    """A short-lived view of the cluster for one planning step (closed after use)."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.client = options.security.client(options.registry, options.rpc_timeout_ms / 1000)

    def __enter__(self) -> Catalog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.client.close()

    # ------------------------------------------------------------------ topics
    def topics(self) -> list[str]:
        """The topics to read: the listed ones (each must exist) or the pattern's matches."""
        if self.options.topic_pattern is None:
            for topic in self.options.topics:
                self._route(topic)
            return list(self.options.topics)
        pattern = re.compile(self.options.topic_pattern)
        return sorted(t for t in self._all_topics() if pattern.fullmatch(t))

    def _route(self, topic: str) -> registry_pb2.TopicRoute:
        try:
            return self.client.route(topic)
        except TopicNotFound:
            raise OptionError(
                f"topic {topic!r} does not exist (the registry at "
                f"{self.options.registry} knows no route for it)"
            ) from None
        except RegistryError as exc:
            raise self._unreachable(exc) from None

    def _unreachable(self, exc: RegistryError) -> OptionError:
        return OptionError(
            f"registry {self.options.registry} cannot be reached: {exc}"
            f"{self.options.security.unreachable_hint()}"
        )

    def _all_topics(self) -> set[str]:
        try:
            brokers = self.client.cluster_brokers()
        except RegistryError as exc:
            raise self._unreachable(exc) from None
        names: set[str] = set()
        for broker in brokers:
            if broker.broker_id != 0:
                continue
            response = self._call(broker.address, "ListTopics", broker_pb2.ListTopicsRequest())
            names.update(t.name for t in response.topics)
        return names

    # ------------------------------------------------------------------ queues
    def ranges(self, topics: Iterable[str]) -> list[QueueRange]:
        """Every readable queue of ``topics`` with its current offsets."""
        ranges: list[QueueRange] = []
        for topic in topics:
            route = self._route(topic)
            readable = {
                q.broker_name: q.read_queue_nums for q in route.queues if q.perm & PERM_READ
            }
            for broker_name, count in sorted(readable.items()):
                address = self.client.broker_address(route, broker_name)
                if address is None:
                    raise OptionError(f"broker {broker_name} of topic {topic!r} has no live master")
                status = self._call(
                    address, "TopicStatus", broker_pb2.TopicStatusRequest(topic=topic)
                )
                for info in status.queues:
                    if info.queue_id < count:
                        ranges.append(
                            QueueRange(
                                topic, broker_name, info.queue_id, info.min_offset, info.max_offset
                            )
                        )
        return ranges

    def _call(self, address: str, method: str, request: object) -> Any:
        try:
            return getattr(self.client.broker(address), method)(
                request, timeout=self.client.rpc_timeout_s
            )
        except grpc.RpcError as exc:
            hint = (
                self.options.security.unreachable_hint()
                if exc.code() == grpc.StatusCode.UNAVAILABLE
                else ""
            )
            raise OptionError(
                f"broker {address} {method} failed: {rpc_error_text(exc)}{hint}"
            ) from None

    # ------------------------------------------------------------------ offsets
    def offset_at(self, queue: QueueRange, timestamp_ms: int) -> int:
        """The first offset of ``queue`` stored at or after ``timestamp_ms`` (its end if none).

        Store timestamps grow along a queue (one writer assigns them under the
        append lock), so a binary search over one-message pulls finds it.
        """
        low, high = queue.min_offset, queue.max_offset
        while low < high:
            middle = (low + high) // 2
            result = pull_queue(
                self.client,
                self.options.group,
                queue.queue,
                middle,
                max_messages=1,
                subscription="*",
                wait_ms=0,
            )
            if not result.messages:
                low = max(middle + 1, result.next_begin_offset)
                continue
            found = result.messages[0]
            if found.store_timestamp >= timestamp_ms:
                high = middle
            else:
                low = found.queue_offset + 1
        return low

    def resolve(
        self,
        spec: OffsetSpec,
        ranges: list[QueueRange],
        *,
        default: int,
        timestamp_ms: int | None = None,
    ) -> Offsets:
        """Concrete offsets of every queue from a spec (queues a JSON spec omits: ``default``)."""
        _check_named_queues(spec, ranges)
        offsets: Offsets = {}
        for queue in ranges:
            if timestamp_ms is not None:
                offset = self.offset_at(queue, timestamp_ms)
            else:
                offset = _spec_offset(spec, queue, default)
                if offset == EARLIEST:
                    offset = queue.min_offset
                elif offset == LATEST:
                    offset = queue.max_offset
            offsets.setdefault(queue.topic, {})[queue.key] = offset
        return offsets


def _spec_offset(spec: OffsetSpec, queue: QueueRange, default: int) -> int:
    if spec == "earliest":
        return EARLIEST
    if spec == "latest":
        return LATEST
    assert isinstance(spec, dict)
    return spec.get(queue.topic, {}).get(queue.key, default)


def _check_named_queues(spec: OffsetSpec, ranges: list[QueueRange]) -> None:
    """A JSON spec may only name queues that exist (a typo must not read nothing)."""
    if not isinstance(spec, dict):
        return
    known = {(q.topic, q.key) for q in ranges}
    for topic, queues in spec.items():
        for key in queues:
            if (topic, key) not in known:
                names = sorted(k for t, k in known if t == topic)
                raise OptionError(
                    f"offsets name queue {key} of topic {topic!r}, which does "
                    f"not exist (queues: {names})"
                )
