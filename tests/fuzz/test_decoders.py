"""Every decoder of bytes from disk or the network, fed arbitrary and mutated bytes.

Invariant of each property: the decoder returns a value or raises its named
error (CorruptRecord, CorruptCheckpoint, MalformedBatch, InvalidMessage,
CorruptIndexFile, ValueError for message ids); never another exception type
and never a hang. Inputs are either arbitrary bytes or a valid encoding with
bytes flipped, cut or inserted, so the checks past the first few are reached.

A hang shows as :class:`DecoderHang` from a generous alarm (the bound is for
a loop that never ends, not a speed limit: every decoder here finishes in
microseconds).
"""

from __future__ import annotations

import signal
import struct
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from google.protobuf.message import DecodeError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from boltmq.pull_consumer import decode_records as sdk_decode_records
from boltmq.v1 import store_pb2
from boltmq.wire.pull_answer import PullAnswer, encode_pull, split_records
from boltmq.wire.pulled_records import decode_pulled
from boltmq.wire.record import (
    PHYSICAL_OFFSET_OFFSET,
    CorruptRecord,
    InvalidMessage,
    decode_properties,
    decode_record,
    decode_records,
    parse_msg_id,
    verified_record,
)
from boltmq.wire.record_batch import (
    MalformedBatch,
    RecordBatch,
    encode_send_record,
    frame_records,
)
from boltmq.wire.record_encoding import blank_marker, encode_properties
from boltmq.wire.record_heads import check_batch
from services.store.checkpoint import (
    CHECKPOINT_FILE_SIZE,
    CheckpointState,
    CorruptCheckpoint,
    decode_checkpoint,
    encode_checkpoint,
)
from services.store.chunk_records import SMALL_CHUNK, chunk_requests
from services.store.commitlog import dispatch_request_of
from services.store.record_scan import check_chunk, whole_records_end
from tests.reliability.scale import FUZZ_EXAMPLES

HANG_ALARM_S = 20
"""Seconds one decoder call may run before it counts as a hang (they take microseconds)."""
SETTINGS = settings(
    max_examples=FUZZ_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
LONG = struct.Struct(">q")


class DecoderHang(AssertionError):
    """A decoder ran for HANG_ALARM_S seconds: a loop that does not end."""


@contextmanager
def hang_guard() -> Iterator[None]:
    def alarm(signum: int, frame: object) -> None:
        raise DecoderHang(f"decoder still running after {HANG_ALARM_S} s")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(HANG_ALARM_S)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def named_error_only(decode: Callable[[], Any], *named: type[Exception]) -> Any:
    """Run ``decode``; its value, or None when it raised one of ``named``."""
    with hang_guard():
        try:
            return decode()
        except named:
            return None


# ------------------------------------------------------------------ strategies
def record(topic: str, body: bytes, properties: dict[str, str], at: int = 0) -> bytes:
    """A valid message record that says it belongs at CommitLog offset ``at``."""
    raw = bytearray(encode_send_record(topic, body, properties=properties))
    LONG.pack_into(raw, PHYSICAL_OFFSET_OFFSET, at)
    return bytes(raw)


names = st.text(
    st.characters(codec="utf-8", exclude_characters="\x01\x02"), min_size=1, max_size=20
)
valid_records = st.builds(
    record,
    st.one_of(names, st.text("ab", min_size=128, max_size=200)),
    st.binary(min_size=1, max_size=300),
    st.dictionaries(names, names, max_size=4),
)


def run_of(records: list[bytes]) -> bytes:
    """Records back to back, each naming its own offset (a valid chunk from offset 0)."""
    out = bytearray()
    for raw in records:
        patched = bytearray(raw)
        LONG.pack_into(patched, PHYSICAL_OFFSET_OFFSET, len(out))
        out += patched
    return bytes(out)


valid_runs = st.lists(valid_records, min_size=1, max_size=4).map(run_of)
pull_runs = st.builds(
    lambda topic, bodies, tags: run_of(
        [record(topic, body, {"TAGS": tags} if tags else {}) for body in bodies]
    ),
    names,
    st.lists(st.binary(min_size=1, max_size=40), min_size=16, max_size=40)
    | st.integers(16, 40).flatmap(lambda n: st.lists(st.just(b"x" * 20), min_size=n, max_size=n)),
    st.sampled_from(("", "t")),
)
"""A pull's records: 16-40 of one topic (enough for the bulk checks), same size or not."""


@st.composite
def mutated(draw: st.DrawFn, base: st.SearchStrategy[bytes]) -> bytes:
    """``base`` with a few bytes overwritten, a cut, or bytes inserted."""
    data = bytearray(draw(base))
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(("flip", "cut", "insert", "int")))
        at = draw(st.integers(0, max(0, len(data) - 1)))
        if kind == "flip" and data:
            data[at] = draw(st.integers(0, 255))
        elif kind == "cut":
            del data[at : at + draw(st.integers(1, 64))]
        elif kind == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=16))
        elif len(data) >= at + 4:  # an int32 field set to an edge value
            value = draw(st.sampled_from((0, -1, 1, 0x7FFFFFFF, -0x80000000, len(data))))
            data[at : at + 4] = struct.pack(">i", value)
    return bytes(data)


