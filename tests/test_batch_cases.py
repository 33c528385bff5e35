"""Batch building blocks without workers: case validation, derived ids, grading, the results
file, summary statistics, and the refusal to start on invalid cases (CLI and Python)."""

from __future__ import annotations

import fcntl
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer import Typer
from typer.testing import CliRunner

from tether.errors import InvalidId, InvalidInput
from tether.ids import validate_id
from tether.producer.client import Producer
from tether.producer.ops.batch import DatasetOptions, run_batch
from tether.producer.ops.batch.cases import (
    MAX_REPORTED_PROBLEMS,
    BatchCase,
    CasesInvalid,
    Grader,
    iter_cases,
    parse_case_line,
    scan_cases,
    spool_cases,
)
from tether.producer.ops.batch.grading import grade
from tether.producer.ops.batch.ids import (
    case_request_id,
    case_session_id,
    check_batch_id,
    derive_batch_id,
)
from tether.producer.ops.batch.results import CaseResult, ResultsFile
from tether.producer.ops.batch.summary import (
    SummaryStats,
    build_summary,
    percentile,
    render_summary,
)
from tether.producer.ops.cli import batch as batch_cli
from tether.producer.ops.cli.batch_support import EXIT_INVALID
from tether.settings import Settings

# --- cases ------------------------------------------------------------------------------------


def write_lines(path: Path, lines: list[Any]) -> Path:
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return path


def test_valid_cases_parse_with_defaults() -> None:
    case = parse_case_line('{"id": 7, "input": "hi"}', default_agent="echo")
    assert (case.id, case.turns, case.agent, case.grader, case.expected) == (
        "7",
        ["hi"],
        None,
        Grader.EXACT,
        None,
    )
    multi = parse_case_line(
        '{"id": "m", "input": ["a", "b"], "agent": "notes", "expected": "x", "grader": "regex",'
        ' "session_id": "s-1", "metadata": {"k": [1, 2]}}',
        default_agent=None,
    )
    assert multi.turns == ["a", "b"]
    assert (multi.session_id, multi.grader, multi.metadata) == ("s-1", Grader.REGEX, {"k": [1, 2]})


@pytest.mark.parametrize(
    ("line", "fragment"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
        ('{"input": "x"}', "id: Field required"),
        ('{"id": "", "input": "x"}', "id:"),
        ('{"id": "a"}', "input: Field required"),
        ('{"id": "a", "input": []}', "1 to 1000 strings"),
        ('{"id": "a", "input": ["x", 3]}', "input"),
        ('{"id": "a", "input": "x", "expect": "y"}', "expect: Extra inputs are not permitted"),
        ('{"id": "a", "input": "x", "grader": "contains"}', "without 'expected'"),
        ('{"id": "a", "input": "x", "expected": "(", "grader": "regex"}', "not a valid regex"),
        ('{"id": "a", "input": "x", "expected": "y", "grader": "fuzzy"}', "exact, contains, regex"),
        ('{"id": "a", "input": "x", "session_id": "a/b"}', "not allowed"),
        ('{"id": "a", "input": "x", "agent": ""}', "agent"),
    ],
)
def test_invalid_case_lines_say_what_is_wrong(line: str, fragment: str) -> None:
    with pytest.raises(ValueError, match=None) as info:
        parse_case_line(line, default_agent="echo")
    assert fragment in str(info.value)


def test_agent_and_input_size_are_checked() -> None:
    with pytest.raises(ValueError, match="no agent"):
        parse_case_line('{"id": "a", "input": "x"}', default_agent=None)
    with pytest.raises(ValueError, match="input turn 1 is 11 bytes, over the limit of 10"):
        parse_case_line(
            '{"id": "a", "input": ["ok", "01234567890"]}', default_agent="e", max_input_bytes=10
        )


