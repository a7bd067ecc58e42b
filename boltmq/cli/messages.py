"""``boltmq produce`` and ``boltmq consume``: messages from the command line.

``produce`` sends one body, a body per stdin line, or ``--count`` generated
bodies (async and batched, with a progress bar for large counts).
``consume`` prints messages as they arrive, or counts them, and stops after
``--count`` messages or ``--idle-ms`` without one.
"""

from __future__ import annotations

import sys
import threading
import time

import click

from boltmq.cli.security import sdk_options
from boltmq.client import BoltMQError
from boltmq.kernel.registry_client import RegistryError

DEFAULT_REGISTRY = "127.0.0.1:9876"
PROGRESS_MIN_COUNT = 10_000
"""Counts from which produce and consume show a progress bar."""

_CLIENT_ERRORS = (BoltMQError, RegistryError, ValueError)


def fail(error: BaseException | str) -> click.ClickException:
    """A user's mistake as one clear line and exit 1 (every ``boltmq`` command uses it)."""
    return click.ClickException(str(error))


def registry_option(fn):
    """``--registry`` and the TLS / ACL credential options (:mod:`boltmq.cli.security`)."""
    from boltmq.cli.security import security_options

    return security_options(
        click.option(
            "--registry",
            default=DEFAULT_REGISTRY,
            show_default=True,
            envvar="BOLTMQ_REGISTRY",
            help="Registry address(es), comma separated.",
        )(fn)
    )


@click.command()
@registry_option
@click.option("--topic", required=True)
@click.option("--body", default=None, help="Body text (default: one message per stdin line).")
@click.option("--tags", default=None)
@click.option("--keys", default=None, help="Space-separated keys.")
@click.option("--property", "properties", multiple=True, metavar="NAME=VALUE")
@click.option("--sharding-key", default=None, help="Send every message to one queue, in order.")
@click.option(
    "--count",
    default=0,
    type=click.IntRange(min=0),
    help="Send COUNT generated bodies of --size bytes (a load generator).",
)
@click.option("--size", default=1024, show_default=True, type=click.IntRange(min=0))
@click.option("--group", default="CLI_PRODUCER", show_default=True)
def produce(
    registry: str,
    topic: str,
    body: str | None,
    tags: str | None,
    keys: str | None,
    properties: tuple[str, ...],
    sharding_key: str | None,
    count: int,
    size: int,
    group: str,
) -> None:
    """Send messages to TOPIC."""
    from boltmq.message import Message
    from boltmq.producer import Producer

    props = {}
    for item in properties:
        name, sep, value = item.partition("=")
        if not sep or not name:
            # A ClickException, not a UsageError: one line, without the usage banner.
            raise fail(ValueError(f"--property expects NAME=VALUE, got {item!r}"))
        props[name] = value
    key_list = keys.split() if keys else []

    def make(data: bytes) -> Message:
        return Message(topic=topic, body=data, tags=tags, keys=key_list, properties=props)

    try:
        producer = Producer(registry, group, **sdk_options()).start()
    except _CLIENT_ERRORS as exc:
        raise fail(exc) from None
    try:
        if count:
            _produce_many(producer, make, count, size)
        else:
            bodies = (
                [body.encode()]
                if body is not None
                else [line.rstrip("\n").encode() for line in sys.stdin]
            )
            for data in bodies:
                result = producer.send(make(data), sharding_key=sharding_key)
                click.echo(
                    f"{result.status.name} {result.msg_id} {result.queue} "
                    f"offset {result.queue_offset}"
                )
    except _CLIENT_ERRORS as exc:
        raise fail(exc) from None
    finally:
        producer.shutdown()


