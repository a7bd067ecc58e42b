"""The unique ids of a batch kept as one column, from the check to the index.

The store finds an SDK batch's unique ids as a column of its bytes
(``_derive_all``) and keeps them as a :class:`KeyColumn`; the index hashes
them from the column (``column_key_hashes``) instead of one string each. Both
must be indistinguishable from the keys decoded record by record: the same
keys when read as a sequence, the same entry hashes, and index files byte for
byte the same as the per-record path writes, also when a restart already
indexed the run's first records.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from boltmq.wire.key_column import KeyColumn
from boltmq.wire.record_heads import SMALL_BATCH, _derive_all
from services.store.index_file import column_key_hashes, key_hash
from services.store.index_service import IndexService

TOPIC = "Orders"
FAR_FUTURE_MS = 2**62


def _column(ids: list[str], shared: tuple[str, ...] = ()) -> KeyColumn:
    width = len(ids[0])
    matrix = np.frombuffer("".join(ids).encode("ascii"), dtype=np.uint8).reshape(-1, width)
    return KeyColumn(shared, matrix)


def _ids(count: int, start: int = 0) -> list[str]:
    return ["%032X" % (0xC0A80001 << 96 | n) for n in range(start, start + count)]


def test_an_sdk_batch_keeps_its_ids_as_a_column() -> None:
    ids = _ids(SMALL_BATCH * 2)
    sections = [b"TAGS\x01red\x02UNIQ_KEY\x01" + i.encode() + b"\x02" for i in ids]
    ends = np.cumsum([len(s) for s in sections], dtype=np.int64)
    starts = ends - len(sections[0])
    _, keys, corrupt = _derive_all(b"".join(sections), starts, ends)
    assert not corrupt
    assert isinstance(keys, KeyColumn)
    assert keys.shared == ()
    assert len(keys) == len(ids)
    assert list(keys) == [(i,) for i in ids]


def test_a_column_reads_as_the_keys_of_each_record() -> None:
    ids = _ids(5)
    column = _column(ids, shared=("a", "b"))
    assert list(column) == [("a", "b", i) for i in ids]
    assert column[0] == ("a", "b", ids[0])
    assert column[-1] == ("a", "b", ids[-1])
    part = column[1:3]
    assert isinstance(part, KeyColumn)
    assert list(part) == [("a", "b", i) for i in ids[1:3]]
    assert any(column)
    with pytest.raises(IndexError):
        column[5]


def test_a_column_must_be_a_matrix_of_bytes() -> None:
    with pytest.raises(ValueError, match="count x width"):
        KeyColumn((), np.zeros(4, dtype=np.uint8))
    with pytest.raises(ValueError, match="count x width"):
        KeyColumn((), np.zeros((4, 0), dtype=np.uint8))


@settings(max_examples=150, deadline=None)
@given(
    topic=st.text(min_size=1, max_size=20),
    ids=st.integers(1, 40).flatmap(
        lambda n: st.lists(
            st.text(
                alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E),
                min_size=n,
                max_size=n,
            ),
            min_size=1,
            max_size=30,
        )
    ),
)
def test_hashes_of_a_column_are_each_keys_own(topic: str, ids: list[str]) -> None:
    assert column_key_hashes(topic, _column(ids).ids) == [key_hash(topic, i) for i in ids]


def _index(directory: Path, runs: list[tuple[object, list[int]]]) -> bytes:
    service = IndexService(directory, 16, 40)
    service.load(True, 0)
    try:
        for keys, offsets in runs:
            service.build_index_run(TOPIC, keys, offsets, 1_767_225_600_000)  # type: ignore[arg-type]
        return b"".join(f.read_bytes() for f in sorted(directory.iterdir()))
    finally:
        service.close()


@pytest.mark.parametrize("shared", [(), ("order-7",)])
def test_a_column_indexes_as_the_keys_of_each_record(
    tmp_path: Path, shared: tuple[str, ...]
) -> None:
    """Three runs over two files (40 entries a file), the second starting below what the
    first indexed (a re-dispatch after a restart): the same files from the column as from
    the keys record by record, and every id found by its key."""
    first, second = _ids(30), _ids(30, start=30)
    offsets_1 = [1_000 * n for n in range(30)]
    offsets_2 = [1_000 * n for n in range(20, 50)]  # 20..29 indexed already
    together = _index(
        tmp_path / "together",
        [(_column(first, shared), offsets_1), (_column(second, shared), offsets_2)],
    )
    alone = _index(
        tmp_path / "alone",
        [
            ([(*shared, i) for i in first], offsets_1),
            ([(*shared, i) for i in second], offsets_2),
        ],
    )
    assert together == alone
    service = IndexService(tmp_path / "together", 16, 40)
    service.load(True, 0)
    try:
        assert service.query(TOPIC, first[3], 10, 0, FAR_FUTURE_MS) == [3_000]
        assert service.query(TOPIC, second[-1], 10, 0, FAR_FUTURE_MS) == [49_000]
        # Offsets 20,000..29,000 were indexed by the first run only, with its ids.
        assert service.query(TOPIC, second[0], 10, 0, FAR_FUTURE_MS) == []
    finally:
        service.close()
