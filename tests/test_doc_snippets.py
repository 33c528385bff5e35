"""Every Python and shell block of README.md and docs/**/*.md runs, or says in the page why not.

The pages run against one local stack, started as the docs start it: ``tether up --workers 2
--no-console`` (a private redis-server, the local store ``.tether/store``, two workers with the
demo agents) in a folder of its own, shared by every page of this module. The test stack of
``tests/support/stack.py`` does not fit: the pages are written for ``tether up``'s defaults (the
local store, its leases, ``.tether/env``). Each page runs in a folder of its own holding a copy of
the stack's ``.tether/env``; its blocks run in order there (see ``tests/support/snippets.py``).
Pages share the stack and the default tenant: a page that needs a fresh session names one no
other page uses.

The blocks marked ``<!-- not run: REASON -->`` are listed, with their reasons, in the generated
section "Documentation snippets not run" of tests/README.md (``python -m tests.support.snippets
--write`` rewrites it); ``test_the_list_of_blocks_not_run_is_current`` prints the list and holds
the section to it. ``<!-- slow: REASON -->`` blocks run in ``make test-long`` only.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.snippets import (
    LOCAL_ENV,
    VENV_BIN,
    Block,
    SnippetFailed,
    SnippetPageError,
    all_blocks,
    current_section,
    doc_pages,
    page_blocks,
    page_env,
    page_folder,
    readme_section,
    run_block,
    run_page,
)

REPO = Path(__file__).resolve().parents[1]


def _pages_with(*, slow: bool) -> list[str]:
    return [
        str(path.relative_to(REPO))
        for path in doc_pages()
        if any(block.runs(slow=slow) for block in page_blocks(path))
    ]


@pytest.fixture(scope="module")
def docs_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """``tether up`` in a folder of its own; yields its ``.tether/env``."""
    project = tmp_path_factory.mktemp("docs-stack")
    env = page_env(project)
    tether = str(VENV_BIN / "tether")
    up = subprocess.run(
        [tether, "up", "--workers", "2", "--no-console"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    try:
        assert up.returncode == 0, f"tether up failed:\n{up.stdout}\n{up.stderr}"
        yield project / LOCAL_ENV
    finally:
        subprocess.run([tether, "down"], cwd=project, env=env, timeout=60, check=False)


def _run_page(page: str, stack_env: Path, tmp_path: Path, *, slow: bool) -> None:
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    blocks = page_blocks(REPO / page)
    with page_folder(page, tmp_path / "pages", stack_env) as folder:
        outcomes = run_page(blocks, folder, scripts, slow=slow)
    assert outcomes, f"{page}: no block ran"
    for outcome in outcomes:
        print(f"{outcome.block.where}: ok in {outcome.seconds:.1f} s")


@pytest.mark.parametrize("page", _pages_with(slow=False))
def test_the_snippets_of_the_page_run(page: str, docs_stack: Path, tmp_path: Path) -> None:
    _run_page(page, docs_stack, tmp_path, slow=False)


@pytest.mark.slow
@pytest.mark.parametrize("page", _pages_with(slow=True))
def test_the_long_snippets_of_the_page_run(page: str, docs_stack: Path, tmp_path: Path) -> None:
    _run_page(page, docs_stack, tmp_path, slow=True)


def test_the_list_of_blocks_not_run_is_current() -> None:
    blocks = all_blocks()
    wanted = readme_section(blocks)
    print("Documentation snippets not run, and why:\n" + wanted)
    assert current_section() == wanted, (
        "tests/README.md's list of snippets not run is out of date: "
        "run `.venv/bin/python -m tests.support.snippets --write`"
    )


def test_every_page_has_its_snippets_found() -> None:
    blocks = all_blocks()
    code = [b for b in blocks if b.kind is not None]
    assert len({b.page for b in code}) >= 15, "the pages' code blocks were not found"
    run = [b for b in code if b.marker is None]
    assert len(run) > len(code) // 2, "most documented snippets should run, not be marked"


# --- the runner itself, on pages made here (no stack) ---------------------------------------------


def _page(tmp_path: Path, text: str) -> list[Block]:
    path = tmp_path / "page.md"
    path.write_text(text)
    return page_blocks(path, repo=tmp_path)


def test_a_failing_block_names_its_page_its_line_and_what_it_printed(tmp_path: Path) -> None:
    blocks = _page(tmp_path, "# A page\n\n```bash\necho before-the-error\nfalse\necho never\n```\n")
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / ".tether").mkdir()
    (folder / LOCAL_ENV).write_text("")
    with pytest.raises(SnippetFailed) as failed:
        run_page(blocks, folder, tmp_path)
    message = str(failed.value)
    assert message.startswith("page.md:3: the bash block exited 1")
    assert "    5 | false" in message
    assert "before-the-error" in message and "never" not in message.split("---")[1]


def test_a_python_traceback_gives_the_line_of_the_page(tmp_path: Path) -> None:
    blocks = _page(tmp_path, "Text.\n\n```python\nx = 1\nraise ValueError(x)\n```\n")
    outcome = run_block(blocks[0], tmp_path, tmp_path)
    assert outcome.returncode == 1
    assert "line 5" in outcome.output and "ValueError: 1" in outcome.output


def test_a_block_that_never_ends_is_stopped_and_said_so(tmp_path: Path) -> None:
    blocks = _page(tmp_path, "```bash\nsleep 600.25 &\nsleep 600.25\n```\n")
    outcome = run_block(blocks[0], tmp_path, tmp_path, timeout_s=1.0)
    assert outcome.returncode is None and outcome.seconds < 30
    # both sleeps, the one in the background too, were in the block's process group: gone
    left = subprocess.run(["pgrep", "-f", "sleep 600.25"], capture_output=True, check=False)
    assert left.returncode == 1, left.stdout


def test_an_async_main_that_is_never_run_fails_the_page(tmp_path: Path) -> None:
    text = "```python\nimport asyncio\n\nasync def main() -> None:\n    print('ran')\n```\n"
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / ".tether").mkdir()
    (folder / LOCAL_ENV).write_text("")
    with pytest.raises(SnippetFailed, match=r"page.md:1: .* async def main\(\) and never runs it"):
        run_page(_page(tmp_path, text), folder, tmp_path)
    ran = run_page(
        _page(tmp_path, text.replace("```\n", "asyncio.run(main())\n```\n")), folder, tmp_path
    )
    assert ran[0].output.strip() == "ran"


def test_blocks_of_a_page_share_its_folder_in_order(tmp_path: Path) -> None:
    blocks = _page(
        tmp_path,
        "```bash\necho made > made.txt\n```\n\n```python\nprint(open('made.txt').read())\n```\n",
    )
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / ".tether").mkdir()
    (folder / LOCAL_ENV).write_text("")
    outcomes = run_page(blocks, folder, tmp_path)
    assert [o.output.strip() for o in outcomes] == ["", "made"]


def test_marked_blocks_are_listed_and_not_run(tmp_path: Path) -> None:
    blocks = _page(
        tmp_path,
        "<!-- not run: needs a real key -->\n```bash\nexit 3\n```\n\n"
        "<!-- slow: takes minutes -->\n\n```python\nraise SystemExit(4)\n```\n"
        "```text\nnot code\n```\n",
    )
    assert [(b.marker, b.reason) for b in blocks] == [
        ("not run", "needs a real key"),
        ("slow", "takes minutes"),
        (None, ""),
    ]
    assert not any(b.runs(slow=False) for b in blocks)
    assert readme_section(blocks).split("\n")[1:-1] == [
        "- page.md (bash, not run), `exit 3`: needs a real key",
        "- page.md (python, long tests only), `raise SystemExit(4)`: takes minutes",
    ]


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("<!-- not run: -->\n```bash\ntrue\n```\n", "needs its reason"),
        ("<!-- not run: why -->\n```text\nout\n```\n", "not Python or shell"),
        ("<!-- not run: why -->\nSome text.\n```bash\ntrue\n```\n", "right before its block"),
        ("<!-- notrun: why -->\n```bash\ntrue\n```\n", "is written"),
        ("```bash\ntrue\n```\n<!-- slow: why -->\n", "before no block"),
    ],
)
def test_a_marker_that_cannot_be_read_is_refused(tmp_path: Path, text: str, says: str) -> None:
    with pytest.raises(SnippetPageError, match=says):
        _page(tmp_path, text)