def bytes_like(valid: st.SearchStrategy[bytes]) -> st.SearchStrategy[bytes]:
    """Arbitrary bytes, mutated valid encodings, and the valid encodings themselves."""
    return st.one_of(st.binary(max_size=600), mutated(valid), valid)


# ------------------------------------------------------------------ records
@SETTINGS
@given(bytes_like(valid_records), st.integers(-8, 700), st.booleans())
def test_decode_record_raises_corrupt_record_or_decodes_every_field(
    data: bytes, position: int, check_crc: bool
) -> None:
    def decode() -> tuple[object, ...]:
        view = decode_record(memoryview(data), position, check_crc=check_crc)
        # Every lazily decoded field too: a view that decodes must not blow up later.
        return (
            view.properties,
            view.tags,
            view.keys,
            view.msg_id,
            view.born_host,
            view.store_host,
            view.body_bytes(),
            repr(view),
        )

    named_error_only(decode, CorruptRecord)


@SETTINGS
@given(bytes_like(valid_runs))
def test_decode_records_of_a_pull_raises_corrupt_record_only(data: bytes) -> None:
    views = named_error_only(lambda: decode_records(data), CorruptRecord)
    if views is not None:
        assert sum(v.total_size for v in views) == len(data)
    named_error_only(lambda: [m.properties for m in sdk_decode_records(data)], CorruptRecord)


def outcome(decode: Callable[[], list[Any]]) -> object:
    """What a records decoder made of a run: its records' fields, or its error's text."""
    try:
        return [
            (m.total_size, m.topic, bytes(m.body), m.properties, m.queue_offset) for m in decode()
        ]
    except CorruptRecord as exc:
        return str(exc)


@SETTINGS
@given(st.one_of(mutated(pull_runs), pull_runs))
def test_decode_pulled_agrees_with_decode_records_record_for_record_and_error_for_error(
    data: bytes,
) -> None:
    with hang_guard():
        assert outcome(lambda: decode_pulled(data)) == outcome(lambda: decode_records(data))


@SETTINGS
@given(bytes_like(valid_records), st.integers(-8, 700), st.integers(-1, 700))
def test_verified_record_raises_corrupt_record_only(data: bytes, position: int, size: int) -> None:
    out = named_error_only(lambda: verified_record(memoryview(data), position, size), CorruptRecord)
    if out is not None:
        assert len(out) == size


@SETTINGS
@given(
    st.one_of(
        st.binary(max_size=300),
        mutated(st.dictionaries(names, names, max_size=5).map(encode_properties)),
    )
)
def test_decode_properties_raises_corrupt_record_only(data: bytes) -> None:
    named_error_only(lambda: decode_properties(data), CorruptRecord)


@SETTINGS
@given(st.text(max_size=64))
def test_parse_msg_id_raises_value_error_only(text: str) -> None:
    named_error_only(lambda: parse_msg_id(text), ValueError)


# ------------------------------------------------------------------ HA chunks
@SETTINGS
@given(
    st.one_of(bytes_like(valid_runs), valid_runs.map(lambda run: run + blank_marker(64))),
    st.sampled_from((0, 8, 4096 - 64)),
    st.sampled_from((4096, 64 * 1024)),
)
def test_check_chunk_accepts_only_whole_checked_records(
    data: bytes, offset: int, segment_bytes: int
) -> None:
    records = named_error_only(lambda: check_chunk(data, offset, segment_bytes), CorruptRecord)
    if records is not None:
        assert all(
            r.commitlog_offset == offset + sum(p.total_size for p in records[:i])
            for i, r in enumerate(records)
        )


