"""No function of the core package (wyoming_wis/) takes more than MAX_POSITIONAL positional parameters (self and
cls not counted): past that, a call reads as a row of values whose meaning hangs on their order, so the rarer ones
are keyword-only (after `*`) or grouped into a value of their own.

Read from the source (ast), so nested functions and methods count too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from helpers import ROOT

pytestmark = pytest.mark.fast

MAX_POSITIONAL = 4
PACKAGE = ROOT / "wyoming_wis"


def _positional(function: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    names = [argument.arg for argument in (*function.args.posonlyargs, *function.args.args)]
    return names[1:] if names[:1] in (["self"], ["cls"]) else names


def _too_many(root: Path) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and len(_positional(node)) > MAX_POSITIONAL:
                found.append(
                    f"{path.relative_to(root.parent)}:{node.lineno} {node.name}({', '.join(_positional(node))})"
                )
    return found


def test_no_core_function_takes_more_than_four_positional_parameters() -> None:
    assert _too_many(PACKAGE) == []


def test_the_check_sees_too_many_positional_parameters(tmp_path: Path) -> None:
    package = tmp_path / "package"
    package.mkdir()
    (package / "module.py").write_text(
        "def fine(a, b, c, d, *, e, f): ...\n"
        "class Thing:\n"
        "    def method(self, a, b, c, d): ...\n"
        "    async def crowded(self, a, b, c, d, e=None): ...\n"
        "def outer():\n"
        "    def inner(a, b, /, c, d, e): ...\n"
    )
    assert _too_many(package) == [
        "package/module.py:4 crowded(a, b, c, d, e)",
        "package/module.py:6 inner(a, b, c, d, e)",
    ]
