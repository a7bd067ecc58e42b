"""The web console in a real browser (Debian's Chromium through Playwright) against a
real cluster with the ACL on: one cluster, one console process and one browser for
the module.

Accounts: an admin; ``reader`` (SUB on ``orders`` and on group ``billing``: read-only,
no admin calls); ``outsider`` (rights on another topic only).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import urllib.request
from playwright.sync_api import Browser, sync_playwright

from boltmq.kernel.signing import Credentials
from boltmq.message import ConsumeResult, Message
from boltmq.options import PushConsumerOptions
from boltmq.producer import Producer
from boltmq.push_consumer import PushConsumer
from boltmq.v1 import broker_pb2
from tests.integration.console.browser import ConsoleProcess, Visitor, launch, screenshot_dir
from tests.integration.test_acl import AclCluster
from tests.waiting import wait_until

ADMIN = Credentials("console-admin", "console-admin-secret")
READER = Credentials("reader-app", "reader-secret-1")
OUTSIDER = Credentials("outsider-app", "outsider-secret-1")
SEED = {
    "accounts": [
        {"accessKey": ADMIN.access_key, "secretKey": ADMIN.secret_key, "admin": True},
        {
            "accessKey": READER.access_key,
            "secretKey": READER.secret_key,
            "topicPerms": {"orders": "SUB"},
            "groupPerms": {"billing": "SUB"},
        },
        {
            "accessKey": OUTSIDER.access_key,
            "secretKey": OUTSIDER.secret_key,
            "topicPerms": {"elsewhere": "PUB|SUB"},
        },
    ]
}
DELAY_LEVELS = " ".join(f"{100 + 10 * n}ms" for n in range(18))
"""Retries come back within a fraction of a second: a dead letter forms quickly."""
ORDERS = 12


@dataclass
class Received:
    bodies: list[bytes] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def count(self, body: bytes) -> int:
        with self.lock:
            return self.bodies.count(body)


@dataclass
class World:
    cluster: AclCluster
    console: ConsoleProcess
    browser: Browser
    shots: Path
    sent: list  # SendResults of the orders, in order
    sent_between: tuple[int, int]
    billing: Received
    consumer: PushConsumer

    def visitor(self, credentials: Credentials | None = None) -> Visitor:
        visitor = Visitor(self.browser, self.console.url, self.shots)
        if credentials is not None:
            visitor.login(credentials.access_key, credentials.secret_key)
            visitor.page.wait_for_selector("h1:has-text('Overview')")
        return visitor

    def topics(self) -> set[str]:
        answer = self.cluster.stub(ADMIN).ListTopics(broker_pb2.ListTopicsRequest(), timeout=10)
        return {t.name for t in answer.topics}


def consumer(registry: str, group: str, topic: str, listener, **options) -> PushConsumer:
    return PushConsumer(
        registry,
        group,
        {topic: "*"},
        listener,
        credentials=ADMIN,
        options=PushConsumerOptions(
            long_poll_ms=500, rebalance_interval_ms=1_000, commit_interval_ms=200, **options
        ),
    ).start()


@pytest.fixture(scope="module")
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
            producer.send(Message(topic="elsewhere", body=b"not for readers of orders"))
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


def test_without_login_every_page_sends_to_the_login_form_and_bad_logins_are_refused(
    world: World,
) -> None:
    visitor = world.visitor()
    try:
        for path in ("/", "/topics", "/groups/billing", "/messages", "/access"):
            visitor.page.goto(f"{world.console.url}{path}")
            assert visitor.page.url.endswith("/login"), path
        visitor.login(ADMIN.access_key, "a-wrong-secret")
        assert "refused" in visitor.page.inner_text(".error")
        visitor.login("no such key!", "whatever-secret")
        assert visitor.page.locator(".error").count() == 1
        # a login without the form's CSRF token is refused before the brokers are asked
        answer = visitor.context.request.post(
            f"{world.console.url}/login",
            form={"access_key": ADMIN.access_key, "secret_key": ADMIN.secret_key},
            max_redirects=0,
        )
        assert answer.status == 403
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(f"{world.console.url}/api/rates", timeout=10)
    finally:
        visitor.close()


def test_every_page_shows_the_clusters_data_without_browser_errors(world: World) -> None:
    admin = world.visitor(ADMIN)
    try:
        page = admin.open("/")
        row = page.locator("#members tbody tr").first
        assert "broker-a" in row.inner_text() and "master" in row.inner_text()
        assert world.cluster.broker.address in row.inner_text()
        page.wait_for_selector("#rates .uplot", timeout=20_000)  # the live chart drew
        admin.shoot("overview")

        page = admin.open("/topics?q=ord")
        names = page.locator("#topics tbody td:first-child").all_inner_texts()
        assert names == ["orders"]
        admin.shoot("topics")

        page = admin.open("/topics/orders")
        max_offsets = [int(x) for x in page.locator("#queues tbody td:nth-child(4)").all_inner_texts()]
        assert sum(max_offsets) == ORDERS
        assert "broker-a" in page.inner_text("#route")
        consumers = page.locator("#consumers tbody tr").all_inner_texts()
        assert any(line.split()[:1] == ["billing"] and line.split()[-1] == "0" for line in consumers)
        admin.shoot("topic")

        page = admin.open("/groups")
        assert "billing" in page.inner_text("#groups")
        admin.shoot("groups")

        page = admin.open("/groups/billing")
        members = page.inner_text("#members tbody")
        assert world.consumer.client.client_id in members
        assert "PYTHON" in members.upper()
        assert page.inner_text("#total-lag") == "0"
        admin.shoot("group")

        page = admin.open("/messages?by=key&topic=orders&key=order-3")
        assert page.inner_text("#found-count").startswith("1 ")
        assert page.inner_text("article .keys") == "order-3"
        page.click("article button[data-view=json]")
        assert json.loads(page.inner_text("article pre.body-json")) == {"order": 3}
        admin.shoot("messages")

        page = admin.open("/access")
        accounts = page.inner_text("#accounts")
        assert READER.access_key in accounts and OUTSIDER.access_key in accounts
        content = page.content()
        assert not [s for s in (ADMIN.secret_key, READER.secret_key) if s in content]
        admin.shoot("access")
        assert admin.problems == []
    finally:
        admin.close()
