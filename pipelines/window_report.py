"""The window aggregates a topic holds, read back with the SDK and printed as a table.

    python -m pipelines.window_report --registry 127.0.0.1:9876 --topic EventWindows

Reads every queue of the topic from its first offset (a pull consumer; nothing
is committed) and decodes the bodies the streaming job writes
(:mod:`pipelines.window_aggregates`). A window written more than once (a
micro-batch re-run after a failure: the sink is at-least-once) shows its last
message: one key's windows are in one queue, so the highest queue offset is
the newest.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

PULL_BATCH_MAX: Final = 256
"""Messages per pull."""
REPORT_GROUP: Final = "PIPELINE_WINDOW_REPORT"


@dataclass(frozen=True)
class WindowAggregate:
    """One window of one key and tag, as the streaming job wrote it."""

    key: str
    tag: str | None
    window_start_ms: int
    window_end_ms: int
    count: int
    sum: float | None
    min: float | None
    max: float | None

    @classmethod
    def from_body(cls, body: bytes) -> WindowAggregate:
        """Decode a body; ValueError when it is not one of the job's aggregates."""
        try:
            fields = json.loads(body)
            return cls(**{name: fields[name] for name in cls.__dataclass_fields__})
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"not a window aggregate ({exc}): {body[:80]!r}") from None

    @property
    def identity(self) -> tuple[str, str | None, int, int]:
        """What names a window: key, tag and bounds."""
        return self.key, self.tag, self.window_start_ms, self.window_end_ms


def read_aggregates(registry: str, topic: str) -> list[WindowAggregate]:
    """Every window in ``topic`` (the newest message of each), ordered by window then key."""
    from boltmq.pull_consumer import PullConsumer, PullStatus

    newest: dict[tuple[str, str | None, int, int], tuple[int, WindowAggregate]] = {}
    with PullConsumer(registry, REPORT_GROUP) as consumer:
        for queue in consumer.queues(topic):
            offset = 0
            while True:
                result = consumer.pull(queue, offset, PULL_BATCH_MAX)
                if result.status is not PullStatus.FOUND:
                    break
                for message in result.messages:
                    aggregate = WindowAggregate.from_body(bytes(message.body))
                    seen = newest.get(aggregate.identity)
                    if seen is None or seen[0] < message.queue_offset:
                        newest[aggregate.identity] = (message.queue_offset, aggregate)
                offset = result.next_begin_offset
    return sorted(
        (a for _, a in newest.values()), key=lambda a: (a.window_start_ms, a.key, a.tag or "")
    )


def _window(start_ms: int, end_ms: int) -> str:
    """``2024-05-01 10:15:00 - 10:16:00`` (the end's date only when it differs)."""
    start = datetime.fromtimestamp(start_ms / 1000, UTC)
    end = datetime.fromtimestamp(end_ms / 1000, UTC)
    end_form = "%H:%M:%S" if end.date() == start.date() else "%Y-%m-%d %H:%M:%S"
    return f"{start:%Y-%m-%d %H:%M:%S} - {end.strftime(end_form)}"


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def print_table(topic: str, aggregates: Sequence[WindowAggregate]) -> None:
    """A rich table: one row per window, key and tag."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{topic}: {len(aggregates)} window aggregates (UTC)")
    for name in ("window", "key", "tag", "count", "sum", "min", "max"):
        table.add_column(
            name,
            no_wrap=True,
            justify="right" if name in ("count", "sum", "min", "max") else "left",
        )
    for a in aggregates:
        table.add_row(
            _window(a.window_start_ms, a.window_end_ms),
            a.key,
            a.tag or "-",
            str(a.count),
            _number(a.sum),
            _number(a.min),
            _number(a.max),
        )
    Console().print(table)


def main(argv: Sequence[str] | None = None) -> int:
    """CLI: print the table; one line of error and exit 1 when the topic cannot be read."""
    from boltmq.client import BoltMQError
    from boltmq.kernel.registry_client import RegistryError

    parser = argparse.ArgumentParser(
        prog="python -m pipelines.window_report",
        description="Print the window aggregates of a topic.",
    )
    parser.add_argument("--registry", required=True, help="host:port of the name registry")
    parser.add_argument("--topic", required=True)
    args = parser.parse_args(argv)
    try:
        aggregates = read_aggregates(args.registry, args.topic)
    except (BoltMQError, RegistryError, ValueError) as exc:
        print(f"window_report: error: {exc}", file=sys.stderr)
        return 1
    print_table(args.topic, aggregates)
    return 0


if __name__ == "__main__":
    sys.exit(main())
