"""Unique message ids: their format, their uniqueness, and how records carry them."""

from __future__ import annotations

import datetime
import itertools
import re
import threading

import pytest

from boltmq.message import Message, batch_records, message_unique_ids
from boltmq.unique_id import MANY_AS_ARRAY, UniqueIds, new_unique_id, new_unique_ids
from boltmq.wire.record import decode_records
from boltmq.wire.record_batch import derive_properties, send_record_parts
from boltmq.wire.record_encoding import InvalidMessage

HEX32 = re.compile(r"[0-9A-F]{32}")


def test_an_id_is_32_hex_digits_with_the_process_prefix_and_the_month_time() -> None:
    ids = UniqueIds()
    now = datetime.datetime(2026, 3, 5, 1, 2, 3, 4000, datetime.UTC)
    now_ms = int(now.timestamp() * 1000)
    first, second = ids.new(now_ms), ids.new(now_ms)
    assert HEX32.fullmatch(first) and HEX32.fullmatch(second)
    assert first[:20] == second[:20]  # ip, pid, per-process random
    month_ms = ((4 * 24 + 1) * 3600 + 2 * 60 + 3) * 1000 + 4
    assert int(first[20:28], 16) == month_ms
    assert (int(second[28:], 16) - int(first[28:], 16)) % 65536 == 1


def test_the_time_restarts_with_each_month() -> None:
    ids = UniqueIds()
    end = int(datetime.datetime(2026, 2, 28, 23, 59, 59, 999000, datetime.UTC).timestamp() * 1000)
    assert int(ids.new(end)[20:28], 16) == 28 * 86_400_000 - 1
    assert int(ids.new(end + 1)[20:28], 16) == 0


def test_ids_of_many_threads_are_all_different() -> None:
    made: list[list[str]] = [[] for _ in range(8)]

    def make(n: int) -> None:
        made[n] += [new_unique_id() for _ in range(5_000)]

    threads = [threading.Thread(target=make, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    every = [i for per_thread in made for i in per_thread]
    assert len(set(every)) == len(every) == 40_000


@pytest.mark.parametrize(
    "message",
    [
        Message(topic="T", body=b"plain"),
        Message(topic="T", body=b"tagged", tags="A"),
        Message(topic="T", body=b"keyed", tags="A", keys=["k1", "k2"], properties={"p": "v"}),
    ],
)
def test_a_record_carries_its_unique_id_and_the_store_indexes_it(message: Message) -> None:
    record = message.to_record(7, unique_id="ID-1")
    (view,) = decode_records(record, check_crc=False)
    assert view.unique_id == "ID-1"
    assert view.body_bytes() == message.body and view.tags == message.tags
    assert view.keys == list(message.keys)
    assert derive_properties(bytes(view.properties_raw))[1] == (*message.keys, "ID-1")
    plain = message.to_record(7)  # without one: as before
    assert decode_records(plain, check_crc=False)[0].unique_id == ""


def test_a_message_keeps_the_unique_id_its_properties_name() -> None:
    own = Message(topic="T", body=b"x", properties={"UNIQ_KEY": "mine"})
    assert own.unique_id() == "mine"
    assert HEX32.fullmatch(Message(topic="T", body=b"x").unique_id())


def test_a_batch_gives_each_record_its_own_id() -> None:
    msgs = [Message(topic="T", body=b"%d" % i) for i in range(3)]
    records = batch_records(msgs, 1, None, ["a", "b", "c"])
    assert [v.unique_id for v in decode_records(records, check_crc=False)] == ["a", "b", "c"]
    with pytest.raises(ValueError):
        batch_records(msgs, 1, None, ["a"])


def test_a_unique_id_with_a_separator_is_refused() -> None:
    with pytest.raises(InvalidMessage):
        send_record_parts("T", b"x", unique_id="bad\x01id")


def test_ids_made_together_are_those_made_one_by_one() -> None:
    """new_many reads the clock once and takes the counter's next values: the ids new()
    would make at that time, one after the other, month rollover included."""
    for when in (
        datetime.datetime(2026, 3, 5, 1, 2, 3, 4000, datetime.UTC),
        datetime.datetime(2026, 2, 28, 23, 59, 59, 999000, datetime.UTC),
        datetime.datetime(2026, 3, 1, tzinfo=datetime.UTC),
    ):
        now_ms = int(when.timestamp() * 1000)
        for count in (MANY_AS_ARRAY - 1, 300):  # formatted one by one, and as an array
            ids = UniqueIds()
            together = ids.new_many(count, now_ms)
            one_by_one = [ids.new(now_ms) for _ in range(count)]
            assert all(HEX32.fullmatch(i) for i in together)
            assert {i[:28] for i in together} == {i[:28] for i in one_by_one}  # prefix, time
            counters = [int(i[28:], 16) for i in together + one_by_one]
            steps = [(b - a) % 65536 for a, b in itertools.pairwise(counters)]
            assert steps == [1] * (2 * count - 1)
    ids = UniqueIds()
    ids._counter = itertools.count(65_530)  # the counter's low 16 bits wrap inside the batch
    assert [int(i[28:], 16) for i in ids.new_many(20)] == [*range(65_530, 65_536), *range(14)]
    assert len(set(new_unique_ids(1000) + new_unique_ids(1000))) == 2000
    assert new_unique_ids(0) == []


def test_a_batch_keeps_the_ids_its_messages_carry() -> None:
    own = Message(topic="T", body=b"x", properties={"UNIQ_KEY": "MINE"})
    ids = message_unique_ids([Message(topic="T", body=b"a"), own, Message(topic="T", body=b"b")])
    assert ids[1] == "MINE"
    assert HEX32.fullmatch(ids[0]) and HEX32.fullmatch(ids[2]) and ids[0] != ids[2]
