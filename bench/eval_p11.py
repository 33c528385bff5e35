"""P11: batch evaluation with a model-graded scorer, Tether against Inspect AI, in one run.

The same dataset (``p11_cases`` one-turn cases), ``p11_epochs`` epochs and a model-graded scorer
on both sides, trials alternated (which side goes first alternates too):

- **Tether**: ``run_batch(..., epochs=N, scorers=["judge:model=judge-model"])`` at concurrency
  ``p11_concurrency`` on ``p11_workers`` single-process workers; the agent (``assistant``, one
  model call) and the judge both talk HTTP to the test OpenAI-compatible server (its own
  process), which answers the agent ``{"reasoning": ..., "score": 1}`` and the judge (its own
  model name) a ``submit_verdict`` call with that verdict (a text verdict that the graded answer
  holds would be a quote of it: a scoring error); Redis and S3 (moto) are the bench stack's.
- **Inspect AI**: ``eval()`` in its own process (:mod:`bench.inspect_side`), written as its docs
  write it: ``generate()`` and ``model_graded_qa()``, both on Inspect's ``openai`` provider over
  HTTP to the same server (their own model names: the solver answers the reference, the judge
  ``GRADE: C``), ``max_samples`` = ``max_connections`` = the same concurrency; its import is not
  timed.

Until #51 the Inspect side ran on ``mockllm`` with a list of n replies as the judge's argument,
which Inspect recorded in every sample (its time grew with n²): the 0.08x and 0.22x it gave are
withdrawn (CHANGELOG).

Figure: the median Tether wall time over the median Inspect wall time (target <= 0.4); the
per-sample overhead of each side (wall time / samples) is in the extra columns. Every sample
must be scored and pass on both sides, or the measure fails.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import inspect_side
from bench.core import Bench, BenchFailure, Measure, Stats, Target
from bench.stack import bench_settings
from tests.support.openai_fixture import OpenAIServer, start_openai_server
from tether.dev.workers import WorkerProcess
from tether.models.base import ModelResponse
from tether.producer.client import Producer
from tether.producer.ops.batch import BatchSummary, run_batch
from tether.settings import Settings

QUEUE = "p11"
MODEL = "test-model"
JUDGE_MODEL = "judge-model"
VERDICT = json.dumps({"reasoning": "matches the reference", "score": 1})
VERDICT_CALL = ModelResponse.call("v1", "submit_verdict", VERDICT)
INSPECT_TIMEOUT_S = 3600


def worker_env(server: OpenAIServer) -> dict[str, str]:
    """What P11's workers add to the stack's environment: their queue and the test server."""
    return {
        "TETHER_QUEUE": QUEUE,
        "TETHER_OPENAI_BASE_URL": server.base_url,
        "TETHER_OPENAI_API_KEY": server.api_key,
        "TETHER_OPENAI_MODEL": MODEL,
        "TETHER_OPENAI_API": "chat",
    }


def producer_settings(redis_url: str, s3_endpoint: str, server: OpenAIServer) -> Settings:
    """The producer's settings: the stack's, P11's queue, and the judge on the test server."""
    return bench_settings(
        redis_url,
        s3_endpoint,
        queue=QUEUE,
        openai_base_url=server.base_url,
        openai_api_key=server.api_key,
        openai_model=MODEL,
        openai_api="chat",
    )


def _start_workers(bench: Bench, server: OpenAIServer) -> list[WorkerProcess]:
    stack = bench.stack
    env = {**stack.env, **worker_env(server)}
    workers = [
        WorkerProcess(f"p11w{i + 1}", env, stack.log_dir, concurrency=1, queue=QUEUE)
        for i in range(bench.sizes.p11_workers)
    ]
    stack.extra_workers.extend(workers)
    for worker in workers:  # boot in parallel
        worker.start(wait=False)
    for worker in workers:
        worker.wait_ready(120.0)
    return workers


def write_cases(path: Path, n: int, prefix: str = "c") -> Path:
    """``n`` one-turn cases with a reference answer (also :mod:`bench.p11_cpu`'s)."""
    lines = (
        json.dumps({"id": f"{prefix}{i}", "input": f"question {i}", "expected": "the answer"})
        for i in range(n)
    )
    path.write_text("".join(line + "\n" for line in lines))
    return path


def judged_batch(
    producer: Producer, cases: Path, out: Path, batch_id: str, epochs: int, concurrency: int
) -> BatchSummary:
    """Tether's side of one trial: the ``assistant`` agent on every case, each answer scored
    by the judge on the test server (also :mod:`bench.p11_cpu`'s)."""
    return run_batch(
        producer,
        cases,
        agent="assistant",
        concurrency=concurrency,
        out=out,
        batch_id=batch_id,
        epochs=epochs,
        scorers=[f"judge:model={JUDGE_MODEL}"],
    )


def inspect_command(
    cases: int, epochs: int, concurrency: int, log_dir: Path, server: OpenAIServer
) -> tuple[list[str], dict[str, str]]:
    """The argv and environment of Inspect's side in its own process (also
    :mod:`bench.p11_cpu`'s)."""
    argv = [sys.executable, "-m", "bench.inspect_side", str(cases), str(epochs)]
    argv += [str(concurrency), str(log_dir)]
    # Inspect's openai provider reads the endpoint from the environment, as a user would set it
    env = {**os.environ, "OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": server.api_key}
    return argv, env


