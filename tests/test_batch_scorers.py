"""Batch scorers without workers: every built-in against hand-computed values, ``--scorer``
parsing and its refusals, custom scorers by import path (a raising one is a scoring error), and
the judge, which talks HTTP to the test OpenAI server process."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.support.openai_fixture import OpenAIServer, reply
from tether.errors import InvalidInput
from tether.models.openai import OpenAIChatModel
from tether.producer.ops.batch.cases import BatchCase
from tether.producer.ops.batch.scoring import Sample, Score, resolve_scorers, score_sample
from tether.producer.ops.batch.scoring.builtin import last_number, normalize_tokens, token_f1
from tether.producer.ops.batch.scoring.judge import JudgeReplyInvalid, parse_reply, render
from tether.producer.ops.batch.scoring.rubric import AnswerFence


def run(spec: str, output: str | None, expected: Any = None, **case: Any) -> dict[str, Any]:
    """The score record of one scorer on one output, as a dict."""
    scorer = resolve_scorers([spec])[0]
    sample = Sample(BatchCase(id="c", input="q", expected=expected, **case), output)
    (record,) = score_sample([scorer], sample)
    return record.model_dump(exclude_none=True)


# --- built-ins ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "output", "expected", "value"),
    [
        ("exact", "4", "4", 1.0),
        ("exact", "4 ", "4", 0.0),  # no trimming
        ("exact", None, "4", 0.0),  # no output never passes
        ("contains", "the answer is 42.", "42", 1.0),
        ("contains", "the answer is 41", "42", 0.0),
        ("regex", "id-123", r"^id-\d+$", 1.0),
        ("regex", "xid-123", r"^id-\d+$", 0.0),
        ("includes-any", "Paris, France", ["Lyon", "Paris"], 1.0),
        ("includes-any", "Berlin", ["Lyon", "Paris"], 0.0),
        ("includes-any", "Paris", "Paris", 1.0),  # one string is a list of one
        ("numeric", "so x = 3.14", 3.14, 1.0),
        ("numeric", "so x = 3.14", "3.1416", 0.0),
        ("numeric:tol=0.01", "so x = 3.14", "3.1416", 1.0),  # |3.14 - 3.1416| = 0.0016
        ("numeric:tol=0.001", "so x = 3.14", "3.1416", 0.0),
        ("numeric:rel=0.01", "about 1,005 people", 1000, 1.0),  # 5 <= 1% of 1000
        ("numeric:rel=0.001", "about 1,005 people", 1000, 0.0),
        ("numeric", "first 7 then -2.5e1", -25, 1.0),  # the last number counts
        ("numeric", "no digits", 1, 0.0),
        ("json", '{"a": 1, "b": [2]}', {"b": [2], "a": 1}, 1.0),
        ("json", '```json\n{"a": 1}\n```', {"a": 1}, 1.0),  # a fence is fine
        ("json", '{"a": 2}', {"a": 1}, 0.0),
        ("json", "not json", {"a": 1}, 0.0),
        ("json", '{"a": 1}', '{"a": 1}', 1.0),  # expected written as JSON text
        ("json:field=answer.value", '{"answer": {"value": 7}}', 7, 1.0),
        ("json:field=answer.value", '{"answer": {"value": 7}}', "7", 1.0),
        ("json:field=answer.0", '{"answer": ["x", "y"]}', "x", 1.0),
        ("json:field=answer.value", '{"answer": {}}', 7, 0.0),
        ("f1", "The cat sat", "the cat sat!", 1.0),  # normalised: case, punctuation, articles
        ("f1", None, "x", 0.0),
    ],
)
def test_builtin_scorers(spec: str, output: str | None, expected: Any, value: float) -> None:
    record = run(spec, output, expected)
    assert record["value"] == value, record
    assert record["passed"] is (value >= 1.0)
    assert record["scorer"] == spec and record["explanation"]


def test_token_f1_by_hand() -> None:
    # pred: [cat, sat, on, mat] (articles dropped), ref: [cat, sat]: common 2,
    # precision 2/4, recall 2/2, F1 = 2 * 0.5 * 1 / 1.5 = 2/3
    assert normalize_tokens("The cat sat on the mat.") == ["cat", "sat", "on", "mat"]
    assert token_f1("The cat sat on the mat.", "a cat sat") == pytest.approx(2 / 3)
    # repeated tokens count by multiplicity: pred [x, x, y], ref [x, y, y]: common 2
    assert token_f1("x x y", "x y y") == pytest.approx(2 / 3)
    assert token_f1("", "") == 1.0 and token_f1("a", "") == 1.0  # only articles: both empty
    assert token_f1("dog", "cat") == 0.0
    record = run("f1:threshold=0.6", "The cat sat on the mat.", ["dog", "a cat sat"])
    assert record["value"] == pytest.approx(2 / 3) and record["passed"] is True  # the best ref
    assert run("f1", "The cat sat on the mat.", "a cat sat")["passed"] is False


def test_last_number() -> None:
    assert last_number("1,234.5 and then 6") == 6.0
    assert last_number("total: 1,234.5") == 1234.5
    assert last_number("-.5") == -0.5
    assert last_number("e5 is not a number") == 5.0  # the 5 is; "e" is not a mantissa
    assert last_number("none") is None


def test_json_schema_scorer(tmp_path: Path) -> None:
    schema = tmp_path / "schema.json"
    schema.write_text(
        json.dumps(
            {
                "type": "object",
                "required": ["answer"],
                "properties": {"answer": {"type": "integer"}},
            }
        )
    )
    spec = f"json:schema={schema}"
    scorer = resolve_scorers([spec])[0]
    case = BatchCase(id="c", input="q", expected="unused")
    good = score_sample([scorer], Sample(case, '{"answer": 3}'))[0]
    bad = score_sample([scorer], Sample(case, '{"answer": "three"}'))[0]
    assert (good.value, bad.value) == (1.0, 0.0)
    assert bad.explanation == "schema: 'three' is not of type 'integer'"
    both = resolve_scorers([f"json:schema={schema},field=answer"])[0]
    assert (
        score_sample([both], Sample(case.model_copy(update={"expected": 3}), '{"answer": 3}'))[
            0
        ].value
        == 1.0
    )
    (tmp_path / "broken.json").write_text('{"type": 12}')
    with pytest.raises(InvalidInput, match=r"broken\.json' is not a readable JSON schema"):
        resolve_scorers([f"json:schema={tmp_path / 'broken.json'}"])


def test_builtin_scorers_skip_cases_without_expected() -> None:
    scorer = resolve_scorers(["exact"])[0]
    assert score_sample([scorer], Sample(BatchCase(id="c", input="q"), "x")) == []


# --- specs -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("numeric:tolerance=1", "--scorer 'numeric:tolerance=1': unknown option 'tolerance=1'"),
        ("numeric:tol=abc", "tol must be a number, got 'abc'"),
        ("f1:threshold=2", "threshold must be in [0, 1], got 2.0"),
        ("exact:field=x", "unknown option 'field=x'"),
        ("nosuchname", "neither a built-in scorer"),
        ("no_such_module_xyz:grade", "module 'no_such_module_xyz' does not import"),
        ("tests.support.eval_scorers:missing", "has no 'missing'"),
        ("tests.support.eval_scorers:NOT_CALLABLE", "'NOT_CALLABLE' is not callable"),
        ("judge:rubric=/no/such/rubric.txt", "judge rubric '/no/such/rubric.txt' cannot be read"),
        ("judge:verdict=json", "verdict must be 'tool' (the submit_verdict tool) or 'text'"),
    ],
)
def test_bad_scorer_values_are_refused_naming_them(value: str, fragment: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        resolve_scorers([value])
    assert fragment in str(caught.value)


def test_a_scorer_given_twice_is_refused() -> None:
    with pytest.raises(InvalidInput, match="'exact' is given twice"):
        resolve_scorers(["exact", "contains", "exact"])


# --- custom scorers ------------------------------------------------------------------------------


def test_custom_scorers_by_import_path() -> None:
    scorers = resolve_scorers(
        [
            "tests.support.eval_scorers:length_ratio",
            "tests.support.eval_scorers:as_bool:threshold=0.5",
        ]
    )
    case = BatchCase(id="c", input="q", expected="abc")
    ratio, flag = score_sample(scorers, Sample(case, "yes abcdef"))
    assert (ratio.value, ratio.passed, ratio.explanation) == (0.3, False, "3/10")
    assert ratio.metadata == {"output_chars": 10}
    assert (flag.value, flag.passed) == (1.0, True)
    # custom scorers score cases without expected too
    assert len(score_sample(scorers, Sample(BatchCase(id="d", input="q"), "no"))) == 2


def test_a_raising_scorer_is_a_scoring_error_and_the_others_still_run() -> None:
    scorers = resolve_scorers(
        [
            "tests.support.eval_scorers:explode",
            "tests.support.eval_scorers:out_of_range",
            "exact",
        ]
    )
    case = BatchCase(id="c-9", input="q", expected="x")
    boom, bad, exact = score_sample(scorers, Sample(case, "x"))
    # the exception's last line, as Python prints it
    assert boom.error == "ZeroDivisionError: cannot score c-9\nsecond line of the message"
    assert (boom.value, boom.passed) == (None, None)
    assert bad.error is not None and "Score is invalid" in bad.error
    assert (exact.value, exact.passed, exact.error) == (1.0, True, None)


# --- the judge -----------------------------------------------------------------------------------


def test_judge_reply_parsing() -> None:
    assert parse_reply('Sure. {"reasoning": "ok", "score": 0.75}') == (0.75, "ok", None)
    assert parse_reply('```json\n{"reasoning": "no", "verdict": "FAIL"}\n```') == (
        0.0,
        "no",
        "FAIL",
    )
    for text, fragment in [
        (None, "empty"),
        ("I think it is right", "no JSON object"),
        ('{"score": 0.5,}', "not valid JSON"),
        ('{"reasoning": "x"}', "no numeric 'score'"),
        ('{"score": 7}', "outside [0, 1]"),
        ('{"score": true}', "no numeric 'score'"),
    ]:
        with pytest.raises(JudgeReplyInvalid, match=re.escape(fragment)):
            parse_reply(text)


def test_rubric_rendering_replaces_only_the_three_names_and_fences_the_output() -> None:
    case = BatchCase(id="c", input=["a", "b"], expected={"k": 1})
    fence = AnswerFence("n0")
    text = render('{input}|{output}|{expected}|{"json": {other}}', Sample(case, "out"), fence)
    assert text == 'a\nb|<answer-n0>\nout\n</answer-n0>|{"k": 1}|{"json": {other}}'


def judge_for(server: OpenAIServer, spec: str = "judge:threshold=0.5") -> Any:
    client = OpenAIChatModel(server.base_url, server.api_key, max_retries=0, timeout_s=30)
    return resolve_scorers([spec], client_factory=lambda: (client, "judge-model"))[0]


def test_judge_scores_through_the_model_client_with_usage(openai_server: OpenAIServer) -> None:
    openai_server.script(
        [
            reply(
                '{"reasoning": "It says 4, as the reference does.", "score": 1.0}',
                usage={"input_tokens": 120, "output_tokens": 15},
            ),
            reply("I refuse to answer in JSON", usage={"input_tokens": 100, "output_tokens": 6}),
            reply('{"reasoning": "Half right.", "score": 0.4}'),
        ]
    )
    judge = judge_for(openai_server)
    case = BatchCase(id="c", input="2+2", expected="4")
    good = score_sample([judge], Sample(case, "4"))[0]
    assert (good.value, good.passed, good.explanation) == (
        1.0,
        True,
        "It says 4, as the reference does.",
    )
    assert good.usage is not None
    assert (good.usage.input_tokens, good.usage.output_tokens, good.usage.total_tokens) == (
        120,
        15,
        135,
    )
    assert good.metadata is not None and good.metadata["model"] == "judge-model"
    # a reply that does not parse is this case's scoring error, with the tokens it cost
    bad = score_sample([judge], Sample(case, "5"))[0]
    assert bad.error is not None and bad.error.startswith(
        "tether.producer.ops.batch.scoring.judge.JudgeReplyInvalid: "
    )
    assert "no JSON object" in bad.error and bad.usage is not None
    assert bad.usage.total_tokens == 106
    partial = score_sample([judge], Sample(case, "four-ish"))[0]
    assert (partial.value, partial.passed) == (0.4, False)  # below the 0.5 threshold
    # the judge saw the rubric with the case filled in, as one user message, under our model
    sent = openai_server.model_requests()[0]
    assert sent.body["model"] == "judge-model"
    prompt = sent.messages[-1]["content"]
    assert "[Task]\n2+2" in prompt and "[Reference answer]\n4" in prompt
    assert re.search(r"\[Assistant's answer\]\n<answer-(\w+)>\n4\n</answer-\1>\n", prompt)


def test_judge_model_errors_are_scoring_errors(openai_server: OpenAIServer, tmp_path: Path) -> None:
    rubric = tmp_path / "rubric.txt"
    rubric.write_text('Is "{output}" a greeting? Answer {"reasoning": "...", "score": 0 or 1}')
    openai_server.fail_next(1, 500)
    judge = judge_for(openai_server, f"judge:rubric={rubric},model=strict-judge")
    record = score_sample([judge], Sample(BatchCase(id="c", input="hi"), "hello"))[0]
    assert record.error is not None and record.error.startswith("tether.errors.ModelError: ")
    openai_server.script([reply('{"reasoning": "a greeting", "score": 1}')])
    ok = score_sample([judge], Sample(BatchCase(id="c", input="hi"), "hello"))[0]
    assert ok.value == 1.0
    sent = openai_server.model_requests()[-1]
    assert sent.body["model"] == "strict-judge"
    assert re.match(
        r'Is "<answer-(\w+)>\nhello\n</answer-\1>" a greeting\?', sent.messages[-1]["content"]
    )


def test_rubric_without_output_is_refused(tmp_path: Path) -> None:
    rubric = tmp_path / "r.txt"
    rubric.write_text("Grade {input}")
    with pytest.raises(InvalidInput, match=re.escape("never names {output}")):
        resolve_scorers([f"judge:rubric={rubric}"], client_factory=lambda: (None, "m"))  # type: ignore[arg-type,return-value]


def test_score_values_are_validated() -> None:
    with pytest.raises(ValueError):
        Score(value=1.5)
    with pytest.raises(ValueError):
        Score(value=float("nan"))


def test_the_judges_tokens_are_priced_into_the_batch_cost(
    openai_server: OpenAIServer, tmp_path: Path
) -> None:
    """A judge whose model ``TETHER_MODEL_PRICES`` prices: its tokens cost, in the line, the
    summary's ``scorer_cost_usd`` and ``total_cost_usd``, and the report (it was 0.0, "no cost
    recorded")."""
    from tether.producer.client import Producer
    from tether.producer.ops.batch.execution import batch_scorers
    from tether.producer.ops.batch.outputs.report_data import build_report_data
    from tether.producer.ops.batch.results import CaseResult, dump_line
    from tether.producer.ops.batch.summary import summary_of_results
    from tether.settings import Settings

    nowhere = "redis://127.0.0.1:1"  # never contacted: the judge talks only to the model
    prices = {"judge-model": {"input_usd_per_mtok": 1.0, "output_usd_per_mtok": 10.0}}
    settings = Settings(
        redis_url=nowhere,
        broker_url=nowhere,
        openai_base_url=openai_server.base_url,
        openai_api_key=openai_server.api_key,
        openai_model="judge-model",
        model_prices=json.dumps(prices),
    )
    (judge,) = batch_scorers(Producer(settings), ["judge"])
    openai_server.script(
        [
            reply(
                '{"reasoning": "right", "score": 1}',
                usage={"input_tokens": 1000, "output_tokens": 100},
            )
        ]
    )
    case = BatchCase(id="c", input="2+2", expected="4")
    (record,) = score_sample([judge], Sample(case, "4"))
    assert record.usage is not None and record.usage.cost_usd == pytest.approx(0.002)
    line = CaseResult(
        batch_id="b",
        id="c",
        line=1,
        session_id="b:c",
        agent="echo",
        status="COMPLETED",
        output="4",
        passed=True,
        score=1.0,
        scores={"judge": record},
        cost_usd=0.001,
        tokens=5,
    )
    summary = summary_of_results([line], batch_id="b", out="-")
    assert summary.scorer_tokens == 1100 and summary.scorer_cost_usd == pytest.approx(0.002)
    assert summary.total_cost_usd == pytest.approx(0.003)  # the run's 0.001 and the judge's
    path = tmp_path / "r.jsonl"
    path.write_bytes(dump_line(line))
    report = build_report_data(path, lambda _: [])
    assert report.cost_usd == pytest.approx(0.003) and report.costs_usd == [pytest.approx(0.003)]


