"""The console's browser tests share one world: a cluster with the ACL on, a console
process and a browser (:mod:`tests.integration.console.world`)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
from playwright.sync_api import sync_playwright

from boltmq.message import ConsumeResult, Message
from boltmq.producer import Producer
from tests.integration.console.browser import ConsoleProcess, launch, screenshot_dir
from tests.integration.console.world import (
    ADMIN,
    DELAY_LEVELS,
    ORDERS,
    SEED,
    TRACEPARENT,
    XSS,
    Received,
    World,
    consumer,
)
from tests.integration.test_acl import AclCluster
from tests.waiting import wait_until


@pytest.fixture(scope="package")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    tmp = tmp_path_factory.mktemp("console")
    cluster = AclCluster(tmp, SEED, broker_settings=(f"message_delay_level={DELAY_LEVELS}",))
    registry = cluster.registry.address
    console = None
    billing_consumer = None
    try:
        with Producer(registry, "console-test", credentials=ADMIN) as producer:
            before = int(time.time() * 1000)
            sent = [
                producer.send(
                    Message(
                        topic="orders",
                        body=json.dumps({"order": n}).encode(),
                        tags="created",
                        keys=[f"order-{n}"],
                    )
                )
                for n in range(ORDERS)
            ]
            after = int(time.time() * 1000) + 1
            producer.send(
                Message(topic="elsewhere", body=b"not for readers of orders", keys=["mine"])
            )
            producer.send(Message(topic="elsewhere", body=XSS, keys=["xss"], tags="<b>t</b>"))
            producer.send(
                Message(
                    topic="elsewhere",
                    body=b"traced",
                    keys=["traced"],
                    properties={"traceparent": TRACEPARENT},
                )
            )
        billing = Received()

        def listen(messages) -> ConsumeResult:
            with billing.lock:
                billing.bodies += [m.body_bytes() for m in messages]
            return ConsumeResult.SUCCESS

        billing_consumer = consumer(registry, "billing", "orders", listen)
        wait_until(lambda: len(billing.bodies) >= ORDERS, "billing consumed the orders")
        console = ConsoleProcess(registry)
        with sync_playwright() as playwright:
            browser = launch(playwright)
            yield World(
                cluster,
                console,
                browser,
                screenshot_dir(tmp / "screenshots"),
                sent,
                (before, after),
                billing,
                billing_consumer,
            )
            browser.close()
    finally:
        if billing_consumer is not None:
            billing_consumer.shutdown()
        if console is not None:
            console.stop()
        cluster.stop()
