"""The history checker catches each property's violation in a synthetic history."""

from __future__ import annotations

from pathlib import Path

from services.store import MessageStore, StoreMessage
from tests.conftest import quiet_disk, small_config
from tests.reliability.history_checker import Ack, Delivery, check, surviving_keys

Q0 = ("T", 0)
GROUPS = ["g1", "g2"]


def ack(key: str, seq: int = 0, group: str = "a", epoch: int = 1, master: str = "m1") -> Ack:
    return Ack(key, group, Q0, epoch, master, shard="s" if seq else "", seq=seq)


def got(key: str, consumer_group: str = "g1", consumer: str = "c1") -> Delivery:
    return Delivery(consumer_group, consumer, key, Q0)


def everywhere(*keys: str) -> list[Delivery]:
    return [got(k, g) for g in GROUPS for k in keys]


def test_a_clean_run_passes_and_counts_duplicates_with_their_reason() -> None:
    acks = [ack("k1", 1), ack("k2", 2)]
    deliveries = [*everywhere("k1", "k2"), got("k1"), got("k2", "g2", consumer="c2")]
    report = check(acks, deliveries, {"a": ["k1", "k2"]}, GROUPS)
    assert report.ok, report.violations
    assert report.acknowledged == 2 and report.delivered == 6
    assert report.duplicates == {"redelivered": 1, "rebalanced": 1}
    assert "lost 0, phantom 0, duplicates 2" in report.summary()


def test_a_lost_acknowledged_message_is_caught() -> None:
    report = check([ack("k1"), ack("k2")], everywhere("k1", "k2"), {"a": ["k1"]}, GROUPS)
    assert report.count("lost") == 1 and "k2" in report.violations[0][1]


def test_an_acknowledged_message_stored_twice_is_caught() -> None:
    report = check([ack("k1")], everywhere("k1"), {"a": ["k1", "k1"]}, GROUPS)
    assert [k for k, _ in report.violations] == ["stored-twice"]


def test_a_message_in_another_groups_log_only_is_lost_for_its_own() -> None:
    report = check([ack("k1")], everywhere("k1"), {"a": [], "b": ["k1"]}, GROUPS)
    assert report.count("lost") == 1


def test_an_undelivered_message_is_caught_per_consumer_group() -> None:
    report = check([ack("k1")], [got("k1", "g1")], {"a": ["k1"]}, GROUPS)
    assert report.violations == [("undelivered", "k1 never reached g2")]


def test_a_phantom_read_is_caught() -> None:
    deliveries = [*everywhere("k1"), got("gone")]  # read, then taken back by a failover
    report = check([ack("k1")], deliveries, {"a": ["k1"]}, GROUPS)
    assert report.violations == [("phantom", "gone received by c1")]


def test_an_order_inversion_within_a_sharding_key_is_caught() -> None:
    acks = [ack("k1", 1), ack("k2", 2), ack("k3", 3)]
    deliveries = [got("k1"), got("k3"), got("k2"), *[got(k, "g2") for k in ("k1", "k2", "k3")]]
    report = check(acks, deliveries, {"a": ["k1", "k2", "k3"]}, GROUPS)
    assert report.violations == [("order", "g1 got k2 (#2) after k3")]


def test_order_is_judged_only_for_the_ordered_groups() -> None:
    acks = [ack("k1", 1), ack("k2", 2)]
    deliveries = [got("k2"), got("k1"), got("k1", "g2"), got("k2", "g2")]
    report = check(acks, deliveries, {"a": ["k1", "k2"]}, GROUPS, ordered_groups=["g2"])
    assert report.ok, report.violations
    report = check(acks, deliveries, {"a": ["k1", "k2"]}, GROUPS, ordered_groups=["g1"])
    assert [k for k, _ in report.violations] == ["order"]


def test_a_replay_of_older_messages_is_no_order_violation() -> None:
    acks = [ack("k1", 1), ack("k2", 2)]
    deliveries = [*everywhere("k1", "k2"), got("k1"), got("k2")]  # an offset rolled back
    assert check(acks, deliveries, {"a": ["k1", "k2"]}, GROUPS).ok


def test_two_masters_acknowledging_in_one_epoch_are_caught() -> None:
    acks = [ack("k1", master="m1"), ack("k2", master="m2"), ack("k3", epoch=2, master="m2")]
    report = check(acks, everywhere("k1", "k2", "k3"), {"a": ["k1", "k2", "k3"]}, GROUPS)
    assert report.violations == [("two-masters", "a epoch 1: m1, m2")]


def test_surviving_keys_reads_a_stopped_stores_commitlog(tmp_path: Path) -> None:
    store = MessageStore(small_config(tmp_path / "s"), disk_usage=quiet_disk)
    store.start()
    for key in ("hist-1", "other", "hist-2", "hist-1"):
        store.put_message(StoreMessage(topic="T", queue_id=0, body=b"x", keys=[key]))
    store.shutdown()
    assert surviving_keys(tmp_path / "s") == ["hist-1", "hist-2", "hist-1"]
