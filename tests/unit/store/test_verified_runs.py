"""verified_runs: stored records checked in bulk exactly as verified_record checks one.

The records come from a real store (so every field the store fills in is
real); the bytes are then copied and damaged at random, and the bulk check
must accept and refuse the same records as the record-by-record check, and
hand back the accepted ones byte for byte.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from boltmq.wire.pulled_records import verified_runs
from boltmq.wire.record import CorruptRecord, verified_record
from boltmq.wire.record_heads import SMALL_BATCH
from services.store import MessageStore, StoreMessage

COUNT = 40


@pytest.fixture(scope="module")
def segment(tmp_path_factory: pytest.TempPathFactory) -> tuple[bytes, list[int], list[int]]:
    """A segment's bytes and the (position, size) of its records on queue 0 (queue 1's
    records sit between them, so the queue's records form several runs)."""
    from tests.conftest import quiet_disk, small_config

    root: Path = tmp_path_factory.mktemp("runs") / "store"
    with MessageStore(small_config(root), disk_usage=quiet_disk) as store:
        for i in range(COUNT):
            store.put_messages(
                [
                    StoreMessage("T", b"body-%d" % i * (1 + i % 7), queue_id=0)
                    for _ in range(1 + i % 3)
                ]
            )
            if i % 5 == 4:
                store.put_message(StoreMessage("T", b"other queue", queue_id=1))
        store.wait_dispatched()
        cq = store.queues.get("T", 0)
        assert cq is not None
        entries = list(cq.entries(0, 1000))
        mf = store.commitlog.files.find(entries[0][0])
        assert mf is not None and all(p < mf.file_end_offset for p, _, _ in entries)
        data = bytes(mf.view[: mf.wrote_position])
        base = mf.file_from_offset
    return data, [p - base for p, _, _ in entries], [s for _, s, _ in entries]


def one_by_one(
    view: memoryview, positions: list[int], sizes: list[int]
) -> tuple[bytes, int, list[str]]:
    accepted, count, refused = b"", 0, []
    for position, size in zip(positions, sizes, strict=True):
        try:
            accepted += bytes(verified_record(view, position, size))
            count += 1
        except CorruptRecord as exc:
            refused.append(str(exc))
    return accepted, count, refused


def in_bulk(
    view: memoryview, positions: list[int], sizes: list[int]
) -> tuple[bytes, int, list[str]]:
    found = verified_runs(view, positions, sizes, check_crc=True)
    return b"".join(found.views), found.count, [str(e) for e in found.refused]


def test_good_records_come_back_as_runs(segment: tuple[bytes, list[int], list[int]]) -> None:
    data, positions, sizes = segment
    view = memoryview(data)
    found = verified_runs(view, positions, sizes, check_crc=True)
    assert found.count == len(positions) >= SMALL_BATCH and found.refused == []
    assert b"".join(found.views) == b"".join(
        data[p : p + s] for p, s in zip(positions, sizes, strict=True)
    )
    assert 1 < len(found.views) < len(positions)  # back-to-back records share a view


def test_a_bad_crc_and_a_wrong_size_are_refused_and_split_the_run(
    segment: tuple[bytes, list[int], list[int]],
) -> None:
    data, positions, sizes = segment
    damaged = bytearray(data)
    damaged[positions[3] + 90] ^= 0xFF  # a body byte of record 3
    sizes = list(sizes)
    sizes[7] += 1  # the consume queue disagrees on record 7
    found = verified_runs(memoryview(damaged), positions, sizes, check_crc=True)
    assert found.count == len(positions) - 2
    assert [str(e) for e in found.refused] == [
        f"body CRC mismatch at {positions[3]}",
        f"record at {positions[7]}: size {sizes[7] - 1} / magic 0xDAA320A7 do not match the "
        f"consume queue's {sizes[7]}",
    ]
    without_crc = verified_runs(memoryview(damaged), positions, sizes, check_crc=False)
    assert without_crc.count == len(positions) - 1


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    damage=st.lists(st.tuples(st.integers(0, 10**9), st.integers(1, 255)), max_size=6),
    first=st.integers(0, COUNT - 1),
    take=st.integers(1, 3 * COUNT),
)
def test_random_damage_is_judged_alike(
    segment: tuple[bytes, list[int], list[int]],
    damage: list[tuple[int, int]],
    first: int,
    take: int,
) -> None:
    data, positions, sizes = segment
    damaged = bytearray(data)
    for where, mask in damage:
        damaged[where % len(damaged)] ^= mask
    chosen = slice(first, first + take)
    view = memoryview(damaged)
    assert in_bulk(view, positions[chosen], sizes[chosen]) == one_by_one(
        view, positions[chosen], sizes[chosen]
    )


def test_positions_outside_the_view_are_refused(
    segment: tuple[bytes, list[int], list[int]],
) -> None:
    data, positions, sizes = segment
    found = verified_runs(
        memoryview(data), [*positions, len(data) - 10, -5], [*sizes, 100, 100], check_crc=True
    )
    assert found.count == len(positions)
    assert [str(e) for e in found.refused] == [
        f"record at {len(data) - 10} runs past the end of the segment",
        "record at -5 runs past the end of the segment",
    ]


def test_a_few_records_are_joined_into_runs_as_many_are(
    segment: tuple[bytes, list[int], list[int]],
) -> None:
    """Fewer than SMALL_BATCH records are checked one by one, not as arrays: the views
    still join the records that lie back to back."""
    data, positions, sizes = segment
    few = slice(2, 2 + SMALL_BATCH - 1)
    chosen, lengths = positions[few], sizes[few]
    found = verified_runs(memoryview(data), chosen, lengths, check_crc=True)
    apart = sum(1 for n in range(1, len(chosen)) if chosen[n] != chosen[n - 1] + lengths[n - 1])
    assert apart and len(found.views) == 1 + apart
    assert found.count == len(chosen) and found.refused == []
    assert b"".join(found.views) == b"".join(
        data[p : p + s] for p, s in zip(chosen, lengths, strict=True)
    )
