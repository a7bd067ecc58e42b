"""Deriving tags codes and index keys of a batch's properties sections at once.

The SDK's batches repeat one producer's properties but for each message's UNIQ_KEY, so
the sections differ only inside that value: they are derived from the first section and
the column of values. Whatever the sections hold, the result must be what decoding each
section gives (``derive_properties``), refusals included.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from boltmq.wire.record import CorruptRecord
from boltmq.wire.record_batch import derive_properties
from boltmq.wire.record_heads import SMALL_BATCH, _derive_all


def derive_each(sections: list[bytes]) -> tuple[list[int], list[tuple[str, ...]], dict[int, str]]:
    codes, keys, corrupt = [], [], {}
    for at, section in enumerate(sections):
        try:
            code, index_keys = derive_properties(section)
        except CorruptRecord as exc:
            corrupt[at] = str(exc)
            code, index_keys = 0, ()
        codes.append(code)
        keys.append(index_keys)
    return codes, keys, corrupt


def derive_together(
    sections: list[bytes],
) -> tuple[list[int], list[tuple[str, ...]], dict[int, str]]:
    ends = np.cumsum([len(s) for s in sections], dtype=np.int64)
    starts = ends - np.array([len(s) for s in sections], dtype=np.int64)
    codes, keys, corrupt = _derive_all(b"".join(sections), starts, ends)
    return list(codes), list(keys), {at: str(exc) for at, exc in corrupt.items()}


def section(unique_id: bytes, head: bytes = b"TAGS\x01red\x02KEYS\x01a b\x02") -> bytes:
    return head + b"UNIQ_KEY\x01" + unique_id + b"\x02"


def test_sections_differing_in_their_unique_ids_get_each_its_own_key() -> None:
    ids = [b"%032X" % n for n in range(SMALL_BATCH * 2)]
    codes, keys, corrupt = derive_together([section(i) for i in ids])
    assert not corrupt
    assert len(set(codes)) == 1 and codes[0] != 0
    assert keys == [("a", "b", i.decode()) for i in ids]


def test_a_separator_or_a_byte_above_ascii_in_one_id_decodes_each_section() -> None:
    for odd in (b"A\x02BCDEF", b"A\x01BCDEF", b"\xc3\xa9BCDEF", b"\xff\xfeBCDEF"):  # 7 bytes
        sections = [section(b"%07d" % n) for n in range(SMALL_BATCH)] + [section(odd)]
        assert derive_together(sections) == derive_each(sections)


def test_sections_differing_outside_the_unique_id_decode_each() -> None:
    sections = [section(b"%05d" % n) for n in range(SMALL_BATCH)]
    sections.append(section(b"00000", head=b"TAGS\x01blu\x02KEYS\x01a b\x02"))
    assert derive_together(sections) == derive_each(sections)


pieces = st.sampled_from(
    [b"UNIQ_KEY", b"\x01", b"\x02", b"TAGS", b"KEYS", b"a", b"b c", b"\xc3\xa9", b"\xff", b""]
)


@settings(max_examples=300, deadline=None)
@given(
    head=st.lists(pieces, max_size=8).map(b"".join),
    tail=st.lists(pieces, max_size=3).map(b"".join),
    ids=st.lists(
        st.binary(min_size=4, max_size=4) | st.sampled_from([b"ABCD", b"ABCE", b"\x02\x02\x01A"]),
        min_size=SMALL_BATCH,
        max_size=SMALL_BATCH + 8,
    ),
)
def test_any_batch_derives_as_each_section_alone(
    head: bytes, tail: bytes, ids: list[bytes]
) -> None:
    sections = [head + b"UNIQ_KEY\x01" + i + tail for i in ids]
    assert derive_together(sections) == derive_each(sections)
