"""Name rules and BrokerConfig validation: every bad value is one clear error."""

from __future__ import annotations

import pytest

from boltmq.kernel.config import ConfigError, load_config
from services.broker.config import BrokerConfig
from services.broker.errors import InvalidArgument
from services.broker.metadata.names import (
    check_client_id,
    check_group,
    check_subscription,
    check_topic,
)


@pytest.mark.parametrize("topic", ["orders", "%RETRY%g1", "a|b", "A_b-9", "x" * 127])
def test_valid_topics_pass(topic: str) -> None:
    assert check_topic("topic", topic) == topic


@pytest.mark.parametrize(
    ("topic", "reason"),
    [
        ("", "required"),
        ("x" * 128, "at most 127"),
        ("../etc", "may only use"),
        ("a.b", "may only use"),
        ("a/b", "may only use"),
        ("a b", "may only use"),
        ("t@g", "may only use"),
    ],
)
def test_invalid_topics_name_the_field(topic: str, reason: str) -> None:
    with pytest.raises(InvalidArgument, match=f"^messages\\[0\\].topic: .*{reason}"):
        check_topic("messages[0].topic", topic)


@pytest.mark.parametrize("group", ["", "g/1", "g@1", "x" * 256])
def test_invalid_groups_name_the_field(group: str) -> None:
    with pytest.raises(InvalidArgument, match="^consumer_group: "):
        check_group("consumer_group", group)


def test_client_ids_must_be_present_and_printable() -> None:
    assert check_client_id("client_id", "10.0.0.1@123") == "10.0.0.1@123"
    for bad in ("", "a\nb", "x" * 256):
        with pytest.raises(InvalidArgument, match="^client_id: "):
            check_client_id("client_id", bad)


@pytest.mark.parametrize("expression", ["", "*", "A", "A || B", " A||B "])
def test_valid_subscriptions_pass(expression: str) -> None:
    assert check_subscription("subscription", expression) == expression


@pytest.mark.parametrize("expression", ["A ||", "|| B", "A |||| B"])
def test_subscriptions_with_empty_tags_name_the_field(expression: str) -> None:
    with pytest.raises(InvalidArgument, match="^subscription: empty tag"):
        check_subscription("subscription", expression)


def test_config_defaults_match_the_design() -> None:
    config = BrokerConfig()
    assert config.listen_port == 10911
    assert config.store_address == "127.0.0.1:10913"
    assert config.registry_address_list == ("127.0.0.1:9876",)
    assert config.max_message_size_bytes == 4 * 1024 * 1024
    assert (config.register_interval_ms, config.offset_persist_interval_ms) == (30_000, 5_000)


def test_registry_addresses_are_a_comma_list() -> None:
    config = load_config(
        BrokerConfig, env={}, overrides={"registry_addresses": "10.0.0.1:9876, 10.0.0.2:9876,"}
    )
    assert config.registry_address_list == ("10.0.0.1:9876", "10.0.0.2:9876")
    assert (
        load_config(
            BrokerConfig, env={}, overrides={"registry_addresses": ""}
        ).registry_address_list
        == ()
    )


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("store_address", "nohost", "host:port"),
        ("registry_addresses", "a:1,b", "host:port"),
        ("broker_name", "a/b", "broker_name"),
        ("cluster_name", "", "cluster_name"),
        ("long_poll_max_ms", "0", "long_poll_max_ms must be positive"),
        ("default_topic_queue_nums", "2000", "default_topic_queue_nums"),
        ("broker_id", "-1", "broker_id"),
    ],
)
def test_bad_settings_are_one_clear_error(name: str, value: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(BrokerConfig, env={}, overrides={name: value})