# --- red-team findings (each failed before its fix) ---------------------------------------------


@pytest.mark.parametrize(
    ("spec", "output", "expected", "value"),
    [
        ("json", "1", True, 0.0),  # true is not 1 (Python's == says it is)
        ("json", "0", False, 0.0),
        ("json", "true", True, 1.0),
        ("json", '{"ok": 1}', {"ok": True}, 0.0),
        ("json", '{"ok": true}', {"ok": True}, 1.0),
        ("json:field=ok", '{"ok": 1}', True, 0.0),
        ("json:field=ok", '{"ok": false}', False, 1.0),
        ("json", "[true, false]", [1, 0], 0.0),
        ("json", "[1, 0]", "[true, false]", 0.0),  # expected as JSON text
        ("json", "1", "true", 0.0),
        ("json", "1.0", 1, 1.0),  # the same number
        ("json", '{"a": [{"b": 2.0}]}', {"a": [{"b": 2}]}, 1.0),
    ],
)
def test_json_scorer_never_equates_a_boolean_with_a_number(
    spec: str, output: str, expected: Any, value: float
) -> None:
    assert run(spec, output, expected)["value"] == value


def test_judge_reply_with_several_braces_takes_its_one_graded_object() -> None:
    # a draft and a final answer that disagree are two verdicts: ambiguous (issue 47, J1)
    draft = 'Draft: {"reasoning": "look", "score": 0.0}\nFinal: {"reasoning": "ok", "score": 1}'
    with pytest.raises(JudgeReplyInvalid, match=re.escape("different verdicts (0.0, 1.0)")):
        parse_reply(draft)
    again = 'Draft: {"reasoning": "look", "score": 1.0}\nFinal: {"reasoning": "ok", "score": 1}'
    assert parse_reply(again) == (1.0, "ok", None)  # the same verdict twice is one verdict
    assert parse_reply('A set {1, 2}. {"reasoning": "ok", "score": 0.5}') == (0.5, "ok", None)
    after = '{"reasoning": "ok", "score": 1.0} (note: the {output} placeholder was filled)'
    assert parse_reply(after) == (1.0, "ok", None)
    nested = '{"reasoning": "ok", "score": 1.0, "detail": {"score": 0.0}}'  # one object
    assert parse_reply(nested) == (1.0, "ok", None)
    trailing = '{"reasoning": "r", "verdict": "pass"} {"note": "no score here"}'
    assert parse_reply(trailing) == (1.0, "r", "pass")
    with pytest.raises(JudgeReplyInvalid, match="not valid JSON"):
        parse_reply("{not json} and {1, 2}")


