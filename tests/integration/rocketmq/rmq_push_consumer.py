"""Run by the official client's venv (not by pytest): a PushConsumer, one JSON line per
consumption.

usage: rmq_push_consumer.py ENDPOINTS GROUP TOPIC COUNT SECONDS [MODE [TAGS]]: consume until
COUNT messages succeeded or SECONDS passed, subscribed with the tag expression TAGS (``*``
unless given). MODE ``fail_first`` (the default): the first delivery
of every message fails (FAILURE), so each is consumed twice. MODE ``fifo``: every message
succeeds after a short pause; each consumption is emitted with its message group and the
number of that group's messages being consumed at the same moment (``in_flight``, 1 when the
client consumes the group one message at a time).
"""

import json
import sys
import threading
import time

from rocketmq import (
    ClientConfiguration,
    ConsumeResult,
    Credentials,
    FilterExpression,
    MessageListener,
    PushConsumer,
)

EMIT_LOCK = threading.Lock()


def emit(**fields):
    """One JSON line; the listener runs on several threads, so lines are written whole."""
    with EMIT_LOCK:
        sys.stdout.write(json.dumps(fields) + "\n")
        sys.stdout.flush()


class FailFirst(MessageListener):
    def __init__(self):
        self.lock = threading.Lock()
        self.failed = set()
        self.succeeded = set()

    def consume(self, message):
        with self.lock:
            first = message.message_id not in self.failed
            self.failed.add(message.message_id)
            if not first:
                self.succeeded.add(message.message_id)
        emit(
            event="consumed",
            message_id=message.message_id,
            body=message.body.decode(),
            tag=message.tag,
            attempt=message.delivery_attempt,
            result="FAILURE" if first else "SUCCESS",
        )
        return ConsumeResult.FAILURE if first else ConsumeResult.SUCCESS


class Ordered(MessageListener):
    """Succeeds every message; records how many of its group were consumed at once."""

    def __init__(self):
        self.lock = threading.Lock()
        self.busy = {}
        self.succeeded = set()

    def consume(self, message):
        group = message.message_group
        with self.lock:
            self.busy[group] = self.busy.get(group, 0) + 1
            in_flight = self.busy[group]
        time.sleep(0.02)  # long enough for a second consumption of the group to overlap
        with self.lock:
            self.busy[group] -= 1
            self.succeeded.add(message.message_id)
        emit(
            event="consumed",
            message_id=message.message_id,
            body=message.body.decode(),
            group=group,
            attempt=message.delivery_attempt,
            in_flight=in_flight,
            result="SUCCESS",
        )
        return ConsumeResult.SUCCESS


def main():
    endpoints, group, topic, count, seconds, *rest = sys.argv[1:]
    mode, tags = (rest + ["fail_first", "*"][len(rest) :])[:2]
    listener = Ordered() if mode == "fifo" else FailFirst()
    consumer = PushConsumer(
        ClientConfiguration(endpoints, Credentials()),
        group,
        listener,
        {topic: FilterExpression(tags)},
        consumption_thread_count=4,
    )
    consumer.startup()
    try:
        deadline = time.time() + float(seconds)
        while len(listener.succeeded) < int(count) and time.time() < deadline:
            time.sleep(0.1)
        emit(event="done", succeeded=len(listener.succeeded))
    finally:
        consumer.shutdown()


if __name__ == "__main__":
    main()
