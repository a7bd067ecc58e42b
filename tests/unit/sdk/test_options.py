"""ProducerOptions and PushConsumerOptions: defaults that work, wrong values named at once."""

from __future__ import annotations

import dataclasses

import pytest

from boltmq import Producer, ProducerOptions, PushConsumer, PushConsumerOptions


def test_the_defaults_are_valid_and_the_options_frozen() -> None:
    producer, consumer = ProducerOptions(), PushConsumerOptions()
    assert (producer.send_timeout_ms, producer.linger_ms, producer.batch_size) == (3_000, 5, 256)
    assert producer.natural_batching is True
    assert producer.compress_body_over == 4096  # RocketMQ's compressMsgBodyOverHowmuch
    assert (consumer.model, consumer.consume_from, consumer.consume_threads) == (
        "CLUSTERING",
        "FIRST",
        4,
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        producer.linger_ms = 10  # type: ignore[misc]  # frozen: the test checks it refuses


@pytest.mark.parametrize(
    ("field", "value", "error"),
    [
        ("send_timeout_ms", 0, "ProducerOptions.send_timeout_ms must be positive, not 0"),
        ("batch_size", -1, "ProducerOptions.batch_size must be positive, not -1"),
        ("max_pending", 0, "ProducerOptions.max_pending must be positive"),
        ("default_topic_queue_nums", 0, "default_topic_queue_nums must be positive"),
        ("retry_times", -1, "ProducerOptions.retry_times must be an int >= 0, not -1"),
        ("linger_ms", 1.5, "ProducerOptions.linger_ms must be an int >= 0, not 1.5"),
        ("route_refresh_ms", -5, "route_refresh_ms must be an int >= 0"),
        ("natural_batching", "no", "ProducerOptions.natural_batching must be a bool, not 'no'"),
        ("natural_batching", 0, "ProducerOptions.natural_batching must be a bool, not 0"),
        ("compress_body_over", 0, "ProducerOptions.compress_body_over must be positive, not 0"),
        ("compress_body_over", -4096, "compress_body_over must be positive, not -4096"),
        ("compress_body_over", "4096", "compress_body_over must be positive, not '4096'"),
        ("compress_body_over", 4096.0, "compress_body_over must be positive, not 4096.0"),
        ("compress_body_over", True, "compress_body_over must be positive, not True"),
    ],
)
def test_a_wrong_producer_option_is_a_value_error_naming_it(
    field: str, value: object, error: str
) -> None:
    with pytest.raises(ValueError, match=error):
        ProducerOptions(**{field: value})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("field", "value", "error"),
    [
        ("model", "SOMETIMES", "PushConsumerOptions.model must be one of"),
        ("consume_from", "MIDDLE", "PushConsumerOptions.consume_from must be one of"),
        ("consume_from", "TIMESTAMP", "consume_timestamp_ms \\(epoch ms\\) is set with"),
        ("consume_timestamp_ms", 5, "is set with consume_from='TIMESTAMP', and only then"),
        ("consume_timestamp_ms", -1, "consume_timestamp_ms must be an int >= 0, not -1"),
        ("consume_timestamp_ms", 1.5, "consume_timestamp_ms must be an int >= 0, not 1.5"),
        ("orderly", "yes", "PushConsumerOptions.orderly must be a bool"),
        ("pull_batch_size", 0, "pull_batch_size must be positive, not 0"),
        ("pull_max_bytes", -1, "pull_max_bytes must be positive"),
        ("consume_batch_max_size", 0, "consume_batch_max_size must be positive"),
        ("consume_threads", 0, "consume_threads must be positive"),
        ("rebalance_interval_ms", 0, "rebalance_interval_ms must be positive"),
        ("commit_interval_ms", 0, "commit_interval_ms must be positive"),
        ("rpc_timeout_ms", 0, "rpc_timeout_ms must be positive"),
        ("long_poll_ms", -1, "long_poll_ms must be an int >= 0"),
        ("suspend_on_failure_ms", -1, "suspend_on_failure_ms must be an int >= 0"),
        ("route_refresh_ms", -5, "route_refresh_ms must be an int >= 0, not -5"),
        ("max_reconsume_times", 1.0, "max_reconsume_times must be an int >= 0, not 1.0"),
        ("max_reconsume_times", True, "max_reconsume_times must be an int >= 0, not True"),
    ],
)
def test_a_wrong_push_consumer_option_is_a_value_error_naming_it(
    field: str, value: object, error: str
) -> None:
    with pytest.raises(ValueError, match=error):
        PushConsumerOptions(**{field: value})  # type: ignore[arg-type]


def test_rocketmq_names_and_a_timestamp_are_accepted() -> None:
    for name in ("FIRST", "LAST", "FIRST_OFFSET", "LAST_OFFSET"):
        assert PushConsumerOptions(consume_from=name).consume_from == name
    options = PushConsumerOptions(consume_from="TIMESTAMP", consume_timestamp_ms=1_767_225_600_000)
    assert options.consume_timestamp_ms == 1_767_225_600_000


def test_zero_is_allowed_where_it_means_something() -> None:
    assert ProducerOptions(retry_times=0, linger_ms=0).retry_times == 0  # no retry, no linger
    options = PushConsumerOptions(long_poll_ms=0, suspend_on_failure_ms=0, max_reconsume_times=0)
    assert options.long_poll_ms == 0  # a pull that answers at once


def test_clients_keep_the_options_they_are_given_or_the_defaults() -> None:
    tuned = ProducerOptions(linger_ms=20, retry_times=0)
    producer = Producer("127.0.0.1:1", "pg", options=tuned)  # nothing is contacted yet
    plain = Producer("127.0.0.1:1", "pg")
    consumer = PushConsumer(
        "127.0.0.1:1",
        "cg",
        {"orders": "*"},
        lambda messages: None,
        options=PushConsumerOptions(model="BROADCASTING", consume_threads=2),
    )
    try:
        assert producer.options is tuned and plain.options == ProducerOptions()
        assert consumer.options.consume_threads == 2
        assert not consumer.sends_back  # BROADCASTING retries in place
        assert consumer.retry_topic not in consumer.expressions
    finally:
        for client in (producer.client, plain.client, consumer.client):
            client.close()