def test_numeric_reads_a_range_and_the_unicode_minus_sign() -> None:
    assert last_number("between 10-20") == 20.0  # a dash after a digit is not a sign
    assert last_number("The answer is \u22125") == -5.0  # U+2212 MINUS SIGN
    assert last_number("x = -3") == -3.0 and last_number("(+4)") == 4.0
    assert last_number("1e-3") == 0.001
    assert run("numeric", "It is between 10-20", 20)["value"] == 1.0
    assert run("numeric", "The answer is \u22125", -5)["value"] == 1.0


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("numeric:tol=nan", "tol must be a finite number >= 0, got 'nan'"),
        ("numeric:tol=inf", "tol must be a finite number >= 0, got 'inf'"),
        ("numeric:tol=-1", "tol must be a finite number >= 0, got '-1'"),
        ("numeric:rel=-0.5", "rel must be a finite number >= 0, got '-0.5'"),
        ("json:field=", "--scorer 'json:field=': option field is empty"),
        ("json:schema= ", "option schema is empty"),
        ("numeric:tol=0.01,tol=5", "--scorer 'numeric:tol=0.01,tol=5': option tol is given twice"),
        ("exact:threshold=0.5,threshold=1", "option threshold is given twice"),
    ],
)
def test_meaningless_scorer_options_are_refused_naming_them(value: str, fragment: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        resolve_scorers([value])
    assert fragment in str(caught.value)


def test_the_docs_example_results_line_passes_scores_at_their_thresholds() -> None:
    docs = Path(__file__).resolve().parents[1] / "docs" / "batch.md"
    section = docs.read_text(encoding="utf-8").split("## Results file", 1)[1]
    example = json.loads(section.split("```json", 1)[1].split("```", 1)[0])
    assert example["scores"]
    for name, record in example["scores"].items():
        given = re.search(r"threshold=([0-9.]+)", name)
        threshold = float(given.group(1)) if given else 1.0  # every scorer's default
        assert record["passed"] is (record["value"] >= threshold), name
