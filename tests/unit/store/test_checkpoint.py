"""The checkpoint file: its format, its checks, and a store started on a bad one.

The format is in docs/store-format.md (Checkpoint).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.store import GetStatus, MessageStore, PutStatus, StoreMessage
from services.store.checkpoint import (
    CHECKPOINT_CRC_OFFSET,
    CHECKPOINT_FILE_SIZE,
    CHECKPOINT_INDEX_TS_OFFSET,
    CHECKPOINT_LOGICS_TS_OFFSET,
    CHECKPOINT_PHYSIC_TS_OFFSET,
    CHECKPOINT_VERSION,
    CHECKPOINT_VERSION_OFFSET,
    Checkpoint,
    CheckpointState,
    CorruptCheckpoint,
    decode_checkpoint,
    encode_checkpoint,
)

SEGMENT_BYTES = 64 * 1024
INT64_MAX = (1 << 63) - 1
TIMESTAMPS = st.integers(0, INT64_MAX)
LONG = struct.Struct(">q")
INT = struct.Struct(">i")
UINT = struct.Struct(">I")


def raw_checkpoint(
    physic: int, logics: int, index: int, version: int = CHECKPOINT_VERSION, crc: int | None = None
) -> bytes:
    """A checkpoint built field by field from the documented layout (not by the encoder)."""
    page = bytearray(CHECKPOINT_FILE_SIZE)
    LONG.pack_into(page, CHECKPOINT_PHYSIC_TS_OFFSET, physic)
    LONG.pack_into(page, CHECKPOINT_LOGICS_TS_OFFSET, logics)
    LONG.pack_into(page, CHECKPOINT_INDEX_TS_OFFSET, index)
    INT.pack_into(page, CHECKPOINT_VERSION_OFFSET, version)
    if crc is None:
        crc = zlib.crc32(bytes(page[:CHECKPOINT_CRC_OFFSET]))
    UINT.pack_into(page, CHECKPOINT_CRC_OFFSET, crc)
    return bytes(page)


# --------------------------------------------------------------------------- codec


@given(TIMESTAMPS, TIMESTAMPS, TIMESTAMPS)
def test_encode_matches_the_documented_layout_and_round_trips(
    physic: int, logics: int, index: int
) -> None:
    state = CheckpointState(physic, logics, index)
    raw = encode_checkpoint(state)
    assert len(raw) == CHECKPOINT_FILE_SIZE
    assert raw == raw_checkpoint(physic, logics, index)
    padding = raw[CHECKPOINT_CRC_OFFSET + UINT.size :]
    assert padding == bytes(len(padding))
    assert decode_checkpoint(raw) == state


def test_min_timestamp_is_the_oldest_of_the_three() -> None:
    state = CheckpointState(
        physic_msg_timestamp=30, logics_msg_timestamp=20, index_msg_timestamp=10
    )
    assert state.min_timestamp() == 10
    assert state.min_timestamp(with_index=False) == 20


@pytest.mark.parametrize("position", range(CHECKPOINT_CRC_OFFSET + 4))
def test_any_flipped_bit_in_the_covered_bytes_is_a_crc_mismatch(position: int) -> None:
    raw = bytearray(encode_checkpoint(CheckpointState(1_700_000_000_000, 1_700_000_000_500, 9)))
    raw[position] ^= 0x10
    with pytest.raises(CorruptCheckpoint, match="CRC"):
        decode_checkpoint(bytes(raw))


def test_another_version_is_refused() -> None:
    raw = raw_checkpoint(1, 2, 3, version=CHECKPOINT_VERSION + 1)  # CRC valid for that body
    with pytest.raises(CorruptCheckpoint, match="version"):
        decode_checkpoint(raw)


@pytest.mark.parametrize("size", [0, 1, 8, 24, 28, 31])
def test_short_file_is_refused(size: int) -> None:
    with pytest.raises(CorruptCheckpoint):
        decode_checkpoint(encode_checkpoint(CheckpointState(5, 6, 7))[:size])


def test_negative_timestamp_is_refused_even_with_a_valid_crc() -> None:
    with pytest.raises(CorruptCheckpoint):
        decode_checkpoint(raw_checkpoint(5, -1, 7))


def test_all_zero_page_is_corrupt_not_zero_timestamps() -> None:
    # A pre-allocated, never written page must not pass for "nothing flushed yet".
    with pytest.raises(CorruptCheckpoint):
        decode_checkpoint(bytes(CHECKPOINT_FILE_SIZE))


@given(st.binary(max_size=CHECKPOINT_FILE_SIZE + 16))
def test_arbitrary_bytes_decode_or_raise_corrupt_checkpoint(raw: bytes) -> None:
    try:
        state = decode_checkpoint(raw)
    except CorruptCheckpoint:
        return
    assert (
        min(state.physic_msg_timestamp, state.logics_msg_timestamp, state.index_msg_timestamp) >= 0
    )


@given(
    st.integers(-(1 << 63), INT64_MAX),
    st.integers(-(1 << 63), INT64_MAX),
    st.integers(-(1 << 63), INT64_MAX),
    st.integers(-(1 << 31), (1 << 31) - 1),
    st.binary(min_size=0, max_size=64),
)
def test_well_framed_but_odd_checkpoints_decode_or_raise_corrupt_checkpoint(
    physic: int, logics: int, index: int, version: int, trailer: bytes
) -> None:
    """Valid CRCs over any field values: only CorruptCheckpoint may come out."""
    raw = raw_checkpoint(physic, logics, index, version)[: CHECKPOINT_CRC_OFFSET + 4] + trailer
    try:
        state = decode_checkpoint(raw)
    except CorruptCheckpoint:
        assert version != CHECKPOINT_VERSION or min(physic, logics, index) < 0
        return
    assert state == CheckpointState(physic, logics, index)


# --------------------------------------------------------------------------- the file


def test_checkpoint_file_missing_reads_as_zero_and_flush_writes_a_page(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint"
    checkpoint = Checkpoint(path)
    try:
        assert checkpoint.problem == ""
        assert checkpoint.state == CheckpointState()
        checkpoint.state.physic_msg_timestamp = 123
        checkpoint.state.logics_msg_timestamp = 456
        checkpoint.state.index_msg_timestamp = 789
        checkpoint.flush()
    finally:
        checkpoint.close()
    raw = path.read_bytes()
    assert len(raw) == CHECKPOINT_FILE_SIZE
    assert decode_checkpoint(raw) == CheckpointState(123, 456, 789)
    reopened = Checkpoint(path)
    try:
        assert reopened.problem == "" and reopened.state == CheckpointState(123, 456, 789)
    finally:
        reopened.close()


@pytest.mark.parametrize(
    "content", [b"", b"garbage", bytes(CHECKPOINT_FILE_SIZE), b"\xff" * CHECKPOINT_FILE_SIZE]
)
def test_corrupt_checkpoint_file_reads_as_zero_with_a_problem(
    tmp_path: Path, content: bytes
) -> None:
    path = tmp_path / "checkpoint"
    path.write_bytes(content)
    checkpoint = Checkpoint(path)
    try:
        assert checkpoint.problem != ""
        assert checkpoint.state == CheckpointState()
    finally:
        checkpoint.close()


# --------------------------------------------------------------------------- in a store


def _fill(store: MessageStore, count: int) -> list[tuple[int, int, bytes]]:
    """``(queue_id, commitlog_offset, body)`` of each message written."""
    written = []
    for i in range(count):
        body = f"cp-{i}|".encode() * 200
        result = store.put_message(
            StoreMessage(topic="CP", queue_id=i % 2, body=body, tags="A", keys=[f"cp{i}"])
        )
        assert result.status == PutStatus.PUT_OK
        written.append((i % 2, result.commitlog_offset, body))
    return written


def _served(store: MessageStore, queue_id: int) -> list[tuple[int, bytes]]:
    out: list[tuple[int, bytes]] = []
    while True:
        got = store.get_messages("CP", queue_id, len(out), 32)
        if got.status != GetStatus.FOUND:
            return out
        out.extend((m.commitlog_offset, bytes(m.body)) for m in got.messages)


def test_clean_shutdown_writes_the_store_time_of_the_last_record(
    make_store: Callable[..., MessageStore],
) -> None:
    store = make_store()
    _fill(store, 20)
    last = store.put_message(StoreMessage(topic="CP", body=b"last", keys=["last"]))
    store.shutdown()
    state = decode_checkpoint((store.root / "checkpoint").read_bytes())
    assert state.physic_msg_timestamp == last.store_timestamp
    assert state.logics_msg_timestamp == last.store_timestamp
    assert state.index_msg_timestamp > 0


@pytest.mark.parametrize("crashed", [True, False], ids=["abort-left", "clean"])
def test_store_on_a_corrupt_checkpoint_recovers_from_the_first_segment(
    make_store: Callable[..., MessageStore], crashed: bool
) -> None:
    store = make_store()
    written = _fill(store, 120)
    assert written[-1][1] > 2 * SEGMENT_BYTES
    root = store.root
    store.shutdown()
    if crashed:
        (root / "abort").touch()  # as if the process had died
    raw = bytearray((root / "checkpoint").read_bytes())
    raw[CHECKPOINT_LOGICS_TS_OFFSET] ^= 0x01
    (root / "checkpoint").write_bytes(bytes(raw))

    store = make_store()
    report = store.recovery
    assert report is not None and report.clean is not crashed
    assert any("checkpoint unusable" in note for note in report.notes), report.notes
    if crashed:
        assert report.start_offset == 0
    assert report.truncated_bytes == 0
    for queue_id in range(2):
        assert _served(store, queue_id) == [(o, b) for q, o, b in written if q == queue_id]
    assert store.verify() == []
    store.shutdown()
    # The shutdown rewrote a sound checkpoint.
    decode_checkpoint((root / "checkpoint").read_bytes())
