"""The status each HA error ends a Replicate stream with (the table in services/ha/errors.py)."""

from __future__ import annotations

import grpc
import pytest

from boltmq.kernel.errors import ServiceError
from services.ha.errors import (
    CannotResume,
    ChunkRefused,
    HAError,
    HandshakeRefused,
    MasterUnknown,
    OffsetMismatch,
    StoreCallFailed,
    StoreUnavailable,
    StreamSilent,
)
from services.ha.master import NotMaster


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (CannotResume("gone"), grpc.StatusCode.FAILED_PRECONDITION),
        (NotMaster("replica"), grpc.StatusCode.FAILED_PRECONDITION),
        (StreamSilent("quiet"), grpc.StatusCode.DEADLINE_EXCEEDED),
        (OffsetMismatch("off"), grpc.StatusCode.ABORTED),
        (HandshakeRefused("no"), grpc.StatusCode.ABORTED),
        (ChunkRefused("bad"), grpc.StatusCode.ABORTED),
        (StoreUnavailable("down"), grpc.StatusCode.UNAVAILABLE),
        (StoreCallFailed("refused", grpc.StatusCode.OUT_OF_RANGE), grpc.StatusCode.OUT_OF_RANGE),
        (MasterUnknown("none"), grpc.StatusCode.INTERNAL),
    ],
)
def test_every_ha_error_carries_its_status(error: HAError, code: grpc.StatusCode) -> None:
    assert isinstance(error, ServiceError)
    assert error.code == code
