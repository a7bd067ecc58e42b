"""Run by the official client's venv (not by pytest): one JSON line per outcome.

usage: rmq_producer.py ENDPOINTS MODE TOPIC [ARGS...] with the environment
RMQ_AK / RMQ_SK for credentials. MODE: send N | send_async N | tagged N TAG,TAG... (the
i-th message tagged with the i-th tag, round) | fifo GROUPS N |
delay SECONDS | transaction (commit|rollback|orphan) | paced SECONDS (one sync send every
PACE_S for SECONDS, each outcome emitted with its time, a failed send does not stop it).
"""

import json
import os
import sys
import time

from rocketmq import (
    ClientConfiguration,
    Credentials,
    Message,
    Producer,
    TransactionChecker,
    TransactionResolution,
)


def emit(**fields):
    print(json.dumps(fields), flush=True)


class Checker(TransactionChecker):
    def __init__(self, answer):
        self.answer = answer

    def check(self, message):
        emit(event="check", message_id=message.message_id, body=message.body.decode())
        return self.answer


def message(topic, body, **attrs):
    msg = Message()
    msg.topic = topic
    msg.body = body.encode()
    msg.tag = attrs.pop("tag", "t")
    msg.keys = attrs.pop("keys", "k1")
    msg.add_property("origin", "rmq-python")
    for name, value in attrs.items():
        setattr(msg, name, value)
    return msg


PACE_S = 0.05


def paced(producer, topic, seconds):
    """Send until ``seconds`` pass; ``t`` is seconds since the first send."""
    start = time.monotonic()
    i = 0
    while time.monotonic() - start < seconds:
        body = f"paced-{i}"
        try:
            receipt = producer.send(message(topic, body))
            at = receipt.message_queue.endpoints.facade.split(":", 1)[1]  # "ipv4:host:port"
            emit(event="sent", body=body, t=time.monotonic() - start, at=at)
        except Exception as exc:  # the client gave up on this message: recorded, go on
            emit(event="failed", body=body, t=time.monotonic() - start, error=str(exc)[:200])
        i += 1
        time.sleep(PACE_S)


def main():
    endpoints, mode, topic, *args = sys.argv[1:]
    config = ClientConfiguration(
        endpoints, Credentials(os.environ.get("RMQ_AK", ""), os.environ.get("RMQ_SK", ""))
    )
    checker = Checker(TransactionResolution.COMMIT) if mode == "transaction" else None
    producer = Producer(config, (topic,), checker)
    producer.startup()
    try:
        if mode == "send":
            for i in range(int(args[0])):
                receipt = producer.send(message(topic, f"sync-{i}"))
                emit(event="sent", message_id=receipt.message_id, offset=receipt.offset)
        elif mode == "tagged":
            tags = args[1].split(",")
            for i in range(int(args[0])):
                tag = tags[i % len(tags)]
                receipt = producer.send(message(topic, f"{tag}-{i}", tag=tag))
                emit(event="sent", message_id=receipt.message_id, tag=tag)
        elif mode == "send_async":
            futures = [
                producer.send_async(message(topic, f"async-{i}")) for i in range(int(args[0]))
            ]
            for future in futures:
                receipt = future.result(timeout=30)
                emit(event="sent", message_id=receipt.message_id, offset=receipt.offset)
        elif mode == "fifo":
            groups, count = int(args[0]), int(args[1])
            for i in range(count):
                group = f"g{i % groups}"
                receipt = producer.send(message(topic, f"{group}-{i}", message_group=group))
                emit(event="sent", group=group, message_id=receipt.message_id)
        elif mode == "paced":
            paced(producer, topic, float(args[0]))
        elif mode == "delay":
            due = int(time.time() * 1000) + int(float(args[0]) * 1000)
            receipt = producer.send(message(topic, "delayed", delivery_timestamp=due))
            emit(event="sent", message_id=receipt.message_id, due_ms=due)
        elif mode == "transaction":
            outcome = args[0]
            transaction = producer.begin_transaction()
            receipt = producer.send(message(topic, f"tx-{outcome}"), transaction)
            emit(event="sent", message_id=receipt.message_id, transaction_id=receipt.transaction_id)
            if outcome == "commit":
                transaction.commit()
                emit(event="committed")
            elif outcome == "rollback":
                transaction.rollback()
                emit(event="rolled_back")
            else:  # orphan: leave it undecided, answer the broker's check-back
                deadline = time.time() + float(args[1])
                while time.time() < deadline:
                    time.sleep(0.2)
        else:
            raise SystemExit(f"unknown mode {mode}")
    except Exception as exc:  # the test reads the failure
        emit(event="error", type=type(exc).__name__, message=str(exc))
    finally:
        producer.shutdown()


if __name__ == "__main__":
    main()
