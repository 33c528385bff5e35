"""The documentation's snippets, found and run: every Python and shell block of README.md and
docs/**/*.md (``tests/test_doc_snippets.py`` runs them against a local stack).

A page is read as a reader copies it: its blocks run in order in one folder of the page's own (a
later block may use a file an earlier one made), each block in a fresh process, the way each is
pasted into a terminal or saved as a script:

- ```` ```python ```` (or ``py``): ``python FILE`` with the venv's interpreter; a block whose first
  line is a comment naming a file (``# my_project/agents.py, ...``) is also saved there first;
- ```` ```bash ````, ``sh``, ``shell``: ``bash -e -o pipefail FILE``, with the venv's ``bin`` (so
  ``tether``) first on ``PATH``; ``console``: its ``$ `` lines, the rest being output.

Any other fence (``text``, ``json``, ``jsonl``, none) is output or data and is not run. A block that
cannot run here says so in an HTML comment on the line before it (blank lines between are fine),
which renders as nothing on GitHub and in the built site::

    <!-- not run: needs a real OpenAI key -->
    <!-- slow: starts an autoscaler that scales 1 to 4 workers -->

``not run`` blocks are listed with their reasons (``python -m tests.support.snippets`` prints the
list; ``--write`` puts it in tests/README.md); ``slow`` blocks run only in ``make test-long``.

The page's folder stands for a project folder where ``tether up`` ran: it holds a copy of the
stack's ``.tether/env`` (so ``tether ...`` and ``Producer()`` find the stack) and of the
checkout's ``examples/``, and the checkout is on ``PYTHONPATH`` (``python -m tests.support...``).
A page that runs ``tether up`` itself gets a stack of its own in its folder, as a reader would;
whatever it leaves running is stopped (``tether down``) when the page ends.
"""

from __future__ import annotations

import ast
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
#: The venv's ``bin``: its ``python`` runs the Python blocks, its ``tether`` the shell ones.
VENV_BIN = Path(sys.executable).parent
LOCAL_ENV = Path(".tether") / "env"
#: Seconds a block may take: every snippet must end by itself (a tail needs an idle timeout).
BLOCK_TIMEOUT_S = 60.0
#: The last lines of a failed block's output shown in the failure message.
OUTPUT_TAIL_LINES = 60

PYTHON_FENCES = frozenset({"python", "py", "python3"})
SHELL_FENCES = frozenset({"bash", "sh", "shell", "console"})
_FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})\s*(?P<lang>[\w+-]*)")
_MARKER = re.compile(r"^\s*<!--\s*(?P<kind>not run|slow)\s*:\s*(?P<reason>.*?)\s*-->\s*$")
_LOOSE_MARKER = re.compile(r"<!--\s*(not[ -]?run|slow|skip)\b", re.IGNORECASE)
_FILE_COMMENT = re.compile(r"^#\s*(?P<path>[\w./-]+\.py)\b")


class SnippetPageError(ValueError):
    """A page whose snippet markers cannot be read (a marker without a reason or a block)."""


@dataclass(frozen=True)
class Block:
    """One fenced block of a page."""

    page: str
    """The page, relative to the checkout (``docs/quickstart.md``)."""
    line: int
    """The line of its opening fence (1-based)."""
    lang: str
    code: str
    marker: str | None = None
    """``not run`` or ``slow``, from the comment before it."""
    reason: str = ""

    @property
    def kind(self) -> str | None:
        """``python``, ``shell``, or None for a block that is not code (output, data)."""
        if self.lang in PYTHON_FENCES:
            return "python"
        if self.lang in SHELL_FENCES:
            return "shell"
        return None

    @property
    def where(self) -> str:
        """``page:line``, as an editor opens it."""
        return f"{self.page}:{self.line}"

    def runs(self, *, slow: bool) -> bool:
        """Whether the fast run (``slow=False``) or the long one (``slow=True``) runs it."""
        if self.kind is None or self.marker == "not run":
            return False
        return (self.marker == "slow") == slow


def doc_pages(repo: Path = REPO) -> list[Path]:
    """README.md and every page under docs/, in a fixed order."""
    return [repo / "README.md", *sorted((repo / "docs").rglob("*.md"))]


