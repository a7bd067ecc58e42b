"""An independent check of a cluster run: the recorded history against the surviving files.

What a fault test records (the **history**) and what it reads back from the
stores' files after the run (the **files**) are plain data, so this module
knows nothing of how they were produced and can be tested with synthetic
histories (``tests/unit/reliability/test_history_checker.py``).

History:

- :class:`Ack`: one send the producer was told SEND_OK for: the message's key
  (unique per send attempt's message; a retried send keeps it), the broker group
  that took it, the queue, the sharding key and its sequence number within that
  key (orderly sends), and the epoch and master address that acknowledged it.
- :class:`Delivery`: one message a consumer received, in the order it received
  them: consumer group, consumer, key, queue and queue offset.

Files: for every broker group, the keys found in the CommitLog of its current
master, in CommitLog order (:func:`surviving_keys` reads a stopped store's
directory with the offline reader ``boltmq store inspect`` uses).

Properties checked (:func:`check`), each violation named by its kind:

==============  ===============================================================
``lost``        an acknowledged key is not in its group's surviving CommitLog
``stored-twice`` an acknowledged key is there more than once
``undelivered`` an acknowledged key reached no consumer of some consumer group
``phantom``     a consumer received a key that no surviving CommitLog holds
``order``       a consumer group's first deliveries of one sharding key are not
                in the order of their sequence numbers
``two-masters`` two masters of one group acknowledged writes in the same epoch
==============  ===============================================================

Deliveries of a key already delivered to the consumer group are counted as
duplicates, not violations (at-least-once), and explained: ``redelivered``
(the same consumer got it again: a retry or an offset rolled back by a
failover) or ``rebalanced`` (another consumer of the group got it: a queue
moved between consumers before the offset was committed).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from services.store.config import StoreConfig
from services.store.verify import offline_lock, open_offline

KEY_PROPERTY_PREFIX = "hist-"
"""Keys the fault tests give their messages (``KEYS``), so other records are ignored."""


@dataclass(frozen=True)
class Ack:
    """A send acknowledged with SEND_OK."""

    key: str
    group: str
    queue: tuple[str, int]
    epoch: int
    master: str
    shard: str = ""
    seq: int = 0


@dataclass(frozen=True)
class Delivery:
    """A message a consumer received."""

    consumer_group: str
    consumer: str
    key: str
    queue: tuple[str, int]
    queue_offset: int = -1


@dataclass
class Report:
    """What :func:`check` found."""

    acknowledged: int = 0
    delivered: int = 0
    violations: list[tuple[str, str]] = field(default_factory=list)
    duplicates: Counter[str] = field(default_factory=Counter)
    """Duplicate deliveries by explanation (``redelivered``, ``rebalanced``)."""

    def count(self, kind: str) -> int:
        return sum(1 for k, _ in self.violations if k == kind)

    @property
    def ok(self) -> bool:
        return not self.violations

    def summary(self) -> str:
        kinds = Counter(k for k, _ in self.violations)
        return (
            f"acknowledged {self.acknowledged}, delivered {self.delivered}, "
            f"lost {kinds['lost']}, phantom {kinds['phantom']}, "
            f"duplicates {sum(self.duplicates.values())} {dict(self.duplicates)}, "
            f"violations {dict(kinds)}"
        )


def check(
    acks: Iterable[Ack],
    deliveries: Iterable[Delivery],
    surviving: Mapping[str, list[str]],
    consumer_groups: Iterable[str],
    ordered_groups: Iterable[str] | None = None,
) -> Report:
    """Every property of the module docstring over one run; the order only for
    ``ordered_groups`` (None: every group), since a concurrent consumer may process
    one queue's batches in parallel."""
    acks = list(acks)
    deliveries = list(deliveries)
    report = Report(acknowledged=len({a.key for a in acks}), delivered=len(deliveries))
    stored = {group: Counter(keys) for group, keys in surviving.items()}
    anywhere: Counter[str] = Counter()
    for counts in stored.values():
        anywhere.update(counts)
    _check_files(acks, stored, report)
    _check_deliveries(acks, deliveries, anywhere, list(consumer_groups), report)
    ordered = None if ordered_groups is None else set(ordered_groups)
    _check_order(
        acks, [d for d in deliveries if ordered is None or d.consumer_group in ordered], report
    )
    _check_masters(acks, report)
    return report


def _check_files(acks: list[Ack], stored: Mapping[str, Counter[str]], report: Report) -> None:
    seen: set[str] = set()
    for ack in acks:
        if ack.key in seen:
            continue
        seen.add(ack.key)
        copies = stored.get(ack.group, Counter())[ack.key]
        if copies == 0:
            report.violations.append(("lost", f"{ack.key} acknowledged by {ack.master}"))
        elif copies > 1:
            report.violations.append(("stored-twice", f"{ack.key}: {copies} copies"))


def _check_deliveries(
    acks: list[Ack],
    deliveries: list[Delivery],
    anywhere: Counter[str],
    consumer_groups: list[str],
    report: Report,
) -> None:
    first_consumer: dict[tuple[str, str], str] = {}
    for d in deliveries:
        if anywhere[d.key] == 0:
            report.violations.append(("phantom", f"{d.key} received by {d.consumer}"))
        slot = (d.consumer_group, d.key)
        if slot not in first_consumer:
            first_consumer[slot] = d.consumer
        elif first_consumer[slot] == d.consumer:
            report.duplicates["redelivered"] += 1
        else:
            report.duplicates["rebalanced"] += 1
    for group in consumer_groups:
        for key in sorted({a.key for a in acks}):
            if (group, key) not in first_consumer:
                report.violations.append(("undelivered", f"{key} never reached {group}"))


def _check_order(acks: list[Ack], deliveries: list[Delivery], report: Report) -> None:
    seq_of = {a.key: (a.shard, a.seq) for a in acks if a.shard}
    last: dict[tuple[str, str], tuple[int, str]] = {}
    seen: set[tuple[str, str]] = set()
    for d in deliveries:
        if d.key not in seq_of or (d.consumer_group, d.key) in seen:
            continue  # not orderly, or a duplicate (at-least-once replays older ones)
        seen.add((d.consumer_group, d.key))
        shard, seq = seq_of[d.key]
        previous = last.get((d.consumer_group, shard))
        if previous is not None and seq < previous[0]:
            report.violations.append(
                ("order", f"{d.consumer_group} got {d.key} (#{seq}) after {previous[1]}")
            )
        last[(d.consumer_group, shard)] = (seq, d.key)


def _check_masters(acks: list[Ack], report: Report) -> None:
    masters: defaultdict[tuple[str, int], set[str]] = defaultdict(set)
    for ack in acks:
        masters[(ack.group, ack.epoch)].add(ack.master)
    for (group, epoch), names in sorted(masters.items()):
        if len(names) > 1:
            report.violations.append(
                ("two-masters", f"{group} epoch {epoch}: {', '.join(sorted(names))}")
            )


def surviving_keys(store_root: Path) -> list[str]:
    """The history keys in a stopped store's CommitLog, in CommitLog order (offline)."""
    keys: list[str] = []
    with offline_lock(store_root):
        commitlog, queues, index = open_offline(store_root, StoreConfig(root_dir=store_root))
        try:
            for _, record in commitlog.walk(commitlog.min_offset, check_crc=True):
                if record is None:
                    continue
                keys.extend(k for k in record.keys if k.startswith(KEY_PROPERTY_PREFIX))
        finally:
            commitlog.close()
            queues.close()
            index.close()
    return keys
