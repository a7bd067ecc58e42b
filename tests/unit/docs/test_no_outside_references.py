"""No code, test or document cites a document or work history that is not in the repository.

A reader can open every reference: a module, a test, a file under ``docs/``,
``bench/RESULTS.md``. Numbered sections of design or style documents kept elsewhere,
tracker tickets, numbered work sessions and paths into a shared folder outside the
repository cannot be opened, so they are not written down; their content is.
``bench/history/`` is the benchmark journal, whose sessions are its own headings; it is
not scanned.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import PurePosixPath

import pytest

from tests.unit.docs.repo_files import ROOT, tracked_files

# Built from parts so that this file does not match itself.
PATTERN = re.compile(
    r"(DESIGN|STYLE) [0-9]"
    r"|[Ii]ssue[- ]?#?[0-9]"
    r"|[Ss]ession [0-9]"
    r"|DESIGN\.md|STYLE\.md"
    r"|shared" + "/"
)
SUFFIXES = frozenset((".py", ".md", ".proto", ".yaml", ".yml", ".toml", ".js", ".sh"))
NAMES = frozenset(("Makefile", "Dockerfile"))
EXCLUDED = ("bench/history/",)


def scanned_files() -> dict[str, list[str]]:
    """The tracked files to scan, grouped by directory ('.' for the root's), so a failure
    names the folder it is in."""
    groups: dict[str, list[str]] = defaultdict(list)
    for name in tracked_files():
        path = PurePosixPath(name)
        if name.startswith(EXCLUDED):
            continue
        if path.suffix in SUFFIXES or path.name in NAMES:
            groups[str(path.parent)].append(name)
    return dict(groups)


def references_in(names: list[str]) -> list[str]:
    """``path:line: text`` for every line of ``names`` the pattern matches."""
    hits = []
    for name in names:
        file = ROOT / name
        if not file.is_file():  # deleted in the working tree, not yet in the index
            continue
        for number, line in enumerate(file.read_text(errors="replace").splitlines(), 1):
            if PATTERN.search(line):
                hits.append(f"{name}:{number}: {line.strip()}")
    return hits


GROUPS = scanned_files() if (ROOT / ".git").exists() else {}


def test_the_pattern_finds_each_kind_of_reference() -> None:
    cited = ["DESIGN" + " 7", "STYLE" + " 13", "issue" + " 8", "Issue #" + "3", "issue-" + "3"]
    cited += ["session" + " 17", "DESIGN" + ".md", "/work/" + "shared" + "/x"]
    assert all(PATTERN.search(text) for text in cited)
    plain = ["the sessions of Spark", "a known issue", "issues", "SessionState 1"]
    assert not any(PATTERN.search(text) for text in plain)


def test_python_and_docs_are_scanned() -> None:
    if not GROUPS:
        pytest.skip("not a git checkout")
    assert {"docs", "boltmq", "services/store", "protos/boltmq/v1", "."} <= set(GROUPS)


@pytest.mark.parametrize("group", sorted(GROUPS))
def test_no_outside_references(group: str) -> None:
    hits = references_in(GROUPS[group])
    assert not hits, "references that do not resolve inside the repository:\n" + "\n".join(hits)
