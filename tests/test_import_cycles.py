"""The package's shape, checked: no module over 500 lines, and no import cycle, counting every
import: module level, inside functions, and type-only imports under ``if TYPE_CHECKING:`` (which
import-linter's layer contracts leave out). Two graphs:

- between ``tether`` subpackages: a node is a package (a folder with ``__init__.py``); an import
  of a module is an edge from the importer's package to the imported module's package;
- between modules: a node is a module (a package is its ``__init__``, its face); each import is
  an edge to the module it names: ``import pkg.sub`` to ``pkg.sub``; ``from pkg import name``
  to ``pkg`` (the face, which runs first and may hand out ``name``) and, when ``name`` is a
  submodule, to ``pkg.name`` too. A package's own face counts like any other module.

And a module inside a package takes a name from where it is defined, not from the package's
face that re-exports it (the face imports its parts: taking names back from it is how circles
through ``__init__`` start).
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


def source_of(node: ast.ImportFrom, name: str, is_package: bool) -> str:
    """The dotted module a ``from ... import`` in module ``name`` reads (relative ones resolved)."""
    if not node.level:
        return node.module or ""
    anchor = (name if is_package else name.rpartition(".")[0]).split(".")
    anchor = anchor[: len(anchor) - (node.level - 1)]
    return ".".join([*anchor, node.module] if node.module else anchor)


def imported(path: Path, name: str, is_package: bool) -> set[str]:
    """Every ``tether`` module ``path`` imports, anywhere in the file (``from pkg import x``
    gives ``pkg`` and ``pkg.x``: the caller keeps those that are modules)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = source_of(node, name, is_package)
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


def module_graph() -> dict[str, set[str]]:
    """Module -> the modules it imports (see the module docstring)."""
    mods = modules()
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        for target in imported(path, name, path.name == "__init__.py"):
            if target in mods and target != name:
                graph.setdefault(name, set()).add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one node (Tarjan)."""
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


def described(found: list[list[str]], graph: dict[str, set[str]]) -> str:
    """Each cycle's members and the imports that close it, a line each."""
    return "\n".join(
        " <-> ".join(c)
        + ": "
        + "; ".join(f"{a} -> {b}" for a in c for b in sorted(graph[a]) if b in c)
        for c in found
    )


def test_no_cycle_between_subpackages() -> None:
    graph = package_graph()
    assert graph, "no imports found: the walk is broken"
    found = cycles(graph)
    assert found == [], described(found, graph)


def test_no_cycle_between_modules() -> None:
    graph = module_graph()
    assert graph, "no imports found: the walk is broken"
    found = cycles(graph)
    assert found == [], (
        "import cycles between modules (move what both need down, or pass the upper one in):\n"
        + described(found, graph)
    )


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


def test_the_module_check_sees_a_cycle_through_a_face(tmp_path: Path) -> None:
    # a part taking a name back from its package's face closes a circle the face opens
    graph = module_graph()
    assert "tether.settings.core" in graph["tether.settings"]  # the face's type-only import
    graph.setdefault("tether.settings.core", set()).add("tether.settings")
    assert any({"tether.settings", "tether.settings.core"} <= set(c) for c in cycles(graph))
    # `from pkg import submodule` names the submodule and the face; relative forms resolve
    part = tmp_path / "m.py"
    part.write_text("def f():\n    from . import checks\n    from .. import settings\n")
    found = imported(part, "tether.settings.m", False)
    assert {"tether.settings", "tether.settings.checks", "tether"} <= found


def reexported(init: Path) -> set[str]:
    """The names a package's ``__init__`` imports (eagerly, on first use for the type checker,
    or inside a function): those it re-exports rather than defines."""
    tree = ast.parse(init.read_text(), filename=str(init))
    return {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module != "__future__"
        for alias in node.names
    }


def face_imports(mods: dict[str, Path]) -> list[str]:
    """``from pkg import name`` inside ``pkg`` (or below it) where ``pkg/__init__`` only
    re-exports ``name`` (submodules are fine: they are where their names are defined)."""
    found: list[str] = []
    for name, path in sorted(mods.items()):
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if not isinstance(node, ast.ImportFrom):
                continue
            face = source_of(node, name, is_package)
            if face not in mods or mods[face].name != "__init__.py":
                continue
            if not name.startswith(face + "."):
                continue  # from outside, the face is the package's public door
            taken = reexported(mods[face])
            for alias in node.names:
                if alias.name in taken and f"{face}.{alias.name}" not in mods:
                    found.append(f"{name}:{node.lineno} takes {alias.name} from the face {face}")
    return found


def test_no_module_takes_a_name_from_its_own_package_face() -> None:
    found = face_imports(modules())
    assert found == [], "import these from the module that defines them:\n" + "\n".join(found)


def test_the_face_check_sees_a_part_importing_its_face(tmp_path: Path) -> None:
    mods = modules()
    part = tmp_path / "part.py"
    part.write_text("from tether.settings import Settings\nfrom tether.settings import checks\n")
    found = face_imports({**mods, "tether.settings.part": part})
    assert found == ["tether.settings.part:1 takes Settings from the face tether.settings"]


def lazy_faces() -> dict[str, tuple[dict[str, str], dict[str, str], list[str]]]:
    """Each package face that imports its names on first use (an ``_EXPORTS`` table): the
    table, its ``if TYPE_CHECKING:`` imports (name -> module) and its ``__all__``."""
    out: dict[str, tuple[dict[str, str], dict[str, str], list[str]]] = {}
    for name, path in modules().items():
        if path.name != "__init__.py":
            continue
        table: dict[str, str] | None = None
        typed: dict[str, str] = {}
        public: list[str] = []
        for node in ast.parse(path.read_text(), filename=str(path)).body:
            if isinstance(node, ast.AnnAssign | ast.Assign):
                target = node.target if isinstance(node, ast.AnnAssign) else node.targets[0]
                if isinstance(target, ast.Name) and target.id == "_EXPORTS" and node.value:
                    table = ast.literal_eval(node.value)
                elif isinstance(target, ast.Name) and target.id == "__all__" and node.value:
                    public = ast.literal_eval(node.value)
            elif isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
                for stmt in node.body:
                    if isinstance(stmt, ast.ImportFrom) and stmt.module:
                        typed.update({a.asname or a.name: stmt.module for a in stmt.names})
        if table is not None:
            out[name] = (table, typed, public)
    return out


def test_every_lazy_face_says_what_the_type_checker_sees() -> None:
    faces = lazy_faces()
    assert {"tether", "tether.settings"} <= set(faces)
    for name, (table, typed, public) in faces.items():
        assert table == typed, f"{name}: _EXPORTS and the TYPE_CHECKING imports differ"
        assert sorted(table) == sorted(public), f"{name}: _EXPORTS and __all__ differ"


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
