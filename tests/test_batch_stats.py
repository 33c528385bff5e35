"""Epoch statistics and batch comparison without workers: pass@k, mean and standard error
against hand-computed values, the bootstrap interval and McNemar's test against scipy and worked
examples, ``compare`` on hand-made results files, and its CLI (``--fail-if-regressed``)."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from tether.errors import InvalidInput
from tether.producer.ops.batch.compare import compare_results
from tether.producer.ops.batch.metrics import EpochMetrics, ks_for, mean_stderr, pass_at_k
from tether.producer.ops.batch.results import CaseResult, dump_line, read_results
from tether.producer.ops.batch.stats import bootstrap_mean_ci, mcnemar_exact
from tether.producer.ops.cli.batch import batch_app


def scipy_stats() -> Any:
    """scipy.stats, the reference the statistics are checked against (imported on first use:
    about 0.6 s, which every test process would pay when pytest collects this file)."""
    from scipy import stats

    return stats


# --- pass@k, mean, stderr --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "c", "k", "want"),
    [
        (5, 2, 1, 1 - 3 / 5),  # 1 - C(3,1)/C(5,1)
        (5, 2, 2, 1 - 3 / 10),  # 1 - C(3,2)/C(5,2)
        (5, 2, 3, 1 - 1 / 10),  # 1 - C(3,3)/C(5,3)
        (5, 2, 4, 1.0),  # n - c < k: some pick always holds a pass
        (5, 0, 3, 0.0),
        (3, 3, 1, 1.0),
        (10, 1, 5, 1 - 126 / 252),  # 1 - C(9,5)/C(10,5)
    ],
)
def test_pass_at_k_by_hand(n: int, c: int, k: int, want: float) -> None:
    assert pass_at_k(n, c, k) == pytest.approx(want)


def test_pass_at_k_refuses_impossible_counts() -> None:
    for n, c, k in [(3, 1, 0), (3, 1, 4), (3, 4, 1)]:
        with pytest.raises(ValueError, match="pass@k needs"):
            pass_at_k(n, c, k)


def test_mean_and_stderr_by_hand() -> None:
    # mean 0.5; sample variance (0.25 + 0.25 + 0 + 0) / 3 = 1/6; stderr sqrt(1/6 / 4)
    mean, stderr = mean_stderr([1.0, 0.0, 0.5, 0.5])
    assert mean == 0.5 and stderr == pytest.approx(math.sqrt(1 / 24))
    assert mean_stderr([0.3]) == (0.3, None) and mean_stderr([]) == (None, None)
    values = [random.Random(3).random() for _ in range(50)]
    assert mean_stderr(values)[1] == pytest.approx(scipy_stats().sem(values))


def test_epoch_metrics_reduce_per_case_first() -> None:
    metrics = EpochMetrics()
    # case a: 3 epochs, passes T F T; case b: 3 epochs, no pass (scores 0, 0, 0.5)
    for epoch, (ok, score) in enumerate([(True, 1.0), (False, 0.0), (True, 1.0)]):
        metrics.add(
            "a",
            epoch,
            passed=ok,
            score=score,
            scorer_results=[("exact", ok, score)],
            tags=["math", "easy"],
        )
    for epoch, score in enumerate([0.0, 0.0, 0.5]):
        metrics.add(
            "b",
            epoch,
            passed=False,
            score=score,
            scorer_results=[("exact", False, score)],
            tags=["math"],
        )
    metrics.add("c", 0, passed=None, score=None)  # ungraded: not counted
    overall = metrics.overall(3)
    assert (overall.cases, overall.samples, overall.passed) == (2, 6, 2)
    # case means 2/3 and 1/6: mean 5/12; two values: stderr = |a - b| / 2
    assert overall.mean == pytest.approx(5 / 12)
    assert overall.stderr == pytest.approx((2 / 3 - 1 / 6) / 2)
    # pass@1: a 1 - C(1,1)/C(3,1) = 2/3, b 0; pass@2: a 1 (n - c < 2), b 0; pass@3 the same
    assert overall.pass_at_k == pytest.approx({1: 1 / 3, 2: 0.5, 3: 0.5})
    tags = metrics.by_tag(3)
    assert tags["easy"].cases == 1 and tags["easy"].pass_at_k[1] == pytest.approx(2 / 3)
    assert tags["math"].mean == pytest.approx(5 / 12)
    assert metrics.by_scorer(3)["exact"].to_dict()["pass_at_k"]["1"] == pytest.approx(1 / 3)


def test_reported_ks() -> None:
    assert ks_for(1) == [1]
    assert ks_for(3) == [1, 2, 3]
    assert ks_for(20) == [1, 2, 3, 4, 5, 8, 16, 20]


# --- bootstrap and McNemar ------------------------------------------------------------------


def test_bootstrap_interval_against_scipy() -> None:
    rng = random.Random(11)
    diffs = [rng.choice([-1.0, 0.0, 0.0, 1.0, 1.0]) + rng.random() * 0.1 for _ in range(300)]
    ours = bootstrap_mean_ci(diffs, resamples=5000, seed=5)
    assert ours is not None
    reference = scipy_stats().bootstrap(
        (np.array(diffs),),
        np.mean,
        confidence_level=0.95,
        n_resamples=5000,
        method="percentile",
        random_state=np.random.default_rng(1),
    )
    low, high = reference.confidence_interval
    # two independent Monte-Carlo estimates of the same quantiles (standard error ~0.001 here)
    assert ours[0] == pytest.approx(low, abs=0.01)
    assert ours[1] == pytest.approx(high, abs=0.01)
    assert bootstrap_mean_ci(diffs, resamples=5000, seed=5) == ours  # seeded: the same
    assert bootstrap_mean_ci(diffs, resamples=5000, seed=6) != ours


def test_bootstrap_worked_examples() -> None:
    assert bootstrap_mean_ci([0.5] * 20, resamples=500) == (0.5, 0.5)  # no spread, no width
    assert bootstrap_mean_ci([], resamples=500) is None
    low, high = bootstrap_mean_ci([0.0, 1.0], resamples=4000, seed=1) or (0, 0)
    assert (low, high) == (0.0, 1.0)  # means of two draws: 0, 0.5 or 1 (each end 1/4 of mass)


@pytest.mark.parametrize(("b", "c"), [(0, 0), (1, 6), (6, 1), (5, 5), (0, 12), (30, 45), (3, 0)])
def test_mcnemar_exact_against_scipy(b: int, c: int) -> None:
    want = 1.0 if b + c == 0 else scipy_stats().binomtest(min(b, c), b + c, 0.5).pvalue
    assert mcnemar_exact(b, c) == pytest.approx(want, rel=1e-12)


def test_mcnemar_by_hand() -> None:
    # 7 discordant pairs, 1 one way: P[X <= 1] = (1 + 7) / 2^7; two-sided 16/128
    assert mcnemar_exact(1, 6) == 16 / 128
    assert mcnemar_exact(5, 5) == 1.0


# --- compare ---------------------------------------------------------------------------------


def line(
    cid: str,
    score: float | None,
    passed: bool | None,
    *,
    epoch: int = 0,
    latency_ms: int = 100,
    tokens: int = 10,
    status: str = "COMPLETED",
    **extra: Any,
) -> CaseResult:
    return CaseResult(
        batch_id="b",
        id=cid,
        line=1,
        session_id=f"b:{cid}",
        agent="echo",
        status=status,
        passed=passed,
        score=score,
        epoch=epoch,
        latency_ms=latency_ms,
        tokens=tokens,
        **extra,
    )


def write(path: Path, records: list[CaseResult]) -> Path:
    path.write_bytes(b"".join(dump_line(r) for r in records))
    return path


@pytest.fixture
def pair(tmp_path: Path) -> tuple[Path, Path]:
    a = write(
        tmp_path / "a.jsonl",
        [
            line("c1", 1.0, True, latency_ms=100, cost_usd=0.01),
            line("c2", 0.0, False, latency_ms=200, cost_usd=0.01),
            line("c3", 1.0, True, latency_ms=300, cost_usd=0.01),
            line("c4", 0.5, False, latency_ms=400, cost_usd=0.01),
            line("c5", None, False, status="FAILED", error_type="ModelError"),
            line("gone", 1.0, True),
        ],
    )
    b = write(
        tmp_path / "b.jsonl",
        [
            line("c1", 1.0, True, latency_ms=50, cost_usd=0.02),
            line("c2", 1.0, True, latency_ms=50, cost_usd=0.02),
            line("c3", 0.0, False, latency_ms=50, cost_usd=0.02),
            line("c4", 0.5, False, latency_ms=50, cost_usd=0.02),
            line("c5", 1.0, True, latency_ms=50, cost_usd=0.02),
            line("new", 1.0, True),
        ],
    )
    return a, b


def test_compare_by_hand(pair: tuple[Path, Path]) -> None:
    a, b = pair
    result = compare_results(a, b, resamples=2000, seed=3)
    # c5 failed in A (score 0 by its verdict), passes in B
    assert (result.improved, result.regressed, result.unchanged) == (["c2", "c5"], ["c3"], 2)
    assert (result.cases, result.only_in_a, result.only_in_b) == (5, 1, 1)
    assert result.mean_a == pytest.approx((1 + 0 + 1 + 0.5 + 0) / 5)
    assert result.mean_b == pytest.approx((1 + 1 + 0 + 0.5 + 1) / 5)
    assert result.mean_difference == pytest.approx(0.2)  # diffs 0, 1, -1, 0, 1
    assert result.ci95 == bootstrap_mean_ci([0.0, 1.0, -1.0, 0.0, 1.0], resamples=2000, seed=3)
    # pass/fail pairs: c2 and c5 pass only in B, c3 only in A: McNemar on (1, 2)
    assert (result.a_only_passed, result.b_only_passed, result.pairs) == (1, 2, 5)
    assert result.mcnemar_p == pytest.approx(scipy_stats().binomtest(1, 3, 0.5).pvalue)
    # latency and tokens over every line of each file
    assert result.a.latency_mean_ms == pytest.approx((100 + 200 + 300 + 400 + 100 + 100) / 6)
    assert result.b.latency_mean_ms == pytest.approx((5 * 50 + 100) / 6)
    assert result.latency_difference_ms == pytest.approx((350 - 1200) / 6)
    assert result.cost_difference_usd == pytest.approx(0.10 - 0.04)


def test_compare_a_scorer_and_epochs(tmp_path: Path) -> None:
    def scored(cid: str, epoch: int, value: float) -> CaseResult:
        record = {"scorer": "f1", "value": value, "passed": value >= 1.0}
        return line(cid, value, value >= 1.0, epoch=epoch, scores={"f1": record})

    a = write(
        tmp_path / "a.jsonl",
        [scored("x", 0, 1.0), scored("x", 1, 0.0), scored("y", 0, 0.5), scored("y", 1, 0.5)],
    )
    b = write(
        tmp_path / "b.jsonl",
        [scored("x", 0, 1.0), scored("x", 1, 1.0), scored("y", 0, 0.5), scored("y", 1, 0.25)],
    )
    result = compare_results(a, b, scorer="f1", resamples=500)
    assert (result.improved, result.regressed) == (["x"], ["y"])  # means 0.5 -> 1, 0.5 -> 0.375
    assert result.per_case == pytest.approx({"x": 0.5, "y": -0.125})
    # one verdict per case: x passed 1 of 2 epochs in A (a tie fails), 2 of 2 in B
    assert (result.pairs, result.a_only_passed, result.b_only_passed) == (2, 0, 1)


def test_mcnemar_counts_cases_not_epochs(tmp_path: Path) -> None:
    """10 cases x 10 epochs, B fixes 3 cases: McNemar used to count 30 discordant (case,
    epoch) pairs and report p = 1.9e-9; the epochs of a case are not independent, so the test
    runs on one verdict per case (the majority of its epochs): b = 0, c = 3, p = 0.25."""
    a_lines, b_lines = [], []
    for i in range(10):
        for epoch in range(10):
            ok_a = i >= 3
            a_lines.append(line(f"c{i}", float(ok_a), ok_a, epoch=epoch))
            b_lines.append(line(f"c{i}", 1.0, True, epoch=epoch))
    a = write(tmp_path / "a.jsonl", a_lines)
    b = write(tmp_path / "b.jsonl", b_lines)
    result = compare_results(a, b, resamples=500)
    assert (result.pairs, result.a_only_passed, result.b_only_passed) == (10, 0, 3)
    assert result.mcnemar_p == pytest.approx(mcnemar_exact(0, 3)) == pytest.approx(0.25)
    # the majority rule: 2 of 3 epochs passes, 1 of 3 fails, 1 of 2 (a tie) fails; a case's
    # epochs without a verdict do not count
    votes = {"p": [True, True, False], "f": [True, False, False], "t": [True, False]}
    a = write(
        tmp_path / "a2.jsonl",
        [line(c, float(v), v, epoch=e) for c, vs in votes.items() for e, v in enumerate(vs)]
        + [line("p", None, None, epoch=3), line("p", None, None, epoch=4)],
    )
    b = write(tmp_path / "b2.jsonl", [line(c, 0.0, False) for c in votes])
    result = compare_results(a, b, resamples=500)
    assert (result.pairs, result.a_only_passed, result.b_only_passed) == (3, 1, 0)


def test_compare_refuses_unrelated_files(tmp_path: Path) -> None:
    a = write(tmp_path / "a.jsonl", [line("p", 1.0, True)])
    b = write(tmp_path / "b.jsonl", [line("q", 1.0, True)])
    with pytest.raises(InvalidInput, match="no case id in common"):
        compare_results(a, b)
    with pytest.raises(InvalidInput, match="does not exist"):
        compare_results(a, tmp_path / "missing.jsonl")


def test_a_failed_run_and_a_scoring_error_score_0_in_the_summary_as_in_compare(
    tmp_path: Path,
) -> None:
    """Replies 42, an HTTP 400, 41 (expected 42, scorer exact): the summary, compare, pass@k and
    the report count all three cases, the failed one as 0 (it was 0.5 over 2 cases, beside
    compare's 1/3); a scorer that errored counts 0 too."""
    from tether.producer.ops.batch.outputs.report_data import build_report_data
    from tether.producer.ops.batch.summary import summary_of_results

    def exact(cid: str, output: str) -> CaseResult:
        value = float(output == "42")
        record = {"scorer": "exact", "value": value, "passed": value == 1.0}
        return line(
            cid,
            value,
            value == 1.0,
            output=output,
            expected="42",
            scorers=["exact"],
            scores={"exact": record},
        )

    failed = line(
        "c2",
        None,
        False,
        status="FAILED",
        error_type="ModelError",
        expected="42",
        scorers=["exact"],
    )
    path = write(tmp_path / "a.jsonl", [exact("c1", "42"), failed, exact("c3", "41")])
    lines = read_results(path)
    metrics = summary_of_results(lines, batch_id="b", out=str(path)).metrics
    overall, by_scorer = metrics["overall"], metrics["scorers"]["exact"]
    assert overall["mean"] == pytest.approx(1 / 3) and overall["cases"] == 3
    assert overall["stderr"] == pytest.approx(math.sqrt(1 / 3 / 3))  # values 1, 0, 0
    assert overall["pass_at_k"] == {"1": pytest.approx(1 / 3)}
    assert (by_scorer["mean"], by_scorer["cases"], by_scorer["samples"]) == (
        pytest.approx(1 / 3),
        3,
        3,
    )
    assert compare_results(path, path).mean_a == pytest.approx(overall["mean"])
    assert compare_results(path, path, scorer="exact").mean_a == pytest.approx(1 / 3)
    report = build_report_data(path, lambda _: [])
    assert report.summary.metrics == metrics
    # a scorer that raised: 0 for that scorer and in the line's mean, and not a pass
    broken = {"scorer": "judge", "error": "ValueError: no JSON in the reply"}
    judged = line(
        "c1",
        1.0,
        False,
        scorers=["exact", "judge"],
        expected="42",
        scores={"exact": {"scorer": "exact", "value": 1.0, "passed": True}, "judge": broken},
    )
    metrics = summary_of_results([judged], batch_id="b", out="-").metrics
    assert metrics["overall"]["mean"] == 0.5 and metrics["scorers"]["judge"]["mean"] == 0.0
    assert metrics["scorers"]["judge"]["samples"] == 1
    # a failed case no scorer would have scored (no expected: built-ins skip it) stays ungraded
    ungraded = line("c9", None, None, status="FAILED", error_type="ModelError", scorers=["exact"])
    metrics = summary_of_results([ungraded], batch_id="b", out="-").metrics
    assert metrics["overall"]["mean"] is None and metrics["scorers"] == {}


def test_compare_cli_and_fail_if_regressed(pair: tuple[Path, Path]) -> None:
    a, b = pair
    runner = CliRunner()
    done = runner.invoke(batch_app, ["compare", str(a), str(b), "--json", "--resamples", "500"])
    assert done.exit_code == 0, done.output
    doc = json.loads(done.output)
    assert doc["regressed"] == ["c3"] and doc["mcnemar_p"] == pytest.approx(1.0)
    # one case regressed: the per-case rule fails on it, the gate on evidence does not
    failing = runner.invoke(batch_app, ["compare", str(a), str(b), "--fail-if-any-regressed"])
    assert failing.exit_code == 1
    assert "regressed" in failing.output and "McNemar exact p" in failing.output
    gated = runner.invoke(batch_app, ["compare", str(a), str(b), "--fail-if-regressed"])
    assert gated.exit_code == 0, gated.output
    assert "--fail-if-regressed: no significant regression: McNemar exact p = 1 >= alpha" in (
        " ".join(gated.output.split())
    )
    # the other way round nothing regressed... except c2 and c5: B -> A regresses those
    back = runner.invoke(
        batch_app, ["compare", str(b), str(a), "--fail-if-any-regressed", "--json"]
    )
    assert back.exit_code == 1 and json.loads(back.output)["regressed"] == ["c2", "c5"]
    same = runner.invoke(batch_app, ["compare", str(a), str(a), "--fail-if-any-regressed"])
    assert same.exit_code == 0, same.output
    missing = runner.invoke(batch_app, ["compare", str(a), str(a) + ".nope"])
    assert missing.exit_code == 2 and "does not exist" in missing.output


def test_compare_refuses_an_unknown_scorer_and_nothing_to_compare(
    pair: tuple[Path, Path], tmp_path: Path
) -> None:
    """``compare --scorer exactt`` (a typo) compared 0 cases and exited 0, even with
    --fail-if-regressed: now a usage error listing the scorers present (exit 2)."""
    a, b = pair

    def scored(cid: str, name: str, value: float) -> CaseResult:
        record = {"scorer": name, "value": value, "passed": value >= 1.0}
        return line(cid, value, value >= 1.0, scores={name: record}, scorers=[name])

    plain = a
    a = write(tmp_path / "sa.jsonl", [scored("c1", "exact", 1.0), scored("c2", "f1", 0.5)])
    b = write(tmp_path / "sb.jsonl", [scored("c1", "exact", 0.0), scored("c2", "contains", 1.0)])
    with pytest.raises(InvalidInput, match="has scorer 'exactt'; scorers present: contains, "):
        compare_results(a, b, scorer="exactt")
    runner = CliRunner()
    args = ["compare", str(a), str(b), "--scorer", "exactt", "--fail-if-regressed"]
    typo = runner.invoke(batch_app, args)
    assert typo.exit_code == 2, typo.output
    assert "scorers present: contains, exact, f1" in typo.output
    # a scorer of one side only: no case to compare either
    with pytest.raises(InvalidInput, match=r"scorer 'f1' in both files.*0 cases to compare"):
        compare_results(a, b, scorer="f1")
    assert compare_results(a, b, scorer="exact").regressed == ["c1"]
    # files of line scores only name no scorer
    with pytest.raises(InvalidInput, match="scorers present: none"):
        compare_results(plain, plain, scorer="exact")
    # two ungraded batches of the same cases: nothing to compare
    ungraded = write(tmp_path / "u.jsonl", [line("c1", None, None), line("c2", None, None)])
    with pytest.raises(InvalidInput, match="the line score in both files"):
        compare_results(ungraded, ungraded)


def test_version_1_lines_read_as_epoch_0(tmp_path: Path) -> None:
    v1 = {
        "v": 1,
        "batch_id": "b",
        "id": "q1",
        "line": 1,
        "session_id": "b:q1",
        "agent": "echo",
        "status": "COMPLETED",
        "output": "4",
        "passed": True,
        "grader": "exact",
        "latency_ms": 5,
        "steps": 1,
        "tokens": 0,
        "turns": 1,
        "error_type": None,
        "error": None,
        "run_ids": ["r"],
    }
    path = tmp_path / "v1.jsonl"
    path.write_text(json.dumps(v1) + "\n")
    (record,) = read_results(path)
    assert (record.v, record.epoch, record.scores, record.passed) == (1, 0, None, True)


# --- the results format: golden files of each version ------------------------------------------

FIXTURES = Path(__file__).parent / "fixtures"


def test_golden_results_files_of_each_version() -> None:
    v1 = read_results(FIXTURES / "batch_results_v1.jsonl")
    assert [(r.v, r.id, r.epoch, r.passed, r.grader, r.scores) for r in v1] == [
        (1, "add-1", 0, True, "exact", None),
        (1, "lost", 0, None, None, None),
    ]
    assert v1[1].errored and not v1[0].errored and v1[1].error_type == "UnknownAgent"
    v2 = read_results(FIXTURES / "batch_results_v2.jsonl")
    first, second = v2
    assert (first.v, first.epoch, first.tags, first.score) == (2, 1, ["math"], 1.0)
    assert first.scores is not None and first.scores["judge"].usage is not None
    assert first.scores["judge"].usage.total_tokens == 135
    assert (second.attempt, second.error_kind, second.errored) == (1, "model", True)
    # written back byte for byte (the retry rewrites files with these lines)
    raw = (FIXTURES / "batch_results_v2.jsonl").read_bytes()
    assert b"".join(dump_line(r) for r in v2) == raw


def test_retry_refuses_a_version_1_file_before_any_run(tmp_path: Path) -> None:
    from tether.producer.client import Producer
    from tether.producer.ops.batch import BatchOptions
    from tether.producer.ops.batch.retry import retry_batch
    from tether.settings import Settings

    path = tmp_path / "v1.jsonl"
    path.write_bytes((FIXTURES / "batch_results_v1.jsonl").read_bytes())
    nowhere = "redis://127.0.0.1:1"  # never contacted: the refusal comes first
    producer = Producer(Settings(redis_url=nowhere, broker_url=nowhere))
    with pytest.raises(InvalidInput, match=r"has no input in its results line \(a version-1"):
        retry_batch(producer, path, BatchOptions())
    with pytest.raises(InvalidInput, match="does not exist"):
        retry_batch(producer, tmp_path / "missing.jsonl", BatchOptions())
    assert path.read_bytes() == (FIXTURES / "batch_results_v1.jsonl").read_bytes()


def test_retry_refuses_other_scorers_than_the_batchs(tmp_path: Path) -> None:
    """``tether batch retry --scorer exact`` on a batch scored by contains and judge wrote the
    retried lines, scored by exact alone, beside the others: one summary mixed two scorings."""
    from tether.producer.client import Producer
    from tether.producer.ops.batch import BatchOptions
    from tether.producer.ops.batch.retry import retry_batch
    from tether.settings import Settings

    path = tmp_path / "v2.jsonl"
    path.write_bytes((FIXTURES / "batch_results_v2.jsonl").read_bytes())
    nowhere = "redis://127.0.0.1:1"  # never contacted: the refusal comes first
    producer = Producer(Settings(redis_url=nowhere, broker_url=nowhere))
    with pytest.raises(InvalidInput, match=r"scored by \['contains', 'judge'\].*not \['exact'\]"):
        retry_batch(producer, path, BatchOptions(scorers=("exact",)))
    assert path.read_bytes() == (FIXTURES / "batch_results_v2.jsonl").read_bytes()


# --- the gate: --fail-if-regressed on evidence ---------------------------------------------------


def verdicts(tmp_path: Path, name: str, passes: list[bool]) -> Path:
    """A results file of one epoch per case, passed or not (score 1 or 0)."""
    records = [line(f"c{i}", float(p), p) for i, p in enumerate(passes)]
    return write(tmp_path / f"{name}.jsonl", records)


def gate(a: Path, b: Path, *more: str) -> tuple[int, dict[str, Any]]:
    args = ["compare", str(a), str(b), "--json", "--resamples", "2000", *more]
    done = CliRunner().invoke(batch_app, args)
    return done.exit_code, json.loads(done.output)


def test_a_significantly_better_candidate_passes_the_gate(tmp_path: Path) -> None:
    """30 cases improved, 10 regressed, 20 unchanged: McNemar's p = 0.002, in B's favour. The
    per-case rule failed this (and CI with it); the gate passes it."""
    base = [False] * 30 + [True] * 10 + [True] * 10 + [False] * 10
    cand = [True] * 30 + [False] * 10 + [True] * 10 + [False] * 10
    a, b = verdicts(tmp_path, "a", base), verdicts(tmp_path, "b", cand)
    code, doc = gate(a, b, "--fail-if-regressed")
    assert code == 0, doc
    assert (doc["b_only_passed"], doc["a_only_passed"], len(doc["regressed"])) == (30, 10, 10)
    reference = scipy_stats().binomtest(10, 40, 0.5).pvalue
    assert doc["mcnemar_p"] == pytest.approx(reference, rel=1e-12) and reference < 0.0025
    assert doc["gate"]["rule"] == "mcnemar" and doc["gate"]["regressed"] is False
    assert gate(a, b, "--fail-if-any-regressed")[0] == 1  # the old rule, on request
    # the same evidence the other way round is a significant regression
    code, doc = gate(b, a, "--fail-if-regressed")
    assert (code, doc["gate"]["regressed"]) == (1, True), doc
    assert (
        "McNemar exact p = 0.002" in doc["gate"]["reason"]
        and "< alpha 0.05" in (doc["gate"]["reason"])
    )


def test_two_runs_of_the_same_random_agent_pass_the_gate(tmp_path: Path) -> None:
    """A random agent passing each of 100 cases with probability 0.6, run twice: some cases
    "regress" by chance (the per-case rule failed such pairs nearly always); the gate fails at
    about its alpha. Checked on 200 seeded pairs in-process, and on one through the CLI."""
    from tether.producer.ops.batch.compare import compare_results, significant_regression

    def run(rng: random.Random) -> list[bool]:
        return [rng.random() < 0.6 for _ in range(100)]

    rng = random.Random(50)
    false_alarms = per_case_alarms = 0
    for trial in range(200):
        a = verdicts(tmp_path, f"a{trial}", run(rng))
        b = verdicts(tmp_path, f"b{trial}", run(rng))
        comparison = compare_results(a, b, resamples=200, seed=trial)
        false_alarms += significant_regression(comparison).regressed
        per_case_alarms += bool(comparison.regressed)
    assert per_case_alarms == 200  # the old rule: every pair "regressed"
    assert false_alarms <= 10  # one-sided at alpha 0.05: about 2.5% of pairs (5 of 200)
    a = verdicts(tmp_path, "one-a", run(random.Random(1)))
    b = verdicts(tmp_path, "one-b", run(random.Random(2)))
    code, doc = gate(a, b, "--fail-if-regressed")
    assert code == 0 and doc["regressed"], doc  # cases regressed, no significant regression


def test_a_real_regression_fails_the_gate_and_alpha_sets_its_level(tmp_path: Path) -> None:
    base = [True] * 40 + [False] * 10
    cand = [False] * 12 + [True] * 28 + [True] * 2 + [False] * 8  # 12 lost, 2 gained
    a, b = verdicts(tmp_path, "a", base), verdicts(tmp_path, "b", cand)
    code, doc = gate(a, b, "--fail-if-regressed")
    assert code == 1 and doc["gate"]["regressed"], doc
    assert doc["mcnemar_p"] == pytest.approx(scipy_stats().binomtest(2, 14, 0.5).pvalue)
    assert doc["mcnemar_p"] > 0.005  # p = 0.013: not significant at a stricter level
    code, doc = gate(a, b, "--fail-if-regressed", "--alpha", "0.005")
    assert code == 0 and not doc["gate"]["regressed"], doc


def test_with_scores_only_the_gate_reads_the_bootstrap_interval(tmp_path: Path) -> None:
    """No pass/fail verdicts (scores only): B regressed when the whole 1 - alpha bootstrap
    interval of the mean score difference is below 0."""
    rng = random.Random(7)
    base = [rng.uniform(0.4, 0.9) for _ in range(60)]

    def scored(name: str, scores: list[float]) -> Path:
        records = [line(f"c{i}", s, None) for i, s in enumerate(scores)]
        return write(tmp_path / f"{name}.jsonl", records)

    a = scored("a", base)
    worse = scored("worse", [s - 0.1 + rng.uniform(-0.05, 0.05) for s in base])
    # noise of mean 0 exactly (each draw once up, once down): half the cases score lower
    jitter = [rng.uniform(0.0, 0.05) for _ in range(30)]
    noisy = scored(
        "noisy", [s + d for s, d in zip(base, [*jitter, *(-j for j in jitter)], strict=True)]
    )
    code, doc = gate(a, worse, "--fail-if-regressed")
    assert (code, doc["gate"]["rule"], doc["gate"]["regressed"]) == (1, "bootstrap", True), doc
    code, doc = gate(a, noisy, "--fail-if-regressed")
    assert (code, doc["gate"]["rule"], doc["gate"]["regressed"]) == (0, "bootstrap", False), doc
    assert doc["regressed"]  # cases did score lower, by noise
