"""The simulator's structure (issue "Trust on real stacks", item 8): each engine's behaviour is its own
small unit behind one shared timeline walk, so no function in ``trainmem/memory`` grows past 80 lines
(the 470-line ``_simulate`` with a closure per engine is what this replaced)."""

from __future__ import annotations

import ast
from pathlib import Path

import trainmem.memory

MAX_LINES = 80


def _functions(root: Path):  # noqa: ANN202 - (path, name, lines)
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield path.relative_to(root.parent), node.name, node.end_lineno - node.lineno + 1


def test_no_function_in_memory_over_80_lines() -> None:
    root = Path(trainmem.memory.__file__).parent
    found = list(_functions(root))
    assert len(found) > 50  # the walk really read the package
    long = [f"{p}::{name} ({n} lines)" for p, name, n in found if n > MAX_LINES]
    assert not long, "functions over 80 lines: " + ", ".join(long)
