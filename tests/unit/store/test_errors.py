"""The store's errors in the kernel's vocabulary: the status and text each ends a call with."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from boltmq.kernel.errors import InvalidArgument, ServiceError, Unavailable
from services.store import MessageStore, StoreConfig
from services.store.errors import BadRequest, Rejected, StoreNotRunning


def test_a_bad_request_is_invalid_argument_naming_its_field() -> None:
    error = BadRequest("pulls[2].topic", "must not be empty")
    assert isinstance(error, InvalidArgument)
    assert error.code is grpc.StatusCode.INVALID_ARGUMENT
    assert (str(error), error.field) == ("pulls[2].topic: must not be empty", "pulls[2].topic")


def test_a_rejection_carries_the_status_it_names() -> None:
    error = Rejected(grpc.StatusCode.OUT_OF_RANGE, "offset: 7 is past the CommitLog's end 0")
    assert isinstance(error, ServiceError)
    assert error.code is grpc.StatusCode.OUT_OF_RANGE
    assert str(error) == "offset: 7 is past the CommitLog's end 0"


def test_a_store_not_started_answers_unavailable_and_is_still_a_runtime_error(
    tmp_path: Path,
) -> None:
    store = MessageStore(StoreConfig(root_dir=tmp_path))
    with pytest.raises(StoreNotRunning) as raised:
        store.get_messages("T", 0, 0)
    assert isinstance(raised.value, Unavailable) and isinstance(raised.value, RuntimeError)
    assert raised.value.code is grpc.StatusCode.UNAVAILABLE
    assert str(raised.value) == "store is not running (call start())"
