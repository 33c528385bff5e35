"""Batch evaluation on real workers (the session's live stack, and for retry a worker of its own
that loads a test agent): epochs in fresh sessions with a killed producer resuming exactly,
scorers reading the runs' events, and ``tether batch retry`` re-running only errored cases."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from tests.support.eval_agents import MARKER_VARIABLE
from tests.support.openai_fixture import OpenAIServer, reply
from tests.support.stack import Stack, eventually, unique
from tests.test_batch import complete_lines, read_results, user_inputs, write_cases
from tether.dev.workers import WorkerFleet
from tether.producer import Producer
from tether.producer.ops.batch import run_batch

RUN_EPOCHS = """
import json, sys
from tether.producer.client import Producer
from tether.producer.ops.batch import run_batch
with Producer() as producer:
    summary = run_batch(producer, sys.argv[1], agent="notes", concurrency=2, out=sys.argv[2],
                        epochs=int(sys.argv[3]),
                        scorers=["contains", "tests.support.eval_scorers:event_count"])
print(json.dumps(summary.to_dict()))
"""


SCORERS = ["contains", "tests.support.eval_scorers:event_count"]


def test_epochs_resume_exactly_after_a_kill(
    live_stack: Stack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the scorer reading events reads the stack's S3 from this process, as the workers do
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION"):
        monkeypatch.setenv(name, live_stack.env[name])
    tag = unique("ep")
    n, epochs = 6, 3
    cases = [
        {
            "id": f"{tag}-{i}",
            "input": [f"remember {tag}-{i}", "recall"],
            "expected": f"{tag}-{i}",
            "tags": ["even" if i % 2 == 0 else "odd"],
        }
        for i in range(n)
    ]
    path = write_cases(tmp_path / "ep.jsonl", cases)
    out = tmp_path / "ep.results.jsonl"

    def batch(epochs: int) -> dict[str, Any]:
        summary = run_batch(
            live_stack.producer,
            path,
            agent="notes",
            concurrency=4,
            out=out,
            epochs=epochs,
            scorers=SCORERS,
        )
        return summary.to_dict()

    # epoch 0 alone first: a later --epochs 3 adds epochs 1 and 2 and re-runs nothing
    one = batch(1)
    assert (one["total"], one["finished"], one["runs"]) == (n, n, 2 * n)
    log = (tmp_path / "first.log").open("wb")
    first = subprocess.Popen(
        [sys.executable, "-c", RUN_EPOCHS, str(path), str(out), str(epochs)],
        env=live_stack.env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        eventually(lambda: len(complete_lines(out)) >= n + 2 or first.poll() is not None, 120)
        first.send_signal(signal.SIGKILL)
    finally:
        first.kill()
        first.wait(timeout=30)
        log.close()
    assert first.returncode == -signal.SIGKILL, (tmp_path / "first.log").read_text()[-2000:]
    before = len(complete_lines(out))
    assert n < before < n * epochs

    summary = batch(epochs)
    assert (summary["total"], summary["cases"], summary["epochs"]) == (n * epochs, n, epochs)
    assert (summary["finished"], summary["resumed"]) == (n * epochs, before)
    assert summary["by_status"] == {"COMPLETED": n * epochs} and summary["passed"] == n * epochs
    overall = summary["metrics"]["overall"]
    assert overall["pass_at_k"] == {"1": 1.0, "2": 1.0, "3": 1.0} and overall["mean"] == 1.0
    assert overall["stderr"] == 0.0 and overall["cases"] == n
    assert summary["metrics"]["tags"]["even"]["cases"] == n // 2
    assert set(summary["metrics"]["scorers"]) == set(SCORERS)

    lines = read_results(out)
    assert Counter((x["id"], x["epoch"]) for x in lines) == Counter(
        {(c["id"], e): 1 for c in cases for e in range(epochs)}
    )
    sessions = {x["session_id"] for x in lines}
    assert len(sessions) == n * epochs  # a fresh session per epoch
    for line in lines:
        # every session holds its inputs once, in order, however the producer was killed
        assert user_inputs(live_stack, line["session_id"]) == line["input"], line
        assert line["session_id"].endswith(f":e{line['epoch']}") == (line["epoch"] > 0)
        assert line["v"] == 2 and line["scores"]["contains"]["passed"] is True
        types = line["scores"][SCORERS[1]]["metadata"]["types"]  # read from the session's log
        assert types.count("USER_INPUT") == 2 and types.count("FINAL_OUTPUT") == 2, types
        assert line["usage"]["total_tokens"] == line["tokens"]
    again = batch(epochs)
    assert (again["runs"], again["resumed"]) == (0, n * epochs)


# --- retry ------------------------------------------------------------------------------------

QUEUE = "evalq"


@pytest.fixture
def flaky_fleet(
    live_stack: Stack, tmp_path: Path
) -> Iterator[tuple[Producer, dict[str, str], Path]]:
    marker = tmp_path / "provider-down"
    env = dict(
        live_stack.env,
        TETHER_AGENT_MODULES="tests.support.eval_agents",
        TETHER_QUEUE=QUEUE,
        **{MARKER_VARIABLE: str(marker)},
    )
    fleet = WorkerFleet(env, tmp_path, count=1, queue=QUEUE, prefix="eval")
    producer = Producer(live_stack.settings.model_copy(update={"queue": QUEUE}))
    try:
        fleet.start()
        yield producer, env, marker
    finally:
        fleet.stop()
        producer.close()


def retry_cli(env: dict[str, str], results: Path) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "tether.producer.ops.cli.batch", "retry", str(results), "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    doc: dict[str, Any] = json.loads(done.stdout)
    return doc


def test_retry_reruns_only_errored_cases(
    flaky_fleet: tuple[Producer, dict[str, str], Path], tmp_path: Path, live_stack: Stack
) -> None:
    producer, env, marker = flaky_fleet
    tag = unique("rt")
    cases = [
        {"id": f"{tag}-ok", "input": "hi", "agent": "echo", "expected": "echo: hi"},
        {"id": f"{tag}-wrong", "input": "hi", "agent": "echo", "expected": "nope"},
        *({"id": f"{tag}-f{i}", "input": f"q{i}", "expected": f"flaky: q{i}"} for i in range(3)),
    ]
    path = write_cases(tmp_path / "rt.jsonl", cases)
    out = tmp_path / "rt.results.jsonl"
    marker.touch()  # the provider is down for the first run
    first = run_batch(
        producer, path, agent="flaky", concurrency=4, out=out, epochs=2, scorers=["f1"]
    )
    assert first.by_status == {"COMPLETED": 4, "FAILED": 6}
    assert first.errors_by_kind == {"model": 6}
    before = {(x["id"], x["epoch"]): x for x in read_results(out)}
    flaky_lines = [x for k, x in before.items() if k[0].startswith(f"{tag}-f")]
    assert {x["error_kind"] for x in flaky_lines} == {"model"}
    assert {x["error_type"] for x in flaky_lines} == {"ModelError"}
    assert all(x["passed"] is False and "scores" not in x for x in flaky_lines)

    marker.unlink()  # the provider is back
    env_q = dict(env)
    summary = retry_cli(env_q, out)
    assert (summary["retried"], summary["runs"]) == (6, 6)
    assert summary["by_status"] == {"COMPLETED": 10}
    assert summary["passed"] == 8  # the wrong expected value still fails: it was not retried
    after = read_results(out)
    assert [(x["id"], x["epoch"]) for x in after] == list(before)  # same lines, same order
    for line in after:
        old = before[(line["id"], line["epoch"])]
        if line["id"].startswith(f"{tag}-f"):
            assert line["attempt"] == 1 and line["status"] == "COMPLETED"
            assert line["output"] == f"flaky: {line['input']}"
            assert line["scores"]["f1"]["value"] == 1.0 and line["passed"] is True
            assert line["session_id"].endswith(f":e{line['epoch']}r1")
            assert user_inputs(live_stack, line["session_id"]) == [line["input"]]
        else:
            assert line == old  # kept as it was
    assert not (tmp_path / "rt.results.jsonl.retry").exists()
    # nothing errored any more: a second retry runs nothing
    again = retry_cli(env_q, out)
    assert (again["retried"], again["runs"]) == (0, 0)
    assert read_results(out) == after


# --- the judge in a batch ------------------------------------------------------------------------


def test_judge_scores_a_batch_and_a_bad_reply_is_a_scoring_error(
    live_stack: Stack, openai_server: OpenAIServer, tmp_path: Path
) -> None:
    tag = unique("jd")
    openai_server.script(
        [
            reply(
                '{"reasoning": "right", "score": 1}', usage={"input_tokens": 50, "output_tokens": 5}
            ),
            reply(
                '{"reasoning": "wrong", "score": 0}', usage={"input_tokens": 50, "output_tokens": 5}
            ),
            reply("no idea", usage={"input_tokens": 50, "output_tokens": 2}),
        ]
    )
    settings = live_stack.settings.model_copy(
        update={
            "openai_base_url": openai_server.base_url,
            "openai_api_key": SecretStr(openai_server.api_key),
            "openai_max_retries": 0,
            "openai_model": "judge-model",
        }
    )
    path = write_cases(
        tmp_path / "jd.jsonl",
        [{"id": f"{tag}-{i}", "input": f"q{i}", "expected": f"echo: q{i}"} for i in range(3)],
    )
    with Producer(settings) as producer:
        summary = run_batch(
            producer,
            path,
            agent="echo",
            concurrency=3,
            out=tmp_path / "jd.out",
            scorers=["judge:threshold=0.5", "exact"],
        )
    assert summary.scoring_errors == 1 and summary.scorer_tokens == 55 + 55 + 52
    lines = read_results(tmp_path / "jd.out")
    judge = "judge:threshold=0.5"  # scores are keyed by the --scorer value
    judged = sorted(
        (x["scores"][judge].get("value"), x["passed"])
        for x in lines
        if "value" in x["scores"][judge]
    )
    assert judged == [(0.0, False), (1.0, True)]
    assert {x["scores"][judge].get("explanation") for x in lines} == {"right", "wrong", None}
    (bad,) = [x for x in lines if "error" in x["scores"][judge]]
    assert "no JSON object" in bad["scores"][judge]["error"]
    assert bad["scores"][judge]["usage"]["total_tokens"] == 52
    assert bad["scores"]["exact"]["passed"] is True and bad["passed"] is False
    assert all(x["status"] == "COMPLETED" for x in lines)
    assert len(openai_server.model_requests()) == 3  # one judge call per case
