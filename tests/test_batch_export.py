"""``tether batch export --format inspect``: a batch run on real workers, written as an Inspect
AI eval log by the CLI and read back by ``inspect_ai.log.read_eval_log`` with every sample,
score and transcript."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.support.finished_batch import EPOCHS, FinishedBatches, finish_batches
from tests.support.stack import Stack
from tether.producer.ops.batch.results import read_results
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
