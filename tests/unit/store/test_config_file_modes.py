"""Modes of the store's config files, which hold the ACL's secret keys
(services.store.config_files)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from services.store.config_files import ConfigFiles


def mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


@pytest.fixture
def wide_umask() -> Iterator[None]:
    """Writes under umask 000, so only the store's own modes narrow anything."""
    old = os.umask(0)
    yield
    os.umask(old)


def test_files_and_their_backups_are_owner_only(tmp_path: Path, wide_umask: None) -> None:
    files = ConfigFiles(tmp_path)
    files.put("plain_acl.json", b'{"secret": "old"}')
    files.put("plain_acl.json", b'{"secret": "new"}')
    config = tmp_path / "config"
    assert mode(config) == 0o700
    assert mode(config / "plain_acl.json") == 0o600
    assert (config / "plain_acl.json.bak").read_bytes() == b'{"secret": "old"}'
    assert mode(config / "plain_acl.json.bak") == 0o600


def test_files_an_older_version_left_readable_are_narrowed_on_open(
    tmp_path: Path, wide_umask: None
) -> None:
    config = tmp_path / "config"
    config.mkdir(mode=0o755)
    for name in ("plain_acl.json", "plain_acl.json.bak", "topics.json.tmp"):
        (config / name).write_bytes(b"{}")
        os.chmod(config / name, 0o644)
    files = ConfigFiles(tmp_path)
    assert mode(config) == 0o700
    assert {mode(p) for p in config.iterdir()} == {0o600}
    files.put("plain_acl.json", b'{"secret": "rotated"}')
    assert {mode(p) for p in config.iterdir()} == {0o600}


def test_a_crashed_write_left_wide_is_rewritten_owner_only(
    tmp_path: Path, wide_umask: None
) -> None:
    files = ConfigFiles(tmp_path)
    files.put("topics.json", b"{}")
    tmp = tmp_path / "config" / "plain_acl.json.tmp"
    tmp.write_bytes(b"partial")
    os.chmod(tmp, 0o666)
    files.put("plain_acl.json", b"{}")
    assert mode(tmp_path / "config" / "plain_acl.json") == 0o600
