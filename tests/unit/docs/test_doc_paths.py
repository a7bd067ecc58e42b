"""Every repository path the guides cite exists.

README.md, docs/architecture.md, docs/style.md and bench/RESULTS.md name modules and
files to read next; a module renamed or moved without its mention fails here. Patterns
(``services/<name>/config.py``, ``protos/boltmq/v1/*.proto``) are not paths and are
left alone.
"""

from __future__ import annotations

import re

import pytest

from tests.unit.docs.repo_files import ROOT

GUIDES = ("README.md", "docs/architecture.md", "docs/style.md", "bench/RESULTS.md")
TOP = "boltmq|services|bench|tests|docs|deploy|protos|pipelines|clients"
CITED = re.compile(rf"`((?:{TOP})/[^`\s]*)`|\]\((?:\.\./)*((?:{TOP})/[^)\s#]*)\)")


def cited_paths(guide: str) -> list[str]:
    """The repository paths ``guide`` cites in backticks or as link targets."""
    text = (ROOT / guide).read_text()
    found = [a or b for a, b in CITED.findall(text)]
    return [path.rstrip("/.,:") for path in found if not set(path) & set("<>*{}[]")]


@pytest.mark.parametrize("guide", GUIDES)
def test_cited_paths_exist(guide: str) -> None:
    paths = cited_paths(guide)
    assert paths, f"{guide} cites no repository path"
    missing = sorted({path for path in paths if not (ROOT / path).exists()})
    assert not missing, f"{guide} cites paths that do not exist: {missing}"
