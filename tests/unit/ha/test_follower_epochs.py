"""The follower refuses a deposed master: a handshake or chunk older than the newest epoch."""

from __future__ import annotations

import asyncio

import pytest

from boltmq.v1 import store_pb2
from services.ha.config import HAConfig
from services.ha.errors import HandshakeRefused
from services.ha.follower import Follower


def follower() -> Follower:
    config = HAConfig(store_address="127.0.0.1:1", master_address="127.0.0.1:2")
    return Follower(config, store=None, locator=None, own_address="r:1")  # type: ignore[arg-type]


def test_the_newest_group_epoch_only_rises() -> None:
    f = follower()
    f.note_group_epoch(3)
    f.note_group_epoch(2)
    assert f._group_epoch == 3


def test_a_handshake_from_a_master_older_than_the_elected_one_is_refused() -> None:
    f = follower()
    f.note_group_epoch(5)
    handshake = store_pb2.CommitLogChunk(handshake=True, master_epoch=4, segment_bytes=1024)
    info = store_pb2.StoreInfo(segment_bytes=1024, role="REPLICA")
    with pytest.raises(HandshakeRefused, match="deposed master"):
        asyncio.run(f._apply_handshake(handshake, info, "old-master:1"))
