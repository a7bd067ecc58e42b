"""The SDK's message encoding: what ``Producer`` sends is one CommitLog record per message."""

from __future__ import annotations

import pytest

from boltmq.message import Message, MessageError
from services.store.record import decode_record


def test_to_record_carries_every_field_a_consumer_sees() -> None:
    msg = Message(topic="T", body=b"hi", tags="A", keys=["k1"], properties={"p": "v"}, flag=3)
    view = decode_record(memoryview(msg.to_record(born_timestamp_ms=42)), 0, check_crc=True)
    assert (view.topic, bytes(view.body), view.tags, view.keys, view.properties["p"],
            view.flag, view.born_timestamp) == ("T", b"hi", "A", ["k1"], "v", 3, 42)


@pytest.mark.parametrize("msg, reason", [
    (Message(topic="", body=b"x"), "topic"),
    (Message(topic="T", body="text"), "body must be bytes"),  # type: ignore[arg-type]
    (Message(topic="T", body=b"x", keys="k"), "keys"),
    (Message(topic="T", body=b"x", keys=["a b"]), "key"),
    (Message(topic="T", body=b"x", keys=[7]), "T"),  # type: ignore[list-item]
    (Message(topic="T", body=b"x", properties={"a": "b\x02"}), "separator"),
    (Message(topic="T", body=b"x", properties={"a": "v" * 40_000}), "32767"),
    (Message(topic="T", body=b"x", flag=1 << 40), "flag"),
])
def test_to_record_refuses_what_no_store_accepts_with_a_message_error(msg: Message,
                                                                      reason: str) -> None:
    with pytest.raises(MessageError, match=reason):
        msg.to_record()
