"""The shape issue #24 set for the production code (kbase/, ingest/, retrieval/, validators/): no
module over 400 lines, no function over 80, so one reader can hold each at once."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("kbase", "ingest", "retrieval", "validators")
MAX_MODULE, MAX_FUNCTION = 400, 80


def _modules() -> list[Path]:
    return sorted(p for d in PACKAGES for p in (ROOT / d).rglob("*.py"))


def test_no_module_is_over_400_lines():
    mods = _modules()
    assert len(mods) > 50  # the walk found the packages
    long = {
        str(p.relative_to(ROOT)): n
        for p in mods
        if (n := len(p.read_text().splitlines())) > MAX_MODULE
    }
    assert long == {}


def test_no_function_is_over_80_lines():
    long = {}
    for p in _modules():
        for node in ast.walk(ast.parse(p.read_text(), str(p))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1  # type: ignore[operator]
                if n > MAX_FUNCTION:
                    long[f"{p.relative_to(ROOT)}:{node.lineno} {node.name}"] = n
    assert long == {}
