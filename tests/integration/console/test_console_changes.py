"""Changes made through the console's forms, in the browser (the package's ``world``):
a test message sent from a topic's page and found again, an account created on the
Access page (its secret never shown again) that can log in, and a message's trace id."""

from __future__ import annotations

from tests.integration.console.world import ADMIN, TRACE_ID, World


def test_a_test_message_sent_from_the_topic_page_is_stored_and_found(world: World) -> None:
    admin = world.visitor(ADMIN)
    try:
        page = admin.open("/topics/elsewhere")
        page.fill("#send textarea[name=body]", '{"hello": "console"}')
        page.fill("#send input[name=tags]", "manual")
        page.fill("#send input[name=keys]", "sent-from-console second-key")
        page.click("#send button")
        notice = page.inner_text(".notice")
        assert notice.startswith("SEND_OK msg id ")
        msg_id = notice.split()[3]
        page = admin.open("/messages?by=key&topic=elsewhere&key=sent-from-console")
        assert page.inner_text("#found-count") == "1 message(s)"
        assert page.get_attribute("article", "data-msg-id") == msg_id
        assert page.inner_text("article .keys") == "sent-from-console second-key"
        page.click("article button[data-view=json]")
        assert page.inner_text("article pre.body-json") == '{\n  "hello": "console"\n}'
        assert admin.problems == []
    finally:
        admin.close()


def test_an_account_made_on_the_access_page_logs_in_and_its_secret_is_never_shown(
    world: World,
) -> None:
    admin = world.visitor(ADMIN)
    secret = "made-on-the-console-9"
    try:
        page = admin.open("/access")
        page.fill("#account input[name=access_key]", "console-made")
        page.fill("#account input[name=secret_key]", secret)
        page.fill("#account textarea[name=topic_perms]", "orders=SUB")
        page.fill("#account textarea[name=group_perms]", "billing=SUB")
        page.click("#account button")
        assert "account console-made set" in page.inner_text(".notice")
        row = page.locator("#accounts tbody tr", has_text="console-made").inner_text()
        assert "orders=SUB" in row and "billing=SUB" in row
        assert secret not in page.content()
        assert page.input_value("#account input[name=secret_key]") == ""
        made = world.visitor()
        try:
            made.login("console-made", secret)
            made.page.wait_for_selector("h1:has-text('Overview')")
            assert "console-made (read-only)" in made.page.inner_text("header")
            assert "orders" in made.open("/topics").inner_text("#topics")
        finally:
            made.close()
        page.once("dialog", lambda dialog: dialog.accept())
        page.locator("#accounts tbody tr", has_text="console-made").locator("button").click()
        assert "account console-made deleted" in page.inner_text(".notice")
        gone = world.visitor()
        try:
            gone.login("console-made", secret)
            assert "refused" in gone.page.inner_text(".error")
        finally:
            gone.close()
        assert admin.problems == []
    finally:
        admin.close()


def test_a_message_shows_its_trace_id(world: World) -> None:
    admin = world.visitor(ADMIN)
    try:
        page = admin.open("/messages?by=key&topic=elsewhere&key=traced")
        assert page.inner_text("article .trace-id") == TRACE_ID
        page = admin.open("/messages?by=key&topic=elsewhere&key=mine")
        assert page.inner_text("article .trace-id") == "-"
        assert admin.problems == []
    finally:
        admin.close()
