"""What the console's browser tests see: one cluster with the ACL on, one console
process and one browser for the package (the ``world`` fixture of conftest.py).

Accounts: an admin; ``reader`` (SUB on ``orders`` and on group ``billing``: read-only,
no admin calls); ``outsider`` (rights on another topic only). The cluster holds
``ORDERS`` orders (topic ``orders``, keys ``order-N``, consumed by the live group
``billing``) and, in topic ``elsewhere``, a message of the outsider's, one whose body
is markup, and one with a ``traceparent``.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path

from playwright.sync_api import Browser

from boltmq.kernel.signing import Credentials
from boltmq.options import PushConsumerOptions
from boltmq.push_consumer import PushConsumer
from boltmq.v1 import broker_pb2
from tests.integration.console.browser import ConsoleProcess, Visitor
from tests.integration.test_acl import AclCluster

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
XSS = b'<img src=x onerror="window.pwned=1"><script>window.pwned=2</script>'
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"


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
