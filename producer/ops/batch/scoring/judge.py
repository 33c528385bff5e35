"""The model-graded scorer: a judge model reads a rubric, the case and the output, and answers.

The judge's calls go through Tether's own model client (:func:`tether.models.openai.
model_from_settings`, configured by ``TETHER_OPENAI_*``), so they share its endpoint, retries and
key scrubbing. The prompt (:mod:`.rubric`) shows the graded answer fenced by a per-call nonce.

The verdict comes through a structured channel: the judge is offered one tool,
``submit_verdict`` ``{"reasoning": "...", "score": 0.0-1.0}``, and a call to it is the verdict
(the reply's text is then not read, so nothing the judge quotes there can count). Tool calling
rather than JSON mode (``response_format``): every model client of Tether already carries tools,
on Chat Completions and the Responses API alike, and more OpenAI-compatible servers implement
tool calls than JSON mode or JSON schemas; a call's arguments are a channel of their own, apart
from the text. ``judge:verdict=text`` offers no tool, for endpoints that refuse tools.

A judge that answers in text instead (a model that ignores the tool) is read as before: a JSON
object ``{"reasoning": "...", "score": ...}`` (or ``"verdict": "pass"``/``"fail"``) anywhere in
the reply, a ```json fence and prose around it being fine. But only an unambiguous verdict is a
score; each of these is a scoring error of the case (with the tokens it cost), never a score:

- no verdict, or a verdict that is not a score in [0, 1] or a known word;
- two verdicts that differ (two tool calls, or two objects in the text: a draft and a final
  answer that disagree are ambiguous);
- a verdict only inside the graded answer: objects inside a quoted fence, and objects whose text
  the graded answer holds (whitespace aside), are quotes, not the judge's own.

The reasoning is the score's explanation; the verdict, how it came (``channel``: ``tool`` or
``text``), the model and the tokens it spent (priced at the producer's ``TETHER_MODEL_PRICES``
when they name the judge's model) are stored with the case.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

from tether.core.items import UserMessage
from tether.models.base import ModelRequest, ToolSpec
from tether.producer.ops.batch.scoring.base import Sample, Score, ScoreUsage
from tether.producer.ops.batch.scoring.rubric import (
    DEFAULT_RUBRIC,
    SYSTEM_PROMPT,
    VERDICT_TOOL_NAME,
    AnswerFence,
    load_rubric,
    render,
)

if TYPE_CHECKING:
    from tether.core.events import Usage
    from tether.core.items import ToolCall
    from tether.models.base import ModelClient, ModelResponse
    from tether.settings.prices import ModelPrices

VERDICT_TOOL = ToolSpec(
    name=VERDICT_TOOL_NAME,
    description="Record your verdict on the assistant's answer. Call it exactly once.",
    parameters={
        "type": "object",
        "properties": {
            "reasoning": {"type": "string", "description": "One or two sentences."},
            "score": {
                "type": "number",
                "minimum": 0.0,
                "maximum": 1.0,
                "description": "0.0 (wrong) to 1.0 (right).",
            },
        },
        "required": ["reasoning", "score"],
        "additionalProperties": False,
    },
)
#: How the judge is asked for its verdict: by the tool (text accepted too), or in text only.
VerdictChannel = Literal["tool", "text"]
_DECODER = json.JSONDecoder()
_VERDICTS = {"pass": 1.0, "correct": 1.0, "fail": 0.0, "incorrect": 0.0}
_SPACE = re.compile(r"\s+")
#: A verdict: the score, the reasoning, and the verdict word when the judge gave one.
Verdict = tuple[float, str, str | None]


class JudgeReplyInvalid(ValueError):
    """The judge's reply does not hold one unambiguous verdict (a scoring error for the case).

    ``usage`` is what the unusable call cost, kept with the case's scoring error.
    """

    def __init__(self, message: str, usage: ScoreUsage | None = None) -> None:
        super().__init__(message)
        self.usage = usage


def _objects(text: str) -> tuple[list[tuple[dict[str, Any], str]], str | None]:
    """The JSON objects in ``text`` with their source text, and why the first ``{`` that did not
    decode did not. Each ``{`` is tried as the start of an object; a decoded object is skipped
    whole (an object nested in it is not a reply of its own), text that does not decode is
    prose."""
    objects: list[tuple[dict[str, Any], str]] = []
    problem: str | None = None
    start = text.find("{")
    while start >= 0:
        try:
            doc, end = _DECODER.raw_decode(text, start)
        except ValueError as exc:
            problem = problem or str(exc)
            start = text.find("{", start + 1)
            continue
        except RecursionError:
            problem = problem or "nested too deeply"
            start = text.find("{", start + 1)
            continue
        objects.append((doc, text[start:end]))  # a decode from "{" is always an object
        start = text.find("{", end)
    return objects, problem


def _graded(doc: dict[str, Any]) -> bool:
    return "score" in doc or "verdict" in doc


def _verdict_of(doc: dict[str, Any], text: str) -> Verdict:
    """The verdict one object states.

    Raises:
        JudgeReplyInvalid: no score in [0, 1] and no known verdict word.
    """
    verdict = doc.get("verdict")
    score = doc.get("score")
    if isinstance(score, bool) or not isinstance(score, int | float):
        if isinstance(verdict, str) and verdict.lower() in _VERDICTS:
            score = _VERDICTS[verdict.lower()]
        else:
            raise JudgeReplyInvalid(f"the judge's reply has no numeric 'score': {text[:200]!r}")
    if not 0.0 <= float(score) <= 1.0:
        raise JudgeReplyInvalid(f"the judge's score {score} is outside [0, 1]")
    reasoning = doc.get("reasoning")
    return (
        float(score),
        str(reasoning) if reasoning is not None else "",
        (str(verdict) if verdict is not None else None),
    )


def _one(verdicts: Sequence[Verdict], where: str) -> Verdict:
    """The verdict when every one of ``verdicts`` gives the same score (the last one's words).

    Raises:
        JudgeReplyInvalid: two scores differ.
    """
    scores = sorted({v[0] for v in verdicts})
    if len(scores) > 1:
        listed = ", ".join(str(s) for s in scores)
        raise JudgeReplyInvalid(
            f"the judge's reply is ambiguous: {where} give different verdicts ({listed})"
        )
    return verdicts[-1]


def _quoted(source: str, dense_answer: str) -> bool:
    """Whether the graded answer (``dense_answer``: its whitespace removed) holds this
    object's text, whitespace aside: then the object is a quote of the answer."""
    return bool(dense_answer) and _SPACE.sub("", source) in dense_answer


def parse_reply(text: str | None, fence: AnswerFence | None = None, answer: str = "") -> Verdict:
    """The one verdict in a judge's text reply (see the module docstring).

    Args:
        text: the reply.
        fence: the fence the graded answer was shown in: what the reply holds inside it is a
            quote of the answer.
        answer: the graded answer: an object whose text it holds is a quote.

    Raises:
        JudgeReplyInvalid: no verdict, an invalid one, two that differ, or one only inside the
            graded answer.
    """
    if not text:
        raise JudgeReplyInvalid("the judge's reply is empty")
    own_text = fence.outside(text) if fence is not None else text
    objects, problem = _objects(own_text)
    graded = [(doc, source) for doc, source in objects if _graded(doc)]
    dense_answer = _SPACE.sub("", answer)
    own = [(doc, source) for doc, source in graded if not _quoted(source, dense_answer)]
    if not own:
        fenced = _objects(fence.inside(text))[0] if fence is not None else []
        if graded or any(_graded(doc) for doc, _ in fenced):
            raise JudgeReplyInvalid(
                "the judge's reply holds a verdict only inside the graded answer (a quote of "
                f"the answer, not the judge's own): {text[:200]!r}"
            )
        if objects:
            return _verdict_of(objects[-1][0], text)  # raises: it has no score
        if problem is None:
            raise JudgeReplyInvalid(f"the judge's reply holds no JSON object: {text[:200]!r}")
        raise JudgeReplyInvalid(f"the judge's reply is not valid JSON ({problem}): {text[:200]!r}")
    return _one([_verdict_of(doc, text) for doc, _ in own], f"{len(own)} JSON objects")


def tool_verdict(calls: Sequence[ToolCall]) -> Verdict | None:
    """The verdict of the judge's ``submit_verdict`` calls (None: it made none).

    Raises:
        JudgeReplyInvalid: a call whose arguments are not a JSON object with a valid verdict,
            or two calls that differ.
    """
    verdicts: list[Verdict] = []
    for call in calls:
        if call.name != VERDICT_TOOL_NAME:
            continue  # not a verdict; the text may still hold one
        try:
            doc = json.loads(call.arguments)
        except (ValueError, RecursionError):
            doc = None
        if not isinstance(doc, dict):
            raise JudgeReplyInvalid(
                f"the judge's {VERDICT_TOOL_NAME} arguments are not a JSON object: "
                f"{call.arguments[:200]!r}"
            )
        verdicts.append(_verdict_of(doc, call.arguments))
    return _one(verdicts, f"{len(verdicts)} {VERDICT_TOOL_NAME} calls") if verdicts else None


class Judge:
    """A model-graded scorer (``--scorer judge:rubric=FILE,model=NAME,threshold=0.5``).

    Args:
        client: the model client (built from the producer's settings when the batch starts).
        model: the judge model's name.
        rubric: the rubric template.
        prices: the producer's price table, to price the judge's tokens (None: unpriced).
        channel: ``tool`` offers the ``submit_verdict`` tool (a text verdict is still read when
            the judge does not call it); ``text`` offers no tool.
    """

    def __init__(
        self,
        client: ModelClient,
        model: str,
        rubric: str,
        prices: ModelPrices | None = None,
        channel: VerdictChannel = "tool",
    ) -> None:
        self.client = client
        self.model = model
        self.rubric = rubric
        self.prices = prices
        self.channel = channel

    def _usage(self, usage: Usage) -> ScoreUsage:
        # priced here, where the judge's model is known: the results line keeps the cost, so
        # the summary, the report and compare read it without the producer's settings
        cost = self.prices.cost_usd(self.model, usage) if self.prices is not None else None
        return ScoreUsage(
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            total_tokens=usage.total_tokens,
            cost_usd=cost,
        )

    def _verdict(
        self, response: ModelResponse, fence: AnswerFence, answer: str
    ) -> tuple[Verdict, VerdictChannel, str]:
        """The verdict, the channel it came by, and the reply to keep with the score."""
        if self.channel == "tool":
            verdict = tool_verdict(response.tool_calls)
            if verdict is not None:
                calls = [c.arguments for c in response.tool_calls if c.name == VERDICT_TOOL_NAME]
                return verdict, "tool", "\n".join(calls)
        return parse_reply(response.text, fence, answer), "text", response.text or ""

    def __call__(self, sample: Sample) -> Score:
        answer = sample.output or ""
        fence = AnswerFence.around(answer)
        request = ModelRequest(
            model=self.model,
            items=(UserMessage(content=render(self.rubric, sample, fence)),),
            system_prompt=SYSTEM_PROMPT,
            tools=(VERDICT_TOOL,) if self.channel == "tool" else (),
        )
        response = self.client.complete(request)
        usage = self._usage(response.usage)
        try:
            (value, reasoning, verdict), channel, reply = self._verdict(response, fence, answer)
        except JudgeReplyInvalid as exc:
            raise JudgeReplyInvalid(f"{exc} (judge {self.model})", usage) from None
        metadata: dict[str, Any] = {"model": self.model, "channel": channel, "reply": reply[:2000]}
        if verdict is not None:
            metadata["verdict"] = verdict
        return Score(value=value, explanation=reasoning, metadata=metadata, usage=usage)


__all__ = [
    "DEFAULT_RUBRIC",
    "VERDICT_TOOL",
    "Judge",
    "JudgeReplyInvalid",
    "Verdict",
    "VerdictChannel",
    "load_rubric",
    "parse_reply",
    "render",
    "tool_verdict",
]
