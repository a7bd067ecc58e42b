"""Where a batched send's time goes: the SDK's work against the servers' round trip.

Against a running cluster (``boltmq dev``), one thread sends the same batch of
``--batch`` bodies of ``--size`` bytes, one call after another, four ways:

- ``sdk``: ``Producer.send_batch`` of new ``Message``s, as ``bench/compare``
  sends (bodies built per call, records encoded, ``SendResult``s made);
- ``request``: the generated stub's ``SendMessage`` with one prebuilt
  ``SendRequest`` (protobuf in and out, nothing else);
- ``request+results``: the same, the answer turned into ``SendResult``s;
- ``raw``: the prebuilt request's bytes on a call with no serializers (the
  least a client can do).

Each prints the client's CPU per message (``time.process_time``), msg/s and the
per-call p50/p99. ``raw`` is the round trip through broker and store with no
client work at all, so it bounds what a single producer can reach however
cheap the SDK becomes (bench/history/side-by-side.md, "What bounds one batched producer").

    .venv/bin/python -m bench.send_split --registry 127.0.0.1:9876 [--calls 300]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import grpc

from bench.compare.workload import body
from bench.soak_report import percentile_ms
from boltmq.client import BoltMQError
from boltmq.kernel import allocator
from boltmq.kernel.channels import sync_channel
from boltmq.kernel.registry_client import RegistryError
from boltmq.message import Message, batch_records, send_results
from boltmq.producer import Producer
from boltmq.v1 import broker_pb2, broker_pb2_grpc

SEND_METHOD = "/boltmq.v1.BrokerService/SendMessage"
TIMEOUT_S = 10.0


def _timed(name: str, send: Callable[[], object], calls: int, batch: int) -> None:
    send()  # warm: routes, channel, the topic's first append
    samples = []
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for _ in range(calls):
        t0 = time.perf_counter_ns()
        send()
        samples.append(time.perf_counter_ns() - t0)
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    messages = calls * batch
    print(
        f"{name:16s} {messages / wall:10,.0f} msg/s  client CPU {cpu / messages * 1e6:5.2f} "
        f"us/msg  p50={percentile_ms(samples, 0.5)}ms p99={percentile_ms(samples, 0.99)}ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--registry", required=True, help="host:port of the name registry")
    parser.add_argument("--topic", default="SendSplit")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--calls", type=int, default=300, help="calls per way and round")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    if args.batch < 1 or args.size < 8 or args.calls < 1 or args.rounds < 1:
        parser.error("--batch, --calls and --rounds must be >= 1 and --size >= 8")
    allocator.keep_freed_memory()  # as the SDK's own benchmarks run
    try:
        _split(args)
    except (BoltMQError, RegistryError) as exc:
        raise SystemExit(f"send_split: {exc}") from None
    except grpc.RpcError as exc:
        raise SystemExit(f"send_split: send failed: {exc.code().name}: {exc.details()}") from None


def _split(args: argparse.Namespace) -> None:
    producer = Producer(args.registry, "SEND_SPLIT").start()
    try:
        _send_each_way(producer, args)
    finally:
        producer.shutdown()


def _send_each_way(producer: Producer, args: argparse.Namespace) -> None:
    topic, batch = args.topic, args.batch

    def sdk() -> object:
        return producer.send_batch(
            [Message(topic=topic, body=body(args.size)) for _ in range(batch)]
        )

    sdk()  # creates the topic and caches its route
    queue = producer.client.write_queues(topic)[0]
    records = batch_records(
        [Message(topic=topic, body=body(args.size)) for _ in range(batch)], 0, {}
    )
    request = broker_pb2.SendRequest(
        producer_group="SEND_SPLIT",
        records=records,
        record_count=batch,
        topic=topic,
        queue_id=queue.queue_id,
    )
    raw = request.SerializeToString()
    channel = sync_channel(producer.client.address_of(queue))
    try:
        stub = broker_pb2_grpc.BrokerServiceStub(channel)
        raw_send = channel.unary_unary(SEND_METHOD)  # no serializers: bytes in, bytes out
        ways: dict[str, Callable[[], object]] = {
            "sdk": sdk,
            "request": lambda: stub.SendMessage(request, timeout=TIMEOUT_S),
            "request+results": lambda: send_results(stub.SendMessage(request, timeout=TIMEOUT_S)),
            "raw": lambda: raw_send(raw, timeout=TIMEOUT_S),
        }
        for _ in range(args.rounds):
            for name, send in ways.items():
                _timed(name, send, args.calls, batch)
    finally:
        channel.close()


if __name__ == "__main__":
    main()
