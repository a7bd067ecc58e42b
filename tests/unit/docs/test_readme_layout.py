"""The README's layout table describes the tree as it is.

Every path the table lists exists, and the table lists every top-level directory git
tracks (dot-directories aside), every package directly under ``boltmq/`` and every
package directly under ``services/``. A folder added, moved or removed without its row
fails here.
"""

from __future__ import annotations

import re

from tests.unit.docs.repo_files import ROOT, tracked_files

SECTION = "## Layout"


def layout_paths() -> list[str]:
    """The paths in the first cell of each row of the README's layout table, without '/'."""
    text = (ROOT / "README.md").read_text()
    _, found, rest = text.partition(f"\n{SECTION}\n")
    assert found, f"README.md has no '{SECTION}' section"
    section = rest.split("\n## ", 1)[0]
    paths = []
    for line in section.splitlines():
        cells = line.split("|")
        if line.startswith("|") and len(cells) > 2:
            paths += [path.rstrip("/") for path in re.findall(r"`([^`]+)`", cells[1])]
    return paths


def packages_under(directory: str) -> set[str]:
    """Packages directly under ``directory`` (subdirectories with an ``__init__.py``)."""
    return {
        f"{directory}/{child.name}"
        for child in (ROOT / directory).iterdir()
        if (child / "__init__.py").is_file()
    }


def top_level_directories() -> set[str]:
    """First path components of tracked files that are directories, dot-directories aside."""
    return {
        name.split("/", 1)[0]
        for name in tracked_files()
        if "/" in name and not name.startswith(".")
    }


def test_the_layout_table_lists_paths() -> None:
    assert len(layout_paths()) >= 10


def test_every_listed_path_exists() -> None:
    missing = [path for path in layout_paths() if not (ROOT / path).exists()]
    assert not missing, f"README.md's layout lists paths that do not exist: {missing}"


def test_every_top_level_directory_is_listed() -> None:
    unlisted = sorted(top_level_directories() - set(layout_paths()))
    assert not unlisted, f"top-level directories missing from README.md's layout: {unlisted}"


def test_every_package_under_boltmq_and_services_is_listed() -> None:
    packages = packages_under("boltmq") | packages_under("services")
    unlisted = sorted(packages - set(layout_paths()))
    assert not unlisted, f"packages missing from README.md's layout: {unlisted}"
