"""Index hashes of many keys at once against :func:`key_hash` of each.

Keys of one length in ASCII (the SDK's unique ids) are hashed as one matrix of their
bytes, other keys as UTF-16 code units grouped by length; both must give exactly what
``key_hash`` gives one key at a time (the entry hash a Java reader computes).
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from services.store.index_file import _entry_hashes, key_hash, key_hashes


@settings(max_examples=200, deadline=None)
@given(
    topic=st.text(min_size=1, max_size=12),
    keys=st.lists(st.text(max_size=40), max_size=24)
    | st.integers(1, 40).flatmap(
        lambda n: st.lists(
            st.text(alphabet=st.characters(max_codepoint=0x7F), min_size=n, max_size=n),
            min_size=2,
            max_size=40,
        )
    ),
)
def test_hashes_computed_together_are_each_keys_own(topic: str, keys: list[str]) -> None:
    """Keys of one length in ASCII (the SDK's unique ids) take a shorter way than others;
    both must give what key_hash gives one key at a time."""
    assert key_hashes(topic, keys) == [key_hash(topic, key) for key in keys]


def test_entry_hashes_of_sums_follow_key_hash_rule() -> None:
    """Modulo 2^32, as a signed int32, abs, and Integer.MIN_VALUE as 0."""
    sums = np.array([0x80000000, 0xFFFFFFFF, 5, 0x180000000, 0x7FFFFFFF], dtype=np.uint64)
    assert _entry_hashes(sums) == [0, 1, 5, 0, 0x7FFFFFFF]
