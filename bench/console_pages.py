"""``python -m bench.console_pages``: the web console's pages on a large cluster.

Starts a local cluster (``boltmq dev``'s :class:`LocalCluster`, ACL off) with
``--topics`` topics (4 queues each) and ``--groups`` consumer groups, each group
with a committed offset on one topic, and a console in this process. Then, per
page, ``--rounds`` times:

- time to first byte: a GET over a fresh HTTP connection until the status line
  arrived (the console renders a page whole before it answers, so this is the
  server's time: its calls to the brokers plus the template);
- time to a rendered table: Debian's Chromium (Playwright, ``/usr/bin/chromium``)
  navigates to the page until its table's last row is in the DOM and the load
  event fired (skipped with ``--no-browser``).

Prints the median and the worst of each; asserts nothing.
"""

from __future__ import annotations

import argparse
import http.client
import statistics
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

from boltmq.cli.dev.local_cluster import ClusterSpec, LocalCluster
from boltmq.console.server import ConsoleServer, bind
from boltmq.kernel.channels import sync_channel
from boltmq.v1 import broker_pb2, broker_pb2_grpc, registry_pb2

CHROMIUM = "/usr/bin/chromium"
PAGES = (
    ("overview", "/", "#members"),
    ("topics", "/topics", "#topics"),
    ("groups", "/groups", "#groups"),
    ("one topic", "/topics/Bench0000", "#consumers"),
    ("one group", "/groups/BenchGroup000", "#progress"),
)


def populate(broker: str, topics: int, groups: int) -> None:
    """``topics`` topics of 4 queues; ``groups`` groups, group g committed on topic g."""
    channel = sync_channel(broker)
    stub = broker_pb2_grpc.BrokerServiceStub(channel)
    try:
        for t in range(topics):
            config = registry_pb2.TopicConfig(
                name=f"Bench{t:04d}", read_queue_nums=4, write_queue_nums=4, perm=6
            )
            stub.UpsertTopic(broker_pb2.UpsertTopicRequest(topic=config), timeout=30)
        for g in range(groups):
            name = f"BenchGroup{g:03d}"
            stub.UpsertGroup(broker_pb2.UpsertGroupRequest(group=name), timeout=30)
            stub.UpdateConsumerOffset(
                broker_pb2.UpdateConsumerOffsetRequest(
                    group=name, topic=f"Bench{g % topics:04d}", queue_id=0, offset=0
                ),
                timeout=30,
            )
    finally:
        channel.close()


def first_byte_ms(url: str) -> float:
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=60)
    try:
        start = time.perf_counter()
        connection.request("GET", parts.path or "/")
        response = connection.getresponse()
        elapsed = (time.perf_counter() - start) * 1000
        assert response.status == 200, (url, response.status)
        response.read()
        return elapsed
    finally:
        connection.close()


def rendered_ms(page: object, url: str, table: str) -> float:
    start = time.perf_counter()
    page.goto(url, wait_until="load")  # type: ignore[attr-defined]
    page.wait_for_selector(f"{table} tbody tr:last-child", state="attached")  # type: ignore[attr-defined]
    return (time.perf_counter() - start) * 1000


def summary(values: list[float]) -> str:
    return f"median {statistics.median(values):7.1f} ms  worst {max(values):7.1f} ms"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--topics", type=int, default=1024)
    parser.add_argument("--groups", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-browser", action="store_true")
    args = parser.parse_args(argv)
    if min(args.topics, args.groups, args.rounds) < 1:
        parser.error("--topics, --groups and --rounds must be positive")
    with tempfile.TemporaryDirectory(prefix="bench-console-") as scratch:
        cluster = LocalCluster(ClusterSpec(Path(scratch)))
        cluster.start()
        console = None
        try:
            assert cluster.registry is not None and cluster.members[0].broker is not None
            started = time.perf_counter()
            populate(cluster.members[0].broker.address, args.topics, args.groups)
            print(
                f"{args.topics} topics, {args.groups} groups created in "
                f"{time.perf_counter() - started:.1f} s"
            )
            time.sleep(1.5)  # the broker's next registration carries every topic
            console = ConsoleServer(cluster.registry.address, bind("127.0.0.1", 0)).start()
            first_byte_ms(f"{console.url}/topics")  # warm: channels, templates
            for name, path, _ in PAGES:
                times = [first_byte_ms(console.url + path) for _ in range(args.rounds)]
                print(f"first byte  {name:<10} {summary(times)}")
            if not args.no_browser:
                browse(console.url, args.rounds)
        finally:
            if console is not None:
                console.stop()
            cluster.stop()


def browse(url: str, rounds: int) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page()
        page.set_default_timeout(120_000)
        for name, path, table in PAGES:
            times = [rendered_ms(page, url + path, table) for _ in range(rounds)]
            rows = page.locator(f"{table} tbody tr").count()
            print(f"rendered    {name:<10} {summary(times)}  ({rows} rows)")
        browser.close()


if __name__ == "__main__":
    main()
