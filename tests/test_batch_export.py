"""``tether batch export --format inspect``: a batch run on real workers, written as an Inspect
AI eval log by the CLI and read back by ``inspect_ai.log.read_eval_log`` with every sample,
score and transcript; and case ids that are not safe as paths (issue 47, X1), exported from a
results file without workers."""

from __future__ import annotations

import zipfile
from pathlib import Path, PurePosixPath

import pytest
from typer.testing import CliRunner

from tests.support.finished_batch import EPOCHS, FinishedBatches, finish_batches
from tests.support.stack import Stack
from tether.producer.ops.batch.outputs.entry_names import safe_name, safe_names
from tether.producer.ops.batch.results import CaseResult, dump_line, read_results
from tether.producer.ops.batch.scoring import ScoreRecord
from tether.producer.ops.cli.batch import batch_app

# inspect_ai (about 1.5 s to import) is imported by the tests, not when pytest collects this file
# in every test process.


@pytest.fixture(scope="module")
def batches(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> FinishedBatches:
    return finish_batches(stack, tmp_path_factory.mktemp("export"))


def export(stack: Stack, monkeypatch: pytest.MonkeyPatch, *args: str) -> str:
    for name, value in stack.env.items():
        if name.startswith(("TETHER_", "AWS_")):
            monkeypatch.setenv(name, value)
    result = CliRunner().invoke(batch_app, ["export", *args])
    assert result.exit_code == 0, result.output
    return result.output


def test_an_exported_batch_reads_back_with_every_sample_score_and_transcript(
    stack: Stack, batches: FinishedBatches, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from inspect_ai.log import read_eval_log
    from inspect_ai.model import ChatMessageAssistant

    out = tmp_path / "run.eval"
    assert "wrote" in export(
        stack, monkeypatch, str(batches.a), "--format", "inspect", "-o", str(out)
    )
    log = read_eval_log(str(out))
    lines = read_results(batches.a)
    assert log.status == "success" and log.eval.model == "tether/calculator"
    assert log.eval.config.epochs == EPOCHS
    assert log.samples is not None and len(log.samples) == len(lines) == 4 * EPOCHS
    by_key = {(s.id, s.epoch): s for s in log.samples}
    for line in lines:
        sample = by_key[(line.id, line.epoch + 1)]
        assert line.scores is not None
        assert sample.scores is not None
        assert sample.scores["contains"].value == line.scores["contains"].value
        assert sample.output.completion == (line.output or "")
        assert sample.target == line.expected
        roles = [m.role for m in sample.messages]
        # the calculator asks for its tool, gets the result, then answers
        assert roles == ["user", "assistant", "tool", "assistant"], roles
        assert sample.messages[0].text == line.input
        call = sample.messages[1]
        assert isinstance(call, ChatMessageAssistant)
        assert call.tool_calls and call.tool_calls[0].function == "calculate"
        assert sample.messages[-1].text == line.output
        assert sample.metadata["tether_session_id"] == line.session_id
    wrong = [s for s in log.samples if str(s.id).endswith("-wrong")]
    assert {s.scores["contains"].value for s in wrong if s.scores} == {0.0}
    assert log.results is not None
    (contains,) = log.results.scores
    assert contains.name == "contains"
    assert contains.metrics["mean"].value == pytest.approx(0.75)  # 3 of 4 cases, every epoch


def test_export_without_transcripts_needs_no_store(
    stack: Stack, batches: FinishedBatches, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from inspect_ai.log import read_eval_log

    out = tmp_path / "run.json"
    export(stack, monkeypatch, str(batches.b), "-o", str(out), "--no-transcripts")
    log = read_eval_log(str(out))
    assert log.samples is not None and len(log.samples) == 4 * EPOCHS
    assert all(s.messages == [] for s in log.samples)
    assert {s.scores["contains"].value for s in log.samples if s.scores} == {0.0}


def test_a_missing_results_file_is_refused_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "nope.results.jsonl"
    result = CliRunner().invoke(batch_app, ["export", str(missing), "-o", str(tmp_path / "x")])
    assert result.exit_code == 2
    assert str(missing) in result.output


# --- case ids that are not safe as paths (issue 47, X1) ------------------------------------------

#: Case ids an entry name must not be made of as they are; "a/b", "a\\b" and "a-b" slug alike,
#: and so do the two long ones (their first 40 characters agree).
HOSTILE_IDS = [
    "../../../../x",
    "/abs/x",
    "C:\\win\\x",
    "a/b",
    "a\\b",
    "a-b",
    "tab\there\x01\x1b[31m\x7f",
    "y" * 255 + "1",
    "y" * 255 + "2",
    "déjà vu",
    "..",
    ".hidden",
    "1",
]


def hostile_results(path: Path) -> list[CaseResult]:
    lines = [
        CaseResult(
            batch_id="b",
            id=case_id,
            line=n,
            epoch=epoch,
            session_id=f"b:{n}:e{epoch}",
            agent="echo",
            status="COMPLETED",
            output=f"out {n}.{epoch}",
            passed=True,
            score=1.0,
            scores={"exact": ScoreRecord(scorer="exact", value=1.0, passed=True)},
        )
        for n, case_id in enumerate(HOSTILE_IDS, start=1)
        for epoch in (0, 1)
    ]
    path.write_bytes(b"".join(dump_line(line) for line in lines))
    return lines


def safe_entry(name: str) -> bool:
    parts = PurePosixPath(name).parts
    return (
        not name.startswith("/")
        and "\\" not in name
        and ":" not in name
        and ".." not in parts
        and not any(ord(c) < 32 or ord(c) == 127 for c in name)
        and len(name) <= 128
    )


@pytest.mark.parametrize("suffix", [".eval", ".json"])
def test_case_ids_never_make_unsafe_entry_names_and_the_export_reads_back(
    tmp_path: Path, suffix: str
) -> None:
    from inspect_ai.log import read_eval_log, read_eval_log_sample

    lines = hostile_results(tmp_path / "r.results.jsonl")
    out = tmp_path / f"run{suffix}"
    result = CliRunner().invoke(
        batch_app,
        ["export", str(tmp_path / "r.results.jsonl"), "-o", str(out), "--no-transcripts"],
    )
    assert result.exit_code == 0, result.output
    if suffix == ".eval":
        names = zipfile.ZipFile(out).namelist()
        unsafe = [n for n in names if not safe_entry(n)]
        assert unsafe == []
        samples = [n for n in names if n.startswith("samples/")]
        assert len(samples) == len(set(samples)) == len(lines)
        assert all(n.count("/") == 1 for n in samples)
    log = read_eval_log(str(out))
    assert log.samples is not None and len(log.samples) == len(lines)
    by_case = {(s.metadata["tether_case_id"], s.epoch): s for s in log.samples}
    for line in lines:  # every line, under its own id as it was
        assert by_case[(line.id, line.epoch + 1)].output.completion == line.output
    ids = {s.metadata["tether_case_id"]: str(s.id) for s in log.samples}
    assert len(set(ids.values())) == len(HOSTILE_IDS)  # distinct ids, distinct names
    assert ids["a-b"] == "a-b" and ids["1"] == "1"  # safe ids are kept as they are
    assert ids["déjà vu"].startswith("deja-vu~") and ids["/abs/x"].startswith("abs-x~")
    assert log.eval.dataset.sample_ids is not None
    assert sorted(map(str, log.eval.dataset.sample_ids)) == sorted(ids.values())
    if suffix == ".eval":  # inspect finds a sample by its id, as `inspect view` does
        one = read_eval_log_sample(str(out), id=ids["../../../../x"], epoch=2)
        assert one.output.completion == "out 1.1"


def test_changed_names_never_collide_even_when_their_hash_prefixes_do() -> None:
    # 40 ids that slug alike ("case"), over 16 one-digit prefixes: prefixes collide
    ids = ["case" + "/" * n for n in range(1, 41)]
    names = safe_names(ids, hash_hex=1)
    assert len(set(names.values())) == len(ids)
    assert {name.split("~")[0] for name in names.values()} == {"case"}
    assert any(len(name.split("~")[1]) == 64 for name in names.values())  # the whole digest
    # an id spelling another id's changed name is changed itself ("~" is never kept)
    crafted = safe_name("a/b")
    assert safe_names(["a/b", crafted]) == {"a/b": crafted, crafted: safe_name(crafted)}
    assert safe_name(crafted) != crafted
