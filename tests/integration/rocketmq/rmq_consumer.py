"""Run by the official client's venv (not by pytest): a SimpleConsumer scenario, one JSON
line per event.

usage: rmq_consumer.py ENDPOINTS MODE GROUP TOPIC [ARGS...] (credentials in RMQ_AK /
RMQ_SK). MODE: drain COUNT SECONDS (receive and ack until COUNT messages or SECONDS) |
redeliver (receive without ack, receive again after the invisible time, change the
invisible duration, ack) | abandon SECONDS (receive without ever acking until SECONDS).
"""

import json
import os
import sys
import time

from rocketmq import ClientConfiguration, Credentials, FilterExpression, SimpleConsumer

AWAIT_S = 2


def emit(**fields):
    print(json.dumps(fields), flush=True)


def described(message):
    return {
        "message_id": message.message_id,
        "body": message.body.decode(),
        "attempt": message.delivery_attempt,
        "tag": message.tag,
        "keys": sorted(message.keys),
        "properties": dict(message.properties),
        "group": message.message_group,
        "topic": message.topic,
    }


def receive(consumer, count, invisible_s):
    try:
        return consumer.receive(count, invisible_s)
    except Exception as exc:
        emit(event="error", type=type(exc).__name__, message=str(exc))
        return []


def main():
    endpoints, mode, group, topic, *args = sys.argv[1:]
    config = ClientConfiguration(
        endpoints, Credentials(os.environ.get("RMQ_AK", ""), os.environ.get("RMQ_SK", ""))
    )
    consumer = SimpleConsumer(config, group, {topic: FilterExpression("*")}, AWAIT_S)
    consumer.startup()
    try:
        if mode == "drain":
            count, deadline = int(args[0]), time.time() + float(args[1])
            batch = int(args[2]) if len(args) > 2 else 8
            seen = 0
            while seen < count and time.time() < deadline:
                for message in receive(consumer, batch, 10):
                    emit(event="received", **described(message))
                    consumer.ack(message)
                    seen += 1
            emit(event="done", received=seen)
        elif mode == "redeliver":
            (first,) = receive(consumer, 1, 1)
            emit(event="received", **described(first))
            again = []
            while not again:  # visible again after 1 s; delivered with attempt 2
                again = receive(consumer, 1, 1)
            emit(event="received", **described(again[0]))
            consumer.change_invisible_duration(again[0], 2)
            emit(event="changed")
            third = []
            while not third:
                third = receive(consumer, 1, 10)
            emit(event="received", **described(third[0]))
            consumer.ack(third[0])
            emit(event="acked")
            try:
                consumer.ack(first)  # a delivery that is over
                emit(event="stale_ack_accepted")
            except Exception as exc:
                emit(event="stale_ack_refused", type=type(exc).__name__, message=str(exc))
        elif mode == "abandon":
            deadline = time.time() + float(args[0])
            while time.time() < deadline:
                for message in receive(consumer, 4, 1):
                    emit(event="received", **described(message))
        else:
            raise SystemExit(f"unknown mode {mode}")
    except Exception as exc:
        emit(event="error", type=type(exc).__name__, message=str(exc))
    finally:
        consumer.shutdown()


if __name__ == "__main__":
    main()
