"""The map of the code (docs/layout.md) names only things that exist, and the README stays a
summary: every file and folder of the tree, every path, dotted name, function, method, class,
`tether` command, `make` target and `python -m` module the page names in backticks resolves
against the code as it is; the README holds at most 250 lines.

Names are resolved from the source (AST), not by importing the package, so the test is quick
and sees type-only names too. A backticked word that is not code (a Redis command, a status
value, a commit step's name) must still be a string the code itself holds, or a Redis command.
"""

from __future__ import annotations

import ast
import re
import shlex
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LAYOUT = REPO / "docs" / "layout.md"
ROOTS = {"shared": "tether", "producer": "tether.producer", "worker": "tether.worker"}
README_MAX_LINES = 250

#: Words of the naming-scheme paragraph that stand for any name, and names of other projects.
PLACEHOLDERS = {
    "m.py",  # "a pair is m.py and m_aio.py": any module
    "m_aio.py",
    "p_aio.py",
    "X",
    "AsyncX",
    "f",
    "async_f",
    "worker.py",  # a *user's* project file that must not shadow tether.worker
}
EXTERNAL = {
    "Celery.send_task",  # Celery's API
    "kwargsrepr",  # an argument of Celery's send_task
    "redis.asyncio",  # redis-py's asyncio client
    "TypeError",
    "package-dir",  # setuptools' key in pyproject.toml
}


@cache
def source_index() -> tuple[dict[str, set[str]], set[str], set[str]]:
    """(members of each class, its bases' included, and of each module by its short name, every
    defined name, every string literal of the package's .py and .lua files)."""
    members: dict[str, set[str]] = {}
    bases: dict[str, set[str]] = {}
    names: set[str] = set()
    literals: set[str] = set()
    for folder in ROOTS:
        for path in (REPO / folder).rglob("*.lua"):
            literals.update(re.findall(r"'([^']*)'", path.read_text()))
        for path in (REPO / folder).rglob("*.py"):
            tree = ast.parse(path.read_text())
            module = path.stem if path.stem != "__init__" else path.parent.name
            names.add(module)
            own = members.setdefault(module, set())
            for node in tree.body:
                own.update(_defined(node))
            for node in ast.walk(tree):
                if isinstance(node, ast.Constant) and isinstance(node.value, str):
                    literals.add(node.value)
                if isinstance(node, ast.ClassDef):
                    body: set[str] = set()
                    for item in node.body:
                        body.update(_defined(item))
                    members.setdefault(node.name, set()).update(body)
                    bases.setdefault(node.name, set()).update(map(_base_name, node.bases))
                    names.add(node.name)
                    names.update(body)
                elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    names.add(node.name)
            names.update(own)
    for cls in bases:  # inherited members, through every generation
        seen, todo = set(), list(bases[cls])
        while todo:
            base = todo.pop()
            if base not in seen:
                seen.add(base)
                members[cls] |= members.get(base, set())
                todo.extend(bases.get(base, ()))
    return members, names, literals


def _base_name(base: ast.expr) -> str:
    """``Base``, ``module.Base`` or ``Base[T]`` as ``Base``."""
    if isinstance(base, ast.Subscript):
        base = base.value
    return base.id if isinstance(base, ast.Name) else getattr(base, "attr", "")


def _defined(node: ast.stmt) -> set[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return {node.target.id}
    if isinstance(node, ast.Assign):
        return {t.id for t in node.targets if isinstance(t, ast.Name)}
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name).split(".")[0] for a in node.names}
    return set()


def module_path(dotted: str) -> Path | None:
    """The file or folder of a ``tether`` module or package, None when there is none."""
    for folder, root in sorted(ROOTS.items(), key=lambda kv: -len(kv[1])):
        if dotted == root or dotted.startswith(root + "."):
            rest = dotted[len(root) :].lstrip(".").split(".") if dotted != root else []
            base = REPO / folder / Path(*rest) if rest else REPO / folder
            if base.with_suffix(".py").is_file():
                return base.with_suffix(".py")
            if (base / "__init__.py").is_file():
                return base
            return None
    return None


def resolves_dotted(dotted: str) -> bool:
    """A ``tether...`` name: a module, or a name a module defines (one level)."""
    if module_path(dotted) is not None:
        return True
    parent, _, name = dotted.rpartition(".")
    path = module_path(parent)
    if path is None:
        return False
    members, _, _ = source_index()
    short = path.stem if path.suffix == ".py" else path.name
    return name in members.get(short, set())


def resolves_code(token: str) -> bool:
    """``Class.method(...)``, ``module.function``, ``variable.method()``, ``name``."""
    bare = re.sub(r"\(.*\)$", "", token).strip()
    members, names, literals = source_index()
    if bare.startswith("tether.") or bare == "tether":
        # a module or its name; else a task or span name the code spells (`tether.run`)
        return resolves_dotted(bare) or bare in literals
    parts = [re.sub(r"\(.*\)$", "", p) for p in re.split(r"\.(?![^(]*\))", bare)]
    if len(parts) == 1:
        return parts[0] in names or parts[0] in literals
    head, rest = parts[0], parts[1:]
    if head in members and head[:1].isupper():  # a class: its attribute
        return rest[0] in members[head]
    if head in members and rest[0] in members[head]:  # a module's name
        return True
    return rest[-1] in names  # a variable's method: the method exists


@cache
def cli_commands() -> set[str]:
    """The `tether` command's command and group names."""
    from typer.main import get_command

    from tether.producer.ops.cli import app

    names: set[str] = set()

    def walk(command: object) -> None:
        for name, sub in getattr(command, "commands", {}).items():
            names.add(name)
            walk(sub)

    walk(get_command(app))
    return names