def _tether_trial(bench: Bench, producer: Producer, cases: Path, folder: Path, n: int) -> float:
    sz = bench.sizes
    out = folder / f"tether-{n}.results.jsonl"
    started = time.perf_counter()
    batch_id = f"p11-{bench.tag}-{n}"
    summary = judged_batch(producer, cases, out, batch_id, sz.p11_epochs, sz.p11_concurrency)
    wall_s = time.perf_counter() - started
    samples = sz.p11_cases * sz.p11_epochs
    if summary.finished != samples or summary.passed != samples:
        raise BenchFailure(
            f"P11 Tether trial {n}: {summary.passed} of {summary.finished} "
            f"samples passed, {samples} expected"
        )
    return wall_s


def _inspect_trial(bench: Bench, server: OpenAIServer, folder: Path, n: int) -> float:
    sz = bench.sizes
    argv, env = inspect_command(
        sz.p11_cases, sz.p11_epochs, sz.p11_concurrency, folder / f"inspect-{n}", server
    )
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=INSPECT_TIMEOUT_S, check=False, env=env
    )
    if done.returncode != 0:
        raise BenchFailure(f"P11 Inspect trial {n} exited {done.returncode}: {done.stderr[-800:]}")
    doc = json.loads(done.stdout.strip().splitlines()[-1])
    samples = sz.p11_cases * sz.p11_epochs
    if doc["status"] != "success" or doc["correct"] != samples:
        raise BenchFailure(f"P11 Inspect trial {n}: {doc}")
    return float(doc["wall_s"])


def answer_by_default(server: OpenAIServer) -> None:
    """Set the server's replies for both sides' models (also :mod:`bench.p11_cpu`'s)."""
    server.default_reply(VERDICT)
    server.default_reply(VERDICT_CALL, model=JUDGE_MODEL)
    server.default_reply(inspect_side.ANSWER, model=inspect_side.SOLVER_MODEL)
    server.default_reply(inspect_side.GRADE, model=inspect_side.JUDGE_MODEL)


def _trials(bench: Bench) -> tuple[list[float], list[float]]:
    sz = bench.sizes
    server = start_openai_server("sk-p11-" + secrets.token_hex(8))
    answer_by_default(server)
    producer = Producer(producer_settings(bench.stack.redis_url, bench.stack.s3_endpoint, server))
    workers: list[WorkerProcess] = []
    tether: list[float] = []
    inspect: list[float] = []
    try:
        workers = _start_workers(bench, server)
        with tempfile.TemporaryDirectory(prefix="p11-") as tmp:
            folder = Path(tmp)
            cases = write_cases(folder / "cases.jsonl", sz.p11_cases)
            for n in range(sz.p11_trials):
                if n % 2 == 0:
                    inspect.append(_inspect_trial(bench, server, folder, n))
                    tether.append(_tether_trial(bench, producer, cases, folder, n))
                else:
                    tether.append(_tether_trial(bench, producer, cases, folder, n))
                    inspect.append(_inspect_trial(bench, server, folder, n))
                server.reset()
                answer_by_default(server)
    finally:
        producer.close()
        for worker in workers:
            worker.stop()
            bench.stack.extra_workers.remove(worker)
        server.close()
    return tether, inspect


def p11_eval_vs_inspect(bench: Bench) -> Measure:
    """Tether's batch with a judge against Inspect AI's eval() with a model-graded scorer."""
    sz = bench.sizes
    tether, inspect = _trials(bench)
    t, i = Stats.of(tether), Stats.of(inspect)
    samples = sz.p11_cases * sz.p11_epochs
    return Measure(
        id="P11",
        name=(
            f"{sz.p11_cases} cases x {sz.p11_epochs} epochs with a model-graded scorer, "
            f"wall time vs Inspect AI eval()"
        ),
        unit="s",
        tether=t,
        baseline=i,
        baseline_name="Inspect AI eval(), openai provider over HTTP to the same server",
        value=t.median / i.median,
        value_of="median wall time ratio",
        target=Target("<=", 0.4, "x"),
        extra={
            "samples per trial": samples,
            "trials": sz.p11_trials,
            "Tether per-sample (ms)": round(1000 * t.median / samples, 2),
            "Inspect per-sample (ms)": round(1000 * i.median / samples, 2),
            "Tether samples/s": round(samples / t.median, 1),
            "Inspect samples/s": round(samples / i.median, 1),
        },
        note=(
            f"{sz.p11_trials} trials alternated (the first side alternates); Tether: run_batch "
            f"at concurrency {sz.p11_concurrency} on {sz.p11_workers} single-process workers, "
            f"agent 'assistant' (one model call) and the judge scorer both over HTTP to the "
            f"test OpenAI server (own process), results file, Redis and S3 (moto); Inspect: "
            f"eval() in its own process (import not timed), generate() and model_graded_qa() "
            f"on the openai provider over HTTP to the same server, max_samples = "
            f"max_connections = {sz.p11_concurrency}; every sample scored and passed on both "
            f"sides"
        ),
    )
