"""The web console's pages in a real browser (Debian's Chromium through Playwright)
against a real cluster with the ACL on (the package's ``world``): logins, every page
with the cluster's data, reset offsets, dead letters, lookups, rights, CSRF."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from datetime import UTC, datetime

import pytest

from boltmq.message import ConsumeResult, Message
from boltmq.producer import Producer
from tests.integration.console.world import (
    ADMIN,
    ORDERS,
    OUTSIDER,
    READER,
    XSS,
    Received,
    World,
    consumer,
)
from tests.waiting import wait_until


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
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"{world.console.url}/api/rates", timeout=10)
        refused.value.close()  # the error holds the answer's connection
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
        max_offsets = [
            int(x) for x in page.locator("#queues tbody td:nth-child(4)").all_inner_texts()
        ]
        assert sum(max_offsets) == ORDERS
        begin, end = world.sent_between
        stored = [
            datetime.fromisoformat(text).timestamp() * 1000
            for text in page.locator("#queues tbody td.last-stored").all_inner_texts()
        ]
        assert len(stored) == len(max_offsets) and all(begin <= ms <= end for ms in stored)
        route = page.inner_text("#route tbody")
        assert route.split("\t")[:4] == ["broker-a", "4", "4", "RW"], route
        consumers = page.locator("#consumers tbody tr").all_inner_texts()
        assert any(
            line.split()[:1] == ["billing"] and line.split()[-1] == "0" for line in consumers
        )
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


def test_reset_offset_moves_a_live_consumer_back(world: World) -> None:
    """Reset on the group's page, to the earliest offset and then to a time: the running
    billing consumer gets every order again each time, without a restart; a reset to
    the latest offset leaves it nothing to read."""
    admin = world.visitor(ADMIN)
    first_order = json.dumps({"order": 0}).encode()

    def reset(to: str, time_text: str = "") -> str:
        page = admin.open("/groups/billing")
        page.select_option("#reset select[name=topic]", "orders")
        page.select_option("#reset select[name=to]", to)
        if time_text:
            page.fill("#reset input[name=time]", time_text)
        page.click("#reset button")
        return page.inner_text(".notice")

    try:
        assert "orders/0" in reset("earliest")
        wait_until(lambda: world.billing.count(first_order) == 2, "the first order again")
        wait_until(lambda: len(world.billing.bodies) == 2 * ORDERS, "every order again")
        # the second the orders were sent in (the form's datetime-local: UTC, whole seconds)
        begin, _ = world.sent_between
        moment = datetime.fromtimestamp(begin // 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S")
        assert "orders/0" in reset("time", moment)
        wait_until(lambda: world.billing.count(first_order) == 3, "the orders of that time")
        wait_until(lambda: len(world.billing.bodies) == 3 * ORDERS, "every order a third time")
        notice = reset("latest")
        assert sum(int(line.split()[-1]) for line in notice.splitlines()) == ORDERS  # the ends
        page = admin.open("/groups/billing")
        assert page.inner_text("#total-lag") == "0"
        assert len(world.billing.bodies) == 3 * ORDERS  # nothing read after the last reset
        assert admin.problems == []
    finally:
        admin.close()


def test_a_dead_letter_is_listed_resent_and_consumed(world: World) -> None:
    """A group whose listener fails a message exhausts its retries (retry max times set
    on the console); the dead letter shows on the group's page, is resent from there,
    and the group consumes it."""
    registry = world.cluster.registry.address
    healthy = threading.Event()
    seen = Received()

    def listen(messages) -> ConsumeResult:
        with seen.lock:
            seen.bodies += [m.body_bytes() for m in messages]
        return ConsumeResult.SUCCESS if healthy.is_set() else ConsumeResult.RECONSUME_LATER

    with Producer(registry, "console-test", credentials=ADMIN) as producer:
        producer.send(Message(topic="poison", body=b"poison-pill"))
    admin = world.visitor(ADMIN)
    failing = None
    try:
        page = admin.open("/groups/poisoned")  # the group exists once its settings are saved
        page.fill("#retry input[name=retry_max_times]", "2")
        page.click("#retry button")
        assert "retry max times 2" in page.inner_text(".notice")
        assert page.inner_text(".retry-max") == "2"
        failing = consumer(registry, "poisoned", "poison", listen)

        def listed() -> bool:
            return admin.open("/groups/poisoned").locator("#dead-letters tbody tr").count() == 1

        wait_until(listed, "the dead letter on the group's page")
        assert "poison" in page.inner_text("#dead-letters tbody")
        delivered = seen.count(b"poison-pill")
        assert delivered == 3  # the first delivery and two retries
        healthy.set()
        page.check("#dead-letters input[name=letter]")
        page.click("#resend button")
        assert "SEND_OK" in page.inner_text(".notice")
        wait_until(lambda: seen.count(b"poison-pill") == delivered + 1, "the resent letter")
        assert admin.problems == []
    finally:
        if failing is not None:
            failing.shutdown()
        admin.close()


def test_messages_are_found_by_offset_id_unique_id_key_and_time(world: World) -> None:
    admin = world.visitor(ADMIN)
    reader = world.visitor(READER)
    try:
        target = world.sent[5]
        page = admin.open(f"/messages?by=id&id={target.msg_id}")
        assert page.inner_text("#found-count").startswith("1 ")
        assert page.get_attribute("article", "data-msg-id") == target.msg_id
        assert page.inner_text("article .keys") == "order-5"
        # its track: the live group reading orders has it, consumed or about to be
        state = page.inner_text("article table.track tr[data-group=billing] .state")
        assert state in ("CONSUMED", "NOT_CONSUMED_YET")
        # a unique id, by an account with SUB on the topic (no admin call needed)
        page = reader.open(f"/messages?by=id&id={target.unique_id}")
        assert page.inner_text("article .unique-id") == target.unique_id
        assert page.inner_text("article .track-note") == "Track: the track needs an admin account"
        assert page.inner_text("article .keys") == "order-5"
        page.click("article button[data-view=hex]")
        assert page.is_visible("article pre.body-hex")
        assert not page.is_visible("article pre.body-text")
        assert page.inner_text("article pre.body-hex").startswith("00000000  7b 22 6f 72")  # {"or
        # every order stored in the range, read as a group, none from outside it
        begin, end = world.sent_between
        page = admin.open(f"/messages?by=time&topic=orders&begin={begin}&end={end}&group=billing")
        assert page.inner_text("#found-count") == f"{ORDERS} message(s)"
        keys = set(page.locator("article .keys").all_inner_texts())
        assert keys == {f"order-{n}" for n in range(ORDERS)}
        page = admin.open(
            f"/messages?by=time&topic=orders&begin={end}&end={end + 60_000}&group=billing"
        )
        assert page.inner_text("#found-count") == "0 message(s)"
        # a body and tags that are markup are shown as text, never run
        page = admin.open("/messages?by=key&topic=elsewhere&key=xss")
        assert page.inner_text("article pre.body-text") == XSS.decode()
        assert page.evaluate("window.pwned") is None
        assert page.locator("article img, article script, article b").count() == 0
        page = admin.open("/messages?by=key&topic=orders&key=no-such-key")
        assert page.inner_text("#found-count") == "0 message(s)"
        page = admin.open(
            "/messages?by=time&topic=orders&begin=2026-01-02T00:00&end=2026-01-01T00:00"
        )
        assert "the start must be before the end" in page.inner_text(".error")
        assert admin.problems == [] and reader.problems == []
    finally:
        admin.close()
        reader.close()


def test_a_read_only_account_sees_no_buttons_and_its_changes_are_refused(world: World) -> None:
    reader = world.visitor(READER)
    try:
        assert "(read-only)" in reader.page.inner_text("header")
        assert reader.page.locator("nav a[href='/access']").count() == 0
        for path, form in (
            ("/topics", "#topic-create"),
            ("/topics/orders", "#send"),
            ("/groups/billing", "#reset"),
            ("/groups/billing", "#retry"),
        ):
            page = reader.open(path)
            assert page.locator(form).count() == 0, path
            assert page.locator("main form[method=post]").count() == 0, path
        reader.shoot("read-only-group")
        token = reader.csrf()
        for path, form in (
            ("/topics", {"name": "sneaky", "queues": "4", "perm": "6"}),
            ("/topics/orders/delete", {}),
            ("/groups/billing/reset", {"topic": "orders", "to": "latest"}),
            (
                "/access/account",
                {"access_key": "sneaky-admin", "secret_key": "sneaky-secret", "admin": "on"},
            ),
        ):
            answer = reader.context.request.post(
                f"{world.console.url}{path}", form={"csrf": token, **form}, max_redirects=0
            )
            assert answer.status == 403, path
        page = reader.open("/topics")
        assert "sneaky" not in world.topics() and "orders" in world.topics()
        response = reader.page.goto(f"{world.console.url}/access")
        assert response is not None and response.status == 403
    finally:
        reader.close()


def test_a_change_without_the_csrf_token_is_refused(world: World) -> None:
    admin = world.visitor(ADMIN)
    try:
        for token in ("", "forged-token"):
            answer = admin.context.request.post(
                f"{world.console.url}/topics",
                form={"csrf": token, "name": "forged", "queues": "4", "perm": "6"},
                max_redirects=0,
            )
            assert answer.status == 403
        assert "forged" not in world.topics()
        # the same form with the page's token goes through
        page = admin.open("/topics")
        page.fill("#topic-create input[name=name]", "made-here")
        page.fill("#topic-create input[name=queues]", "3")
        page.click("#topic-create button")
        assert "made-here queues 3/3" in page.inner_text(".notice")
        assert "made-here" in world.topics()
        page.once("dialog", lambda dialog: dialog.accept())
        page.click("#topic-delete button")
        assert "made-here deleted" in page.inner_text(".notice")
        assert "made-here" not in world.topics()
        assert admin.problems == []
    finally:
        admin.close()


def test_an_account_without_rights_on_a_topic_cannot_see_its_messages(world: World) -> None:
    outsider = world.visitor(OUTSIDER)
    try:
        page = outsider.open("/messages?by=key&topic=orders&key=order-1")
        assert "PERMISSION_DENIED" in page.inner_text(".error")
        assert page.locator("article").count() == 0
        page = outsider.open(f"/messages?by=id&id={world.sent[1].unique_id}")
        assert page.locator("article").count() == 0
        page = outsider.open(f"/messages?by=id&id={world.sent[1].msg_id}")  # ViewMessage: admin
        assert page.locator("article").count() == 0
        begin, end = world.sent_between
        page = outsider.open(
            f"/messages?by=time&topic=orders&begin={begin}&end={end}&group=billing"
        )
        assert page.locator("article").count() == 0
        assert "PERMISSION_DENIED" in page.inner_text(".error")
        # its own topic's message is there for it
        page = outsider.open("/messages?by=key&topic=elsewhere&key=mine")
        assert page.inner_text("#found-count") == "1 message(s)"
        assert page.inner_text("article .topic") == "elsewhere"
        assert outsider.problems == []
    finally:
        outsider.close()


def test_bad_inputs_are_refused_with_clear_notices(world: World) -> None:
    admin = world.visitor(ADMIN)
    try:
        admin.open("/topics")
        token = admin.csrf()

        def post(path: str, form: dict[str, str]) -> str:
            answer = admin.context.request.post(
                f"{world.console.url}{path}", form={"csrf": token, **form}, max_redirects=0
            )
            assert answer.status == 303, (path, answer.status)
            # the page the change goes back to shows its notice once
            admin.page.goto(world.console.url + answer.headers["location"])
            return admin.page.inner_text(".notice")

        assert "may only use" in post("/topics", {"name": "bad name!", "queues": "4", "perm": "6"})
        assert "queues: between 1 and 1024, not 0" in post(
            "/topics", {"name": "fine", "queues": "0", "perm": "6"}
        )
        assert "queues and perm are numbers" in post(
            "/topics", {"name": "fine", "queues": "many", "perm": "6"}
        )
        assert "perm: READ 4 | WRITE 2 | INHERIT 1 (0..7), not 9" in post(
            "/topics", {"name": "fine", "queues": "4", "perm": "9"}
        )
        assert "fine" not in world.topics()
        assert "reset to: time, earliest or latest, not 'yesterday'" in post(
            "/groups/billing/reset", {"topic": "orders", "to": "yesterday"}
        )
        assert "is not a time" in post(
            "/groups/billing/reset", {"topic": "orders", "to": "time", "time": "soon"}
        )
        assert "bad letter 'broker-a:x'" in post("/groups/billing/resend", {"letter": "broker-a:x"})
        assert "choose dead letters first" in post("/groups/billing/resend", {})
        assert "retry max times: between 1 and 1000, not 0" in post(
            "/groups/billing/retry", {"retry_max_times": "0"}
        )
        assert "topic rights: NAME=PERM" in post(
            "/access/account",
            {"access_key": "new-app", "secret_key": "new-app-secret", "topic_perms": "orders"},
        )
        page = admin.open("/messages?by=id&id=has%20space")
        assert "message id: give one without spaces" in page.inner_text(".error")
        page = admin.open("/messages?by=sideways")
        assert "look up by id, key or time, not 'sideways'" in page.inner_text(".error")
        page = admin.open("/topics/no-such-topic")
        assert "topic 'no-such-topic' is unknown on every master" in page.inner_text(".error")
        page = admin.open("/groups/bad%20group")
        assert "may only use" in page.inner_text(".error")
        assert admin.problems == []
    finally:
        admin.close()
