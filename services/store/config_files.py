"""ConfigFiles: the broker's JSON metadata under ``<root>/config/``.

The broker is stateless: topics, consumer offsets, subscription groups and
delay offsets live in files the store writes for it (PutConfig / GetConfig).

Files of one name ``NAME`` in ``<root>/config/``:

File          | Holds
--------------+-----------------------------------------------------------------
NAME          | the current version (always a whole one: it is only ever renamed into place)
NAME.bak      | the version before it (a hard link to the replaced file)
NAME.tmp      | a write in progress; a crash leaves it behind and the next write replaces it
NAME.bak.tmp  | the next NAME.bak, for the instant between link and rename

A write is tmp -> fsync -> rename -> fsync(dir). Before NAME is
replaced, it becomes NAME.bak through a hard link renamed over the old
backup, so neither NAME nor NAME.bak is ever missing or partial. Copying the
bytes was rejected: it costs a second data fsync per write for the same
guarantee. A current file that is itself unusable never replaces the backup.

A read returns NAME, or NAME.bak when NAME is missing, empty or not JSON (a
disk or a hand edit can still break it). Content must be UTF-8 JSON, so the
same check that picks the readable version on the way out protects the way in.

Names are ``[A-Za-z0-9_.-]+``, never ``.`` or ``..``, so a name can only ever
be a plain file in ``config/``; the ``.bak`` and ``.tmp`` endings are reserved
for the files above.

The files hold secrets (``plain_acl.json``: the ACL's secret keys, and its
``.bak`` the secrets before the last edit), so ``config/`` is mode 0700 and
every file in it 0600 (``FILE_MODE``): nobody but the store's own user reads
them. Files and directories left wider by an older version are narrowed when
the store opens them.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
from pathlib import Path
from typing import Final

from services.store.mapped_file import fsync_dir

log = logging.getLogger(__name__)

CONFIG_DIR_NAME: Final = "config"
CONFIG_NAME_PATTERN: Final = re.compile(r"^[A-Za-z0-9_.-]+$")
CONFIG_NAME_MAX_CHARS: Final = 200
"""Longest name: the file system's 255-byte limit minus ``.bak.tmp``, with room to spare."""
CONFIG_CONTENT_MAX_BYTES: Final = 16 * 1024 * 1024
"""Largest content accepted (a consumerOffset.json of ~100,000 queue offsets fits)."""
CONFIG_FILES_MAX: Final = 1024
"""Distinct names kept at most (the broker uses four)."""
FILE_MODE: Final = 0o600
"""Mode of every file in config/ (they may hold secret keys)."""
DIRECTORY_MODE: Final = 0o700
BACKUP_SUFFIX: Final = ".bak"
TMP_SUFFIX: Final = ".tmp"
_RESERVED_SUFFIXES: Final = (BACKUP_SUFFIX, TMP_SUFFIX)


class InvalidConfigName(ValueError):
    """A config name that is not a plain file name of the allowed characters."""


class InvalidConfigContent(ValueError):
    """Content that is too large or not UTF-8 JSON."""


class TooManyConfigFiles(RuntimeError):
    """A new name would exceed CONFIG_FILES_MAX."""


class ConfigCorrupt(RuntimeError):
    """Neither NAME nor NAME.bak holds usable JSON."""


def validate_config_name(name: str) -> str:
    """Return ``name`` when it is allowed, else raise InvalidConfigName with the reason."""
    if not name:
        raise InvalidConfigName("must not be empty")
    if len(name) > CONFIG_NAME_MAX_CHARS:
        raise InvalidConfigName(f"is {len(name)} characters, at most {CONFIG_NAME_MAX_CHARS}")
    if name in (".", "..") or not CONFIG_NAME_PATTERN.fullmatch(name):
        raise InvalidConfigName(
            f"{name[:60]!r} may only use letters, digits, '_', '.' and '-' "
            f"and must not be '.' or '..'"
        )
    if name.endswith(_RESERVED_SUFFIXES):
        raise InvalidConfigName(
            f"{name!r} ends in a reserved suffix ({' or '.join(_RESERVED_SUFFIXES)})"
        )
    return name


def validate_config_content(content: bytes) -> None:
    """Raise InvalidConfigContent unless ``content`` is UTF-8 JSON within the size limit."""
    if len(content) > CONFIG_CONTENT_MAX_BYTES:
        raise InvalidConfigContent(f"is {len(content)} bytes, at most {CONFIG_CONTENT_MAX_BYTES}")
    problem = _json_problem(content)
    if problem:
        raise InvalidConfigContent(problem)


