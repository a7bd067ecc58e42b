"""Recovery (docs/store-format.md) of a damaged CommitLog tail: cut at the first bad record.

Hypothesis zeroes or flips bytes in the fields recovery can check (sizes,
magic, physical offset, lengths, body CRC) of a record in the last segment,
after a crash or a clean stop; the store must come back with exactly the
records before it. A second crash after such a cut must resurrect nothing.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.store import MessageStore, StoreMessage
from tests.unit.store.recovery_helpers import (
    HEAD_BYTES,
    SEGMENT_BYTES,
    Written,
    assert_served_exactly,
    assert_zero_on_disk_from,
    crash,
    flip_byte,
    message,
    open_store,
    put_all,
    zero_commitlog_from,
)

BODY_LENGTH_AT = HEAD_BYTES - 4
PHYSICAL_OFFSET_AT = 28


def properties_bytes(w: Written) -> int:
    """Length of the record's properties section (what is left after the fixed parts)."""
    topic_field = 1 + len(w.msg.topic.encode())
    return w.result.wrote_bytes - HEAD_BYTES - len(w.msg.body) - topic_field - 2


def detectable_ranges(w: Written) -> list[tuple[int, int]]:
    """Byte ranges (relative to the record start) whose change recovery must detect.

    The record protects only the body with a CRC; total_size, magic, the
    physical offset and the three length fields are checked structurally. The
    other header fields (flag, hosts, timestamps...) and the topic/properties
    bytes carry no check, so damage there is undetectable by design and is
    not generated here.
    """
    body_end = HEAD_BYTES + len(w.msg.body)
    topic_len_at = body_end
    props_len_at = topic_len_at + 1 + len(w.msg.topic.encode())
    return [
        (0, 12),
        (PHYSICAL_OFFSET_AT, PHYSICAL_OFFSET_AT + 8),
        (BODY_LENGTH_AT, body_end),
        (topic_len_at, topic_len_at + 1),
        (props_len_at, props_len_at + 2),
    ]


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_damaged_tail_is_cut_at_the_first_bad_record(data: st.DataObject) -> None:
    count = data.draw(st.integers(2, 90), label="messages")
    seed = data.draw(st.integers(0, 1 << 16), label="seed")
    mode = data.draw(st.sampled_from(["zero_tail", "flip", "smear"]), label="mode")
    crashed = data.draw(st.booleans(), label="crashed")  # else: damaged after a clean stop
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "store"
        store = open_store(root)
        written = put_all(store, [message(i, seed, max_bytes=3000) for i in range(count)])
        if crashed:
            crash(store)
        else:
            store.shutdown()

        last_segment = written[-1].offset - written[-1].offset % SEGMENT_BYTES
        candidates = [i for i, w in enumerate(written) if w.offset >= last_segment]
        victim_index = data.draw(st.sampled_from(candidates), label="victim")
        victim = written[victim_index]
        if mode == "zero_tail":
            # Zeroing from inside the properties would only blank undetectable bytes.
            relative = data.draw(
                st.integers(0, victim.result.wrote_bytes - properties_bytes(victim) - 1), label="at"
            )
            zero_commitlog_from(root, victim.offset + relative)
        else:
            lo, hi = data.draw(st.sampled_from(detectable_ranges(victim)), label="field")
            relative = data.draw(st.integers(lo, hi - 1), label="at")
            length = 1 if mode == "flip" else data.draw(st.integers(2, 16), label="length")
            masks = data.draw(
                st.lists(st.integers(1, 255), min_size=length, max_size=length), label="masks"
            )
            for k, mask in enumerate(masks):
                if k and (victim.offset + relative + k) % SEGMENT_BYTES == 0:
                    break  # stay inside the segment
                flip_byte(root, victim.offset + relative + k, mask)

        store = open_store(root)
        try:
            report = store.recovery
            assert report is not None and report.clean is not crashed
            assert report.commitlog_max_offset == victim.offset == store.commitlog.max_offset
            # Zeros over the whole size and magic read as the end of data, not damage.
            size_bytes = victim.result.wrote_bytes.to_bytes(4, "big")
            silent = mode == "zero_tail" and size_bytes[:relative] == bytes(relative)
            if not silent:
                assert report.truncated_bytes > 0
                assert any("invalid record" in note for note in report.notes), report.notes
            assert_zero_on_disk_from(root, victim.offset)
            survivors = written[:victim_index]
            assert_served_exactly(store, survivors)
            for w in written[victim_index:]:
                assert store.look_message(w.offset) is None
            for queue_id in range(3):  # queues left with no survivor included
                assert store.max_offset("T", queue_id) == sum(
                    1 for w in survivors if w.msg.queue_id == queue_id
                )
            assert store.verify() == []
        finally:
            store.shutdown()


# --------------------------------------------------------------------------- second crash


def test_second_crash_after_a_truncation_resurrects_nothing(
    make_store: Callable[..., MessageStore],
) -> None:
    """New records exactly as long as the cut ones end on an old record boundary.

    Were the cut bytes not zeroed, the old record there would be whole, with
    its own offset inside it, and a second recovery would serve it again.
    """
    store = make_store()
    written = put_all(store, [message(i) for i in range(60)])
    root = store.root
    crash(store)
    victim = 40
    flip_byte(root, written[victim].offset + HEAD_BYTES)  # first body byte: CRC mismatch

    store = make_store()
    assert store.recovery is not None
    assert store.recovery.commitlog_max_offset == written[victim].offset
    assert_zero_on_disk_from(root, written[victim].offset)
    redo = [
        StoreMessage(
            topic=w.msg.topic,
            queue_id=w.msg.queue_id,
            body=bytes(b ^ 0x5A for b in w.msg.body),
            tags=w.msg.tags,
            keys=w.msg.keys,
            properties=w.msg.properties,
        )
        for w in written[victim : victim + 10]
    ]
    rewritten = put_all(store, redo)
    assert [w.end for w in rewritten] == [w.end for w in written[victim : victim + 10]]
    crash(store)

    store = make_store()
    report = store.recovery
    assert report is not None and report.clean is False
    assert report.commitlog_max_offset == written[victim + 10].offset
    assert_served_exactly(store, written[:victim] + rewritten)
    assert store.look_message(written[victim + 10].offset) is None
    for w in written[victim + 10 :]:
        assert store.query_messages("T", w.msg.keys[0]) == []
    assert store.verify() == []
