"""The events the streaming job reads, and a producer of sample ones.

An event is one message:

| part          | holds                        | example                                       |
|---------------|------------------------------|-----------------------------------------------|
| ``keys[0]``   | the event's key (required)   | ``sensor-3``                                  |
| ``tags``      | the event's kind (optional)  | ``temperature``                               |
| body (JSON)   | event time and value         | ``{"event_time_ms": 1714000000000, "value": 2}`` |

``event_time_ms`` is milliseconds since the epoch (UTC) and required;
``value`` is a number and optional (an event without one is counted, not
summed). The streaming job drops messages without a key, a JSON body or an
event time: a topic of events carries nothing else.

    python -m pipelines.events --registry 127.0.0.1:9876 --topic Events --count 500
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Final

from pipelines.durations import Duration, duration_arg, positive_int_arg

SEND_BATCH_MAX: Final = 64
"""Events per ``send_batch`` request (one queue per request)."""


@dataclass(frozen=True)
class Event:
    """One event, as the producer sends it and the job reads it."""

    key: str
    tag: str | None
    event_time_ms: int
    value: float | None

    def body(self) -> bytes:
        """The message body: ``{"event_time_ms": ..., "value": ...}``."""
        fields: dict[str, float | int] = {"event_time_ms": self.event_time_ms}
        if self.value is not None:
            fields["value"] = self.value
        return json.dumps(fields).encode()


def sample_events(
    count: int, *, keys: int, tags: Sequence[str], start_ms: int, span_ms: int, seed: int
) -> list[Event]:
    """``count`` events with event times spread over ``[start_ms, start_ms + span_ms)``.

    Values are whole numbers from 1 to 100 so sums are exact in any order.
    """
    rng = random.Random(seed)
    return [
        Event(
            key=f"key-{rng.randrange(keys)}",
            tag=rng.choice(tags),
            event_time_ms=start_ms + rng.randrange(span_ms),
            value=rng.randint(1, 100),
        )
        for _ in range(count)
    ]


def _batches(events: Sequence[Event]) -> Iterator[Sequence[Event]]:
    for low in range(0, len(events), SEND_BATCH_MAX):
        yield events[low : low + SEND_BATCH_MAX]


def send_events(registry: str, topic: str, events: Iterable[Event]) -> int:
    """Send every event to ``topic``; the number sent (SendError on a refusal)."""
    from boltmq.message import Message, SendStatus
    from boltmq.producer import Producer, SendError

    sent = 0
    with Producer(registry, "PIPELINE_EVENTS") as producer:
        for batch in _batches(list(events)):
            messages = [
                Message(topic=topic, body=e.body(), tags=e.tag, keys=[e.key]) for e in batch
            ]
            for result in producer.send_batch(messages):
                if result.status is SendStatus.SEND_FAILED:
                    raise SendError(
                        f"an event to {topic!r} was refused: {result.put_status} {result.error}",
                        result,
                    )
            sent += len(batch)
    return sent


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m pipelines.events",
        description="Send sample events (key, tag, JSON body with event time and value).",
    )
    parser.add_argument("--registry", required=True, help="host:port of the name registry")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--count", type=positive_int_arg, default=500)
    parser.add_argument(
        "--keys", type=positive_int_arg, default=4, help="distinct keys (key-0, key-1, ...)"
    )
    parser.add_argument("--tags", default="click,view,buy", help="comma list of tags")
    parser.add_argument(
        "--span",
        type=duration_arg,
        default=Duration(10, "m"),
        help="event times spread over this span, ending now (default 10m)",
    )
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    args.tags = [tag.strip() for tag in args.tags.split(",") if tag.strip()]
    if not args.tags:
        parser.error("--tags: expected a comma list of at least one tag")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """CLI: send ``--count`` sample events; one line of error and exit 1 on failure."""
    from boltmq.client import BoltMQError

    args = parse_args(argv)
    now_ms = int(time.time() * 1000)
    events = sample_events(
        args.count,
        keys=args.keys,
        tags=args.tags,
        start_ms=now_ms - args.span.ms,
        span_ms=args.span.ms,
        seed=args.seed,
    )
    try:
        sent = send_events(args.registry, args.topic, events)
    except BoltMQError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"sent {sent} events to {args.topic} (event times over the last {args.span})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