def _produce_many(producer, make, count: int, size: int) -> None:
    from rich.progress import Progress

    data = b"x" * size
    failures: list[BaseException] = []
    done = threading.Semaphore(0)

    def callback(result, error) -> None:
        if error is not None:
            failures.append(error)
        done.release()

    start = time.perf_counter()
    with Progress(disable=count < PROGRESS_MIN_COUNT, transient=True) as progress:
        task = progress.add_task("sending", total=count)
        for n in range(count):
            producer.send_async(make(data), callback)
            if n % 1000 == 999:
                progress.update(task, completed=n + 1)
        producer.flush()
        for _ in range(count):
            done.acquire()
    seconds = time.perf_counter() - start
    if failures:
        raise BoltMQError(f"{len(failures)} of {count} sends failed, first: {failures[0]}")
    click.echo(f"sent {count} messages in {seconds:.2f}s ({count / seconds:,.0f} msg/s)")


@click.command()
@registry_option
@click.option("--topic", required=True)
@click.option("--group", default="CLI_CONSUMER", show_default=True)
@click.option("--subscription", default="*", show_default=True, help='e.g. "tagA || tagB"')
@click.option(
    "--sql",
    default=None,
    metavar="CONDITION",
    help="A SQL92 filter on properties instead of tags, e.g. \"a > 5 AND region IN ('eu')\".",
)
@click.option(
    "--count",
    default=0,
    type=click.IntRange(min=0),
    help="Stop after COUNT messages (0: run until Ctrl-C or --idle-ms).",
)
@click.option(
    "--idle-ms",
    default=0,
    type=click.IntRange(min=0),
    help="Stop after this long without a message (0: never).",
)
@click.option("--quiet", is_flag=True, help="Only count, do not print messages.")
@click.option(
    "--from",
    "consume_from",
    type=click.Choice(["FIRST", "LAST"]),
    default="FIRST",
    show_default=True,
    help="Where a group with no committed offset starts.",
)
def consume(
    registry: str,
    topic: str,
    group: str,
    subscription: str,
    sql: str | None,
    count: int,
    idle_ms: int,
    quiet: bool,
    consume_from: str,
) -> None:
    """Consume TOPIC as GROUP and print (or count) the messages."""
    from rich.progress import Progress

    from boltmq.message import ConsumeResult
    from boltmq.message_selector import MessageSelector
    from boltmq.options import PushConsumerOptions
    from boltmq.push_consumer import PushConsumer

    try:
        selector = MessageSelector.by_sql(sql) if sql is not None else subscription
    except ValueError as exc:
        raise fail(exc) from None
    received = 0
    last = time.monotonic()
    lock = threading.Lock()
    finished = threading.Event()
    start = time.perf_counter()
    with Progress(disable=not quiet or 0 < count < PROGRESS_MIN_COUNT, transient=True) as bar:
        task = bar.add_task("consuming", total=count or None)

        def listener(messages):
            nonlocal received, last
            with lock:
                if count and received >= count:
                    # Not consumed: the group's offset stays before these messages.
                    return ConsumeResult.RECONSUME_LATER
                for m in messages:
                    received += 1
                    if not quiet:
                        click.echo(
                            f"{m.msg_id} {m.topic}/{m.queue_id}@{m.queue_offset} "
                            f"tags={m.tags or '-'} keys={' '.join(m.keys) or '-'} "
                            f"body={bytes(m.body)!r}"
                        )
                last = time.monotonic()
                bar.update(task, completed=received)
                if count and received >= count:
                    finished.set()

        try:
            # With --count, one message per call: exactly COUNT are consumed and committed.
            consumer = PushConsumer(
                registry,
                group,
                {topic: selector},
                listener,
                options=PushConsumerOptions(
                    consume_from=consume_from,
                    long_poll_ms=1_000,
                    consume_batch_max_size=1 if count else 32,
                    rebalance_interval_ms=5_000,
                ),
                **sdk_options(),
            ).start()
        except _CLIENT_ERRORS as exc:
            raise fail(exc) from None
        try:
            while not finished.wait(0.1):
                if idle_ms and time.monotonic() - last >= idle_ms / 1000:
                    break
        except KeyboardInterrupt:
            pass
        finally:
            consumer.shutdown()
    seconds = time.perf_counter() - start
    click.echo(f"consumed {received} messages in {seconds:.2f}s", err=not quiet)
