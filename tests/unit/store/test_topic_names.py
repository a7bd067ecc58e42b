"""Topic names and subscription expressions (boltmq/wire/topic.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from boltmq.wire.topic import InvalidSubscription, InvalidTopic, parse_subscription, validate_topic
from services.store import MessageStore, PutStatus, StoreMessage
from tests.unit.store.record_spec import java_hash_reference

# --------------------------------------------------------------------------- topic names


@pytest.mark.parametrize("topic", ["T", "%RETRY%group-1", "a|b", "Az_09-", "t" * 127])
def test_valid_topics(topic: str) -> None:
    assert validate_topic(topic) == topic


@pytest.mark.parametrize(
    "topic",
    [
        "",
        ".",
        "..",
        "/",
        "a/b",
        "../etc",
        "a.b",
        "t" * 128,
        "a b",
        "é",
        "a\x00b",
        "a\tb",
        "\x7f",
        "abc\n",
        "abc\r",
        "\nabc",
    ],
)
def test_invalid_topics(topic: str) -> None:
    with pytest.raises(InvalidTopic):
        validate_topic(topic)


@pytest.mark.parametrize("topic", [None, 5, b"T", ["T"]])
def test_non_string_topics(topic: object) -> None:
    with pytest.raises(InvalidTopic):
        validate_topic(topic)


class _Pretender(str):
    """A str that passes for the valid name "Known" in a set (its hash, an equality that
    says yes to everything)."""

    def __eq__(self, other: object) -> bool:
        return True

    def __hash__(self) -> int:
        return hash("Known")


def test_remembered_valid_names_let_no_bad_name_through() -> None:
    """Valid names are remembered (a store checks every append's): a bad name is refused
    every time, a str subclass is never taken for a remembered name, and past the
    memory's bound every name is still checked."""
    assert validate_topic("Known") == "Known"
    for _ in range(2):
        with pytest.raises(InvalidTopic):
            validate_topic("a/b")
    with pytest.raises(InvalidTopic):
        validate_topic(_Pretender("a/b"))
    names = [f"T{n}" for n in range(5000)]
    assert [validate_topic(name) for name in names] == names
    with pytest.raises(InvalidTopic):
        validate_topic("../etc")


@pytest.mark.parametrize("topic", ["..", "a/b", "abc\n"])
def test_store_never_makes_a_directory_for_a_bad_topic(
    make_store: Callable[..., MessageStore], tmp_path: Path, topic: str
) -> None:
    store = make_store()
    assert (
        store.put_message(StoreMessage(topic=topic, body=b"x")).status == PutStatus.MESSAGE_ILLEGAL
    )
    store.wait_dispatched()
    queue_root = tmp_path / "store" / "consumequeue"
    assert not queue_root.exists() or list(queue_root.iterdir()) == []


# --------------------------------------------------------------------------- subscriptions


@pytest.mark.parametrize("expression", ["*", "", None, "  *  ", "tagA || *"])
def test_subscriptions_that_match_everything(expression: str | None) -> None:
    sub = parse_subscription(expression)
    assert sub.matches_all and sub.expression == "*"
    assert sub.matches_code(12345) and sub.matches_tag(None) and sub.matches_tag("x")


def test_tag_subscription() -> None:
    sub = parse_subscription(" tagA ||tagB|| tagC ")
    assert not sub.matches_all
    assert sub.tags == {"tagA", "tagB", "tagC"}
    assert sub.codes == {java_hash_reference(t) for t in ("tagA", "tagB", "tagC")}
    assert sub.matches_tag("tagB") and not sub.matches_tag("tagD") and not sub.matches_tag(None)
    assert sub.matches_code(java_hash_reference("tagC"))
    assert not sub.matches_code(java_hash_reference("tagD")) and not sub.matches_code(0)
    single = parse_subscription("tagA")
    assert single.tags == {"tagA"} and not single.matches_tag("taga")


@pytest.mark.parametrize("expression", ["tagA ||", "|| tagA", "tagA || || tagB", "||"])
def test_subscriptions_with_an_empty_tag_are_invalid(expression: str) -> None:
    with pytest.raises(InvalidSubscription):
        parse_subscription(expression)
