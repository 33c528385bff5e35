"""A secret pasted into a batch case (``TETHER_REDACT_INPUTS``, on by default): a batch on real
workers (the session's live stack) with an OpenAI-style key in the inputs and an AWS key id in
``expected``, tags and metadata. The results file, the HTML report, every export format and the
stack's Redis (the batch's board record included) hold neither, and the cases score against
what their author wrote, as before the lines were masked."""

from __future__ import annotations

import secrets
import string
import time
import zipfile
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.support.redis_scan import flatten_redis
from tests.support.stack import Stack, unique
from tether.producer.ops.batch import BatchCase, run_batch
from tether.producer.ops.batch.cases import NumberedCase
from tether.producer.ops.batch.records import CaseOutcome, build_record
from tether.producer.ops.batch.results import read_results
from tether.producer.ops.batch.scoring import resolve_scorers
from tether.producer.ops.batch.scoring.apply import score_sample
from tether.producer.ops.batch.scoring.base import Sample
from tether.producer.ops.cli.batch import batch_app

SCORERS = ["contains", "exact"]


def planted() -> dict[str, str]:
    """Fresh credentials in the formats the default redactor knows."""
    alphabet = string.ascii_uppercase + string.digits
    return {
        "openai": "sk-proj-" + secrets.token_hex(16),
        "aws": "AKIA" + "".join(secrets.choice(alphabet) for _ in range(16)),
    }


def secret_cases(tag: str, sec: dict[str, str]) -> list[dict[str, Any]]:
    """One single-turn and one multi-turn case, a secret in every text a case has."""
    return [
        {
            "id": f"{tag}-one",
            "input": f"my key is {sec['openai']}",
            "expected": f"my key is {sec['aws']}",
            "tags": ["keys", sec["openai"]],
            "metadata": {"note": f"pasted {sec['aws']}", sec["openai"]: 1},
        },
        {
            "id": f"{tag}-turns",
            "input": ["hello", f"again {sec['openai']}"],
            # structured: includes-any passes on its second string
            "expected": [sec["aws"], "echo: again"],
            "grader": "includes-any",
        },
    ]


def cli(stack: Stack, monkeypatch: pytest.MonkeyPatch, *args: str) -> None:
    for name, value in stack.env.items():
        if name.startswith(("TETHER_", "AWS_")):
            monkeypatch.setenv(name, value)
    result = CliRunner().invoke(batch_app, list(args))
    assert result.exit_code == 0, result.output


def text_of(path: Path) -> str:
    """A written file as text (an ``.eval`` log is a zip: every member, decompressed)."""
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            return "\0".join(archive.read(n).decode("utf-8", "replace") for n in archive.namelist())
    return path.read_text(encoding="utf-8")


def unmasked_scores(case: dict[str, Any], output: str | None) -> dict[str, float | None]:
    """What the scorers give the case as written (the scoring before lines were masked)."""
    parsed = BatchCase.model_validate(case)
    scorers = resolve_scorers(SCORERS)
    return {r.scorer: r.value for r in score_sample(scorers, Sample(case=parsed, output=output))}


def test_a_pasted_secret_in_a_batch_case_is_never_stored_or_reported(
    live_stack: Stack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stack = live_stack
    assert stack.producer.settings.redact_inputs  # the default
    sec = planted()
    data = secret_cases(unique("red"), sec)
    results = tmp_path / "secret.results.jsonl"
    summary = run_batch(stack.producer, data, agent="echo", out=results, scorers=SCORERS)
    assert summary.by_status == {"COMPLETED": 2}

    written = {"results file": results}
    written["report"] = tmp_path / "report.html"
    cli(stack, monkeypatch, "report", str(results), "-o", str(written["report"]))
    for suffix in (".eval", ".json"):  # the two encodings of the one export format
        out = tmp_path / f"run{suffix}"
        cli(stack, monkeypatch, "export", str(results), "--format", "inspect", "-o", str(out))
        written[f"inspect export ({suffix})"] = out
    texts = {name: text_of(path) for name, path in written.items()}
    texts.update(
        {
            f"redis {key!r}": value.decode("utf-8", "replace")
            for key, value in flatten_redis(stack.redis.client()).items()
        }
    )
    hits = [(where, kind) for where, text in texts.items() for kind, s in sec.items() if s in text]
    assert hits == []

    lines = {line.id: line for line in read_results(results)}
    one, turns = (lines[str(c["id"])] for c in data)
    assert one.input == "my key is ***" and one.output == "echo: my key is ***"
    assert one.expected == "my key is ***" and one.tags == ["keys", "***"]
    assert one.metadata == {"note": "pasted ***", "***": 1}
    assert turns.input == ["hello", "again ***"] and turns.expected == ["***", "echo: again"]
    assert turns.outputs == ["echo: hello", "echo: again ***"]
    for name in written:  # each scan reads the case's text (masked), so none is blind
        assert "my key is ***" in texts[name], name
    # scored against the expected as written: against the masked one, "contains" would pass
    assert unmasked_scores(data[0], one.output) == {"contains": 0.0, "exact": 0.0}
    assert unmasked_scores(data[1], turns.output) == {"contains": 0.0, "exact": 0.0}
    assert one.scores is not None and turns.scores is not None
    assert {n: r.value for n, r in one.scores.items()} == {"contains": 0.0, "exact": 0.0}
    assert one.passed is False and one.score == 0.0
    values = {n: r.value for n, r in turns.scores.items()}
    assert values == {"contains": 0.0, "exact": 0.0, "includes-any": 1.0}
    assert "my key is ***" in (one.scores["exact"].explanation or "")  # quoted, masked


def failed_line(redact: bool, sec: dict[str, str]) -> dict[str, Any]:
    case = BatchCase.model_validate({"id": "c", "input": sec["openai"], "expected": sec["aws"]})
    outcome = CaseOutcome(NumberedCase(1, case), "s", "echo", time.monotonic())
    line = build_record(
        outcome,
        None,
        ("AgentError", f"the agent choked on {sec['openai']}"),
        batch_id="b",
        scorers=[],
        events=None,
        redact=redact,
    )
    return line.model_dump()


def test_a_batch_line_is_masked_only_when_inputs_are_redacted() -> None:
    sec = planted()
    masked = failed_line(True, sec)
    assert (masked["input"], masked["expected"]) == ("***", "***")
    assert masked["error"] == "the agent choked on ***"
    kept = failed_line(False, sec)  # TETHER_REDACT_INPUTS=false keeps the case as written
    assert (kept["input"], kept["expected"]) == (sec["openai"], sec["aws"])
