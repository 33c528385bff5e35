"""The code's shape, checked: no function of the package over 60 lines.

A function is measured from its ``def`` line to its last line (``end_lineno - lineno + 1``:
decorators left out, its docstring and comments counted), methods and nested functions each on
their own. Past 60 lines a function is doing several things; give each its name (STYLE.md: named
steps). There is no allow-list: a function over the line is shortened, not excused.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FOLDERS = ("shared", "producer", "worker")

#: The most lines a function may take (ruff's mccabe cap of 13 limits its branches).
MAX_FUNCTION_LINES = 60


def function_lengths(source: str, where: str) -> Iterator[tuple[str, int]]:
    """``(where:line:name, lines)`` of every function and method in ``source``."""
    for node in ast.walk(ast.parse(source, filename=where)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            assert node.end_lineno is not None
            yield f"{where}:{node.lineno}:{node.name}", node.end_lineno - node.lineno + 1


def test_no_function_is_over_the_line_limit() -> None:
    seen = 0
    over: dict[str, int] = {}
    for folder in FOLDERS:
        for path in sorted((REPO / folder).rglob("*.py")):
            where = str(path.relative_to(REPO))
            for name, lines in function_lengths(path.read_text(), where):
                seen += 1
                if lines > MAX_FUNCTION_LINES:
                    over[name] = lines
    assert seen > 1000, f"only {seen} functions found: the walk is broken"
    detail = "\n".join(f"  {name}: {n} lines" for name, n in sorted(over.items()))
    assert over == {}, (
        f"give these functions' steps names (limit {MAX_FUNCTION_LINES} lines):\n{detail}"
    )


def test_the_check_measures_from_def_to_last_line_without_decorators() -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    source = (
        "@decorator\n@another\ndef long():\n"  # the def on line 3, its body on 4-63
        + body
        + "class C:\n    async def short(self):\n        pass\n"  # class on 64, method on 65
    )
    lengths = dict(function_lengths(source, "m.py"))
    assert lengths == {"m.py:3:long": MAX_FUNCTION_LINES + 1, "m.py:65:short": 2}