def test_scan_lists_every_bad_line_with_its_number(tmp_path: Path) -> None:
    path = write_lines(
        tmp_path / "c.jsonl",
        [
            {"id": "a", "input": "1"},
            "{broken",
            "",
            {"id": "b", "input": "2"},
            {"id": "a", "input": "3"},  # duplicate of line 1
            {"id": "c"},
            {"id": "b", "input": "4"},  # duplicate of line 4
        ],
    )
    scan = scan_cases(path, default_agent="echo")
    assert scan.valid == 2
    assert scan.invalid == 4
    assert [n for n, _ in scan.problems] == [2, 5, 6, 7]
    assert "already used on line 1" in dict(scan.problems)[5]
    assert "already used on line 4" in dict(scan.problems)[7]
    assert scan.duplicate_lines == {5, 7}
    message = str(CasesInvalid(path, scan.problems, scan.invalid))
    assert "4 invalid line(s)" in message and "line 6: input: Field required" in message
    # with skip_invalid only the first occurrences of valid ids run
    kept = list(iter_cases(path, default_agent="echo", skip_lines=scan.duplicate_lines))
    assert [(c.line, c.case.id) for c in kept] == [(1, "a"), (4, "b")]


def test_scan_reports_a_bounded_number_of_problems(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "c.jsonl", ["{bad"] * (MAX_REPORTED_PROBLEMS + 5))
    scan = scan_cases(path, default_agent="echo")
    assert scan.invalid == MAX_REPORTED_PROBLEMS + 5
    assert len(scan.problems) == MAX_REPORTED_PROBLEMS
    assert "... and 5 more" in str(CasesInvalid(path, scan.problems, scan.invalid))


def test_spooled_iterables_and_content_hash(tmp_path: Path) -> None:
    items: list[Any] = [
        BatchCase(id="a", input="x"),
        {"id": "b", "input": ["y", "z"]},
        '{"id": "c", "input": "w"}',
    ]
    spool_cases(items, tmp_path / "s.jsonl")
    cases = [c.case for c in iter_cases(tmp_path / "s.jsonl", default_agent="echo")]
    assert [(c.id, c.turns) for c in cases] == [("a", ["x"]), ("b", ["y", "z"]), ("c", ["w"])]
    first = scan_cases(tmp_path / "s.jsonl", default_agent="echo").sha256
    spool_cases(items, tmp_path / "t.jsonl")
    assert scan_cases(tmp_path / "t.jsonl", default_agent="echo").sha256 == first


# --- derived ids ------------------------------------------------------------------------------


def test_derived_ids_are_valid_stable_and_distinct() -> None:
    plain = BatchCase(id="q-1", input="x")
    assert case_session_id("b1", plain) == "b1:q-1"
    assert case_request_id("b1", plain, 2) == "b1:q-1:2"
    odd = [BatchCase(id=i, input="x") for i in ("with space", "a/b", "x" * 200, "..", "é")]
    ids = {case_session_id("b1", c) for c in odd} | {case_request_id("b1", c, 0) for c in odd}
    assert len(ids) == 2 * len(odd)
    for value in ids:
        assert validate_id(value) == value
    assert case_session_id("b1", odd[0]) == case_session_id(
        "b1", BatchCase(id="with space", input="y")
    )
    assert case_session_id("b1", BatchCase(id="q", input="x", session_id="mine")) == "mine"
    assert case_request_id("b1", plain, 0) != case_request_id("b2", plain, 0)


def test_case_ids_with_a_colon_never_spell_another_cases_epoch_or_retry() -> None:
    # `x:e1` (epoch 0) used to derive the session and request ids of epoch 1 of `x`, and
    # `x:e0r1` those of retry 1 of `x`'s epoch 0: one case got the other's run
    names = ("x", "x:e1", "x:e0r1", "x:e1r1", "x:1", "x:e1:0", "y", "y:e2r3:1")
    sessions: dict[str, tuple[str, int, int]] = {}
    requests: dict[str, tuple[str, int, int, int]] = {}
    for name in names:
        case = BatchCase(id=name, input="x")
        for epoch in range(3):
            for attempt in range(3):
                unit = (name, epoch, attempt)
                session = case_session_id("b1", case, epoch, attempt)
                assert validate_id(session) == session
                assert sessions.setdefault(session, unit) == unit, session
                for turn in range(3):
                    request = case_request_id("b1", case, turn, epoch, attempt)
                    assert requests.setdefault(request, (*unit, turn)) == (*unit, turn), request
    # ids without `:` are byte-identical to what they always were (resume keeps working)
    plain = BatchCase(id="x", input="x")
    assert case_session_id("b1", plain, 1) == "b1:x:e1"
    assert case_session_id("b1", plain, 0, 1) == "b1:x:e0r1"
    assert case_request_id("b1", plain, 2, 1, 2) == "b1:x:e1r2:2"
    colon = case_session_id("b1", BatchCase(id="x:e1", input="x"))
    assert colon.startswith("b1:h-") and colon.count(":") == 1