def page_blocks(path: Path, repo: Path = REPO) -> list[Block]:
    """The fenced blocks of ``path``, each with the marker on the line before it.

    Raises:
        SnippetPageError: a marker without a reason, one that precedes no code block, or a
            comment that looks like a marker but is not one (``<!-- not-run ... -->``).
    """
    page = str(path.relative_to(repo)) if path.is_relative_to(repo) else str(path)
    lines = path.read_text(encoding="utf-8").split("\n")
    blocks: list[Block] = []
    pending: tuple[int, str, str] | None = None  # (line, kind, reason) of the last marker
    index = 0
    while index < len(lines):
        text = lines[index]
        opening = _FENCE.match(text)
        if opening is None:
            pending = _marker_line(page, index + 1, text, pending)
            index += 1
            continue
        end = _closing(lines, index, opening.group("fence"))
        indent = len(opening.group("indent"))
        code = "\n".join(line[indent:] for line in lines[index + 1 : end])
        block = Block(page, index + 1, opening.group("lang").lower(), code)
        if pending is not None:
            if block.kind is None:
                raise SnippetPageError(
                    f"{page}:{pending[0]}: a '{pending[1]}' marker before a block that is not "
                    f"Python or shell (```{block.lang}): remove the marker"
                )
            block = Block(block.page, block.line, block.lang, code, pending[1], pending[2])
            pending = None
        blocks.append(block)
        index = end + 1
    if pending is not None:
        raise SnippetPageError(f"{page}:{pending[0]}: a '{pending[1]}' marker before no block")
    return blocks


def _marker_line(
    page: str, number: int, text: str, pending: tuple[int, str, str] | None
) -> tuple[int, str, str] | None:
    """The marker a line sets (a blank line keeps the one before; other text drops it)."""
    found = _MARKER.match(text)
    if found is not None:
        if not found.group("reason"):
            raise SnippetPageError(
                f"{page}:{number}: '<!-- {found.group('kind')}: -->' needs its reason after "
                "the colon, e.g. '<!-- not run: needs a real OpenAI key -->'"
            )
        return (number, found.group("kind"), found.group("reason"))
    if _LOOSE_MARKER.search(text):
        raise SnippetPageError(
            f"{page}:{number}: a snippet marker is written '<!-- not run: REASON -->' or "
            f"'<!-- slow: REASON -->', on a line of its own; found {text.strip()!r}"
        )
    if text.strip() == "":
        return pending
    if pending is not None:
        raise SnippetPageError(
            f"{page}:{pending[0]}: a '{pending[1]}' marker must be right before its block "
            f"(blank lines only between); line {number} comes first"
        )
    return None


def _closing(lines: list[str], start: int, fence: str) -> int:
    """The index of the line closing the fence opened at ``start`` (the end when unclosed)."""
    closing = re.compile(rf"^\s*{re.escape(fence[0])}{{{len(fence)},}}\s*$")
    for index in range(start + 1, len(lines)):
        if closing.match(lines[index]):
            return index
    return len(lines)


def all_blocks(pages: Iterable[Path] | None = None) -> list[Block]:
    """The blocks of every page."""
    return [block for path in pages or doc_pages() for block in page_blocks(path)]


def not_run_list(blocks: Iterable[Block]) -> list[str]:
    """One line per marked code block (slow ones included): its page, its first line and the
    reason. No line number, so an edit elsewhere in the page leaves the list as it is."""
    listed = []
    for b in blocks:
        if b.kind is None or b.marker is None:
            continue
        first = next((line.strip() for line in b.code.split("\n") if line.strip()), "")
        first = first.split("  #", 1)[0].rstrip()  # its trailing comment
        first = first if len(first) <= 60 else first[:57] + "..."
        what = "not run" if b.marker == "not run" else "long tests only"
        listed.append(f"- {b.page} ({b.lang}, {what}), `{first}`: {b.reason}")
    return listed


# --- running -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    """What running one block did."""

    block: Block
    returncode: int | None
    """None: it did not finish within its time."""
    output: str
    seconds: float

    @property
    def ok(self) -> bool:
        """It exited 0 in time."""
        return self.returncode == 0


