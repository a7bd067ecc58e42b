"""The server processes' gRPC transport setting (``boltmq.runtime.use_server_transport``)."""

from __future__ import annotations

import os

import pytest

from boltmq.runtime import GRPC_EXPERIMENTS_DEFAULT, use_server_transport


def test_a_server_turns_off_the_event_engine_experiments_by_default(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GRPC_EXPERIMENTS", "")  # recorded, so it is restored after
    monkeypatch.delenv("GRPC_EXPERIMENTS")
    use_server_transport()
    assert os.environ["GRPC_EXPERIMENTS"] == GRPC_EXPERIMENTS_DEFAULT
    assert GRPC_EXPERIMENTS_DEFAULT.split(",") == ["-event_engine_client",
                                                   "-event_engine_listener"]


@pytest.mark.parametrize("operators", ["", "event_engine_client", "-event_engine_dns"])
def test_an_operators_own_setting_is_left_as_it_is(monkeypatch: pytest.MonkeyPatch,
                                                    operators: str) -> None:
    monkeypatch.setenv("GRPC_EXPERIMENTS", operators)
    use_server_transport()
    assert os.environ["GRPC_EXPERIMENTS"] == operators