def test_batch_ids() -> None:
    assert check_batch_id("nightly-2024_01") == "nightly-2024_01"
    for bad in ("", "a:b", "a.b", "x" * 65, "sp ace"):
        with pytest.raises(InvalidId):
            check_batch_id(bad)
    same = derive_batch_id("abc", "echo")
    assert same == derive_batch_id("abc", "echo")
    assert same != derive_batch_id("abd", "echo") != derive_batch_id("abc", "notes")
    assert check_batch_id(same) == same


# --- grading ----------------------------------------------------------------------------------


def test_graders() -> None:
    assert grade(Grader.EXACT, "4", "4")
    assert not grade(Grader.EXACT, "4", "4 ")
    assert grade(Grader.CONTAINS, "milk", "eggs\nmilk")
    assert not grade(Grader.CONTAINS, "Milk", "milk")
    assert grade(Grader.REGEX, r"^\d+$", "42")
    assert not grade(Grader.REGEX, r"^\d+$", "42a")
    assert not grade(Grader.CONTAINS, "", None)


# --- results file -----------------------------------------------------------------------------


def result(case_id: str, batch: str = "b1", **extra: Any) -> CaseResult:
    fields: dict[str, Any] = {
        "batch_id": batch,
        "id": case_id,
        "line": 1,
        "session_id": "s",
        "agent": "echo",
        "status": "COMPLETED",
        "latency_ms": 5,
    }
    fields.update(extra)
    return CaseResult(**fields)


def test_results_file_appends_reads_back_and_drops_a_cut_line(tmp_path: Path) -> None:
    path = tmp_path / "out" / "r.jsonl"
    first = ResultsFile(path, "b1")
    assert first.open(lambda r: None) == 0
    first.append(result("a", passed=None))
    first.append(result("b", passed=True, grader="exact"))
    first.close()
    lines = path.read_text().splitlines()
    assert json.loads(lines[0])["passed"] is None and "grader" not in json.loads(lines[0])
    with path.open("ab") as fh:  # a line cut short by SIGKILL
        fh.write(b'{"v": 1, "batch_id": "b1", "id": "c", "li')
    seen: list[str] = []
    again = ResultsFile(path, "b1")
    assert again.open(lambda r: seen.append(r.id)) == 2
    assert again.dropped_partial_line
    assert seen == ["a", "b"]
    assert again.holds("a") and again.holds("b") and not again.holds("c")
    again.append(result("c"))
    again.close()
    assert [json.loads(x)["id"] for x in path.read_text().splitlines()] == ["a", "b", "c"]


