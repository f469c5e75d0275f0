"""Readable functions: none in the package is longer than one reader holds (80 lines)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "orthrus"
MAX_LINES = 80
ALLOWED: set[str] = set()  # none: a function past what one reader holds is split, not excused


def long_functions(root: Path, limit: int = MAX_LINES) -> list[str]:
    """`path:name (N lines)` for every function or method in `root` longer than `limit`, its
    decorators and docstring included."""
    out = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                n = node.end_lineno - start + 1
                if n > limit:
                    out.append(f"{path.relative_to(root.parent)}:{node.name} ({n} lines)")
    return out


def test_no_function_in_the_package_is_over_80_lines():
    found = [f for f in long_functions(PACKAGE) if f.split(" (")[0] not in ALLOWED]
    assert not found, "split these functions (at most 80 lines each):\n" + "\n".join(found)


def test_the_check_sees_a_long_function(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(80))
    (pkg / "m.py").write_text(f"def short():\n    return 1\n\n\n@staticmethod\ndef long():\n{body}\n")
    assert long_functions(pkg) == ["pkg/m.py:long (82 lines)"]
