"""The package's shape, checked: no module over 500 lines, and no import cycle between
``tether`` subpackages, counting every import: module level, inside functions, and type-only
imports under ``if TYPE_CHECKING:`` (which import-linter's layer contracts leave out). A node is
a package (a folder with ``__init__.py``); an import of a module is an edge from the importer's
package to the imported module's package.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ROOTS = {"shared": "tether", "producer": "tether.producer", "worker": "tether.worker"}


def modules() -> dict[str, Path]:
    """Every module of the package, by dotted name (``__init__`` named by its package)."""
    out: dict[str, Path] = {}
    for folder, dotted in ROOTS.items():
        for path in (REPO / folder).rglob("*.py"):
            rel = path.relative_to(REPO / folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            name = ".".join([dotted, *parts]) if parts else dotted
            if name.startswith("tether.producer") and folder == "shared":
                continue  # shared/ has no producer folder; guard against a stray one
            out[name] = path
    return out


def package_of(name: str, mods: dict[str, Path]) -> str:
    path = mods[name]
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def imported(path: Path, name: str, is_package: bool) -> set[str]:
    """Every ``tether`` module ``path`` imports, anywhere in the file."""
    tree = ast.parse(path.read_text(), filename=str(path))
    base = name if is_package else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = base.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                module = ".".join([*anchor, node.module] if node.module else anchor)
            else:
                module = node.module or ""
            found.add(module)
            found.update(f"{module}.{a.name}" for a in node.names)
    return {m for m in found if m == "tether" or m.startswith("tether.")}


def package_graph() -> dict[str, set[str]]:
    mods = modules()
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        source = package_of(name, mods)
        for target in imported(path, name, path.name == "__init__.py"):
            if target not in mods:
                continue  # a name imported from a module, not a module
            dest = package_of(target, mods)
            if dest != source and not source.startswith(dest + "."):
                # a package importing its own parent's face is the parent's business, not a loop
                graph.setdefault(source, set()).add(dest)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one package (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_cycle_between_subpackages() -> None:
    graph = package_graph()
    assert graph, "no imports found: the walk is broken"
    found = cycles(graph)
    detail = [
        " <-> ".join(c) + ": " + "; ".join(f"{a} -> {b}" for a in c for b in graph[a] if b in c)
        for c in found
    ]
    assert found == [], "\n".join(detail)


def test_the_check_sees_a_type_only_cycle(tmp_path: Path) -> None:
    # the check must bite on exactly what import-linter leaves out: a TYPE_CHECKING import
    graph = package_graph()
    graph.setdefault("tether.core", set()).add("tether.runtime")  # runtime imports core today
    assert any({"tether.core", "tether.runtime"} <= set(c) for c in cycles(graph))
    typed = tmp_path / "m.py"
    typed.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from tether.runtime import x\n"
    )
    assert "tether.runtime" in imported(typed, "tether.core.m", False)


#: A module past this many lines wants splitting along its jobs (STYLE.md: small modules).
MAX_MODULE_LINES = 500


def test_no_module_is_over_the_size_limit() -> None:
    sizes = {name: len(path.read_text().splitlines()) for name, path in modules().items()}
    over = {name: n for name, n in sizes.items() if n > MAX_MODULE_LINES}
    assert over == {}, f"split these modules (limit {MAX_MODULE_LINES} lines): {over}"


def test_every_package_folder_is_installed() -> None:
    # setuptools installs the packages pyproject.toml lists; a new folder left off the list
    # imports in a checkout and is missing from the wheel (and from the strict editable install)
    import tomllib

    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    listed = set(config["tool"]["setuptools"]["packages"])
    folders = {name for name, path in modules().items() if path.name == "__init__.py"}
    unlisted, stale = sorted(folders - listed), sorted(listed - folders)
    assert folders == listed, f"add to pyproject: {unlisted}; remove: {stale}"