def test_results_file_refuses_other_batches_garbage_and_a_second_writer(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    path.write_text(result("a", batch="other").model_dump_json() + "\n")
    with pytest.raises(InvalidInput, match="pass --batch-id other"):
        ResultsFile(path, "b1").open(lambda r: None)
    path.write_text("hello\n")
    with pytest.raises(InvalidInput, match="line 1 is not a batch result line"):
        ResultsFile(path, "b1").open(lambda r: None)
    path.write_text("")
    with path.open("ab") as holder:
        fcntl.flock(holder.fileno(), fcntl.LOCK_EX)
        with pytest.raises(InvalidInput, match="another batch process"):
            ResultsFile(path, "b1").open(lambda r: None)


# --- summary ----------------------------------------------------------------------------------


def test_percentiles_and_summary() -> None:
    assert percentile([], 0.5) is None
    values = list(range(1, 101))
    assert (percentile(values, 0.5), percentile(values, 0.95), percentile(values, 1.0)) == (
        50,
        95,
        100,
    )
    assert percentile([7], 0.95) == 7
    stats = SummaryStats()
    for i in range(10):
        stats.add(
            result(
                f"c{i}",
                latency_ms=i * 10,
                tokens=3,
                steps=1,
                passed=(i % 2 == 0) if i < 8 else None,
                status="FAILED" if i == 9 else "COMPLETED",
            )
        )
    summary = build_summary(
        stats,
        batch_id="b1",
        out="r.jsonl",
        total=12,
        resumed=0,
        invalid_skipped=1,
        runs=10,
        wall_s=2.0,
        concurrency=4,
        max_in_flight=4,
    )
    assert summary.by_status == {"COMPLETED": 9, "FAILED": 1}
    assert (summary.graded, summary.passed, summary.pass_rate) == (8, 4, 0.5)
    assert (summary.latency_p50_ms, summary.latency_p95_ms, summary.latency_max_ms) == (40, 90, 90)
    assert (summary.total_tokens, summary.failed, summary.runs_per_s) == (30, 1, 5.0)
    doc = summary.to_dict()
    assert json.loads(json.dumps(doc))["pass_rate"] == 0.5
    console = Console(record=True, width=100)
    render_summary(summary, console)
    text = console.export_text()
    for fragment in (
        "10 / 12 finished",
        "FAILED",
        "4 / 8 (50.0%)",
        "40 ms / 90 ms / 90 ms",
        "invalid lines skipped",
    ):
        assert fragment in text


def test_the_summary_says_why_cases_errored() -> None:
    """A typo in ``--agent`` failed every case with ``UnknownAgent``, and the summary showed only
    ``FAILED 2``: the reason was in the results file alone. The summary now gives each error
    type's count and its first message (masked, like results lines)."""
    stats = SummaryStats()
    unknown = "agent 'eco' is not registered; known agents: calculator, echo"
    for n in range(2):
        stats.add(result(f"c{n}", status="FAILED", error_type="UnknownAgent", error=unknown))
    key = "sk-proj-" + "A1" * 12
    stats.add(result("c9", status="FAILED", error_type="ModelError", error=f"bad key {key}"))
    fields = dict(batch_id="b1", out="r.jsonl", total=3, resumed=0, invalid_skipped=0, runs=3)
    summary = build_summary(stats, wall_s=1.0, concurrency=1, max_in_flight=1, **fields)
    assert summary.errors == {
        "UnknownAgent": {"count": 2, "example": unknown},
        "ModelError": {"count": 1, "example": "bad key ***"},
    }
    console = Console(record=True, width=160)
    render_summary(summary, console)
    text = console.export_text()
    assert "UnknownAgent" in text and "2: agent 'eco' is not registered" in text
    assert key not in text and key not in json.dumps(summary.to_dict())


# --- refusing to start --------------------------------------------------------------------------


def unreachable_producer() -> Producer:
    # port 9 (discard) is closed: any Redis or broker I/O would fail loudly
    url = "redis://127.0.0.1:9/0"
    return Producer(Settings(broker_url=url, redis_url=url, store_url="memory://"))


def test_invalid_cases_refuse_to_start_before_any_io(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "c.jsonl", [{"id": "a", "input": "x"}, {"id": "a"}])
    with unreachable_producer() as producer, pytest.raises(CasesInvalid) as info:
        run_batch(producer, path, agent="echo", out=tmp_path / "r.jsonl")
    assert info.value.problems == [(2, "input: Field required")]
    assert not (tmp_path / "r.jsonl").exists()
    with unreachable_producer() as producer, pytest.raises(CasesInvalid, match="no agent"):
        run_batch(producer, [{"id": "a", "input": "x"}], out=tmp_path / "r.jsonl")


def test_resuming_with_other_scorers_is_refused_naming_both(tmp_path: Path) -> None:
    """A batch run with ``--scorer contains`` and then resumed (or extended with --epochs 2)
    with ``--scorer exact`` put both in one summary, each mean over part of the cases: now the
    resume is refused before anything is submitted, naming both sets and the way out."""
    cases = write_lines(tmp_path / "c.jsonl", [{"id": "a", "input": "hi", "expected": "hi"}])
    out = tmp_path / "r.jsonl"
    line = result("a", passed=True, scorers=["contains", "exact"], grader="exact", expected="hi")
    out.write_text(line.model_dump_json() + "\n")
    before = out.read_bytes()
    with unreachable_producer() as producer, pytest.raises(InvalidInput) as info:
        run_batch(producer, cases, agent="echo", batch_id="b1", out=out, scorers=["regex"])
    message = str(info.value)
    assert "scored with --scorer contains, but this run scores with --scorer regex" in message
    assert "choose another --out" in message
    assert out.read_bytes() == before
    # the same scorers (a line's own grader aside) resume; so does a batch without --scorer
    for scorers, same in (
        (["contains"], line),
        ([], result("a", scorers=["exact"], grader="exact")),
        ([], result("a")),
    ):
        out.write_text(same.model_dump_json() + "\n")
        resumed = ResultsFile(out, "b1", scorers=scorers)
        assert resumed.open(lambda r: None) == 1
        resumed.close()
    with pytest.raises(InvalidInput, match=r"no --scorer \(each case's grader\), but this run"):
        ResultsFile(out, "b1", scorers=["exact"]).open(lambda r: None)


def test_no_cases_after_filters_is_refused_before_any_io(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An empty or blank cases file, or a --filter matching nothing, ran a batch of 0 cases and
    exited 0 (even with --fail-on-error): now refused, nothing submitted or written."""
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    blank = tmp_path / "blank.jsonl"
    blank.write_text("\n\n  \n")
    one = write_lines(tmp_path / "one.jsonl", [{"id": "a", "input": "hi", "tags": ["geo"]}])
    typo = DatasetOptions(filters=(("tag", "gepgraphy"),))
    out = tmp_path / "r.jsonl"
    for cases, dataset, fragment in (
        (empty, None, "the file is empty or blank"),
        (blank, None, "the file is empty or blank"),
        (one, typo, "selected none of its cases"),
        ([], None, "in the cases given"),
    ):
        with unreachable_producer() as producer, pytest.raises(InvalidInput) as info:
            run_batch(producer, cases, agent="echo", out=out, dataset=dataset)
        assert "no cases (after filters)" in str(info.value) and fragment in str(info.value)
        assert not out.exists()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TETHER_REDIS_URL", "redis://127.0.0.1:9/0")
    monkeypatch.setenv("TETHER_BROKER_URL", "redis://127.0.0.1:9/0")
    args = [str(blank), "--agent", "echo", "--fail-on-error"]
    outcome = CliRunner().invoke(batch_cli.batch_app, args)
    assert outcome.exit_code == EXIT_INVALID, outcome.output
    assert "no cases (after filters)" in outcome.output
    assert not (tmp_path / "blank.results.jsonl").exists()


def test_a_rerun_with_fewer_epochs_counts_the_epochs_the_file_holds(tmp_path: Path) -> None:
    """A batch run with --epochs 3 and re-run with --epochs 1 reported "6 / 2 finished": the
    total is the cases times the epochs, those the results file holds included."""
    cases = write_lines(
        tmp_path / "c.jsonl", [{"id": "a", "input": "hi"}, {"id": "b", "input": "yo"}]
    )
    out = tmp_path / "r.jsonl"
    out.write_text(
        "".join(result(c, epoch=e).model_dump_json() + "\n" for c in "ab" for e in range(3))
    )
    # every unit of epoch 0 is in the file: nothing is submitted (the board update only warns)
    with unreachable_producer() as producer:
        summary = run_batch(producer, cases, agent="echo", batch_id="b1", out=out, epochs=1)
    assert (summary.finished, summary.total, summary.resumed) == (6, 6, 6)
    assert (summary.cases, summary.epochs) == (2, 3)


def test_cli_reports_bad_lines_and_exits_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_lines(tmp_path / "c.jsonl", ["{oops", {"id": 1, "input": "x", "grader": "regex"}])
    monkeypatch.setenv("TETHER_REDIS_URL", "redis://127.0.0.1:9/0")
    monkeypatch.setenv("TETHER_BROKER_URL", "redis://127.0.0.1:9/0")
    app = Typer()
    batch_cli.register(app)

    @app.callback()
    def _root() -> None:
        """Make `batch` a sub-command, as in the real CLI."""

    outcome = CliRunner().invoke(app, ["batch", str(path), "--agent", "echo"])
    assert outcome.exit_code == EXIT_INVALID, outcome.output
    assert "2 invalid line(s)" in outcome.output
    assert "line 1: not valid JSON" in outcome.output
    assert "line 2: grader" not in outcome.output and "without 'expected'" in outcome.output
    assert not (tmp_path / "c.results.jsonl").exists()


@pytest.mark.parametrize(
    ("args", "cases", "unknown"),
    [
        (["--agent", "nosuchagent"], [{"id": "a", "input": "x"}], "nosuchagent"),
        # a case's own agent is checked too, and --out changes nothing
        (
            ["--agent", "echo", "--out", "r.jsonl"],
            [{"id": "a", "input": "x", "agent": "ghost"}],
            "ghost",
        ),
        # a case's own agent is checked even with --agent naming a real one
        (
            [],
            [
                {"id": "a", "input": "x", "agent": "echo"},
                {"id": "b", "input": "y", "agent": "typo-agent"},
            ],
            "typo-agent",
        ),
    ],
)
def test_cli_refuses_an_unknown_agent_before_anything_runs(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    args: list[str],
    cases: list[dict[str, Any]],
    unknown: str,
) -> None:
    """``tether batch cases.jsonl --agent nosuchagent`` ran every case, failed them all and
    exited 0 (or, without --out, said to pass --batch-id): now, where the CLI has the workers'
    agent modules, one line naming the agent and the known ones, exit 2, nothing written (the
    broker is unreachable: nothing submitted)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TETHER_REDIS_URL", "redis://127.0.0.1:9/0")
    monkeypatch.setenv("TETHER_BROKER_URL", "redis://127.0.0.1:9/0")
    # this process knows the workers' agents (their modules import here); without
    # TETHER_AGENT_MODULES it could not tell, and the workers judge each case
    monkeypatch.setenv("TETHER_AGENT_MODULES", "tests.support.approval_agents")
    path = write_lines(tmp_path / "c.jsonl", cases)
    before = sorted(p.name for p in tmp_path.iterdir())
    outcome = CliRunner().invoke(batch_cli.batch_app, [str(path), *args])
    assert outcome.exit_code == EXIT_INVALID, outcome.output
    (message,) = outcome.output.strip().splitlines()
    assert f"UnknownAgent: unknown agent {unknown!r}" in message
    assert "known agents: " in message and "echo" in message and "calculator" in message
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no results file


def test_a_batch_scored_by_regex_refuses_a_pattern_that_does_not_compile_before_it_runs(
    tmp_path: Path,
) -> None:
    """With ``--scorer regex`` every case's ``expected`` is a pattern: one that does not
    compile was run, then became a scoring error on every epoch. It is an invalid line now,
    found before anything is submitted, by the batch itself (not only by ``scan_cases``)."""
    cases = write_lines(
        tmp_path / "c.jsonl",
        [{"id": "a", "input": "q", "expected": "([0-9]+"}, {"id": "b", "input": "q"}],
    )
    out = tmp_path / "r.jsonl"
    with unreachable_producer() as producer, pytest.raises(CasesInvalid) as info:
        run_batch(producer, cases, agent="echo", out=out, scorers=["regex"])
    assert "not a valid regex" in str(info.value)
    assert not out.exists()


def test_a_cases_own_session_id_may_not_end_like_an_epochs_session() -> None:
    """A case naming session ``s:e1`` ran in the session of epoch 1 of the case naming ``s``:
    two cases' turns in one session. Such an id is an invalid line now."""
    for session in ("s:e1", "s:e12r3"):
        line = json.dumps({"id": "c", "input": "i", "session_id": session})
        with pytest.raises(ValueError, match="ends like an epoch or retry's session"):
            parse_case_line(line, default_agent="echo")
    for session in ("s", "s:east", "s:e1x"):
        line = json.dumps({"id": "c", "input": "i", "session_id": session})
        assert parse_case_line(line, default_agent="echo").session_id == session
