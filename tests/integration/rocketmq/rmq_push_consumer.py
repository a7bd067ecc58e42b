"""Run by the official client's venv (not by pytest): a PushConsumer, one JSON line per
consumption.

usage: rmq_push_consumer.py ENDPOINTS GROUP TOPIC COUNT SECONDS: consume until COUNT
messages succeeded or SECONDS passed; the first delivery of every message fails
(FAILURE), so each is consumed twice.
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


def emit(**fields):
    print(json.dumps(fields), flush=True)


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
            attempt=message.delivery_attempt,
            result="FAILURE" if first else "SUCCESS",
        )
        return ConsumeResult.FAILURE if first else ConsumeResult.SUCCESS


def main():
    endpoints, group, topic, count, seconds = sys.argv[1:]
    listener = FailFirst()
    consumer = PushConsumer(
        ClientConfiguration(endpoints, Credentials()),
        group,
        listener,
        {topic: FilterExpression("*")},
        consumption_thread_count=2,
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
