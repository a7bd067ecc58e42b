"""Run by the official client's venv (.venv-rocketmq), for ``python -m bench.rocketmq_client``.

usage: bench_worker.py ENDPOINTS MODE TOPIC COUNT THREADS SIZE [GROUP]. MODE: ``sync`` (COUNT
messages of SIZE bytes, ``Producer.send`` from THREADS threads), ``async``
(``Producer.send_async``, at most THREADS * 32 in flight), ``receive`` (a SimpleConsumer of
GROUP receives 32 at a time and acks each, until COUNT). Prints one JSON line: count,
seconds (after the client started), and the latencies in ms (a send each; a receive call
each for ``receive``).
"""

import json
import sys
import threading
import time

from rocketmq import (
    ClientConfiguration,
    Credentials,
    FilterExpression,
    Message,
    Producer,
    SimpleConsumer,
)

IN_FLIGHT_PER_THREAD = 32
RECEIVE_BATCH = 32
INVISIBLE_S = 30
GIVE_UP_S = 120


def message(topic, body):
    msg = Message()
    msg.topic, msg.body = topic, body
    return msg


def send_sync(producer, topic, count, threads, body):
    latencies, lock = [], threading.Lock()
    share = [count // threads + (1 if i < count % threads else 0) for i in range(threads)]

    def sender(n):
        mine = []
        for _ in range(n):
            start = time.perf_counter()
            producer.send(message(topic, body))
            mine.append((time.perf_counter() - start) * 1000)
        with lock:
            latencies.extend(mine)

    workers = [threading.Thread(target=sender, args=(n,)) for n in share]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return latencies


def send_async(producer, topic, count, threads, body):
    latencies, window = [], threading.Semaphore(threads * IN_FLIGHT_PER_THREAD)
    lock, done = threading.Lock(), threading.Event()
    left = [count]

    def finished(start, future):
        future.result()  # a failed send ends the run with its error
        with lock:
            latencies.append((time.perf_counter() - start) * 1000)
            left[0] -= 1
            if left[0] == 0:
                done.set()
        window.release()

    for _ in range(count):
        window.acquire()
        start = time.perf_counter()
        future = producer.send_async(message(topic, body))
        future.add_done_callback(lambda f, s=start: finished(s, f))
    if not done.wait(GIVE_UP_S):
        raise SystemExit(f"async sends unfinished after {GIVE_UP_S} s: {left[0]} left")
    return latencies


def receive(consumer, count):
    latencies, got, deadline = [], 0, time.time() + GIVE_UP_S
    while got < count and time.time() < deadline:
        start = time.perf_counter()
        messages = consumer.receive(RECEIVE_BATCH, INVISIBLE_S)
        latencies.append((time.perf_counter() - start) * 1000)
        for received in messages:
            consumer.ack(received)
        got += len(messages)
    return got, latencies


def main():
    endpoints, mode, topic, count, threads, size, *group = sys.argv[1:]
    count, threads, body = int(count), int(threads), b"x" * int(size)
    config = ClientConfiguration(endpoints, Credentials())
    if mode == "receive":
        client = SimpleConsumer(config, group[0], {topic: FilterExpression("*")}, 5)
    else:
        client = Producer(config, (topic,))
    client.startup()
    try:
        start = time.perf_counter()
        if mode == "sync":
            latencies, done = send_sync(client, topic, count, threads, body), count
        elif mode == "async":
            latencies, done = send_async(client, topic, count, threads, body), count
        else:
            done, latencies = receive(client, count)
        seconds = time.perf_counter() - start
    finally:
        client.shutdown()
    print(json.dumps({"count": done, "seconds": seconds, "latencies_ms": latencies}), flush=True)


if __name__ == "__main__":
    main()
