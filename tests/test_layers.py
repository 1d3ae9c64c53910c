"""Imports run one way: the composition root mounts the frontends, a frontend never imports another (but rtc uses
http_api's error envelope and application state), and nothing below the frontends imports one.

Read from the source (ast), so an import inside a function or under TYPE_CHECKING counts too.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import ROOT

pytestmark = pytest.mark.fast

FRONTENDS = ("http_api", "rtc", "wyoming_wis.wyoming")
COMPOSITION_ROOT = ("wyoming_wis.serve", "wyoming_wis.__main__")  # builds the core and mounts every frontend
ALLOWED = {("rtc", "http_api")}  # (importer, imported) between frontends


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> Iterator[str]:
    """Every name the file imports, absolute (`from . import x` in http_api is http_api.x)."""
    module = _module(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            parts = package.split(".")
            base = ".".join(parts[: len(parts) - node.level + 1]) if node.level else ""
            target = ".".join(part for part in (base, node.module) if part)
            yield from (f"{target}.{alias.name}" for alias in node.names)


def _frontend(name: str) -> str | None:
    return next((f for f in FRONTENDS if name == f or name.startswith(f + ".")), None)


def _wrong_way() -> list[str]:
    found = []
    for path in sorted(p for top in ("wyoming_wis", "http_api", "rtc") for p in (ROOT / top).rglob("*.py")):
        module = _module(path)
        if module in COMPOSITION_ROOT:
            continue
        mine = _frontend(module)
        for name in _imports(path):
            theirs = _frontend(name)
            if theirs is not None and theirs != mine and (mine, theirs) not in ALLOWED:
                found.append(f"{module} imports {name}")
    return found


def test_only_the_composition_root_imports_a_frontend_and_frontends_not_each_other() -> None:
    assert _wrong_way() == []


def test_the_check_sees_relative_and_absolute_imports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check itself: a core module importing http_api, and http_api importing rtc, are both caught."""
    for folder, source in (("wyoming_wis", "from http_api import errors\n"), ("http_api", "from rtc import ice\n")):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "__init__.py").write_text("")
        (tmp_path / folder / "bad.py").write_text(source)
    (tmp_path / "http_api" / "worse.py").write_text("from ..rtc.signalling import PEERS\nfrom . import errors\n")
    (tmp_path / "rtc").mkdir()
    (tmp_path / "rtc" / "fine.py").write_text("from http_api.errors import ApiError\n")
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    assert _wrong_way() == [
        "http_api.bad imports rtc.ice",
        "http_api.worse imports rtc.signalling.PEERS",
        "wyoming_wis.bad imports http_api.errors",
    ]