short_topic_records = st.builds(
    record, names, st.binary(min_size=1, max_size=300), st.dictionaries(names, names, max_size=4)
)
long_runs = st.lists(short_topic_records, min_size=SMALL_CHUNK, max_size=SMALL_CHUNK + 4).map(
    run_of
)
"""Runs the vector check of chunk_requests takes (enough records, short topics)."""


@SETTINGS
@given(
    st.one_of(mutated(long_runs), long_runs, long_runs.map(lambda run: run + blank_marker(64))),
    st.sampled_from((0, 8)),
    st.sampled_from((16 * 1024, 64 * 1024)),
)
def test_chunk_requests_answers_only_with_check_chunks_requests(
    data: bytes, offset: int, segment_bytes: int
) -> None:
    requests = named_error_only(lambda: chunk_requests(data, offset, segment_bytes))
    if requests is not None:  # the vector path accepted: the scalar check must agree
        assert requests == [
            tuple(dispatch_request_of(r)) for r in check_chunk(data, offset, segment_bytes)
        ]


@SETTINGS
@given(bytes_like(valid_runs), st.integers(0, 700), st.integers(0, 700), st.integers(0, 700))
def test_whole_records_end_stays_within_its_limits(
    data: bytes, position: int, limit: int, max_bytes: int
) -> None:
    view = memoryview(data)
    limit = min(limit, len(data))
    position = min(position, limit)
    end = named_error_only(lambda: whole_records_end(view, position, limit, max_bytes))
    assert position <= end <= limit


# ------------------------------------------------------------------ raw send batches
@SETTINGS
@given(
    st.one_of(bytes_like(valid_runs), st.binary(max_size=64)),
    st.integers(-2, 6),
    st.integers(0, 2048),
)
def test_send_batches_raise_named_errors_only(data: bytes, count: int, max_body_bytes: int) -> None:
    def check() -> object:
        return check_batch(RecordBatch(data, count, "T", 0), max_body_bytes, 64 * 1024)

    named_error_only(lambda: frame_records(data, count), MalformedBatch)
    outcome = named_error_only(check, MalformedBatch)
    if outcome is not None:
        good, bad = outcome
        assert len(good) + len(bad) == count
        assert all(isinstance(e, InvalidMessage | CorruptRecord) for e in bad.values())


# ------------------------------------------------------------------ pull answers
def pull_answer(records: bytes, offset: int, count: int, suggest: int) -> bytes:
    """A pull's bytes as the store encodes them, with a broker's suggestion when set."""
    answer = PullAnswer.parse(
        encode_pull(
            store_pb2.PullResponse(status=1, next_begin_offset=offset, record_count=count),
            [records],
        )
    )
    if suggest:
        answer.suggest(suggest)
    return answer.encoded


valid_pull_answers = st.builds(
    pull_answer, valid_runs, st.integers(0, 1 << 62), st.integers(0, 1 << 30), st.integers(0, 2)
)


@SETTINGS
@given(bytes_like(valid_pull_answers))
def test_split_records_raises_decode_error_only_and_agrees_with_protobuf(data: bytes) -> None:
    split = named_error_only(lambda: split_records(data), DecodeError)
    if split is None:
        return
    response, records = split
    whole = named_error_only(lambda: store_pb2.PullResponse.FromString(data), DecodeError)
    if whole is not None:  # what protobuf reads from the same bytes
        assert bytes(records) == whole.records
        whole.records = b""
        assert response == whole


# ------------------------------------------------------------------ checkpoint
valid_checkpoints = st.builds(CheckpointState, *[st.integers(0, 1 << 62)] * 3).map(
    encode_checkpoint
)


@SETTINGS
@given(
    st.one_of(
        st.binary(max_size=64),
        mutated(valid_checkpoints.map(lambda b: b[:64])),
        mutated(valid_checkpoints),
    )
)
def test_decode_checkpoint_raises_corrupt_checkpoint_only(data: bytes) -> None:
    state = named_error_only(lambda: decode_checkpoint(data), CorruptCheckpoint)
    if state is not None:
        assert (
            min(state.physic_msg_timestamp, state.logics_msg_timestamp, state.index_msg_timestamp)
            >= 0
        )
        assert len(encode_checkpoint(state)) == CHECKPOINT_FILE_SIZE
