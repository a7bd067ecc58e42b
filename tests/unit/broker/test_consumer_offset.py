"""ConsumerOffsetManager: commits, queries, change counting, consumerOffset.json."""

from __future__ import annotations

import json

import pytest

from services.broker.errors import CorruptMetadata
from services.broker.metadata.consumer_offset import ConsumerOffsetManager


def test_commit_then_query_per_group_topic_and_queue() -> None:
    offsets = ConsumerOffsetManager()
    offsets.commit("g1", "orders", 0, 12)
    offsets.commit("g1", "orders", 1, 7)
    offsets.commit("g2", "orders", 0, 3)
    assert offsets.query("g1", "orders", 0) == 12
    assert offsets.query("g1", "orders", 1) == 7
    assert offsets.query("g2", "orders", 0) == 3
    assert offsets.query("g2", "orders", 1) is None
    assert offsets.query("g1", "payments", 0) is None
    assert offsets.offsets_of_group("g1") == {"orders": {0: 12, 1: 7}}
    assert offsets.groups() == {"g1", "g2"}


def test_the_newest_commit_wins_even_when_smaller() -> None:
    offsets = ConsumerOffsetManager()
    offsets.commit("g1", "orders", 0, 12)
    offsets.commit("g1", "orders", 0, 4)
    assert offsets.query("g1", "orders", 0) == 4


def test_version_moves_only_on_change() -> None:
    offsets = ConsumerOffsetManager()
    offsets.commit("g1", "orders", 0, 12)
    version = offsets.version
    offsets.commit("g1", "orders", 0, 12)
    assert offsets.version == version
    offsets.commit("g1", "orders", 0, 13)
    assert offsets.version == version + 1


def test_json_is_keyed_topic_at_group_and_round_trips() -> None:
    offsets = ConsumerOffsetManager()
    offsets.commit("g1", "orders", 0, 12)
    offsets.commit("g1", "orders", 3, 1)
    offsets.commit("%RETRY%g1", "%RETRY%g1", 0, 2)
    document = json.loads(offsets.to_json())
    assert document == {
        "offsetTable": {"orders@g1": {"0": 12, "3": 1}, "%RETRY%g1@%RETRY%g1": {"0": 2}}
    }
    loaded = ConsumerOffsetManager()
    loaded.load_json(offsets.to_json())
    assert loaded.offsets_of_group("g1") == {"orders": {0: 12, 3: 1}}
    assert loaded.query("%RETRY%g1", "%RETRY%g1", 0) == 2


def test_deleting_a_topic_forgets_every_group_on_it() -> None:
    offsets = ConsumerOffsetManager()
    offsets.commit("g1", "orders", 0, 12)
    offsets.commit("g2", "orders", 0, 3)
    offsets.commit("g1", "payments", 0, 5)
    assert offsets.delete_topic("orders")
    assert offsets.query("g1", "orders", 0) is None
    assert offsets.query("g2", "orders", 0) is None
    assert offsets.query("g1", "payments", 0) == 5
    assert not offsets.delete_topic("orders")


@pytest.mark.parametrize(
    "content",
    [
        b"{",
        b'{"offsetTable": {"no-separator": {"0": 1}}}',
        b'{"offsetTable": {"t@g": {"x": 1}}}',
        b'{"offsetTable": {"t@g": {"0": "1"}}}',
        b'{"offsetTable": {"t@g": [1]}}',
        b'{"offsetTable": {"../t@g": {"0": 1}}}',
    ],
)
def test_a_corrupt_offsets_file_is_a_named_error(content: bytes) -> None:
    with pytest.raises(CorruptMetadata, match="consumerOffset.json"):
        ConsumerOffsetManager().load_json(content)