def make_targets() -> set[str]:
    text = (REPO / "Makefile").read_text()
    return set(re.findall(r"^([\w-]+):", text, flags=re.M))


def problem(token: str) -> str | None:
    """Why ``token`` names nothing that exists, or None."""
    token = token.strip()
    if not token or token in PLACEHOLDERS or token in EXTERNAL:
        return None
    if " | " in token:  # a layer of the import contract: its modules
        return next((p for p in map(problem, token.split(" | ")) if p), None)
    if token.startswith(("tether ", "make ", "python -m ", "celery ")):
        return command_problem(token)
    if "/" in token and " " not in token:
        return None if (REPO / token.rstrip("/")).exists() else f"no such path {token}"
    if re.fullmatch(r"[\w-]+\.(yml|yaml|toml|md)|Dockerfile", token):
        return None if (REPO / token).exists() else f"no such file {token}"
    if re.fullmatch(r"[A-Z][A-Z_]+", token):  # a Redis command or a stored value
        import redis

        _, _, literals = source_index()
        if hasattr(redis.Redis, token.lower()) or token in literals:
            return None
        return f"{token} is neither a Redis command nor a value the code holds"
    if re.fullmatch(r'\w+="?\w*"?|\w+=\.\.\.|"\w+"', token):  # an argument or value
        _, names, literals = source_index()
        name, _, value = token.partition("=")
        value = value.strip('"') if value else name.strip('"')
        ok = (not value or value == "..." or value in literals) and (
            "=" not in token or name in names
        )
        return None if ok else f"{token}: no such keyword or value in the code"
    if re.fullmatch(r"[\w.]+(\(.*\))?(\.\w+(\(.*\))?)*", token):
        return None if resolves_code(token) else f"{token} names nothing in the code"
    return f"{token}: not a name the map test understands (name it plainly or add a rule)"


def command_problem(token: str) -> str | None:
    words = shlex.split(token)
    if words[0] == "tether":
        wanted = [w for w in re.split(r"[/ ]", " ".join(words[1:])) if w and not w.startswith("-")]
        known = cli_commands()
        missing = [w for w in wanted[:1] if w not in known]
        # `tether up/down/status`: each of the slash-joined names is a command
        if "/" in words[1] if len(words) > 1 else False:
            missing = [w for w in words[1].split("/") if w not in known]
        return f"no `tether {' '.join(missing)}` command" if missing else None
    if words[0] == "make":
        return None if words[1] in make_targets() else f"no make target {words[1]}"
    if words[0] == "python":
        target = words[2]
        path = REPO / Path(*target.split("."))
        ok = path.with_suffix(".py").is_file() or (path / "__main__.py").is_file()
        return None if ok else f"no module {target} to run"
    if words[0] == "celery":
        return next((p for p in (problem(w) for w in words if w.startswith("tether.")) if p), None)
    return None


def tree_problems(text: str) -> list[str]:
    """Every file and folder the tree names exists, where its indentation puts it."""
    block = text.split("## The tree", 1)[1].split("```", 2)[1]
    stack: list[str] = []
    out: list[str] = []
    for line in block.splitlines():
        if not line.strip() or len(line) - len(line.lstrip()) >= 40:
            continue  # a description's continuation
        level = (len(line) - len(line.lstrip())) // 2
        names_part, _, rest = line.strip().partition("  ")
        arrow = re.match(r"\s*-> ([\w.]+)", rest)
        stack = stack[:level]
        for name in names_part.split():
            path = REPO.joinpath(*stack, name.rstrip("/"))
            if not path.exists():
                out.append(f"tree: {'/'.join([*stack, name])} does not exist")
        if names_part.endswith("/") and len(names_part.split()) == 1:
            stack.append(names_part.rstrip("/"))
            if arrow and module_path(arrow.group(1)) != REPO.joinpath(*stack):
                out.append(f"tree: {'/'.join(stack)} is not the package {arrow.group(1)}")
    return out


def test_every_name_the_layout_page_gives_exists() -> None:
    text = LAYOUT.read_text()
    problems = tree_problems(text)
    for token in sorted(set(re.findall(r"`([^`\n]+)`", text))):
        reason = problem(token)
        if reason:
            problems.append(reason)
    assert not problems, "docs/layout.md names what does not exist:\n" + "\n".join(problems)


@pytest.mark.parametrize(
    "token",
    [
        "Producer.no_such_method",
        "DrainState.no_such_transition",
        "tether.worker.engine.no_such_module",
        "producer/no_such_file.py",
        "submission.no_such_function",
        "tether no-such-command",
        "make no-such-target",
        "NOSUCHCOMMAND",
    ],
)
def test_the_map_check_catches_a_stale_name(token: str) -> None:
    assert problem(token) is not None


def test_the_map_check_catches_a_stale_tree_line() -> None:
    text = "## The tree\n```\nshared/    -> tether   x\n  gone.py     what was here\n```\n"
    assert tree_problems(text) == ["tree: shared/gone.py does not exist"]


def test_the_walk_includes_the_budget_check() -> None:
    walk = LAYOUT.read_text().split("## How a request travels", 1)[1]
    assert "RedisTenantAdmission.admit" in walk and "budget_checks" in walk


def test_the_readme_stays_a_summary() -> None:
    lines = (REPO / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines (at most {README_MAX_LINES}): move detail to docs/"
    )