class SnippetFailed(AssertionError):
    """A block failed: the message names the page, the line, the code and what it printed."""


def script_for(block: Block) -> tuple[str, str]:
    """``(suffix, text)`` of the file the block runs as. The code is moved down to its line in
    the page, so an error's line number (a traceback's, bash's) is the page's line."""
    code = block.code
    if block.lang == "console":
        code = "\n".join(
            line[2:] for line in code.split("\n") if line.startswith("$ ")
        )  # the rest is output
    padding = "\n" * block.line
    return (".py" if block.kind == "python" else ".sh"), padding + code + "\n"


def page_env(folder: Path) -> dict[str, str]:
    """The environment of a page's blocks: the caller's, less its Tether and AWS settings (a
    page reads its stack from ``.tether/env``), with the venv first on ``PATH``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TETHER_", "AWS_"))}
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(VENV_BIN.parent)
    env["PYTHONPATH"] = os.pathsep.join([str(folder), str(REPO)])
    env["PYTHONUNBUFFERED"] = "1"
    env["COLUMNS"] = "120"  # rich wraps tables to the terminal; keep lines whole in the output
    return env


def run_block(
    block: Block, folder: Path, scripts: Path, timeout_s: float = BLOCK_TIMEOUT_S
) -> Outcome:
    """Run ``block`` in ``folder`` (its script is written under ``scripts``); every process it
    left in its process group (a server started with ``&``) is killed when it ends."""
    suffix, text = script_for(block)
    script = scripts / f"{block.page.replace('/', '_')}-L{block.line}{suffix}"
    script.write_text(text)
    if block.kind == "python":
        _save_named_file(block, folder)
        argv = [str(VENV_BIN / "python"), str(script)]
    else:
        argv = ["bash", "-e", "-o", "pipefail", str(script)]
    log = script.with_suffix(script.suffix + ".out")
    started = time.monotonic()
    # output to a file, not a pipe: a server the block left in the background (and killed
    # below) would hold a pipe open, and reading it to its end would wait for that server
    with log.open("wb") as out:
        proc = subprocess.Popen(
            argv,
            cwd=folder,
            env=page_env(folder),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own group: what it starts in the background dies with it
        )
        try:
            returncode: int | None = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            returncode = None
        finally:
            _kill_group(proc)
    seconds = time.monotonic() - started
    return Outcome(block, returncode, log.read_text("utf-8", "replace"), seconds)


def _save_named_file(block: Block, folder: Path) -> None:
    """A block that opens with ``# path/to/module.py`` is that file: save it there."""
    first = block.code.split("\n", 1)[0]
    named = _FILE_COMMENT.match(first)
    if named is None:
        return
    target = folder / named.group("path")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(block.code + "\n")
    for parent in target.relative_to(folder).parents:
        if parent != Path(".") and not (folder / parent / "__init__.py").exists():
            (folder / parent / "__init__.py").write_text("")


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """Stop the block's process group: SIGTERM, then SIGKILL what is left after 3 s."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=3.0)  # reaped: a zombie leader would keep the group alive
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline:
            try:
                os.killpg(proc.pid, 0)
            except (ProcessLookupError, PermissionError):
                return
            time.sleep(0.05)


def failure_message(outcome: Outcome, timeout_s: float = BLOCK_TIMEOUT_S) -> str:
    """Which page, which block (its line), its code, and the end of what it printed."""
    block = outcome.block
    if outcome.returncode is None:
        what = (
            f"did not finish within {timeout_s:.0f} s (a snippet must end by itself: give a "
            "tail or a stream an idle timeout, run an asyncio main())"
        )
    else:
        what = f"exited {outcome.returncode} after {outcome.seconds:.1f} s"
    numbered = "\n".join(
        f"{block.line + i:>5} | {line}" for i, line in enumerate(block.code.split("\n"), 1)
    )
    printed = outcome.output.rstrip("\n").split("\n")
    shown = printed[-OUTPUT_TAIL_LINES:]
    cut = len(printed) - len(shown)
    return (
        f"{block.where}: the {block.lang} block {what}\n{numbered}\n"
        f"--- what it printed{f' (its last {len(shown)} lines of {len(printed)})' if cut else ''}"
        f" ---\n" + "\n".join(shown) + "\n---\n"
        f"Fix the page (or the code), or mark the block on the line before it: "
        f"'<!-- not run: REASON -->'. Rerun: pytest tests/test_doc_snippets.py -k "
        f"'{Path(block.page).stem}'"
    )


@contextlib.contextmanager
def page_folder(page: str, root: Path, stack_env_file: Path | None) -> Iterator[Path]:
    """The folder a page's blocks run in: a copy of the stack's settings and of ``examples/``;
    on exit, a stack the page started itself and left up is stopped."""
    folder = root / page.replace("/", "_").removesuffix(".md")
    folder.mkdir(parents=True)
    shutil.copytree(REPO / "examples", folder / "examples", ignore=_not_samples)
    if stack_env_file is not None:
        (folder / ".tether").mkdir()
        shutil.copy(stack_env_file, folder / LOCAL_ENV)
    try:
        yield folder
    finally:
        if (folder / ".tether" / "stack.json").exists():
            subprocess.run(
                [str(VENV_BIN / "tether"), "down"],
                cwd=folder,
                env=page_env(folder),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                timeout=60,
                check=False,
            )


def _not_samples(folder: str, names: list[str]) -> list[str]:
    return [n for n in names if n == "__pycache__" or n.endswith(".results.jsonl.retry")]


def run_page(
    blocks: list[Block], folder: Path, scripts: Path, *, slow: bool = False
) -> list[Outcome]:
    """Run the page's blocks in order; stop at the first that fails.

    Raises:
        SnippetFailed: a block failed, or would run after ``tether down`` took the page's stack.
    """
    outcomes: list[Outcome] = []
    for block in blocks:
        if not block.runs(slow=slow):
            continue
        if not (folder / LOCAL_ENV).exists():
            raise SnippetFailed(
                f"{block.where}: the {block.lang} block would run with no stack: an earlier "
                "block of the page ran `tether down` (move the block before it, or start the "
                "stack again)"
            )
        idle = never_awaited(block)
        if idle:
            raise SnippetFailed(
                f"{block.where}: the python block defines async def {', '.join(idle)}() and never "
                f"runs it: nothing of it would run; add asyncio.run({idle[0]}())"
            )
        outcome = run_block(block, folder, scripts)
        outcomes.append(outcome)
        if not outcome.ok:
            raise SnippetFailed(failure_message(outcome))
    return outcomes


def never_awaited(block: Block) -> list[str]:
    """The top-level ``async def`` functions of a Python block that nothing in it names: a
    snippet that defines ``main()`` and never runs it "passes" having run nothing."""
    if block.kind != "python":
        return []
    tree = ast.parse(block.code)
    defined = [n.name for n in tree.body if isinstance(n, ast.AsyncFunctionDef)]
    named = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    return [name for name in defined if name not in named]


# --- the list in tests/README.md ---------------------------------------------------------------

README = REPO / "tests" / "README.md"
BEGIN = "<!-- snippets-not-run:begin (python -m tests.support.snippets --write) -->"
END = "<!-- snippets-not-run:end -->"


def readme_section(blocks: Iterable[Block]) -> str:
    """The generated part of tests/README.md: every marked block and its reason."""
    listed = not_run_list(blocks) or ["- none"]
    return "\n".join([BEGIN, *listed, END])


def current_section(readme: Path = README) -> str | None:
    """The part of tests/README.md between the markers, or None without them."""
    text = readme.read_text(encoding="utf-8")
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        return None
    return text[start : end + len(END)]


def write_section(blocks: Iterable[Block], readme: Path = README) -> None:
    """Put the list in tests/README.md, replacing the one there."""
    text = readme.read_text(encoding="utf-8")
    old = current_section(readme)
    if old is None:
        raise SystemExit(f"{readme}: no '{BEGIN}' ... '{END}' markers to write between")
    readme.write_text(text.replace(old, readme_section(blocks)), encoding="utf-8")


def main(argv: list[str]) -> int:
    """``python -m tests.support.snippets [--write]``: print (or write) the not-run list."""
    blocks = all_blocks()
    if "--write" in argv:
        write_section(blocks)
    print(readme_section(blocks))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
