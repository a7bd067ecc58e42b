"""GetStoreInfo's ``appends_wait``: whether an append waits for a flush or a replica.

A colocated broker runs a send in its stream's reader only when the store's
appends answer at once, so the field must follow the flush type and the role
as the store runs now (a promotion to SYNC_MASTER included).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from services.store import MessageStore
from services.store.proto_conversion import store_info


def test_appends_wait_under_sync_flush_or_as_a_sync_master_only(
    make_store: Callable[..., MessageStore], tmp_path: Path
) -> None:
    cases = {
        "async": dict(flush_disk_type="ASYNC_FLUSH"),
        "sync flush": dict(flush_disk_type="SYNC_FLUSH"),
        "sync master": dict(broker_role="SYNC_MASTER"),
        "replica": dict(broker_role="SLAVE"),
    }
    waits = {}
    for name, overrides in cases.items():
        store = make_store(tmp_path / name.replace(" ", "-"), **overrides)
        waits[name] = store_info(store, store.config).appends_wait
    assert waits == {"async": False, "sync flush": True, "sync master": True, "replica": False}
