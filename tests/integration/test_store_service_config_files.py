"""StoreService config files end to end: PutConfig and GetConfig.

A write keeps the previous version as a backup that a damaged current file
falls back to; names that could escape the config directory and contents that
are not JSON are refused.
"""

from __future__ import annotations

from pathlib import Path

from boltmq.v1 import store_pb2
from tests.integration.store_service_helpers import (
    Spawn,
    connect_fixture,  # noqa: F401 (the ``connect`` fixture)
    invalid,
    start_store,
)


def test_config_files_round_trip_backup_and_names(spawn: Spawn, connect, tmp_path: Path) -> None:
    root = tmp_path / "s"
    stub = connect(start_store(spawn, root))
    v1, v2 = b'{"topics": {"A": 8}}', b'{"topics": {"A": 8, "B": 4}}'

    def get(name: str) -> store_pb2.GetConfigResponse:
        return stub.GetConfig(store_pb2.GetConfigRequest(name=name))

    stub.PutConfig(store_pb2.PutConfigRequest(name="topics.json", content=v1))
    assert (get("topics.json").found, get("topics.json").content) == (True, v1)
    stub.PutConfig(store_pb2.PutConfigRequest(name="topics.json", content=v2))
    assert get("topics.json").content == v2
    config_dir = root / "config"
    assert (config_dir / "topics.json").read_bytes() == v2
    assert (config_dir / "topics.json.bak").read_bytes() == v1
    assert sorted(p.name for p in config_dir.iterdir()) == ["topics.json", "topics.json.bak"]
    # A damaged current file falls back to the previous version ...
    for damage in (b"", b'{"topics": {"A"'):
        (config_dir / "topics.json").write_bytes(damage)
        assert get("topics.json").content == v1
    # ... and is never kept as the backup by the next write.
    stub.PutConfig(store_pb2.PutConfigRequest(name="topics.json", content=v2))
    assert (config_dir / "topics.json.bak").read_bytes() == v1
    assert not get("nothing.json").found

    for name in (
        "",
        ".",
        "..",
        "../escape.json",
        "a/b",
        "sp ace",
        "x.bak",
        "x.tmp",
        "é",
        "n" * 201,
    ):
        assert invalid(
            stub.PutConfig, store_pb2.PutConfigRequest(name=name, content=b"{}")
        ).startswith("name:")
        assert invalid(stub.GetConfig, store_pb2.GetConfigRequest(name=name)).startswith("name:")
    for content in (b"not json", b"\xff\xfe", b"   ", b"1" * (16 * 1024 * 1024 + 1)):
        assert invalid(
            stub.PutConfig, store_pb2.PutConfigRequest(name="bad.json", content=content)
        ).startswith("content:")
    assert not (tmp_path / "escape.json").exists() and not (root / "escape.json").exists()
    assert not get("bad.json").found
