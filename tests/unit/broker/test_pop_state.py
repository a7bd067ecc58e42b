"""PopState: popState.json round-trips, changes are counted, bad files are refused."""

from __future__ import annotations

import json

import pytest

from services.broker.errors import CorruptMetadata
from services.broker.metadata.pop_state import (
    POP_SECRET_FILE,
    POP_STATE_FILE,
    SECRET_BYTES,
    InFlight,
    PopState,
    new_token,
)


def filled() -> PopState:
    state = PopState()
    assert state.ensure_secret()
    queue = state.queue("G", "Orders", 1)
    queue.pop_offset = 12
    queue.in_flight[10] = InFlight(4096, 1_700_000_030_000, 2, new_token(), "")
    queue.in_flight[11] = InFlight(4200, 0, 0, 0, "order-7")
    state.queue("G2", "Orders", 0).pop_offset = 3
    state.queue("G", "Empty", 0)  # never read: not written
    state.changed()
    return state


def test_the_files_round_trip_and_the_state_never_holds_the_secret() -> None:
    state = filled()
    copy = PopState()
    copy.load_json(state.to_json())
    assert copy.to_json() == state.to_json()
    assert state.secret.hex().encode() not in state.to_json()
    assert copy.secret == b""
    copy.load_secret_json(state.secret_json())
    assert copy.secret == state.secret and len(copy.secret) == SECRET_BYTES
    loaded = copy.find("G", "Orders", 1)
    assert loaded is not None and loaded.pop_offset == 12
    assert loaded.in_flight[11] == InFlight(4200, 0, 0, 0, "order-7")
    assert copy.find("G", "Empty", 0) is None
    document = json.loads(state.to_json())
    assert set(document["popTable"]) == {"Orders@G", "Orders@G2"}
    assert document["popTable"]["Orders@G"]["1"]["inFlight"]["11"] == [4200, 0, 0, 0, "order-7"]


def test_the_secret_is_made_once_and_kept() -> None:
    state = PopState()
    assert state.ensure_secret()
    secret, version = state.secret, state.version
    assert not state.ensure_secret()
    assert state.secret == secret and state.version == version


def test_changes_move_the_version_and_deleting_a_topic_forgets_it() -> None:
    state = filled()
    version = state.version
    assert state.delete_topic("Orders")
    assert state.version > version
    assert state.find("G", "Orders", 1) is None
    assert not state.delete_topic("Orders")


def test_tokens_are_random_and_never_zero() -> None:
    tokens = {new_token() for _ in range(1000)}
    assert len(tokens) == 1000 and 0 not in tokens and max(tokens) < 1 << 63


def document(**changes: object) -> bytes:
    base = json.loads(filled().to_json())
    base.update(changes)
    return json.dumps(base).encode()


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"[1]", "not a JSON object"),
        (document(popTable=[]), "popTable is not a JSON object"),
        (document(popTable={"Orders": {}}), "bad entry"),
        (document(popTable={"Or ders@G": {}}), "bad entry"),
        (document(popTable={"Orders@G": {"x": {}}}), "bad number"),
        (document(popTable={"Orders@G": {"0": {"popOffset": -1}}}), "bad popOffset"),
        (document(popTable={"Orders@G": {"0": {"inFlight": {"5": [1, 2]}}}}), "in-flight"),
        (
            document(popTable={"Orders@G": {"0": {"inFlight": {"5": [1, 2, 3, -4, ""]}}}}),
            "in-flight",
        ),
        (document(popTable={"Orders@G": {"0": {"inFlight": {"5": [1, 2, 3, 4, 5]}}}}), "in-flight"),
    ],
)
def test_a_file_that_is_not_what_the_broker_writes_is_refused(data: bytes, why: str) -> None:
    with pytest.raises(CorruptMetadata, match=why) as info:
        PopState().load_json(data)
    assert POP_STATE_FILE in str(info.value)


@pytest.mark.parametrize(
    "data",
    [b'{"secret": "abc"}', b'{"secret": ""}', b"{}", b'{"secret": 7}', ("00" * 31).encode()],
)
def test_a_secret_file_that_is_not_32_bytes_of_hex_is_refused(data: bytes) -> None:
    with pytest.raises(CorruptMetadata) as info:
        PopState().load_secret_json(data)
    assert POP_SECRET_FILE in str(info.value)
