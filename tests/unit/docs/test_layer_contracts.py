"""The import contracts and the strict typing name every SDK module, and only those.

import-linter's contracts (``[tool.importlinter]`` in pyproject.toml) name the SDK's
modules one by one, since they sit at the root of ``boltmq`` beside the packages of the
other layers; so does the strict mypy override. A new SDK module missing from a list
would escape the layer rules or the strict typing without anyone noticing: this test
notices.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[3]
ROOT_PACKAGES = {"wire", "kernel", "cli", "console", "spark", "v1", "rocketmq"}
"""The packages under ``boltmq/``: every other module there is the SDK."""


def _sdk_modules() -> set[str]:
    modules = {f"boltmq.{p.stem}" for p in (REPO_ROOT / "boltmq").glob("*.py")}
    modules.discard("boltmq.__init__")
    return modules


def _project() -> dict[str, Any]:
    return tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())


def _named_sdk(modules: list[str]) -> set[str]:
    """The SDK modules among ``modules`` (the entries naming a module at boltmq's root)."""
    return {m for m in modules if m.count(".") == 1 and m.startswith("boltmq.")} - {
        f"boltmq.{p}" for p in ROOT_PACKAGES
    }


def test_the_packages_under_boltmq_are_the_known_layers() -> None:
    packages = {p.name for p in (REPO_ROOT / "boltmq").iterdir() if (p / "__init__.py").exists()}
    assert packages <= ROOT_PACKAGES, packages - ROOT_PACKAGES


def test_every_contract_that_names_sdk_modules_names_all_of_them() -> None:
    contracts = _project()["tool"]["importlinter"]["contracts"]
    naming = 0
    for contract in contracts:
        for key in ("source_modules", "forbidden_modules"):
            named = _named_sdk(contract.get(key, []))
            if named:
                naming += 1
                assert named == _sdk_modules(), (contract["name"], key)
    assert naming >= 4  # wire, kernel, SDK and services contracts


def test_the_strict_typing_covers_every_sdk_module() -> None:
    overrides = _project()["tool"]["mypy"]["overrides"]
    strict = next(o for o in overrides if o.get("disallow_untyped_defs"))
    assert _named_sdk(strict["module"]) == _sdk_modules()
    assert {"boltmq.wire.*", "boltmq.kernel.*"} <= set(strict["module"])