def _json_problem(content: bytes) -> str:
    """Why ``content`` is not usable JSON ("" when it is)."""
    if not content.strip():
        return "is empty"
    try:
        json.loads(content.decode("utf-8"))
    except UnicodeDecodeError as exc:
        return f"is not UTF-8 ({exc.reason} at byte {exc.start})"
    except ValueError as exc:
        return f"is not JSON ({exc})"
    return ""


class ConfigFiles:
    """The JSON files of one store root's ``config/`` directory (see the module docstring)."""

    def __init__(self, root_dir: Path, directory_name: str = CONFIG_DIR_NAME) -> None:
        self.directory = root_dir / directory_name
        # One writer at a time: two puts of a name would share NAME.tmp.
        self._write_lock = threading.Lock()
        self._narrow_modes()

    def _narrow_modes(self) -> None:
        """Make an existing config/ 0700 and its files 0600 (an older version wrote 0644)."""
        if not self.directory.is_dir():
            return
        os.chmod(self.directory, DIRECTORY_MODE)
        for entry in os.scandir(self.directory):
            if entry.is_file(follow_symlinks=False) and entry.stat().st_mode & 0o777 != FILE_MODE:
                os.chmod(entry.path, FILE_MODE)

    def put(self, name: str, content: bytes) -> None:
        """Replace ``name`` atomically, keeping the version before it as ``name.bak``.

        Blocks on two fsyncs: call it off the event loop.
        """
        validate_config_name(name)
        validate_config_content(content)
        path = self.directory / name
        with self._write_lock:
            if not self.directory.is_dir():
                self.directory.mkdir(mode=DIRECTORY_MODE, parents=True, exist_ok=True)
                os.chmod(self.directory, DIRECTORY_MODE)  # mkdir's mode is filtered by umask
            if not path.exists() and self._count() >= CONFIG_FILES_MAX:
                raise TooManyConfigFiles(
                    f"config/ already holds {CONFIG_FILES_MAX} files; refusing {name!r}"
                )
            tmp = path.with_name(name + TMP_SUFFIX)
            _write_synced(tmp, content)
            if _usable(path):
                self._keep_backup(path)
            os.replace(tmp, path)
            fsync_dir(self.directory)

    def get(self, name: str) -> bytes | None:
        """The content of ``name`` (or of its backup when it is unusable); None if never put."""
        validate_config_name(name)
        path = self.directory / name
        backup = path.with_name(name + BACKUP_SUFFIX)
        content, problem = _read(path)
        if not problem:
            return content
        fallback, backup_problem = _read(backup)
        if not backup_problem:
            if content is not None:
                log.warning("config/%s %s; serving config/%s%s", name, problem, name, BACKUP_SUFFIX)
            return fallback
        if content is None and fallback is None:
            return None
        raise ConfigCorrupt(
            f"config/{name} {problem or 'is missing'} and config/{name}"
            f"{BACKUP_SUFFIX} {backup_problem or 'is missing'}"
        )

    def _keep_backup(self, path: Path) -> None:
        """Make the current ``path`` the backup: link it as .bak.tmp, rename over .bak."""
        backup = path.with_name(path.name + BACKUP_SUFFIX)
        link = path.with_name(backup.name + TMP_SUFFIX)
        link.unlink(missing_ok=True)
        os.link(path, link)
        os.replace(link, backup)

    def _count(self) -> int:
        return sum(
            1 for entry in os.scandir(self.directory) if not entry.name.endswith(_RESERVED_SUFFIXES)
        )


def _write_synced(path: Path, content: bytes) -> None:
    """Write ``content`` to a fresh ``path`` and fsync it."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)  # a NAME.tmp left by a crash keeps its old mode otherwise
        view = memoryview(content)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)


def _read(path: Path) -> tuple[bytes | None, str]:
    """``(content, problem)``: content None when missing; problem "" when usable JSON."""
    try:
        content = path.read_bytes()
    except FileNotFoundError:
        return None, "is missing"
    except OSError as exc:
        return b"", f"is unreadable ({exc.strerror or exc})"
    return content, _json_problem(content)


def _usable(path: Path) -> bool:
    return not _read(path)[1]
